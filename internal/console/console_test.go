package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/console"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPagesShowTheComponents(t *testing.T) {
	c := newChain(t)
	c.traffic(t, 20)
	tests := []struct {
		path string
		want []string
		not  []string
	}{
		{path: "/console/", want: []string{
			"Overview", "Model versions ready", "2 / 3", "Online views fresh",
			// Problems: the model that failed to load, the stale view.
			"broken v1", "weights file truncated at byte 1024", "old_view", "stale, reads are refused",
			"Latest failed request", "Traffic by service", "Failed requests since start",
		}},
		{path: "/console/models", want: []string{
			"eta_model", "broken", "READY", "UNAVAILABLE", "weights file truncated at byte 1024",
			"since ", "loaded at ",
			`data-series="model"`,
		}},
		{path: "/console/features", want: []string{
			"user_stats", "route_features", "old_view", "archive_view", "offline only",
			"3 keys · ttl 1h", "never materialized or pushed", "more than its ttl 1h0m0s", `<meter`, "hot", "cold",
			"route_live", "stream lag 3m",
			`data-series="features"`, `data-series="view"`,
		}, not: []string{"no hot reads yet"}},
		{path: "/console/services", want: []string{
			"eta", "POST /v1/services/eta:predict", "canary", `x-canary = &#34;true&#34;`, "default",
			"local v1 <b>90 %</b>", "local v2 <b>10 %</b>", "Sticky key", "user_id", "500ms",
			"50 % mirrored to version 2", "closed", "no staged rollout", "base_eta * 1.2",
			"in_process", `data-series="service"`,
			// The client view: partner's use of its limit, ops unlimited.
			`id="clients"`, "partner", "0.5", "10.0 %", "no rate limit",
		}},
		{path: "/console/errors", want: []string{
			"failed requests seen since start", "401", "400", "eta",
			"By reason", `<td class="n">`, "Last seen",
		}},
	}
	for _, tt := range tests {
		t.Run(strings.Trim(tt.path, "/"), func(t *testing.T) {
			code, hdr, body := c.get(t, tt.path)
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, "text/html; charset=utf-8", hdr.Get("Content-Type"))
			require.Contains(t, hdr.Get("Content-Security-Policy"), "script-src 'self'")
			require.NotContains(t, hdr.Get("Content-Security-Policy"), "unsafe-inline")
			require.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
			for _, w := range tt.want {
				require.Contains(t, body, w)
			}
			for _, w := range tt.not {
				require.NotContains(t, body, w)
			}
			// Everything the page loads comes from the console itself.
			require.NotContains(t, body, "http://")
			require.NotContains(t, body, "https://")
			require.NotContains(t, body, "<script>", "no inline script")
			require.NotContains(t, body, "style=", "no inline style")
		})
	}
}

