package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
)

// adminGet sends GET path to the admin handler h and returns the
// recorder, checking for a JSON 200.
func adminGet(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequestWithContext(context.Background(), http.MethodGet, path, nil))
	require.Equal(t, http.StatusOK, w.Code, "GET %s: %s", path, w.Body)
	require.Equal(t, "application/json", w.Header().Get("Content-Type"), "GET %s", path)
	return w
}

// adminJSON decodes GET path of the admin handler h into a T.
func adminJSON[T any](t *testing.T, h http.Handler, path string) T {
	t.Helper()
	var v T
	w := adminGet(t, h, path)
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &v), "GET %s: %s", path, w.Body)
	return v
}

// reload posts /reload to the admin handler h.
func reload(t *testing.T, h http.Handler) *result {
	t.Helper()
	return call(t, h, http.MethodPost, "/reload", "")
}

func TestAdminConfigDumpHasNoSecrets(t *testing.T) {
	yaml := gatewayYAML(yamlOpts{plain: true, gateway: []string{
		clientsYAML("{requests_per_second: 5}"),
		`rate_limit_backend: {type: redis, redis: {addrs: ["127.0.0.1:6379"], password: "${REDIS_PASSWORD}"}}`,
	}})
	env := map[string]string{"TEST_API_KEY": "key-from-env", "REDIS_PASSWORD": "s3cret-pw"}
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	e := newEnv(t, cfg)
	w := adminGet(t, e.g.AdminHandler(nil), "/config_dump")
	dump := w.Body.String()
	for _, secret := range []string{"key-from-env", "s3cret-pw"} {
		require.NotContains(t, dump, secret)
	}
	require.Contains(t, dump, "[redacted]")
	require.True(t, json.Valid(w.Body.Bytes()))
	require.Contains(t, dump, etaPath, "the dump shows the configuration")
	// The dump is a copy: the live configuration keeps its key hashes.
	requireOK(t, e.post(t, plainBody, "Authorization", "Bearer alice-key"))
}

func TestAdminViews(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, gateway: []string{clientsYAML("{requests_per_second: 5, burst: 7}"), anonAllowed},
		routes: poolRoutes("1s", retryAll), backends: poolBackend(""),
		service: []string{breakerYAML},
	}))
	e := newEnv(t, cfg)
	h := e.g.AdminHandler(promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}))
	e.remote.set(epA, behaveUnavailable)
	for range 30 {
		requireOK(t, e.post(t, plainBody))
	}

	t.Run("endpoints", func(t *testing.T) {
		type endpoint struct {
			Addr         string     `json:"addr"`
			Healthy      *bool      `json:"healthy"`
			Ejected      *bool      `json:"ejected"`
			EjectedUntil *time.Time `json:"ejected_until"`
			InFlight     *int       `json:"in_flight"`
			ErrorRate    *float64   `json:"error_rate"`
			Recent503    *int       `json:"recent_503"`
		}
		views := adminJSON[[]struct {
			Backend   string     `json:"backend"`
			Kind      string     `json:"kind"`
			Endpoints []endpoint `json:"endpoints"`
		}](t, h, "/endpoints")
		require.Len(t, views, 1)
		require.Equal(t, "pool", views[0].Backend)
		require.Equal(t, "kserve_grpc", views[0].Kind)
		require.Len(t, views[0].Endpoints, 3)
		for i, ep := range views[0].Endpoints {
			require.Equal(t, poolEndpoints[i], ep.Addr)
			require.NotNil(t, ep.Healthy, "healthy")
			require.NotNil(t, ep.Ejected, "ejected")
			require.NotNil(t, ep.InFlight, "in_flight")
			require.NotNil(t, ep.ErrorRate, "error_rate")
			require.NotNil(t, ep.Recent503, "recent_503")
			require.True(t, *ep.Healthy)
			require.Zero(t, *ep.InFlight)
			if ep.Addr == epA {
				require.True(t, *ep.Ejected)
				require.NotNil(t, ep.EjectedUntil)
				require.True(t, ep.EjectedUntil.After(time.Now()))
				require.Equal(t, 3, *ep.Recent503)
				require.Equal(t, 1.0, *ep.ErrorRate)
			} else {
				require.False(t, *ep.Ejected)
				require.Nil(t, ep.EjectedUntil)
				require.Zero(t, *ep.ErrorRate)
			}
		}
	})
	t.Run("breakers", func(t *testing.T) {
		views := adminJSON[[]map[string]any](t, h, "/breakers")
		require.Equal(t, []map[string]any{{
			"service": "eta", "open": false, "stale_events": 0.0, "threshold": 3.0, "window": "1m0s", "times_opened": 0.0,
		}}, views)
	})
	t.Run("ratelimit", func(t *testing.T) {
		v := adminJSON[map[string]any](t, h, "/ratelimit")
		require.Equal(t, "local", v["backend"])
		require.Contains(t, v, "local_keys")
		require.Equal(t, []any{
			map[string]any{
				"client_id": "alice", "requests_per_second": 5.0, "burst": 7.0, "priority": 2.0,
				"used_ratio": 0.0, "requests_last_minute": 0.0, "scope": "per_replica",
			},
			map[string]any{"client_id": "bob", "requests_per_second": 0.0, "burst": 0.0},
		}, v["clients"])
		anon, ok := v["anonymous"].(map[string]any)
		require.True(t, ok, "anonymous: %v", v["anonymous"])
		require.Equal(t, true, anon["allowed"])
		require.NotContains(t, adminGet(t, h, "/ratelimit").Body.String(), auth.HashKey("alice-key"))
	})
	t.Run("routes", func(t *testing.T) {
		views := adminJSON[[]map[string]any](t, h, "/routes")
		require.Len(t, views, 1)
		require.Equal(t, "eta", views[0]["service"])
		require.Equal(t, "POST "+etaPath, views[0]["path"])
		require.Len(t, views[0]["routes"], 1)
	})
	t.Run("fallback without one", func(t *testing.T) {
		require.Empty(t, adminJSON[[]map[string]any](t, h, "/fallback"))
	})
	t.Run("ready and metrics", func(t *testing.T) {
		adminGet(t, h, "/ready")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, w.Code)
		require.Contains(t, w.Body.String(), `sluice_gateway_requests_total{client_id="anonymous",code="200",reason="",route="default",service="eta",source="model"} 30`)
	})
}

