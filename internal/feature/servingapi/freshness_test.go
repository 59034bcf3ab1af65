package servingapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

func TestStaleView(t *testing.T) {
	cases := []struct {
		name    string
		state   func(f *fixture)
		stale   bool
		mention string
	}{
		{"fresh", func(f *fixture) { f.SetState(t, "user_stats", now.Add(-59*time.Minute)) }, false, ""},
		{"older than ttl", func(f *fixture) { f.SetState(t, "user_stats", now.Add(-61*time.Minute)) }, true, "1h1m0s ago"},
		{"never materialized", func(f *fixture) { delete(f.Store.Meta, feature.ViewStateName("user_stats")) }, true, "never materialized"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, serving.Options{})
			tc.state(f)
			body := `{"features":["user_stats:clicks"],"entities":{"user_id":[1]}}`
			for range 3 {
				code, out := f.post(t, "/get-online-features", body)
				if !tc.stale {
					require.Equal(t, http.StatusOK, code, string(out))
					continue
				}
				require.Equal(t, http.StatusServiceUnavailable, code)
				var e map[string]string
				require.NoError(t, json.Unmarshal(out, &e))
				require.Equal(t, serving.ReasonViewStale, e["reason"])
				require.Contains(t, e["error"], "'user_stats'")
				require.Contains(t, e["error"], tc.mention)
			}
			alerts := strings.Count(f.Logs.String(), `"msg":"stale_feature_alert"`)
			if !tc.stale {
				require.Zero(t, alerts)
				return
			}
			// Three refused reads, one alert: the log is rate-limited.
			require.Equal(t, 1, alerts)
			require.Contains(t, f.Logs.String(), `"view":"user_stats"`)
			require.Equal(t, 1.0, f.Counter(t, "sluice_feature_stale_alerts_total", map[string]string{"view": "user_stats"}))
			require.Equal(t, 3.0, f.Counter(t, "sluice_feature_stale_reads_total", map[string]string{"view": "user_stats"}))
		})
	}
}

func TestNoTTLViewNeverStale(t *testing.T) {
	f := newFixture(t, serving.Options{})
	delete(f.Store.Meta, feature.ViewStateName("route_stats"))
	code, out := f.post(t, "/get-online-features", `{"features":["route_stats:eta"],"entities":{"route_id":["r1"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
}

func TestEventTimestampCheck(t *testing.T) {
	ev := now.Add(-10 * time.Minute)
	cases := []struct {
		name string
		ts   time.Time
		ok   bool
	}{
		{"feature older than request", now, true},
		{"within tolerance", ev.Add(-5 * time.Minute), true},
		{"from the request's future", ev.Add(-5*time.Minute - time.Second), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, serving.Options{})
			f.Put(t, "user_stats", i64(1), ev, i64(1), f64(1), str("a"), feature.Value{F32s: []float32{1, 1, 1}})
			body := `{"features":["user_stats:clicks"],"entities":{"user_id":[1,2]},"event_timestamp":"` + tc.ts.Format(time.RFC3339) + `"}`
			code, out := f.post(t, "/get-online-features", body)
			if tc.ok {
				require.Equal(t, http.StatusOK, code, string(out))
				return
			}
			require.Equal(t, http.StatusBadRequest, code)
			var e map[string]string
			require.NoError(t, json.Unmarshal(out, &e))
			require.Equal(t, serving.ReasonEventTimestampTooOld, e["reason"])
			require.Equal(t, "event_timestamp_too_old", e["feature_stale_reason"])
			require.Contains(t, e["error"], "'user_stats'")
		})
	}
}