func TestAPI(t *testing.T) {
	c := newChain(t)
	c.traffic(t, 10)

	var models struct{ Models []console.Model }
	c.getJSON(t, "/console/api/models", &models)
	require.Len(t, models.Models, 2)
	broken, eta := models.Models[0], models.Models[1]
	require.Equal(t, "broken", broken.Name)
	require.Equal(t, "UNAVAILABLE", broken.Versions[0].State)
	require.Contains(t, broken.Versions[0].Reason, "weights file truncated")
	require.Equal(t, "eta_model", eta.Name)
	require.Len(t, eta.Versions, 2)
	var inferences uint64
	for _, v := range eta.Versions {
		require.Equal(t, "READY", v.State)
		inferences += v.InferenceCount
	}
	require.GreaterOrEqual(t, inferences, uint64(10), "every good prediction ran on a version")

	var views struct{ Views []console.View }
	c.getJSON(t, "/console/api/features", &views)
	byName := map[string]console.View{}
	for _, v := range views.Views {
		byName[v.Name] = v
	}
	require.False(t, byName["user_stats"].Stale)
	require.InDelta(t, 600, byName["user_stats"].AgeSeconds, 30)
	require.Equal(t, int64(2000), byName["user_stats"].Rows, "what the last run wrote")
	require.Zero(t, byName["user_stats"].StoredRows, "what the store holds: no row was written here, only the state")
	require.True(t, byName["old_view"].Stale)
	require.Contains(t, byName["old_view"].StaleReason, "more than its ttl 1h0m0s")
	require.False(t, byName["archive_view"].Online)
	require.True(t, byName["route_live"].Stream)
	require.InDelta(t, 180, byName["route_live"].StreamLagSeconds, 30, "now minus the newest applied event")
	require.True(t, byName["signup_view"].Stale)
	require.False(t, byName["signup_view"].Materialized)
	require.Equal(t, "never materialized or pushed", byName["signup_view"].StaleReason)
	hot := byName["route_features"].Hot
	require.NotNil(t, hot)
	require.Equal(t, "route_features__hot", hot.View)
	require.Equal(t, 3, hot.Keys)
	require.False(t, hot.Stale)
	// The read of routes 1, 2 (hot members, no hot row) and 99 (not a
	// member): two fell back to the cold view.
	require.InDelta(t, 0, hot.Hits, 0)
	require.InDelta(t, 2, hot.Misses, 0)

	var gw console.Gateway
	c.getJSON(t, "/console/api/services", &gw)
	require.True(t, gw.Ready)
	require.Len(t, gw.Services, 1)
	svc := gw.Services[0]
	require.Equal(t, "eta", svc.Name)
	require.Equal(t, "eta_model", svc.Model)
	require.Equal(t, []console.Route{
		{Name: "canary", Match: `x-canary = "true"`, Targets: []console.Target{{Backend: "local", Version: "2", Weight: 100}}, Timeout: svc.Routes[0].Timeout},
		{Name: "default", Match: "all", Targets: []console.Target{{Backend: "local", Version: "1", Weight: 90}, {Backend: "local", Version: "2", Weight: 10}}, StickyKey: "user_id", Timeout: "500ms"},
	}, svc.Routes)
	require.NotNil(t, svc.Shadow)
	require.InDelta(t, 50, svc.Shadow.Percent, 0)
	require.NotNil(t, svc.Fallback)
	require.False(t, svc.Fallback.Triggered)
	require.Nil(t, svc.Rollout)
	require.Len(t, gw.Backends, 1)

	var errs struct {
		Seen   uint64
		Errors []accesslog.Entry
	}
	c.getJSON(t, "/console/api/errors?n=1", &errs)
	require.Equal(t, uint64(2), errs.Seen)
	require.Len(t, errs.Errors, 1)
	require.Equal(t, http.StatusUnauthorized, errs.Errors[0].Status, "newest first")

	var sum console.Summary
	c.getJSON(t, "/console/api/summary", &sum)
	require.False(t, sum.Healthy(), "a failed model and a stale view are critical")
	require.Equal(t, &console.Count{OK: 2, Total: 3}, sum.Models)
	require.Equal(t, &console.Count{OK: 3, Total: 5}, sum.Views) // route_live, a stream view, counts as the others
	var subjects []string
	for _, p := range sum.Problems {
		subjects = append(subjects, p.Area+":"+p.Subject)
	}
	require.ElementsMatch(t, []string{"models:broken v1", "features:old_view", "features:signup_view"}, subjects)
}

