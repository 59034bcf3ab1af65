package servingapi

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
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestAdmissionBodyErrors serves /get-online-features behind
// admission.Handler on a real server with chunked bodies (no
// Content-Length, so admission can only refuse them while they are read):
// readJSON answers 413 past the listener's limit and 503 overloaded past
// the process budget.
func TestAdmissionBodyErrors(t *testing.T) {
	const kib = 1 << 10
	f := newFixture(t, serving.Options{})
	f.Seed(t)
	body := strings.Repeat(" ", 4*kib) + `{"features":["user_stats:clicks"],"entities":{"user_id":[1]}}`
	tests := []struct {
		name   string
		limits admission.Limits
		budget int64
		status int
		reason string
	}{
		{name: "within both", limits: admission.DefaultLimits(64 * kib), budget: 64 * kib, status: http.StatusOK},
		{name: "over the listener limit", limits: admission.DefaultLimits(kib), budget: 64 * kib, status: http.StatusRequestEntityTooLarge, reason: "body_too_large"},
		{name: "past the budget", limits: admission.DefaultLimits(64 * kib), budget: kib, status: http.StatusServiceUnavailable, reason: admission.ReasonOverloaded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := admission.NewBudget(tt.budget, nil)
			srv := httptest.NewServer(admission.Handler("features", tt.limits, budget, nil, f.h))
			defer srv.Close()
			// io.MultiReader hides the length: the body goes chunked.
			r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/get-online-features", io.MultiReader(strings.NewReader(body)))
			require.NoError(t, err)
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
			}
			harness.WaitFor(t, 10*time.Second, 5*time.Millisecond, "the budget released", func() (bool, string) {
				n := budget.InUse()
				return n == 0, fmt.Sprintf("budget still holds %d bytes", n)
			})
		})
	}
}
