package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestAdmissionBodyErrors serves the gateway behind admission.Handler on a
// real server and sends chunked bodies (no Content-Length, so admission
// can only refuse them while they are read): the service and proxy body
// readers answer 413 past the listener's limit and 503 overloaded past the
// process budget.
func TestAdmissionBodyErrors(t *testing.T) {
	const kib = 1 << 10
	ms := newModelServer(t)
	services := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{clientsYAML("{}")}})))
	proxy := newProxyEnv(t, []string{ms.addr}, "1s", "")
	body := strings.Repeat(" ", 4*kib) + plainBody
	tests := []struct {
		name   string
		env    *testEnv
		path   string
		limits admission.Limits
		budget int64
		status int
		reason string
	}{
		{name: "service within both", env: services, path: etaPath, limits: admission.DefaultLimits(64 * kib), budget: 64 * kib, status: http.StatusOK},
		{
			name: "service over the listener limit", env: services, path: etaPath, limits: admission.DefaultLimits(kib), budget: 64 * kib,
			status: http.StatusRequestEntityTooLarge, reason: gateway.ReasonBodyTooLarge,
		},
		{
			name: "service past the budget", env: services, path: etaPath, limits: admission.DefaultLimits(64 * kib), budget: kib,
			status: http.StatusServiceUnavailable, reason: admission.ReasonOverloaded,
		},
		{name: "proxy within both", env: proxy, path: "/v2/models/simple/infer", limits: admission.DefaultLimits(64 * kib), budget: 64 * kib, status: http.StatusOK},
		{
			name: "proxy over the listener limit", env: proxy, path: "/v2/models/simple/infer", limits: admission.DefaultLimits(kib), budget: 64 * kib,
			status: http.StatusRequestEntityTooLarge, reason: gateway.ReasonBodyTooLarge,
		},
		{
			name: "proxy past the budget", env: proxy, path: "/v2/models/simple/infer", limits: admission.DefaultLimits(64 * kib), budget: kib,
			status: http.StatusServiceUnavailable, reason: admission.ReasonOverloaded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := admission.NewBudget(tt.budget, nil)
			srv := httptest.NewServer(admission.Handler("gateway", tt.limits, budget, nil, tt.env.g))
			defer srv.Close()
			// io.MultiReader hides the length: the body goes chunked.
			r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+tt.path, io.MultiReader(strings.NewReader(body)))
			require.NoError(t, err)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer alice-key")
			resp, err := srv.Client().Do(r)
			require.NoError(t, err)
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tt.status, resp.StatusCode, "body: %s", got)
			if tt.reason != "" {
				var e struct{ Error, Reason string }
				require.NoError(t, json.Unmarshal(got, &e), "body: %s", got)
				require.Equal(t, tt.reason, e.Reason, "error: %s", e.Error)
				if tt.status == http.StatusServiceUnavailable {
					require.Equal(t, "1", resp.Header.Get("Retry-After"))
				}
			}
			harness.WaitFor(t, 10*time.Second, 5*time.Millisecond, "the budget released", func() (bool, string) {
				n := budget.InUse()
				return n == 0, fmt.Sprintf("budget still holds %d bytes", n)
			})
		})
	}
}
