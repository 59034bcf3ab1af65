package gateway_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
)

const plainBody = `{"user_id": 7, "base_eta": 30}`

// clientsYAML configures alice (key "alice-key", stored hashed) with
// aliceLimit and priority 2, and bob (key from ${TEST_API_KEY}, unlimited).
func clientsYAML(aliceLimit string) string {
	return fmt.Sprintf(`clients: [{id: alice, api_key_sha256: %s, rate_limit: %s, priority: 2}, {id: bob, api_key: "${TEST_API_KEY}"}]`,
		auth.HashKey("alice-key"), aliceLimit)
}

func TestAuth(t *testing.T) {
	closed := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{clientsYAML("{}")}})))
	open := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{clientsYAML("{}"), anonAllowed}})))
	tests := []struct {
		name   string
		env    *testEnv
		hdr    []string
		code   int
		reason string
	}{
		{name: "bearer key", env: closed, hdr: []string{"Authorization", "Bearer alice-key"}, code: 200},
		{name: "x-api-key", env: closed, hdr: []string{"X-Api-Key", "alice-key"}, code: 200},
		{name: "key hashed from the environment", env: closed, hdr: []string{"Authorization", "Bearer key-from-env"}, code: 200},
		{name: "no key", env: closed, code: 401, reason: auth.ReasonMissingAPIKey},
		{name: "other scheme", env: closed, hdr: []string{"Authorization", "Basic YWxpY2U6YWxpY2Uta2V5"}, code: 401, reason: auth.ReasonMissingAPIKey},
		{name: "empty bearer", env: closed, hdr: []string{"Authorization", "Bearer "}, code: 401, reason: auth.ReasonMissingAPIKey},
		{name: "wrong key", env: closed, hdr: []string{"Authorization", "Bearer alice-key2"}, code: 401, reason: auth.ReasonInvalidAPIKey},
		{name: "the hash is not a key", env: closed, hdr: []string{"X-Api-Key", auth.HashKey("alice-key")}, code: 401, reason: auth.ReasonInvalidAPIKey},
		{name: "anonymous allowed", env: open, code: 200},
		{name: "wrong key with anonymous allowed", env: open, hdr: []string{"X-Api-Key", "nope"}, code: 401, reason: auth.ReasonInvalidAPIKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.env.model.calls.Load()
			res := tt.env.post(t, plainBody, tt.hdr...)
			if tt.code == http.StatusOK {
				requireOK(t, res)
				return
			}
			requireError(t, res, tt.code, tt.reason)
			require.Equal(t, `Bearer realm="sluice"`, res.Header.Get("WWW-Authenticate"))
			require.NotEmpty(t, res.RequestID)
			require.NotContains(t, string(res.Body), "alice-key", "keys are never echoed")
			require.Equal(t, before, tt.env.model.calls.Load(), "a refused request must not reach the model")
		})
	}
}

// retryAfter returns the Retry-After header of a 429, checking it is a
// whole number of seconds, at least 1.
func retryAfter(t *testing.T, res *result) int {
	t.Helper()
	requireError(t, res, http.StatusTooManyRequests, gateway.ReasonRateLimited)
	s, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q is not integer seconds", res.Header.Get("Retry-After"))
	require.GreaterOrEqual(t, s, 1)
	return s
}

func TestRateLimits(t *testing.T) {
	t.Run("anonymous per IP", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{
			"anonymous: {allowed: true, rate_limit_per_ip: {requests_per_second: 0.1, burst: 2}}",
		}})))
		a := []string{"RemoteAddr", "10.0.0.1:40000"}
		requireOK(t, e.post(t, plainBody, a...))
		requireOK(t, e.post(t, plainBody, "RemoteAddr", "10.0.0.1:40001")) // the port does not matter
		require.InDelta(t, 10, retryAfter(t, e.post(t, plainBody, a...)), 1, "one token takes 10s at 0.1/s")
		// X-Forwarded-For is not trusted to pick another bucket.
		retryAfter(t, e.post(t, plainBody, "RemoteAddr", "10.0.0.1:40000", "X-Forwarded-For", "10.9.9.9"))
		// Another address has its own bucket.
		requireOK(t, e.post(t, plainBody, "RemoteAddr", "10.0.0.2:40000"))
		require.Equal(t, int64(3), e.model.calls.Load(), "refused requests must not reach the model")
	})
	t.Run("per client", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{
			clientsYAML("{requests_per_second: 0.1, burst: 3}"), anonAllowed,
		}})))
		alice := []string{"Authorization", "Bearer alice-key"}
		for range 3 {
			requireOK(t, e.post(t, plainBody, alice...))
		}
		res := e.post(t, plainBody, alice...)
		require.InDelta(t, 10, retryAfter(t, res), 1)
		require.Contains(t, res.Error, "alice")
		require.NotEmpty(t, res.RequestID)
		// alice's budget is hers: bob (unlimited) and anonymous callers
		// (unlimited here) from the same address go on.
		for range 20 {
			requireOK(t, e.post(t, plainBody, "Authorization", "Bearer key-from-env"))
			requireOK(t, e.post(t, plainBody))
		}
		require.Equal(t, 1.0, metricValue(t, e.reg, "sluice_gateway_requests_total",
			map[string]string{"service": "eta", "code": "429"}))
	})
}

func TestPriority(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{
		clientsYAML("{}"), anonAllowed,
		"priority_headers: [{name: x-user-type, value: premium, priority: 1}, {name: x-batch, value: 'yes', priority: 5}]",
	}})))
	tests := []struct {
		name string
		hdr  []string
		want any // Parameters["priority"]; nil means absent
	}{
		{name: "client priority", hdr: []string{"Authorization", "Bearer alice-key"}, want: int64(2)},
		{name: "header wins over the client", hdr: []string{"Authorization", "Bearer alice-key", "X-User-Type", "premium"}, want: int64(1)},
		{name: "other header value", hdr: []string{"Authorization", "Bearer alice-key", "X-User-Type", "basic"}, want: int64(2)},
		{name: "second header", hdr: []string{"X-Batch", "yes"}, want: int64(5)},
		{name: "anonymous with header", hdr: []string{"X-User-Type", "premium"}, want: int64(1)},
		{name: "client without priority", hdr: []string{"Authorization", "Bearer key-from-env"}},
		{name: "anonymous", hdr: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireOK(t, e.post(t, plainBody, tt.hdr...))
			p, ok := e.model.last(t).Parameters["priority"]
			if tt.want == nil {
				require.False(t, ok, "priority %v set", p)
				return
			}
			require.Equal(t, tt.want, p)
		})
	}
}

func TestAdmissionBeforeBody(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{clientsYAML("{requests_per_second: 0.1, burst: 1}")}}))
	e := newEnv(t, cfg, func(o *gateway.Options) { o.MaxBodyBytes = 64 })
	big := `{"user_id": 7, "base_eta": 30, "tier": "` + strings.Repeat("x", 100) + `"}`
	// The body is read only once the caller is admitted: a stranger's or a
	// throttled client's oversized body is never read.
	requireError(t, e.post(t, big), http.StatusUnauthorized, auth.ReasonMissingAPIKey)
	alice := []string{"Authorization", "Bearer alice-key"}
	requireError(t, e.post(t, big, alice...), http.StatusRequestEntityTooLarge, gateway.ReasonBodyTooLarge)
	retryAfter(t, e.post(t, big, alice...))
}
