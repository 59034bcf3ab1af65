package servingapi

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
)

// odDefs is a repository with an on-demand view over two stored views
// (one withholding stale values, one flagging them) and request data.
const odDefs = `
entities:
  - {name: user, join_keys: [user_id], value_type: Int64}
  - {name: route, join_keys: [route_id], value_type: String}
sources:
  - {name: user_file, path: data/users.parquet, timestamp_field: event_timestamp}
  - {name: route_file, path: data/routes.parquet, timestamp_field: ts}
  - name: req
    type: request
    schema:
      - {name: factor, dtype: Float64}
      - {name: divisor, dtype: Int64}
      - {name: label, dtype: String}
      - {name: f32, dtype: Float32}
feature_views:
  - name: user_stats
    entities: [user]
    source: user_file
    ttl: 1h
    schema: [{name: clicks, dtype: Int64}, {name: score, dtype: Float32}]
  - name: user_flags
    entities: [user]
    source: user_file
    ttl: 1h
    stale_policy: flag
    schema: [{name: active, dtype: Bool}]
  - name: route_stats
    entities: [route]
    source: route_file
    schema: [{name: eta, dtype: Float64}]
on_demand_feature_views:
  - name: adj
    sources: [route_stats, user_stats, user_flags, req]
    schema:
      - {name: eta_x, dtype: Float64, expression: "eta * factor"}
      - {name: per_click, dtype: Float64, expression: "score / clicks"}
      - {name: mod, dtype: Int64, expression: "clicks % divisor"}
      - {name: flagged, dtype: Bool, expression: "active && factor > 1.0"}
      - {name: tag, dtype: String, expression: "label + '!'"}
      - {name: const, dtype: Float32, expression: "1.5"}
      - {name: f32x, dtype: Float64, expression: "f32 * 1"}
feature_services:
  - name: adj_svc
    features: [route_stats, adj]
`

func loadODRepo(tb testing.TB) *registry.Repo {
	tb.Helper()
	dir := tb.TempDir()
	require.NoError(tb, os.WriteFile(filepath.Join(dir, registry.ConfigFile), []byte("project: od\n"), 0o644))
	require.NoError(tb, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(odDefs), 0o644))
	repo, err := registry.Load(tb.Context(), dir)
	require.NoError(tb, err)
	return repo
}

// newODFixture serves loadODRepo over a fake store with rows for users
// 1 (fresh, 4 clicks), 2 (fresh, 0 clicks), 4 (two hours old) and route r1.
func newODFixture(tb testing.TB) *fixture {
	tb.Helper()
	f := &fixture{Fixture: servingtest.NewFixture(tb, loadODRepo(tb))}
	f.srv = serving.New(f.Hold, f.Store, serving.Options{Now: func() time.Time { return now }}, f.Logger, f.Reg)
	f.h = NewHandler(f.srv, HandlerOptions{MaxBodyBytes: 1 << 16}, f.Logger, f.Reg)
	fresh, old := now.Add(-10*time.Minute), now.Add(-2*time.Hour)
	f.Put(tb, "user_stats", i64(1), fresh, i64(4), f64(float64(float32(0.3))))
	f.Put(tb, "user_stats", i64(2), fresh, i64(0), f64(2))
	f.Put(tb, "user_stats", i64(4), old, i64(9), f64(1))
	f.Put(tb, "user_flags", i64(1), fresh, feature.Value{Bool: true})
	f.Put(tb, "user_flags", i64(4), old, feature.Value{Bool: true})
	f.Put(tb, "route_stats", str("r1"), now.AddDate(0, -1, 0), f64(30))
	return f
}

func (a *feastAnswer) col(tb testing.TB, name string) ([]any, []string) {
	tb.Helper()
	for i, n := range a.Metadata.FeatureNames {
		if n == name {
			return a.Results[i].Values, a.Results[i].Statuses
		}
	}
	tb.Fatalf("no column %q in %v", name, a.Metadata.FeatureNames)
	return nil, nil
}

