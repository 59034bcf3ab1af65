package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
)

const (
	epA = "10.0.0.1:8001"
	epB = "10.0.0.2:8001"
	epC = "10.0.0.3:8001"
)

var poolEndpoints = []string{epA, epB, epC}

// poolBackend is a kserve_grpc backend of the three endpoints; extra adds
// keys (health_check, outlier_detection).
func poolBackend(extra string) string {
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf(`[{name: pool, kind: kserve_grpc, endpoints: [%q, %q, %q]%s}]`, epA, epB, epC, extra)
}

// poolRoutes sends everything to the pool with timeout and retries (a
// flow map, or "" for none).
func poolRoutes(timeout, retries string) string {
	r := ""
	if retries != "" {
		r = ", retries: " + retries
	}
	return fmt.Sprintf(`[{name: default, timeout: %s, route: {weighted: [{backend: pool, weight: 100}]}%s}]`, timeout, r)
}

const retryAll = `{retry_on: [unavailable, connect-failure, 5xx], num_retries: 2, per_try_timeout: 100ms}`

func newPoolEnv(t *testing.T, routes, backends string) *testEnv {
	t.Helper()
	return newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}, routes: routes, backends: backends})))
}

// requireDistinct fails when a request tried an endpoint twice.
func requireDistinct(t *testing.T, tried []string) {
	t.Helper()
	s := slices.Clone(tried)
	slices.Sort(s)
	require.Len(t, slices.Compact(s), len(tried), "an endpoint was tried twice: %v", tried)
}

func TestRetryOnAnotherEndpoint(t *testing.T) {
	e := newPoolEnv(t, poolRoutes("1s", retryAll), poolBackend(""))
	e.remote.set(epA, behaveUnavailable)
	e.remote.set(epB, behaveConnectFail)
	retried := 0
	for range 30 {
		res := e.post(t, plainBody)
		requireOK(t, res)
		tried := e.remote.callsOf(res.RequestID)
		require.NotEmpty(t, tried)
		require.LessOrEqual(t, len(tried), 3, "num_retries 2 allows three tries")
		requireDistinct(t, tried)
		require.Equal(t, epC, tried[len(tried)-1], "only C answers")
		if len(tried) > 1 {
			retried++
		}
	}
	require.Positive(t, retried, "no request hit a failing endpoint first")
	got := metricValue(t, e.reg, "sluice_gateway_retries_total", map[string]string{"service": "eta", "backend": "pool"})
	require.Positive(t, got)
}

func TestRetryNotOnClientError(t *testing.T) {
	e := newPoolEnv(t, poolRoutes("1s", retryAll), poolBackend(""))
	for _, ep := range poolEndpoints {
		e.remote.set(ep, behaveInvalid)
	}
	res := e.post(t, plainBody)
	requireError(t, res, http.StatusBadRequest, "invalid_input")
	require.Len(t, e.remote.callsOf(res.RequestID), 1, "INVALID_ARGUMENT is not retried")
	require.Zero(t, metricValue(t, e.reg, "sluice_gateway_retries_total", map[string]string{"service": "eta"}))
}