func TestAdminFallbackView(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{fallbackYAML}})))
	seedFeatures(e.features)
	requireOK(t, e.post(t, okBody))
	views := adminJSON[[]map[string]any](t, e.g.AdminHandler(nil), "/fallback")
	require.Len(t, views, 1)
	v := views[0]
	require.Equal(t, "eta", v["service"])
	require.Equal(t, "eta_prediction", v["output"])
	require.Equal(t, "base_eta + route_delay_factor * distance_km", v["rule"])
	require.Equal(t, false, v["triggered"])
	require.Equal(t, "confidence_score", v["confidence_output"])
	require.Equal(t, 0.7, v["confidence_below"])
	require.Contains(t, v, "recent_p90")
	require.Contains(t, v, "baseline")
}

// reloader is an Options.Reload whose answer a test sets.
type reloader struct {
	cfg atomic.Pointer[config.Config]
	err atomic.Pointer[error]
}

func (r *reloader) load(context.Context) (*config.Config, error) {
	if err := r.err.Load(); err != nil {
		return nil, *err
	}
	return r.cfg.Load(), nil
}

func (r *reloader) set(cfg *config.Config, err error) {
	r.cfg.Store(cfg)
	if err != nil {
		r.err.Store(&err)
	} else {
		r.err.Store(nil)
	}
}

func versionRoutes(v string) string {
	return `[{name: default, route: {weighted: [{backend: local, version: "` + v + `", weight: 100}]}}]`
}

