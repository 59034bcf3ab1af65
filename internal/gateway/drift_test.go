package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/gateway"
)

// driftYAML records the first 10 s of traffic as the reference and checks
// every second.
const driftYAML = "drift: {record_for: 10s, interval: 1s, window: 1h, features: [user_stats:rating], outputs: [eta_prediction]}"

// TestDriftRecordsReferenceThenFlagsShift: the live window is compared
// with the reference recorded from the first period; a shifted feature is
// flagged (admin /drift and the PSI gauge), an unshifted one is not.
func TestDriftRecordsReferenceThenFlagsShift(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{driftYAML}})))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.g.RunBackground(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	rng := rand.New(rand.NewPCG(1, 2))
	send := func(n int, mean float64) {
		for i := range n {
			id := int64(i%500 + 1)
			e.features.put("user_stats:trips", id, feature.Value{I64: 3})
			e.features.put("user_stats:rating", id, feature.Value{F64: mean + rng.NormFloat64()*0.3})
			e.features.put("user_stats:premium", id, feature.Value{Bool: false})
			e.features.put("user_embedding:embedding", id, feature.Value{F32s: []float32{1, 2, 3, 4}})
			requireOK(t, e.post(t, fmt.Sprintf(`{"user_id": %d, "route_id": 1, "base_eta": 10}`, id)))
		}
	}
	admin := e.g.AdminHandler(nil)
	state := func() gateway.DriftView {
		w := httptest.NewRecorder()
		admin.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/drift", nil))
		require.Equal(t, http.StatusOK, w.Code)
		var v []gateway.DriftView
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &v))
		require.Len(t, v, 1)
		return v[0]
	}
	require.Equal(t, "recording", state().ReferenceFrom)

	send(400, 3) // the reference period
	e.clock.Advance(11 * time.Second)
	require.Eventually(t, func() bool { return state().ReferenceFrom == "recorded" }, 10*time.Second, 50*time.Millisecond)

	// The live window still holds the reference period's values; a period
	// twice as long at a shifted mean moves the rating's distribution.
	send(800, 4.5)
	e.clock.Advance(2 * time.Second)
	var rating gateway.DriftVariable
	require.Eventually(t, func() bool {
		for _, v := range state().Variables {
			if v.Name == "user_stats__rating" {
				rating = v
				return v.Drifting
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "the rating's shift is flagged")
	require.NotNil(t, rating.PSI)
	require.Greater(t, *rating.PSI, 0.25)
	require.Greater(t, metricValue(t, e.reg, "sluice_drift_psi", map[string]string{"scope": "eta", "name": "user_stats__rating"}), 0.25)
	for _, v := range state().Variables {
		if v.Name == "output__eta_prediction" {
			require.True(t, v.Drifting, "the fake model's output sums its inputs, the rating among them: it moves too")
		}
	}
}
