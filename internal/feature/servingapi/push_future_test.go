package servingapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

// TestPushFutureTimestamp: a row dated further in the future than the
// tolerance is refused with 400 timestamp_in_future and nothing is stored,
// so the entity's legitimate pushes keep working.
func TestPushFutureTimestamp(t *testing.T) {
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	cases := []struct {
		name    string
		opts    serving.Options
		cfgTol  time.Duration // the repository's future_timestamp_tolerance
		created bool          // the source has a created timestamp column
		df      string
		wantErr string // substring of the error; empty: accepted
	}{
		{name: "2099", df: `"event_timestamp":["2099-01-01T00:00:00Z"]`, wantErr: "column 'event_timestamp' row 0: 2099-01-01T00:00:00Z is"},
		{name: "epoch seconds in 2099", df: `"event_timestamp":[4070908800]`, wantErr: "tolerance 5m0s"},
		{name: "beyond the default 5m", df: fmt.Sprintf(`"event_timestamp":[%q]`, ts(6*time.Minute)), wantErr: "6m0s in the future"},
		{name: "within the default 5m", df: fmt.Sprintf(`"event_timestamp":[%q]`, ts(4*time.Minute))},
		{name: "repository tolerance", cfgTol: 10 * time.Minute, df: fmt.Sprintf(`"event_timestamp":[%q]`, ts(6*time.Minute))},
		{name: "beyond the repository tolerance", cfgTol: 10 * time.Minute, df: fmt.Sprintf(`"event_timestamp":[%q]`, ts(11*time.Minute)), wantErr: "tolerance 10m0s"},
		{name: "server option wins", opts: serving.Options{FutureTolerance: time.Hour}, cfgTol: 10 * time.Minute, df: fmt.Sprintf(`"event_timestamp":[%q]`, ts(30*time.Minute))},
		{name: "no limit", opts: serving.Options{FutureTolerance: -1}, df: `"event_timestamp":["2099-01-01T00:00:00Z"]`},
		{
			name: "created timestamp", created: true,
			df:      fmt.Sprintf(`"event_timestamp":[%q],"created":["2099-01-01T00:00:00Z"]`, ts(-time.Minute)),
			wantErr: "column 'created' row 0",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			f.Repo.Config.FutureTimestampTolerance = tc.cfgTol
			if tc.created {
				f.Repo.Sources["user_push"].CreatedTimestampColumn = "created"
			}
			code, out := f.post(t, "/push", `{"push_source_name":"user_push","df":{"user_id":[1],"level":[99],`+tc.df+`}}`)
			if tc.wantErr == "" {
				require.Equal(t, http.StatusOK, code, string(out))
				return
			}
			require.Equal(t, http.StatusBadRequest, code, string(out))
			var e struct{ Error, Reason string }
			require.NoError(t, json.Unmarshal(out, &e))
			require.Equal(t, serving.ReasonTimestampInFuture, e.Reason)
			require.Contains(t, e.Error, tc.wantErr)
			require.Empty(t, f.Store.Rows, "a refused push stores nothing")

			// The entity's legitimate pushes keep working.
			code, out = f.post(t, "/push", fmt.Sprintf(`{"push_source_name":"user_push","df":{"user_id":[1],"level":[3],"event_timestamp":[%q]}}`, ts(-time.Minute)))
			require.Equal(t, http.StatusOK, code, string(out))
			require.Contains(t, string(out), `"written":1`)
			resp, err := f.srv.GetOnlineFeatures(t.Context(), &serving.Request{Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}})
			require.NoError(t, err)
			require.Equal(t, int64(3), resp.Results[1].Values[0].I64)
		})
	}
}