func TestOnDemandHTTP(t *testing.T) {
	f := newODFixture(t)
	// Rows: user 1 fresh; user 2 with 0 clicks and divisor 0; user 3 not
	// found; user 4 stale (clicks withheld, active flagged).
	code, body := f.post(t, "/get-online-features", `{"features":["adj:eta_x","adj:per_click","adj:mod","adj:flagged","adj:tag","adj:const","user_stats:clicks"],
		"entities":{"user_id":[1,2,3,4],"route_id":["r1","r1","r1","r2"],
		"factor":[1.5,2,0.5,3],"divisor":[3,0,1,2],"label":["a",null,"c","d"]}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	var a feastAnswer
	require.NoError(t, json.Unmarshal(body, &a))
	require.Equal(t, []string{"user_id", "route_id", "eta_x", "per_click", "mod", "flagged", "tag", "const", "clicks"}, a.Metadata.FeatureNames)

	v, st := a.col(t, "eta_x")
	require.Equal(t, []any{45.0, 60.0, 15.0, nil}, v)
	require.Equal(t, []string{"PRESENT", "PRESENT", "PRESENT", "NOT_FOUND"}, st, "route r2 does not exist")

	v, st = a.col(t, "per_click")
	require.InDelta(t, float64(float32(0.3))/4, v[0], 1e-15)
	require.Equal(t, []any{nil, nil, nil}, v[1:])
	require.Equal(t, []string{"PRESENT", "NULL_VALUE", "NOT_FOUND", "OUTSIDE_MAX_AGE"}, st,
		"2/0 is +Inf: NULL_VALUE; a missing user is NOT_FOUND; a withheld stale input passes its status on")

	v, st = a.col(t, "mod")
	require.Equal(t, []any{1.0, nil, nil, nil}, v)
	require.Equal(t, []string{"PRESENT", "NULL_VALUE", "NOT_FOUND", "OUTSIDE_MAX_AGE"}, st, "integer division by zero is NULL_VALUE, not an error")

	v, st = a.col(t, "flagged")
	require.Equal(t, []any{true, nil, nil, true}, v)
	require.Equal(t, []string{"PRESENT", "NOT_FOUND", "NOT_FOUND", "OUTSIDE_MAX_AGE"}, st, "a flagged stale input computes, and flags the result")

	v, st = a.col(t, "tag")
	require.Equal(t, []any{"a!", nil, "c!", "d!"}, v)
	require.Equal(t, []string{"PRESENT", "NULL_VALUE", "PRESENT", "PRESENT"}, st, "a null request value is NULL_VALUE")

	v, st = a.col(t, "const")
	require.Equal(t, []any{1.5, 1.5, 1.5, 1.5}, v)
	require.Equal(t, []string{"PRESENT", "PRESENT", "PRESENT", "PRESENT"}, st)

	v, _ = a.col(t, "clicks")
	require.Equal(t, []any{4.0, 0.0, nil, nil}, v)

	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_on_demand_failures_total", map[string]string{"view": "adj", "reason": "not_finite"}))
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_on_demand_failures_total", map[string]string{"view": "adj", "reason": "evaluation_failed"}))
}

func TestOnDemandMissingRequestField(t *testing.T) {
	f := newODFixture(t)
	code, body := f.post(t, "/get-online-features", `{"feature_service":"adj_svc","full_feature_names":true,
		"entities":{"user_id":[1],"route_id":["r1"],"label":["x"]}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	var a feastAnswer
	require.NoError(t, json.Unmarshal(body, &a))
	_, st := a.col(t, "adj__eta_x")
	require.Equal(t, []string{"NOT_FOUND"}, st, "factor is missing")
	v, st := a.col(t, "adj__tag")
	require.Equal(t, []any{"x!"}, v)
	require.Equal(t, []string{"PRESENT"}, st)
	v, _ = a.col(t, "route_stats__eta")
	require.Equal(t, []any{30.0}, v)
}

func TestOnDemandBadRequests(t *testing.T) {
	f := newODFixture(t)
	for _, tc := range []struct{ name, body, reason string }{
		{"wrong type", `{"features":["adj:eta_x"],"entities":{"user_id":[1],"route_id":["r1"],"factor":["fast"]}}`, serving.ReasonInvalidRequestValue},
		{"not a list", `{"features":["adj:eta_x"],"entities":{"user_id":[1],"route_id":["r1"],"factor":2}}`, serving.ReasonInvalidRequestValue},
		{"length", `{"features":["adj:eta_x"],"entities":{"route_id":["r1"],"factor":[1,2]}}`, serving.ReasonEntityLengthMismatch},
		{"unknown feature", `{"features":["adj:nope"],"entities":{"user_id":[1]}}`, serving.ReasonUnknownFeature},
		{"unknown key", `{"features":["adj:eta_x"],"entities":{"user_id":[1],"route_id":["r1"],"shop":[1]}}`, serving.ReasonUnknownEntityKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.post(t, "/get-online-features", tc.body)
			require.Equal(t, http.StatusBadRequest, code, string(body))
			var e struct{ Error, Reason string }
			require.NoError(t, json.Unmarshal(body, &e))
			require.Equal(t, tc.reason, e.Reason, e.Error)
		})
	}
}

func TestOnDemandGoAPIRequestContext(t *testing.T) {
	f := newODFixture(t)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &serving.Request{
		Features:       []string{"adj:eta_x", "route_stats:eta"},
		Entities:       map[string][]feature.Value{"route_id": {str("r1")}, "label": {str("not read by eta_x")}},
		RequestContext: map[string][]feature.Value{"factor": {f64(0.25)}, "unused": {f64(1)}},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"route_id", "eta_x", "eta"}, resp.FeatureNames)
	require.Equal(t, 7.5, resp.Results[1].Values[0].F64)
	require.Equal(t, serving.StatusPresent, resp.Results[1].Statuses[0])
	require.Equal(t, now.AddDate(0, -1, 0), resp.Results[1].EventTimestamps[0], "a computed value has its newest input's timestamp")

	// A Float32 request field is rounded to float32 as the JSON and gRPC
	// edges and historical retrieval round it.
	resp, err = f.srv.GetOnlineFeatures(t.Context(), &serving.Request{
		Features:       []string{"adj:f32x"},
		RequestContext: map[string][]feature.Value{"f32": {f64(0.1)}},
	})
	require.NoError(t, err)
	require.Equal(t, float64(float32(0.1)), resp.Results[0].Values[0].F64)
	require.Equal(t, epoch, resp.Results[0].EventTimestamps[0], "request data only: the epoch")
}

