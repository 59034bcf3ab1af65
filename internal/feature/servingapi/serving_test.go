package servingapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

func TestGoldenResponses(t *testing.T) {
	cases := []struct{ name, body string }{
		{"statuses", `{"features":["user_stats:clicks","user_stats:score","user_stats:name","user_stats:emb"],"entities":{"user_id":[1,2,3,4]}}`},
		{"flag_policy", `{"features":["user_flags:active","user_flags:tags"],"entities":{"user_id":[1,3,4]}}`},
		{"full_feature_names", `{"features":["user_stats:clicks","user_flags:active"],"entities":{"user_id":[1]},"full_feature_names":true}`},
		{"feature_service", `{"feature_service":"eta_svc","entities":{"user_id":[1,3],"route_id":["r1","r2"]}}`},
		{"empty_entities", `{"features":["user_stats:clicks"],"entities":{"user_id":[]}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, serving.Options{})
			f.Seed(t)
			code, body := f.post(t, "/get-online-features", tc.body)
			require.Equal(t, http.StatusOK, code, string(body))
			// Indent keeps the server's key order (metadata, results;
			// values, statuses, event_timestamps), which the golden
			// files pin as well.
			var buf bytes.Buffer
			require.NoError(t, json.Indent(&buf, body, "", "  "))
			got := buf.Bytes()
			path := filepath.Join("testdata", "golden", tc.name+".json")
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -update to create it")
			require.JSONEq(t, string(want), string(got))
			require.Equal(t, string(want), string(got))
		})
	}
}

// TestFeastShape checks the structural rules of Feast's response on a
// decoded answer, independent of the golden bytes: one result per name,
// join keys first with PRESENT and the epoch, every column as long as
// the entity rows.
func TestFeastShape(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Seed(t)
	code, body := f.post(t, "/get-online-features", `{"features":["user_stats:clicks","route_stats:eta"],"entities":{"user_id":[1,2],"route_id":["r1","zz"]}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	var resp struct {
		Metadata struct {
			FeatureNames []string `json:"feature_names"`
		} `json:"metadata"`
		Results []struct {
			Values          []any    `json:"values"`
			Statuses        []string `json:"statuses"`
			EventTimestamps []string `json:"event_timestamps"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	require.Equal(t, []string{"user_id", "route_id", "clicks", "eta"}, resp.Metadata.FeatureNames)
	require.Len(t, resp.Results, 4)
	for i, r := range resp.Results {
		require.Len(t, r.Values, 2)
		require.Len(t, r.Statuses, 2)
		require.Len(t, r.EventTimestamps, 2)
		if i < 2 {
			require.Equal(t, []string{"PRESENT", "PRESENT"}, r.Statuses)
			require.Equal(t, []string{"1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z"}, r.EventTimestamps)
		}
	}
	require.Equal(t, []any{float64(1), float64(2)}, resp.Results[0].Values)
	require.Equal(t, []any{"r1", "zz"}, resp.Results[1].Values)
	require.Equal(t, []string{"PRESENT", "PRESENT"}, resp.Results[2].Statuses)
	require.Equal(t, []string{"PRESENT", "NOT_FOUND"}, resp.Results[3].Statuses)
	require.Nil(t, resp.Results[3].Values[1])
}

func TestBadInput(t *testing.T) {
	big := `{"features":["user_stats:clicks"],"entities":{"user_id":[` + strings.Repeat("1,", 40000) + `1]}}`
	cases := []struct {
		name, path, body string
		code             int
		reason, mention  string
	}{
		{"unknown feature", "/get-online-features", `{"features":["user_stats:nope"],"entities":{"user_id":[1]}}`, 400, serving.ReasonUnknownFeature, "user_stats:nope"},
		{"malformed ref", "/get-online-features", `{"features":["clicks"],"entities":{"user_id":[1]}}`, 400, serving.ReasonUnknownFeature, "'clicks'"},
		{"unknown view", "/get-online-features", `{"features":["ghost:clicks"],"entities":{"user_id":[1]}}`, 400, serving.ReasonUnknownView, "ghost"},
		{"offline view", "/get-online-features", `{"features":["offline_only:x"],"entities":{"user_id":[1]}}`, 400, serving.ReasonViewNotOnline, "offline_only"},
		{"unknown service", "/get-online-features", `{"feature_service":"nosvc","entities":{"user_id":[1]}}`, 400, serving.ReasonUnknownService, "nosvc"},
		{"both features and service", "/get-online-features", `{"features":["user_stats:clicks"],"feature_service":"eta_svc","entities":{"user_id":[1]}}`, 400, serving.ReasonInvalidRequest, "not both"},
		{"no features", "/get-online-features", `{"entities":{"user_id":[1]}}`, 400, serving.ReasonInvalidRequest, "no features"},
		{"duplicate feature", "/get-online-features", `{"features":["user_stats:clicks","user_stats:clicks"],"entities":{"user_id":[1]}}`, 400, serving.ReasonDuplicateFeature, "user_stats:clicks"},
		{"unknown entity key", "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[1],"driver_id":[2]}}`, 400, serving.ReasonUnknownEntityKey, "driver_id"},
		{"missing entity key", "/get-online-features", `{"features":["user_stats:clicks"],"entities":{}}`, 400, serving.ReasonMissingEntityKey, "user_id"},
		{"string for Int64 key", "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[1,"2"]}}`, 400, serving.ReasonInvalidEntityValue, "'user_id' value 1"},
		{"fraction for Int64 key", "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[1.5]}}`, 400, serving.ReasonInvalidEntityValue, "'user_id' value 0"},
		{"null key", "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[null]}}`, 400, serving.ReasonInvalidEntityValue, "'user_id' value 0"},
		{"number for String key", "/get-online-features", `{"features":["route_stats:eta"],"entities":{"route_id":[3]}}`, 400, serving.ReasonInvalidEntityValue, "'route_id' value 0"},
		{"entity not a list", "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":1}}`, 400, serving.ReasonInvalidEntityValue, "user_id"},
		{"length mismatch", "/get-online-features", `{"feature_service":"eta_svc","entities":{"user_id":[1,2],"route_id":["a"]}}`, 400, serving.ReasonEntityLengthMismatch, "route_id"},
		{"bad event_timestamp", "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[1]},"event_timestamp":"yesterday"}`, 400, serving.ReasonInvalidRequest, "event_timestamp"},
		{"invalid json", "/get-online-features", `{"features":`, 400, "invalid_json", "JSON"},
		{"trailing data", "/get-online-features", `{} {}`, 400, "invalid_json", "after"},
		{"body too large", "/get-online-features", big, 413, "body_too_large", "larger than"},
		{"unknown route", "/nope", `{}`, 404, "not_found", "/nope"},
		{"unknown push source", "/push", `{"push_source_name":"nope","df":{}}`, 400, serving.ReasonUnknownPushSource, "nope"},
		{"push to offline, file source", "/push", `{"push_source_name":"user_push","df":{},"to":"offline"}`, 400, serving.ReasonPushOfflineNeedsFolder, "'user_file'"},
		{"push bad to", "/push", `{"push_source_name":"user_push","df":{},"to":"moon"}`, 400, serving.ReasonInvalidRequest, "moon"},
		{"push missing column", "/push", `{"push_source_name":"user_push","df":{"user_id":[1],"event_timestamp":["2026-01-02T11:00:00Z"]}}`, 400, serving.ReasonMissingColumn, "level"},
		{"push bad value", "/push", `{"push_source_name":"user_push","df":{"user_id":[1],"level":["x"],"event_timestamp":["2026-01-02T11:00:00Z"]}}`, 400, serving.ReasonInvalidColumnValue, "level"},
		{"push bad timestamp", "/push", `{"push_source_name":"user_push","df":{"user_id":[1],"level":[1],"event_timestamp":["soon"]}}`, 400, serving.ReasonInvalidColumnValue, "event_timestamp"},
		{"push ragged", "/push", `{"push_source_name":"user_push","df":{"user_id":[1,2],"level":[1],"event_timestamp":["2026-01-02T11:00:00Z"]}}`, 400, serving.ReasonEntityLengthMismatch, "has 2 values"},
		{"materialize without materializer", "/materialize", `{"start_ts":"2026-01-01T00:00:00Z","end_ts":"2026-01-02T00:00:00Z"}`, 501, serving.ReasonMaterializeUnavailable, "materializ"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, serving.Options{})
			f.Seed(t)
			code, body := f.post(t, tc.path, tc.body)
			require.Equal(t, tc.code, code, string(body))
			var e map[string]string
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Equal(t, tc.reason, e["reason"], string(body))
			require.Contains(t, e["error"], tc.mention)
		})
	}
}

func TestStoreUnavailable(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Seed(t)
	f.Store.SetErr(fmt.Errorf("redis 127.0.0.1:6379: %w: dial timeout", online.ErrUnavailable))
	body := `{"features":["route_stats:eta"],"entities":{"route_id":["r1"]}}`
	code, out := f.post(t, "/get-online-features", body)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, string(out), `"reason":"online_store_unavailable"`)

	req := httptest.NewRequest(http.MethodGet, "/health", nil)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)

	// Recovery: the next request after the store returns succeeds.
	f.Store.SetErr(nil)
	code, out = f.post(t, "/get-online-features", body)
	require.Equal(t, http.StatusOK, code, string(out))
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	require.Equal(t, http.StatusOK, rec.Code)
}

func TestMetricsEndpoint(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Seed(t)
	code, _ := f.post(t, "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[1,3]}}`)
	require.Equal(t, http.StatusOK, code)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `sluice_feature_values_total{status="NOT_FOUND"} 1`)
	require.Contains(t, rec.Body.String(), `sluice_feature_server_requests_total{code="200",route="POST /get-online-features"} 1`)
}