func TestRetryPerTryTimeout(t *testing.T) {
	t.Run("hanging endpoint is left for another", func(t *testing.T) {
		e := newPoolEnv(t, poolRoutes("1s", retryAll), poolBackend(""))
		e.remote.set(epA, behaveHang)
		for i := 0; e.remote.callsTo(epA) == 0; i++ {
			require.Less(t, i, 40, "no request picked A first")
			start := time.Now()
			res := e.post(t, plainBody)
			requireOK(t, res)
			require.Less(t, time.Since(start), 900*time.Millisecond, "within the route timeout")
			requireDistinct(t, e.remote.callsOf(res.RequestID))
		}
		require.Positive(t, metricValue(t, e.reg, "sluice_gateway_retries_total", map[string]string{"service": "eta", "reason": "5xx"}),
			"a per-try timeout is a 5xx retry")
	})
	t.Run("every endpoint hangs", func(t *testing.T) {
		e := newPoolEnv(t, poolRoutes("1s", `{retry_on: [5xx], num_retries: 2, per_try_timeout: 50ms}`), poolBackend(""))
		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveHang)
		}
		start := time.Now()
		res := e.post(t, plainBody)
		requireError(t, res, http.StatusGatewayTimeout, gateway.ReasonUpstreamTimeout)
		require.Less(t, time.Since(start), time.Second, "three tries of 50ms end before the route timeout")
		require.Contains(t, res.Error, "per-try timeout")
		tried := e.remote.callsOf(res.RequestID)
		require.Len(t, tried, 3)
		requireDistinct(t, tried)
	})
	t.Run("the route timeout ends the retries", func(t *testing.T) {
		e := newPoolEnv(t, poolRoutes("120ms", `{retry_on: [5xx], num_retries: 10, per_try_timeout: 50ms}`), poolBackend(""))
		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveHang)
		}
		start := time.Now()
		res := e.post(t, plainBody)
		requireError(t, res, http.StatusGatewayTimeout, gateway.ReasonUpstreamTimeout)
		require.Less(t, time.Since(start), time.Second)
		require.LessOrEqual(t, len(e.remote.callsOf(res.RequestID)), 3, "at most three 50ms tries fit in 120ms")
	})
}

func TestRetryBudget(t *testing.T) {
	for _, tt := range []struct {
		name      string
		budget    config.RetryBudget
		tries     int
		exhausted float64
	}{
		{name: "empty budget refuses the retry", budget: config.RetryBudget{}, tries: 1, exhausted: 1},
		{name: "min_concurrency allows it", budget: config.RetryBudget{Percent: 0, MinConcurrency: 1}, tries: 3, exhausted: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseConfig(t, gatewayYAML(yamlOpts{
				plain: true, gateway: []string{anonAllowed},
				routes: poolRoutes("1s", retryAll), backends: poolBackend(""),
			}))
			// The file cannot say 0 (0 takes the default); set it here.
			cfg.Gateway.Services[0].Routes[0].Retries.Budget = tt.budget
			e := newEnv(t, cfg)
			for _, ep := range poolEndpoints {
				e.remote.set(ep, behaveUnavailable)
			}
			res := e.post(t, plainBody)
			requireError(t, res, http.StatusServiceUnavailable, gateway.ReasonUpstreamUnavailable)
			require.Len(t, e.remote.callsOf(res.RequestID), tt.tries)
			require.Equal(t, tt.exhausted, metricValue(t, e.reg, "sluice_gateway_retry_budget_exhausted_total", map[string]string{"service": "eta"}))
		})
	}
}

func TestOutlierEjection(t *testing.T) {
	e := newPoolEnv(t, poolRoutes("1s", retryAll), poolBackend(""))
	e.remote.set(epA, behaveUnavailable)
	ejected := func() bool {
		for _, b := range e.g.Endpoints() {
			for _, ep := range b.Endpoints {
				if ep.Addr == epA {
					return ep.Ejected
				}
			}
		}
		return false
	}
	for i := 0; !ejected(); i++ {
		require.Less(t, i, 200, "A was never ejected after %d calls", e.remote.callsTo(epA))
		requireOK(t, e.post(t, plainBody))
	}
	require.Equal(t, 3, e.remote.callsTo(epA), "consecutive_503 defaults to 3")
	for range 30 {
		requireOK(t, e.post(t, plainBody))
	}
	require.Equal(t, 3, e.remote.callsTo(epA), "an ejected endpoint gets no traffic")
}

