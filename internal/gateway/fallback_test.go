package gateway_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
)

// fallbackYAML watches eta_prediction with one-second buckets and windows
// so a fake clock can drive drift and recovery in a few hundred requests.
const fallbackYAML = `fallback: {output: eta_prediction, baseline_window: 1s, history: 30, window: 1s,
        trigger: {duration: 2s, clear_duration: 1s}, confidence: {output: confidence_score, below: 0.7},
        rule: "base_eta + route_delay_factor * distance_km"}`

// driftModel answers eta_prediction = base_eta × factor, and confidence
// 0.5 for express requests, 0.9 otherwise.
func driftModel(factor *atomic.Value) func(context.Context, *infer.Request) (*infer.Response, error) {
	return func(_ context.Context, req *infer.Request) (*infer.Response, error) {
		base := tensorFloats(req.Input("route"))[1]
		conf := 0.9
		if tensorFloats(req.Input("flags"))[0] == 1 {
			conf = 0.5
		}
		return &infer.Response{Model: req.Model, Version: "1", Outputs: []infer.Tensor{
			fp32Tensor("eta_prediction", base*factor.Load().(float64)),
			fp32Tensor("confidence_score", conf),
		}}, nil
	}
}

func fallbackBody(express bool) string {
	return fmt.Sprintf(`{"user_id": 7, "route_id": 3, "base_eta": 30, "route_delay_factor": 0.5, "express": %t}`, express)
}

// ruleAnswer is the rule's value for fallbackBody: 30 + 0.5 × 12.5.
const ruleAnswer = 36.25

func TestFallback(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{fallbackYAML}})))
	seedFeatures(e.features)
	var factor atomic.Value
	factor.Store(1.0)
	e.model.setFn(driftModel(&factor))
	admin := e.g.AdminHandler(nil)
	step := func(express bool) *result {
		t.Helper()
		e.clock.Advance(100 * time.Millisecond)
		res := e.post(t, fallbackBody(express))
		requireOK(t, res)
		return res
	}

	// Baseline: the model says 30 for 5 s; nobody gets the rule.
	for i := range 50 {
		res := step(i%2 == 0)
		require.Equal(t, "model", res.Source)
		require.Equal(t, 30.0, res.Outputs["eta_minutes"])
	}

	// Drift: the model doubles its answers. After trigger.duration
	// outside the band, low-confidence requests get the rule's answer.
	factor.Store(2.0)
	driftStart := e.clock.Now()
	for i := 0; ; i++ {
		require.Less(t, i, 100, "the fallback never triggered")
		res := step(true)
		if res.Source == "fallback_rule" {
			require.GreaterOrEqual(t, e.clock.Now().Sub(driftStart), 2*time.Second, "triggered before trigger.duration")
			break
		}
		require.Equal(t, 60.0, res.Outputs["eta_minutes"])
	}
	low := step(true)
	require.Equal(t, "fallback_rule", low.Source)
	require.Equal(t, ruleAnswer, low.Outputs["eta_minutes"])
	require.Equal(t, 0.5, low.Outputs["confidence"], "the confidence stays the model's")
	high := step(false)
	require.Equal(t, "model", high.Source, "confident answers keep the model's value")
	require.Equal(t, 60.0, high.Outputs["eta_minutes"])

	// A rule that cannot be evaluated keeps the model's answer.
	e.clock.Advance(100 * time.Millisecond)
	res := e.post(t, `{"user_id": 7, "route_id": 3, "base_eta": 30, "express": true}`)
	requireOK(t, res)
	require.Equal(t, "model", res.Source)
	require.Equal(t, 60.0, res.Outputs["eta_minutes"])
	require.Equal(t, 1.0, metricValue(t, e.reg, "sluice_gateway_fallback_rule_errors_total", map[string]string{"service": "eta"}))

	views := adminJSON[[]map[string]any](t, admin, "/fallback")
	require.Len(t, views, 1)
	require.Equal(t, true, views[0]["triggered"])
	require.Positive(t, metricValue(t, e.reg, "sluice_gateway_requests_total", map[string]string{"service": "eta", "source": "fallback_rule"}))

	// Recovery: back to 30. Once the recent P90 is back near the
	// baseline for clear_duration, the model answers everyone again.
	factor.Store(1.0)
	for i := 0; ; i++ {
		require.Less(t, i, 600, "the fallback never cleared")
		res := step(i%5 == 0)
		if i%5 == 0 && res.Source == "model" {
			break
		}
	}
	for range 10 {
		res := step(true)
		require.Equal(t, "model", res.Source)
		require.Equal(t, 30.0, res.Outputs["eta_minutes"])
	}
	views = adminJSON[[]map[string]any](t, admin, "/fallback")
	require.Equal(t, false, views[0]["triggered"])
	p90, ok := views[0]["recent_p90"].(float64)
	require.True(t, ok, "recent_p90: %v", views[0]["recent_p90"])
	require.False(t, math.IsNaN(p90))
}

func TestFallbackNotTriggeredWithoutDrift(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{fallbackYAML}})))
	seedFeatures(e.features)
	var factor atomic.Value
	factor.Store(1.0)
	e.model.setFn(driftModel(&factor))
	for i := range 200 {
		e.clock.Advance(100 * time.Millisecond)
		res := e.post(t, fallbackBody(true))
		require.Equal(t, http.StatusOK, res.Code)
		require.Equal(t, "model", res.Source, "request %d", i)
	}
}

