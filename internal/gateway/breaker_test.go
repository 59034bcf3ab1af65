package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway"
)

const breakerYAML = "feature_breaker: {stale_threshold: 3, window: 1m, probe_interval: 5s}"

func newBreakerEnv(t *testing.T) *testEnv {
	t.Helper()
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{breakerYAML}})))
	seedFeatures(e.features)
	return e
}

func breakerOpen(t *testing.T, e *testEnv) bool {
	t.Helper()
	bs := e.g.Breakers()
	require.Len(t, bs, 1)
	require.Equal(t, "eta", bs[0].Service)
	return bs[0].Open
}

func TestFeatureBreaker(t *testing.T) {
	e := newBreakerEnv(t)
	open := map[string]string{"service": "eta"}

	// Stale reads answer with the feature server's reason until the
	// threshold opens the breaker.
	e.features.setErr(staleErr())
	for i := range 3 {
		require.False(t, breakerOpen(t, e), "open after %d stale reads", i)
		requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, serving.ReasonViewStale)
	}
	require.True(t, breakerOpen(t, e))
	require.Equal(t, 1.0, metricValue(t, e.reg, "sluice_gateway_feature_breaker_open", open))
	require.Equal(t, 3.0, metricValue(t, e.reg, "sluice_gateway_stale_feature_events_total", open))
	require.Equal(t, int64(3), e.features.calls.Load())

	// Open: answered at once, without reading features.
	res := e.post(t, okBody)
	requireError(t, res, http.StatusServiceUnavailable, gateway.ReasonFeatureUnavailable)
	require.NotEmpty(t, res.RequestID)
	e.clock.Advance(4 * time.Second)
	requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, gateway.ReasonFeatureUnavailable)
	require.Equal(t, int64(3), e.features.calls.Load(), "an open breaker must not read features")

	// After probe_interval one request probes; still stale: stays open.
	e.clock.Advance(time.Second)
	requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, serving.ReasonViewStale)
	require.Equal(t, int64(4), e.features.calls.Load(), "the probe reads features")
	requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, gateway.ReasonFeatureUnavailable)
	require.Equal(t, int64(4), e.features.calls.Load(), "one probe per interval")
	require.True(t, breakerOpen(t, e))

	// The next probe finds the features fresh: the breaker closes.
	e.features.setErr(nil)
	e.clock.Advance(5 * time.Second)
	requireOK(t, e.post(t, okBody))
	require.False(t, breakerOpen(t, e))
	require.Equal(t, 0.0, metricValue(t, e.reg, "sluice_gateway_feature_breaker_open", open))
	for range 5 {
		requireOK(t, e.post(t, okBody))
	}
	require.Equal(t, int64(10), e.features.calls.Load())
	require.Equal(t, 1, e.g.Breakers()[0].TimesOpened)
	require.Zero(t, e.g.Breakers()[0].StaleEvents, "closing forgets the old stale events")
}

func TestFeatureBreakerWindow(t *testing.T) {
	e := newBreakerEnv(t)
	e.features.setErr(staleErr())
	for range 2 {
		requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, serving.ReasonViewStale)
	}
	e.clock.Advance(61 * time.Second) // both events leave the 1m window
	requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, serving.ReasonViewStale)
	require.False(t, breakerOpen(t, e), "events older than the window do not count")
	require.Equal(t, 1, e.g.Breakers()[0].StaleEvents)
	for range 2 {
		requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, serving.ReasonViewStale)
	}
	require.True(t, breakerOpen(t, e))
}

func TestFeatureBreakerIgnoresOtherFailures(t *testing.T) {
	e := newBreakerEnv(t)
	e.features.setErr(apierr.Errorf(apierr.KindUnavailable, serving.ReasonStoreUnavailable, "online store: connection refused"))
	for range 10 {
		requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, serving.ReasonStoreUnavailable)
	}
	require.False(t, breakerOpen(t, e), "only stale views count")
	require.Equal(t, int64(10), e.features.calls.Load())
}

func TestFeatureBreakerDisabled(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{
		gateway: []string{anonAllowed},
		service: []string{"feature_breaker: {stale_threshold: -1}"},
	})))
	e.features.setErr(staleErr())
	for range 20 {
		requireError(t, e.post(t, okBody), http.StatusServiceUnavailable, serving.ReasonViewStale)
	}
	require.Equal(t, int64(20), e.features.calls.Load(), "a negative threshold disables the breaker")
}