func TestActiveHealthCheck(t *testing.T) {
	e := newPoolEnv(t, poolRoutes("1s", ""), poolBackend("health_check: {interval: 20ms, timeout: 10ms}"))
	e.remote.setReady(epA, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.g.RunBackground(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	healthy := func(addr string) bool {
		for _, ep := range e.g.Endpoints()[0].Endpoints {
			if ep.Addr == addr {
				return ep.Healthy
			}
		}
		t.Fatalf("no endpoint %s", addr)
		return false
	}
	require.Eventually(t, func() bool { return !healthy(epA) }, 2*time.Second, 5*time.Millisecond)
	for range 30 {
		requireOK(t, e.post(t, plainBody))
	}
	require.Zero(t, e.remote.callsTo(epA), "an unhealthy endpoint gets no traffic")

	e.remote.setReady(epA, true)
	require.Eventually(t, func() bool { return healthy(epA) }, 2*time.Second, 5*time.Millisecond)
	for i := 0; e.remote.callsTo(epA) == 0; i++ {
		require.Less(t, i, 100, "a healthy endpoint again gets traffic")
		requireOK(t, e.post(t, plainBody))
	}
}

func TestInProcessModelErrors(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		code   int
		reason string
	}{
		{name: "model refuses the input", err: apierr.Errorf(apierr.KindInvalid, "invalid_shape", "input x: bad shape"), code: 400, reason: "invalid_shape"},
		{name: "model not ready", err: apierr.Errorf(apierr.KindUnavailable, "model_not_ready", "model eta_model is loading"), code: 503, reason: "model_not_ready"},
		{name: "model unknown", err: apierr.Errorf(apierr.KindNotFound, "model_not_found", "no model eta_model"), code: 404, reason: "model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}})))
			e.model.setFn(func(context.Context, *infer.Request) (*infer.Response, error) { return nil, tt.err })
			requireError(t, e.post(t, plainBody), tt.code, tt.reason)
		})
	}
	t.Run("model too slow for the route timeout", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{
			plain: true, gateway: []string{anonAllowed},
			routes: "[{name: default, timeout: 50ms, route: {weighted: [{backend: local, weight: 100}]}}]",
		})))
		e.model.setFn(func(ctx context.Context, _ *infer.Request) (*infer.Response, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		start := time.Now()
		requireError(t, e.post(t, plainBody), http.StatusGatewayTimeout, gateway.ReasonUpstreamTimeout)
		require.Less(t, time.Since(start), time.Second)
	})
	t.Run("model answers without a mapped output", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}})))
		e.model.setFn(func(_ context.Context, req *infer.Request) (*infer.Response, error) {
			return &infer.Response{Model: req.Model, Outputs: []infer.Tensor{fp32Tensor("eta_prediction", 1)}}, nil
		})
		res := e.post(t, plainBody)
		requireError(t, res, http.StatusInternalServerError, gateway.ReasonInvalidModelOutput)
		require.Contains(t, res.Error, "confidence_score")
	})
}

// TestRetryOnRefusedStream: Istio's refused-stream, as in the seeds'
// VirtualService, retries a gRPC UNAVAILABLE (how gRPC reports a stream
// the server refused) on another endpoint, and is counted under its name.
func TestRetryOnRefusedStream(t *testing.T) {
	e := newPoolEnv(t, poolRoutes("1s", `{retry_on: [refused-stream], num_retries: 2, per_try_timeout: 200ms}`), poolBackend(""))
	e.remote.set(epA, behaveUnavailable)
	e.remote.set(epB, behaveUnavailable)
	for i := 0; e.remote.callsTo(epA)+e.remote.callsTo(epB) == 0; i++ {
		require.Less(t, i, 40, "no request picked A or B first")
		res := e.post(t, plainBody)
		requireOK(t, res)
		require.Equal(t, epC, e.remote.callsOf(res.RequestID)[len(e.remote.callsOf(res.RequestID))-1], "only C answers")
	}
	require.Positive(t, metricValue(t, e.reg, "sluice_gateway_retries_total", map[string]string{"service": "eta", "reason": "refused-stream"}))
}
