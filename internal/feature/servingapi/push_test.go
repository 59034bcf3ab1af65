package servingapi

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

func TestPushThenRead(t *testing.T) {
	f := newFixture(t, serving.Options{})
	delete(f.Store.Meta, feature.ViewStateName("user_live"))
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"online","df":{
		"user_id":[1,2],"level":[10,20],
		"event_timestamp":["2026-01-02T11:50:00Z","2026-01-02 11:55:00"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	var rep serving.PushReport
	require.NoError(t, json.Unmarshal(out, &rep))
	require.Equal(t, serving.PushReport{Rows: 2, Views: []serving.PushViewReport{{View: "user_live", Written: 2}}}, rep)

	read := func() *serving.Response {
		resp, err := f.srv.GetOnlineFeatures(t.Context(), &serving.Request{
			Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2)}},
		})
		require.NoError(t, err)
		return resp
	}
	resp := read()
	require.Equal(t, []serving.Status{serving.StatusPresent, serving.StatusPresent}, resp.Results[1].Statuses)
	require.Equal(t, int64(10), resp.Results[1].Values[0].I64)
	require.Equal(t, time.Date(2026, 1, 2, 11, 55, 0, 0, time.UTC), resp.Results[1].EventTimestamps[1])

	// An older row never replaces a newer one; a newer one does.
	code, out = f.post(t, "/push", `{"push_source_name":"user_push","df":{"user_id":[1,2],"level":[11,21],
		"event_timestamp":["2026-01-02T11:00:00Z","2026-01-02T11:59:00Z"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	require.NoError(t, json.Unmarshal(out, &rep))
	require.Equal(t, []serving.PushViewReport{{View: "user_live", Written: 1, Skipped: 1}}, rep.Views)
	resp = read()
	require.Equal(t, int64(10), resp.Results[1].Values[0].I64)
	require.Equal(t, int64(21), resp.Results[1].Values[1].I64)

	// The push is the view's latest success.
	var st feature.ViewState
	require.NoError(t, json.Unmarshal(f.Store.Meta[feature.ViewStateName("user_live")], &st))
	require.Equal(t, now, st.LastSuccess)
	require.Equal(t, time.Date(2026, 1, 2, 11, 59, 0, 0, time.UTC), st.NewestEventTS)
}

func TestPushRefreshesStaleView(t *testing.T) {
	f := newFixture(t, serving.Options{})
	// user_live gets a ttl and a state older than it: stale until a push.
	f.Repo.Views["user_live"].TTL = time.Hour
	f.SetState(t, "user_live", now.Add(-2*time.Hour))
	body := `{"features":["user_live:level"],"entities":{"user_id":[1]}}`
	code, _ := f.post(t, "/get-online-features", body)
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","df":{"user_id":[1],"level":[3],"event_timestamp":[1767355200]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	code, out = f.post(t, "/get-online-features", body)
	require.Equal(t, http.StatusOK, code, string(out))
	require.Contains(t, string(out), `"values":[3]`)
}

func TestPushNothingWrittenOnBadRow(t *testing.T) {
	f := newFixture(t, serving.Options{})
	code, _ := f.post(t, "/push", `{"push_source_name":"user_push","df":{"user_id":[1,"x"],"level":[1,2],"event_timestamp":["2026-01-02T11:00:00Z","2026-01-02T11:00:00Z"]}}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Empty(t, f.Store.Rows)
}

func TestPushWritesHotCopy(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Repo.Views["user_live"].Hot = &feature.HotSubset{View: "user_live__hot", Keys: []feature.Value{i64(1)}, TTL: 5 * time.Minute}
	// An old hot row for user 1 must not shadow the pushed value.
	f.Put(t, "user_live__hot", i64(1), now.Add(-4*time.Minute), i64(5))
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","df":{"user_id":[1,2],"level":[6,7],"event_timestamp":["2026-01-02T11:59:00Z","2026-01-02T11:59:00Z"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	require.Contains(t, string(out), `"hot_written":1`)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &serving.Request{
		Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2)}},
	})
	require.NoError(t, err)
	require.Equal(t, int64(6), resp.Results[1].Values[0].I64)
	require.Equal(t, int64(7), resp.Results[1].Values[1].I64)
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_hot_reads_total", map[string]string{"view": "user_live", "outcome": "hit"}))
}
