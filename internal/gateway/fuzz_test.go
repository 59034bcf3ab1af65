package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/gateway"
)

// FuzzServiceRequest sends arbitrary bodies, with an arbitrary value in
// the request-id, routing and priority headers, through a service: the
// gateway must never panic, and must always answer JSON: a 200 prediction
// or an error with a reason.
func FuzzServiceRequest(f *testing.F) {
	for _, s := range []struct{ body, hdr string }{
		{okBody, ""},
		{okBody, "true"},
		{`{"user_id": "7", "route_id": "3", "base_eta": 30.5, "route_delay_factor": 0.25, "express": true, "note": "é"}`, "premium"},
		{`{"user_id": 8, "route_id": 4, "base_eta": 30}`, "x"},
		{`{"user_id": 7, "route_id": 3, "base_eta": 1e39}`, ""},
		{`{"user_id": -9223372036854775808, "route_id": 9223372036854775807, "base_eta": -0}`, ""},
		{`{"user_id": 7, "user_id": 8, "route_id": 3, "base_eta": 30}`, ""},
		{`{"user_id": null, "route_id": [3], "base_eta": {}}`, ""},
		{`{"\u0000": 1}`, "\x00"},
		{`null`, ""},
		{`[]`, ""},
		{``, strings.Repeat("a", 200)},
		{`{"user_id": 7, "route_id": 3, "base_eta": 30, "note": "` + strings.Repeat("x", 2000) + `"}`, "a b"},
	} {
		f.Add([]byte(s.body), s.hdr)
	}
	cfg := parseConfig(f, gatewayYAML(yamlOpts{
		gateway: []string{anonAllowed, "priority_headers: [{name: x-user-type, value: premium, priority: 1}]"},
		routes:  routingRoutes,
		service: []string{breakerYAML},
	}))
	repo := loadRepo(f)
	features := newFakeFeatures(repo)
	seedFeatures(features)
	clock := newFakeClock()
	g, err := gateway.New(cfg, gateway.Options{
		Models: newFakeModel(), Features: features,
		FeatureRepo: func() *registry.Repo { return repo },
		Now:         clock.Now, MaxBodyBytes: 4096,
	}, nil, prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = g.Close(f.Context()) })

	f.Fuzz(func(t *testing.T, body []byte, hdr string) {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, etaPath, strings.NewReader(string(body)))
		r.Header.Set("X-Request-Id", hdr)
		r.Header.Set("X-Canary", hdr)
		r.Header.Set("X-User-Type", hdr)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q; body %q", ct, w.Body)
		}
		var res struct {
			RequestID string          `json:"request_id"`
			Error     string          `json:"error"`
			Reason    string          `json:"reason"`
			Outputs   json.RawMessage `json:"outputs"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
			t.Fatalf("%d answer is not JSON: %v; body %q", w.Code, err, w.Body)
		}
		if res.RequestID == "" || res.RequestID != w.Header().Get("X-Request-Id") {
			t.Fatalf("request_id %q, header %q", res.RequestID, w.Header().Get("X-Request-Id"))
		}
		switch {
		case w.Code == http.StatusOK:
			if len(res.Outputs) == 0 || res.Error != "" {
				t.Fatalf("200 without outputs: %q", w.Body)
			}
		case w.Code >= 400 && w.Code < 600:
			if res.Error == "" || res.Reason == "" {
				t.Fatalf("%d without error and reason: %q", w.Code, w.Body)
			}
			if w.Code >= 500 && res.Reason != gateway.ReasonMissingFeature {
				t.Fatalf("%d for a bad request: %q", w.Code, w.Body)
			}
		default:
			t.Fatalf("status %d: %q", w.Code, w.Body)
		}
	})
}
