package servingapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// storeFixture is the test repository served from a real online store.
type storeFixture struct {
	srv *serving.Server
	h   *Handler
}

func newStoreFixture(t *testing.T, store online.Store) *storeFixture {
	t.Helper()
	hold := &servingtest.Holder{}
	hold.P.Store(servingtest.Repo(t))
	srv := serving.New(hold, store, serving.Options{Now: func() time.Time { return now }, StateCacheTTL: -1}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	return &storeFixture{srv: srv, h: NewHandler(srv, HandlerOptions{}, nil, nil)}
}

func (f *storeFixture) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

// feastAnswer is the JSON answer of /get-online-features.
type feastAnswer struct {
	Metadata struct {
		FeatureNames []string `json:"feature_names"`
	} `json:"metadata"`
	Results []struct {
		Values          []any    `json:"values"`
		Statuses        []string `json:"statuses"`
		EventTimestamps []string `json:"event_timestamps"`
	} `json:"results"`
}

func (f *storeFixture) read(t *testing.T, body string) feastAnswer {
	t.Helper()
	code, out := f.post(t, "/get-online-features", body)
	require.Equal(t, http.StatusOK, code, out)
	var a feastAnswer
	require.NoError(t, json.Unmarshal([]byte(out), &a))
	return a
}

// POST /write-to-online-store takes what Feast's remote online store sends
// (sdk/python/feast/infra/online_stores/remote.py, online_write_batch):
// {"feature_view_name", "df" by column with "event_timestamp" and
// "created" as naive UTC isoformat strings, "allow_registry_cache"} and
// answers 200 with the JSON body null, as Feast's feature server does
// (feature_server.py, write_to_online_store returns None).
func TestWriteToOnlineStore(t *testing.T) {
	for name, open := range schemaStores() {
		t.Run(name, func(t *testing.T) {
			f := newStoreFixture(t, open(t))
			code, out := f.post(t, "/write-to-online-store", `{"feature_view_name":"user_stats","allow_registry_cache":false,"df":{
				"user_id":[1,2],"clicks":[7,8],"score":[0.5,1.5],"name":["ann",null],"emb":[[1,2,3],[4,5,6]],
				"event_timestamp":["2026-01-02T11:55:00","2026-01-02T11:56:00.123456"],"created":[null,null]}}`)
			require.Equal(t, http.StatusOK, code, out)
			require.Equal(t, "null\n", out)

			a := f.read(t, `{"features":["user_stats:clicks","user_stats:name","user_stats:emb"],"entities":{"user_id":[1,2,3]}}`)
			require.Equal(t, []any{float64(7), float64(8), nil}, a.Results[1].Values)
			require.Equal(t, []string{"PRESENT", "PRESENT", "NOT_FOUND"}, a.Results[1].Statuses)
			require.Equal(t, []string{"2026-01-02T11:55:00Z", "2026-01-02T11:56:00.123456Z", "1970-01-01T00:00:00Z"}, a.Results[1].EventTimestamps)
			require.Equal(t, []string{"PRESENT", "NULL_VALUE", "NOT_FOUND"}, a.Results[2].Statuses)
			require.Equal(t, []any{1.0, 2.0, 3.0}, a.Results[3].Values[0])

			// Only the named view is written: user_live reads the same
			// entity and got nothing.
			a = f.read(t, `{"features":["user_live:level"],"entities":{"user_id":[1]}}`)
			require.Equal(t, []string{"NOT_FOUND"}, a.Results[1].Statuses)

			// A view whose source names its own timestamp field ("ts")
			// takes that column, or else "event_timestamp".
			code, out = f.post(t, "/write-to-online-store", `{"feature_view_name":"route_stats","df":{"route_id":["r1"],"eta":[31.5],"blob":["AAH/"],"ts":["2026-01-02T11:00:00Z"]}}`)
			require.Equal(t, http.StatusOK, code, out)
			code, out = f.post(t, "/write-to-online-store", `{"feature_view_name":"route_stats","df":{"route_id":["r2"],"eta":[12],"blob":[null],"event_timestamp":["2026-01-02T11:30:00Z"]}}`)
			require.Equal(t, http.StatusOK, code, out)
			a = f.read(t, `{"features":["route_stats:eta"],"entities":{"route_id":["r1","r2"]}}`)
			require.Equal(t, []any{31.5, float64(12)}, a.Results[1].Values)
			require.Equal(t, []string{"2026-01-02T11:00:00Z", "2026-01-02T11:30:00Z"}, a.Results[1].EventTimestamps)

			// Newer wins, as for a push: an older row is skipped.
			code, out = f.post(t, "/write-to-online-store", `{"feature_view_name":"route_stats","df":{"route_id":["r1"],"eta":[1],"blob":[null],"ts":["2026-01-02T10:00:00Z"]}}`)
			require.Equal(t, http.StatusOK, code, out)
			a = f.read(t, `{"features":["route_stats:eta"],"entities":{"route_id":["r1"]}}`)
			require.Equal(t, []any{31.5}, a.Results[1].Values)
		})
	}
}

func TestWriteToOnlineStoreErrors(t *testing.T) {
	f := newFixture(t, serving.Options{})
	cases := []struct {
		name, body string
		reason     string
	}{
		{"no view", `{"df":{"user_id":[1]}}`, serving.ReasonInvalidRequest},
		{"unknown view", `{"feature_view_name":"nope","df":{"user_id":[1]}}`, serving.ReasonUnknownView},
		{"offline view", `{"feature_view_name":"offline_only","df":{"user_id":[1],"x":[1],"event_timestamp":["2026-01-02T11:00:00Z"]}}`, serving.ReasonViewNotOnline},
		{"missing feature", `{"feature_view_name":"user_live","df":{"user_id":[1],"event_timestamp":["2026-01-02T11:00:00Z"]}}`, serving.ReasonMissingColumn},
		{"missing timestamp", `{"feature_view_name":"user_live","df":{"user_id":[1],"level":[1]}}`, serving.ReasonMissingColumn},
		{"bad value", `{"feature_view_name":"user_live","df":{"user_id":[1],"level":["x"],"event_timestamp":["2026-01-02T11:00:00Z"]}}`, serving.ReasonInvalidColumnValue},
		{"future", `{"feature_view_name":"user_live","df":{"user_id":[1],"level":[1],"event_timestamp":["2027-01-02T11:00:00Z"]}}`, serving.ReasonTimestampInFuture},
		{"object column", `{"feature_view_name":"user_live","df":{"user_id":{"a":1},"level":[1],"event_timestamp":["2026-01-02T11:00:00Z"]}}`, serving.ReasonInvalidColumnValue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.post(t, "/write-to-online-store", tc.body)
			require.Equal(t, http.StatusBadRequest, code, string(body))
			_, reason := errorBody(t, body)
			require.Equal(t, tc.reason, reason, string(body))
		})
	}
	require.Empty(t, f.Store.Rows)
}

