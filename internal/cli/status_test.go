package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/console"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
)

// The status tests run the real console handler over fake sources, beside
// a fake gateway admin API, and read them with `sluice status`.

type statusModels []console.Model

func (f statusModels) Models(context.Context) ([]console.Model, error) { return f, nil }

type statusViews []console.View

func (f statusViews) Views(context.Context) ([]console.View, error) { return f, nil }

// statusAdmin answers the gateway admin API paths status reads.
func statusAdmin(ready bool, breakerOpen bool) http.Handler {
	mux := http.NewServeMux()
	js := func(path, body string) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		})
	}
	js("/routes", `[{"service":"parcel-eta","path":"POST /v1/services/parcel-eta:predict","model":{"Name":"parcel_eta","Version":"1"},
		"routes":[{"Name":"canary","Match":{"Headers":[{"Name":"x-canary","Exact":"true"}]},"Route":{"Weighted":[{"Backend":"local","Version":"2","Weight":100}]},"Timeout":500000000},
		          {"Name":"default","Match":{},"Route":{"Weighted":[{"Backend":"local","Version":"1","Weight":90},{"Backend":"local","Version":"2","Weight":10}],"StickyKey":"user_id"},"Timeout":500000000}]}]`)
	js("/endpoints", `[{"backend":"local","kind":"in_process","endpoints":[{"addr":"in-process","healthy":true,"ejected":false,"in_flight":0,"error_rate":0,"recent_503":0}]}]`)
	if breakerOpen {
		js("/breakers", `[{"service":"parcel-eta","open":true,"stale_events":12,"threshold":10,"window":"1m0s","times_opened":1}]`)
	} else {
		js("/breakers", `[{"service":"parcel-eta","open":false,"stale_events":0,"threshold":10,"window":"1m0s","times_opened":0}]`)
	}
	js("/fallback", `[{"service":"parcel-eta","output":"eta_prediction","rule":"base_eta","triggered":false,"recent_p90":null,"baseline":{"buckets":0}}]`)
	js("/rollout", `[]`)
	js("/shadow", `{"services":[{"service":"parcel-eta","version":"2","percent":1,"key":"order_id"}],"recording":"jsonl"}`)
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	return mux
}

