package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
)

// TestOutcomes posts outcomes of predictions the gateway logged: who may
// post, what a bad body gets, and that a logged prediction joins.
func TestOutcomes(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{
		plain:   true,
		gateway: []string{clientsYAML("{}"), anonAllowed},
		service: []string{"accuracy: {key: user_id, outputs: [{name: eta_minutes, observed: actual_minutes}], outcome_clients: [alice]}"},
	}))
	store, err := accuracy.OpenBolt(filepath.Join(t.TempDir(), "p.db"), 100, nil)
	require.NoError(t, err)
	j := accuracy.New(store, accuracy.Options{}, nil, nil)
	t.Cleanup(func() { require.NoError(t, j.Close(context.Background())) })
	resp := &infer.Response{Model: "eta_model", Version: "1", Outputs: []infer.Tensor{fp32Tensor("eta_prediction", 42.5), fp32Tensor("confidence_score", 0.9)}}
	e := newEnv(t, cfg, func(o *gateway.Options) {
		o.Accuracy = j
		o.Models = cannedModel{resp}
	})
	requireOK(t, e.post(t, plainBody, "Authorization", "Bearer alice-key"))
	// Run is not started: Close would store the queue; Flush needs Run.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = j.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	require.NoError(t, j.Flush(t.Context()))

	post := func(body string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/services/eta/outcomes", strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		e.g.ServeHTTP(w, r)
		return w
	}
	tests := []struct {
		name, body string
		hdr        []string
		code       int
		reason     string
	}{
		{"anonymous", `{"key":7,"values":{"actual_minutes":40}}`, nil, 401, "missing_api_key"},
		{"not in outcome_clients", `{"key":7,"values":{"actual_minutes":40}}`, []string{"Authorization", "Bearer key-from-env"}, 403, "outcome_not_permitted"},
		{"bad body", `{"key":7,"values":{"actual_minutes":"late"}}`, []string{"Authorization", "Bearer alice-key"}, 400, "invalid_outcome"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := post(tt.body, tt.hdr...)
			require.Equal(t, tt.code, w.Code, w.Body.String())
			var eb struct{ Error, Reason string }
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &eb))
			require.Equal(t, tt.reason, eb.Reason)
		})
	}
	w := post(`[{"key":7,"values":{"actual_minutes":40}},{"key":7,"values":{"actual_minutes":41}}]`, "Authorization", "Bearer alice-key")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var a struct {
		Results []string       `json:"results"`
		Counts  map[string]int `json:"counts"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
	require.Equal(t, []string{"joined", "duplicate"}, a.Results)
	require.Equal(t, map[string]int{"joined": 1, "duplicate": 1}, a.Counts)
	// A service without an accuracy block, or none at all.
	require.Equal(t, http.StatusNotFound, func() int {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/services/nope/outcomes", strings.NewReader(`{}`))
		r.Header.Set("Authorization", "Bearer alice-key")
		rec := httptest.NewRecorder()
		e.g.ServeHTTP(rec, r)
		return rec.Code
	}())
}