func TestOnDemandGRPC(t *testing.T) {
	f := newODFixture(t)
	conn := serveGRPC(t, f.srv, GRPCOptions{MaxEntityRows: 100}, f.Logger, f.Reg)
	c := feastpb.NewServingServiceClient(conn)
	resp, err := c.GetOnlineFeatures(t.Context(), &feastpb.GetOnlineFeaturesRequest{
		Kind: &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"adj:eta_x", "adj:per_click"}}},
		Entities: map[string]*feastpb.RepeatedValue{
			"route_id": {Val: []*feastpb.Value{{Val: &feastpb.Value_StringVal{StringVal: "r1"}}, {Val: &feastpb.Value_StringVal{StringVal: "r1"}}}},
			"user_id":  {Val: []*feastpb.Value{{Val: &feastpb.Value_Int64Val{Int64Val: 1}}, {Val: &feastpb.Value_Int64Val{Int64Val: 2}}}},
		},
		RequestContext: map[string]*feastpb.RepeatedValue{
			"factor": {Val: []*feastpb.Value{{Val: &feastpb.Value_DoubleVal{DoubleVal: 2}}, {Val: &feastpb.Value_DoubleVal{DoubleVal: math.NaN()}}}},
		},
	})
	require.NoError(t, err)
	eta := resp.GetResults()[2]
	require.Equal(t, 60.0, eta.GetValues()[0].GetDoubleVal())
	require.Equal(t, feastpb.FieldStatus_PRESENT, eta.GetStatuses()[0])
	require.Equal(t, feastpb.FieldStatus_NULL_VALUE, eta.GetStatuses()[1], "NaN request data gives NULL_VALUE")
	require.Equal(t, feastpb.FieldStatus_NULL_VALUE, resp.GetResults()[3].GetStatuses()[1], "0 clicks: +Inf")
}

// FuzzOnDemandRequest feeds arbitrary request data to an on-demand view
// over the HTTP edge: never a panic or a 500, 200 or a JSON error with a
// reason, and every computed value that is not PRESENT is null.
func FuzzOnDemandRequest(f *testing.F) {
	for _, s := range []string{
		`{"features":["adj:eta_x","adj:per_click","adj:mod"],"entities":{"user_id":[1,2],"route_id":["r1","r2"],"factor":[1.5,2],"divisor":[0,3]}}`,
		`{"feature_service":"adj_svc","entities":{"route_id":["r1"],"factor":[1e308],"label":["x"]}}`,
		`{"features":["adj:tag","adj:flagged"],"entities":{"user_id":[4],"label":[null],"factor":[-1e-320]}}`,
		`{"features":["adj:mod"],"entities":{"user_id":[1],"divisor":[9223372036854775807]}}`,
		`{"features":["adj:eta_x"],"entities":{"route_id":["r1"],"factor":[[1],{"a":1}]}}`,
		`{"features":["adj:eta_x"],"entities":{"route_id":["r1"],"factor":"x"}}`,
		`{"features":["adj:const"],"entities":{"factor":[1,2,3]}}`,
	} {
		f.Add(s)
	}
	fx := newODFixture(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/get-online-features", strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
			var a feastAnswer
			if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
				t.Fatalf("answer is not JSON: %v", err)
			}
			for _, r := range a.Results {
				for i, st := range r.Statuses {
					if st != "PRESENT" && st != "OUTSIDE_MAX_AGE" && r.Values[i] != nil {
						t.Fatalf("value %v with status %s", r.Values[i], st)
					}
				}
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if !strings.Contains(rec.Body.String(), `"reason":`) {
				t.Fatalf("error without a reason: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}