// statusServer serves a fake admin API, with the console under /console/
// when withConsole.
func statusServer(t *testing.T, withConsole, ready, breakerOpen bool, views []console.View) string {
	t.Helper()
	admin := statusAdmin(ready, breakerOpen)
	mux := http.NewServeMux()
	mux.Handle("/", admin)
	if withConsole {
		errs := console.NewErrorLog(10)
		errs.Record(accesslog.Entry{Time: time.Now().Add(-time.Minute), Service: "parcel-eta", Status: 401, Reason: "invalid_api_key"})
		mux.Handle(console.Prefix, console.New(console.Sources{
			Models: statusModels{
				{Name: "parcel_eta", Versions: []console.ModelVersion{{Version: "1", State: "READY", InferenceCount: 42}, {Version: "2", State: "READY"}}},
				{Name: "digits", Versions: []console.ModelVersion{{Version: "1", State: "UNAVAILABLE", Reason: "model_unreadable: bad \x1b[31mfile"}}},
			},
			Features: statusViews(views),
			Gateway:  console.GatewayFromAdmin(admin),
			Errors:   errs,
		}, nil))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func statusFreshViews() []console.View {
	return []console.View{
		{Name: "user_stats", Entities: []string{"user"}, Online: true, TTLSeconds: 7 * 86400, Freshness: console.Freshness{Materialized: true, LastSuccess: time.Now().Add(-3 * time.Minute)}},
		{
			Name: "route_features", Online: true, TTLSeconds: 86400, Freshness: console.Freshness{Materialized: true, LastSuccess: time.Now().Add(-time.Hour)},
			Hot: &console.HotSubset{View: "route_features__hot", Keys: 8, TTLSeconds: 3600},
		},
	}
}

func TestStatus(t *testing.T) {
	stale := append(statusFreshViews(), console.View{Name: "old_view", Online: true, TTLSeconds: 3600, Freshness: console.Freshness{Stale: true, StaleReason: "never materialized or pushed"}})
	tests := []struct {
		name        string
		console     bool
		ready       bool
		breakerOpen bool
		views       []console.View
		code        int // 0 when runStatus returns nil
		want        []string
		not         []string
	}{
		{
			name: "degraded by a failed model", console: true, ready: true, views: statusFreshViews(), code: 1,
			want: []string{
				"DEGRADED (1 critical, 0 warnings)", "gateway   ready · 1 service · endpoints 1/1 routable",
				"models    2/3 versions ready", "features  2/2 online views fresh",
				"1 failed request seen (latest 1m", "401 invalid_api_key on parcel-eta)",
				"parcel_eta", "v1 READY  v2 READY", "42 inferences", "digits", "v1 UNAVAILABLE",
				"user_stats", "materialized 3m", "ttl 7d", "hot: 8 keys",
				"canary→v2 100% | default→v1 90% v2 10%", "shadow v2 1%", "breaker closed", "fallback off",
				"PROBLEMS", "critical  models  digits v1  UNAVAILABLE: model_unreadable: bad  [31mfile",
			},
			not: []string{"\x1b"},
		},
		{
			name: "a stale view, an open breaker, not ready", console: true, views: stale, breakerOpen: true, code: 1,
			want: []string{"NOT READY", "old_view", "STALE", "stale, reads are refused: never materialized or pushed", "breaker OPEN", "feature breaker open: 12 stale feature events"},
		},
		{
			name: "gateway only, without the console", ready: true, code: 0,
			want: []string{"HEALTHY (0 critical, 0 warnings)", "console  not served on this admin port", "parcel-eta"},
			not:  []string{"MODELS", "FEATURE VIEWS"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := statusServer(t, tt.console, tt.ready, tt.breakerOpen, tt.views)
			var out strings.Builder
			err := runStatus(t.Context(), &out, &statusFlags{admin: url, timeout: 5 * time.Second})
			if tt.code == 0 {
				require.NoError(t, err, out.String())
			} else {
				ee, ok := errors.AsType[*exitError](err)
				require.True(t, ok, "err = %v", err)
				require.Equal(t, tt.code, ee.code)
			}
			for _, w := range tt.want {
				require.Contains(t, out.String(), w)
			}
			for _, w := range tt.not {
				require.NotContains(t, out.String(), w)
			}
			require.LessOrEqual(t, strings.Count(out.String(), "\n"), 40, "one screen:\n%s", out.String())
		})
	}
}

func TestStatusJSON(t *testing.T) {
	url := statusServer(t, true, true, false, statusFreshViews())
	var out strings.Builder
	err := runStatus(t.Context(), &out, &statusFlags{admin: strings.TrimPrefix(url, "http://"), timeout: 5 * time.Second, json: true})
	require.Error(t, err, "digits failed to load")
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(out.String()), &rep), out.String())
	require.True(t, rep.Console)
	require.Len(t, rep.Models, 2)
	require.Len(t, rep.Views, 2)
	require.Equal(t, "parcel-eta", rep.Gateway.Services[0].Name)
	require.Equal(t, &console.Count{OK: 2, Total: 3}, rep.Summary.Models)
}

func TestStatusUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	err := runStatus(t.Context(), &strings.Builder{}, &statusFlags{admin: url, timeout: 2 * time.Second})
	ee, ok := errors.AsType[*exitError](err)
	require.True(t, ok, "err = %v", err)
	require.Equal(t, 2, ee.code)
	require.Contains(t, ee.Error(), "cannot reach the admin API")
}

// TestStatusVersionSince: a serving version shows when it went live, in
// the local zone, with the date when it is not today's.
func TestStatusVersionSince(t *testing.T) {
	now := time.Date(2026, 12, 7, 13, 42, 0, 0, time.Local)
	for _, c := range []struct {
		v    console.ModelVersion
		want string
	}{
		{console.ModelVersion{Version: "2", State: "READY", LoadedAt: now.Add(-3 * time.Hour)}, "v2 READY since 10:42 (3h ago)"},
		{console.ModelVersion{Version: "1", State: "READY", LoadedAt: time.Date(2026, 12, 5, 9, 0, 0, 0, time.Local)}, "v1 READY since 2026-12-05 09:00 (2d4h ago)"},
		{console.ModelVersion{Version: "3", State: "UNAVAILABLE"}, "v3 UNAVAILABLE"},
	} {
		if got := versionText(c.v, now); got != c.want {
			t.Errorf("versionText(%+v) = %q, want %q", c.v, got, c.want)
		}
	}
}