// TestFallbackOnUpstreamFailure: with fallback.on_upstream_failure, a
// model call that fails because no model server can be reached (every
// endpoint UNAVAILABLE, or timing out) is answered by the rule: 200,
// source fallback_rule, the failure as the reason, counted by cause. A
// rule that lacks a feature does not invent a value: the 503 stays and
// says why. Off (the default), the 503 is as before. A request the model
// refuses (4xx) is never answered by the rule.
func TestFallbackOnUpstreamFailure(t *testing.T) {
	onYAML := strings.Replace(fallbackYAML, "rule:", "on_upstream_failure: true, rule:", 1)
	env := func(t *testing.T, fb string) *testEnv {
		t.Helper()
		e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{
			gateway: []string{anonAllowed}, service: []string{fb},
			routes: poolRoutes("1s", `{retry_on: [unavailable, 5xx], num_retries: 2, per_try_timeout: 100ms}`), backends: poolBackend(""),
		})))
		seedFeatures(e.features)
		return e
	}
	t.Run("on", func(t *testing.T) {
		e := env(t, onYAML)
		requireOK(t, e.post(t, fallbackBody(true)))
		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveUnavailable)
		}
		res := e.post(t, fallbackBody(true))
		requireOK(t, res)
		require.Equal(t, "fallback_rule", res.Source)
		require.Equal(t, gateway.ReasonUpstreamUnavailable, res.Reason)
		require.Equal(t, map[string]float64{"eta_minutes": ruleAnswer}, res.Outputs, "only the rule's output")
		require.Len(t, e.remote.callsOf(res.RequestID), 3, "the route's retries come first")
		require.Equal(t, 1.0, metricValue(t, e.reg, "sluice_gateway_fallback_answers_total", map[string]string{"service": "eta", "cause": gateway.ReasonUpstreamUnavailable}))
		require.Equal(t, 1.0, metricValue(t, e.reg, "sluice_gateway_requests_total", map[string]string{"service": "eta", "code": "200", "source": "fallback_rule"}))

		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveHang)
		}
		res = e.post(t, fallbackBody(true))
		requireOK(t, res)
		require.Equal(t, gateway.ReasonUpstreamTimeout, res.Reason)

		// The rule needs route_delay_factor, an optional field this
		// request leaves out.
		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveUnavailable)
		}
		res = e.post(t, `{"user_id": 7, "route_id": 3, "base_eta": 30, "express": true}`)
		requireError(t, res, http.StatusServiceUnavailable, gateway.ReasonUpstreamUnavailable)
		require.Contains(t, res.Error, "the fallback rule cannot answer")
		require.Contains(t, res.Error, "route_delay_factor")

		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveInvalid)
		}
		res = e.post(t, fallbackBody(true))
		requireError(t, res, http.StatusBadRequest, "invalid_input")

		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveOK)
		}
		res = e.post(t, fallbackBody(true))
		requireOK(t, res)
		require.Equal(t, "model", res.Source)
		require.Empty(t, res.Reason)
	})
	t.Run("off", func(t *testing.T) {
		e := env(t, fallbackYAML)
		for _, ep := range poolEndpoints {
			e.remote.set(ep, behaveUnavailable)
		}
		res := e.post(t, fallbackBody(true))
		requireError(t, res, http.StatusServiceUnavailable, gateway.ReasonUpstreamUnavailable)
		require.Zero(t, metricValue(t, e.reg, "sluice_gateway_fallback_answers_total", map[string]string{"service": "eta"}))
	})
}

// TestReloadKeepsTriggeredFallback: a reload that leaves the fallback
// block unchanged keeps its monitor (still triggered, the rule still
// answers); one that changes it starts a new monitor.
func TestReloadKeepsTriggeredFallback(t *testing.T) {
	cfg := func(block string) *config.Config {
		return parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{block}}))
	}
	e := newEnv(t, cfg(fallbackYAML))
	seedFeatures(e.features)
	var factor atomic.Value
	factor.Store(1.0)
	e.model.setFn(driftModel(&factor))
	admin := e.g.AdminHandler(nil)
	step := func() *result {
		t.Helper()
		e.clock.Advance(100 * time.Millisecond)
		res := e.post(t, fallbackBody(true))
		requireOK(t, res)
		return res
	}
	triggered := func() bool {
		views := adminJSON[[]map[string]any](t, admin, "/fallback")
		require.Len(t, views, 1)
		return views[0]["triggered"] == true
	}
	for range 50 {
		step()
	}
	factor.Store(2.0)
	for i := 0; step().Source != "fallback_rule"; i++ {
		require.Less(t, i, 100, "the fallback never triggered")
	}

	require.NoError(t, e.g.Reload(cfg(fallbackYAML)))
	require.True(t, triggered(), "an unchanged fallback block keeps its monitor")
	require.Equal(t, "fallback_rule", step().Source)

	require.NoError(t, e.g.Reload(cfg(strings.Replace(fallbackYAML, "below: 0.7", "below: 0.6", 1))))
	require.False(t, triggered(), "a changed fallback block starts a new monitor")
	require.Equal(t, "model", step().Source)
}