func TestSeries(t *testing.T) {
	c := newChain(t)
	var series struct {
		IntervalSeconds float64 `json:"interval_seconds"`
		T               []int64
		Series          map[string]map[string][]*float64
	}
	c.getJSON(t, "/console/api/series?kind=model", &series) // the first sample
	time.Sleep(25 * time.Millisecond)                       // one sampling interval (20 ms) without traffic
	c.traffic(t, 30)
	peak := func(kind, id, col string) float64 {
		t.Helper()
		series.Series = nil
		c.getJSON(t, "/console/api/series?kind="+kind, &series)
		cols, ok := series.Series[id]
		require.True(t, ok, "no series %s in %v", id, series.Series)
		m := -1.0
		for _, v := range cols[col] {
			if v != nil && *v > m {
				m = *v
			}
		}
		return m
	}
	harness.WaitFor(t, 10*time.Second, 5*time.Millisecond, "a sample after the traffic", func() (bool, string) {
		series.Series = nil
		c.getJSON(t, "/console/api/series?kind=service", &series)
		for _, v := range series.Series["service/eta"]["rps"] {
			if v != nil && *v > 0 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("service/eta: %v", series.Series["service/eta"])
	})
	for _, kind := range []string{"model", "service", "features", "view"} {
		series.Series = nil
		c.getJSON(t, "/console/api/series?kind="+kind, &series)
		require.InDelta(t, 0.02, series.IntervalSeconds, 1e-9)
		require.NotEmpty(t, series.T, kind)
		for id, cols := range series.Series {
			require.True(t, strings.HasPrefix(id, kind+"/"), "kind %s: series %s", kind, id)
			for name, col := range cols {
				require.Len(t, col, len(series.T), "%s %s", id, name)
			}
		}
	}
	require.Positive(t, peak("model", "model/eta_model", "rps"))
	require.Positive(t, peak("model", "model/eta_model", "p99_ms"))
	require.Positive(t, peak("service", "service/eta", "rps"))
	require.Positive(t, peak("service", "service/eta", "p50_ms"))
	require.Positive(t, peak("features", "features/reads", "rps"))
	require.Positive(t, peak("view", "view/route_features", "cold_fallbacks_per_second"))

	code, _, body := c.get(t, "/console/api/series?kind=nope")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "invalid_parameter")
}

func TestEscapesEverything(t *testing.T) {
	c := newChain(t)
	c.errs.Record(accesslog.Entry{
		Time: time.Now(), Service: `<img src=x onerror=alert(1)>`, Status: 500, Reason: "internal",
		Error: `</td><script>alert("pwned")</script>`, RequestID: `"><svg onload=alert(2)>`,
	})
	code, _, body := c.get(t, "/console/errors")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.NotContains(t, body, "<svg onload")
	require.Contains(t, body, "&lt;/td&gt;&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;")
	code, _, body = c.get(t, "/console/api/errors")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "<script>", "JSON escapes HTML too")
}

func TestRoutesAndMethods(t *testing.T) {
	c := newChain(t)
	tests := []struct {
		method, path string
		code         int
		ctype        string
	}{
		{http.MethodGet, "/console/assets/console.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{http.MethodGet, "/console/assets/vendor/uplot/uPlot.iife.min.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{http.MethodGet, "/console/assets/vendor/uplot/uPlot.min.css", http.StatusOK, "text/css; charset=utf-8"},
		{http.MethodGet, "/console/assets/favicon.svg", http.StatusOK, "image/svg+xml"},
		{http.MethodGet, "/console/nope", http.StatusNotFound, ""},
		{http.MethodGet, "/console/assets/missing.js", http.StatusNotFound, ""},
		{http.MethodPost, "/console/models", http.StatusMethodNotAllowed, ""},
		{http.MethodDelete, "/console/api/errors", http.StatusMethodNotAllowed, ""},
		{http.MethodGet, "/console/api/errors?n=-1", http.StatusBadRequest, "application/json"},
		{http.MethodHead, "/console/features", http.StatusOK, "text/html; charset=utf-8"},
		// The gateway's own admin API still answers beside the console.
		{http.MethodGet, "/routes", http.StatusOK, "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, c.http.URL+tt.path, nil)
			require.NoError(t, err)
			resp, err := c.http.Client().Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, tt.code, resp.StatusCode)
			if tt.ctype != "" {
				require.Equal(t, tt.ctype, resp.Header.Get("Content-Type"))
			}
		})
	}
}

func TestMissingSourcesSayNotRunning(t *testing.T) {
	con := console.New(console.Sources{}, nil)
	srv := httptestServer(t, con)
	for _, path := range []string{"/console/api/models", "/console/api/features", "/console/api/services", "/console/api/errors"} {
		code, body := fetch(t, srv+path)
		require.Equal(t, http.StatusNotFound, code, path)
		require.Contains(t, body, "not_running", path)
	}
	for path, want := range map[string]string{
		"/console/models":   "runs no model server",
		"/console/features": "runs no feature server",
		"/console/services": "runs no gateway",
		"/console/errors":   "keeps no error log",
	} {
		code, body := fetch(t, srv+path)
		require.Equal(t, http.StatusOK, code, path)
		require.Contains(t, body, want, path)
	}
	code, body := fetch(t, srv+"/console/api/summary")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `[]`, jsonField(t, body, "problems"))
}