func TestAdminReload(t *testing.T) {
	var rl reloader
	v1 := parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, routes: versionRoutes("1")}))
	e := newEnv(t, v1, func(o *gateway.Options) { o.Reload = rl.load })
	seedFeatures(e.features)
	h := e.g.AdminHandler(nil)
	require.Equal(t, "1", e.post(t, okBody).Version)

	rl.set(parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, routes: versionRoutes("2")})), nil)
	res := reload(t, h)
	require.Equal(t, http.StatusOK, res.Code, "body: %s", res.Body)
	require.JSONEq(t, `{"reloaded": true}`, string(res.Body))
	require.Equal(t, "2", e.post(t, okBody).Version, "the new route applies")

	t.Run("unreadable file", func(t *testing.T) {
		rl.set(nil, errors.New("test.yaml:3: gateway.services[0].routes: at least one route is required"))
		res := reload(t, h)
		requireError(t, res, http.StatusBadRequest, "invalid_config")
		require.Contains(t, res.Error, "at least one route is required")
		require.Equal(t, "2", e.post(t, okBody).Version, "the old configuration keeps serving")
	})
	t.Run("valid file the gateway cannot apply", func(t *testing.T) {
		bad := parseConfig(t, gatewayYAML(yamlOpts{
			gateway: []string{anonAllowed}, routes: versionRoutes("3"),
			inputs: "[{tensor: user, features: [user_stats:tripz]}]",
		}))
		rl.set(bad, nil)
		res := reload(t, h)
		requireError(t, res, http.StatusBadRequest, "invalid_config")
		require.Contains(t, res.Error, "user_stats:tripz")
		require.Equal(t, "2", e.post(t, okBody).Version, "the old configuration keeps serving")
		require.Contains(t, adminGet(t, h, "/config_dump").Body.String(), "user_stats:trips")
	})
	t.Run("no gateway section", func(t *testing.T) {
		rl.set(&config.Config{}, nil)
		requireError(t, reload(t, h), http.StatusBadRequest, "invalid_config")
		require.Equal(t, "2", e.post(t, okBody).Version)
	})
	t.Run("not configured", func(t *testing.T) {
		other := newEtaEnv(t)
		res := reload(t, other.g.AdminHandler(nil))
		require.Equal(t, http.StatusNotImplemented, res.Code)
	})
}

func TestReloadKeepsState(t *testing.T) {
	yaml := func(timeout, backendExtra string) *config.Config {
		return parseConfig(t, gatewayYAML(yamlOpts{
			plain: true, gateway: []string{anonAllowed},
			routes: poolRoutes(timeout, retryAll), backends: poolBackend(backendExtra),
		}))
	}
	e := newEnv(t, yaml("1s", ""))
	e.remote.set(epA, behaveUnavailable)
	ejected := func() bool {
		for _, ep := range e.g.Endpoints()[0].Endpoints {
			if ep.Addr == epA {
				return ep.Ejected
			}
		}
		return false
	}
	for i := 0; !ejected(); i++ {
		require.Less(t, i, 200, "A was never ejected")
		requireOK(t, e.post(t, plainBody))
	}
	calls := e.remote.callsTo(epA)

	// A new route timeout leaves the backend as it was: A stays ejected.
	require.NoError(t, e.g.Reload(yaml("900ms", "")))
	require.True(t, ejected(), "reload forgot the ejection of an unchanged backend")
	for range 30 {
		requireOK(t, e.post(t, plainBody))
	}
	require.Equal(t, calls, e.remote.callsTo(epA), "the ejected endpoint got traffic after the reload")

	// A changed backend starts afresh.
	require.NoError(t, e.g.Reload(yaml("900ms", "outlier_detection: {base_ejection_time: 31s}")))
	require.False(t, ejected())
}

func TestReloadKeepsOpenBreaker(t *testing.T) {
	cfg := func() *config.Config {
		return parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{breakerYAML}}))
	}
	e := newEnv(t, cfg())
	e.features.setErr(staleErr())
	for range 3 {
		e.post(t, okBody)
	}
	require.True(t, breakerOpen(t, e))
	require.NoError(t, e.g.Reload(cfg()))
	require.True(t, breakerOpen(t, e), "an unchanged breaker keeps its state")
	requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, gateway.ReasonFeatureUnavailable)
	require.Equal(t, int64(3), e.features.calls.Load())
}

func TestReloadRouteChangeUnderLoad(t *testing.T) {
	var rl reloader
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}, routes: versionRoutes("1")})),
		func(o *gateway.Options) { o.Reload = rl.load })
	h := e.g.AdminHandler(nil)
	cfgs := []*config.Config{
		parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}, routes: versionRoutes("1")})),
		parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}, routes: versionRoutes("2")})),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil && i < 200; i++ {
			rl.set(cfgs[i%2], nil)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodPost, "/reload", nil))
			if w.Code != http.StatusOK {
				t.Errorf("reload %d: %d %s", i, w.Code, w.Body)
				return
			}
		}
	}()
	for i := 0; ctx.Err() == nil && i < 500; i++ {
		res := e.post(t, plainBody)
		requireOK(t, res)
		require.True(t, res.Version == "1" || res.Version == "2", "version %q", res.Version)
		require.Equal(t, res.Version, e.model.last(t).Version)
	}
	cancel()
	<-done
}
