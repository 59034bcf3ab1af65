package gateway_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClientRateLimitUse: each configured client's share of its rate limit
// used over the last minute is a metric and in the admin API's /ratelimit
// (the console's client view): admitted requests / (rate × 60 s). The
// minute slides: a minute later the share is back to 0. Clients without a
// limit have no series.
func TestClientRateLimitUse(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{clientsYAML("{requests_per_second: 1, burst: 100}")}})))
	for range 30 {
		requireOK(t, e.post(t, plainBody, "X-Api-Key", "alice-key"))
	}
	requireOK(t, e.post(t, plainBody, "X-Api-Key", "key-from-env")) // bob: no limit
	used := func() float64 {
		return metricValue(t, e.reg, "sluice_gateway_client_rate_limit_used_ratio", map[string]string{"client_id": "alice", "scope": "per_replica"})
	}
	require.InDelta(t, 30.0/60, used(), 1e-9, "30 requests in a minute of a 1/s limit")
	require.Zero(t, metricValue(t, e.reg, "sluice_gateway_client_rate_limit_used_ratio", map[string]string{"client_id": "bob"}), "bob has no limit, so no series")

	v := adminJSON[map[string]any](t, e.g.AdminHandler(nil), "/ratelimit")
	clients := v["clients"].([]any)
	alice := clients[0].(map[string]any)
	require.Equal(t, "alice", alice["client_id"])
	require.InDelta(t, 0.5, alice["used_ratio"], 1e-9)
	require.InDelta(t, 30, alice["requests_last_minute"], 0)
	require.Equal(t, "per_replica", alice["scope"])
	require.NotContains(t, clients[1].(map[string]any), "used_ratio", "bob has no limit")

	e.clock.Advance(30 * time.Second)
	for range 12 {
		requireOK(t, e.post(t, plainBody, "X-Api-Key", "alice-key"))
	}
	require.InDelta(t, 42.0/60, used(), 1e-9, "both half-minutes are in the window")
	e.clock.Advance(31 * time.Second)
	require.InDelta(t, 12.0/60, used(), 1e-9, "the first 30 slid out of the window")
	e.clock.Advance(time.Minute)
	require.Zero(t, used())
}