// Feast's feature server builds the push's rows with pandas'
// DataFrame(df), and its documentation pushes a scalar column
// ("string_feature": "test2", python-feature-server.md): a single value
// stands for every row.
func TestPushScalarColumns(t *testing.T) {
	f := newFixture(t, serving.Options{})
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","df":{"user_id":[1,2],"level":5,"event_timestamp":"2026-01-02T11:50:00Z"}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	require.Contains(t, string(out), `"written":2`)
	// Only single values: one row.
	code, out = f.post(t, "/push", `{"push_source_name":"user_push","df":{"user_id":3,"level":9,"event_timestamp":"2026-01-02T11:51:00Z"}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	require.Contains(t, string(out), `"rows":1`)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &serving.Request{
		Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2), i64(3)}},
	})
	require.NoError(t, err)
	for i, want := range []int64{5, 5, 9} {
		require.Equal(t, serving.StatusPresent, resp.Results[1].Statuses[i])
		require.Equal(t, want, resp.Results[1].Values[i].I64)
	}
}

func TestColumns(t *testing.T) {
	got, err := columns(map[string]any{"a": []any{1, 2, 3}, "b": "x", "c": nil})
	require.NoError(t, err)
	require.Equal(t, map[string][]any{"a": {1, 2, 3}, "b": {"x", "x", "x"}, "c": {nil, nil, nil}}, got)
	got, err = columns(map[string]any{"a": 1, "b": "x"})
	require.NoError(t, err)
	require.Equal(t, map[string][]any{"a": {1}, "b": {"x"}}, got)
	// Lists of different lengths stay as they are; the push reports them.
	got, err = columns(map[string]any{"a": []any{1}, "b": []any{1, 2}})
	require.NoError(t, err)
	require.Len(t, got["b"], 2)
	_, err = columns(map[string]any{"a": map[string]any{}})
	require.Error(t, err)
	// Repeating single values is bounded.
	long := make([]any, maxBroadcastCells/2+1)
	_, err = columns(map[string]any{"a": long, "b": 1, "c": 2})
	require.ErrorContains(t, err, "send those columns as lists")
}
