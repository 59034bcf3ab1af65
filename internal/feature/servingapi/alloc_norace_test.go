//go:build !race

// The race detector allocates on its own and drops pooled objects, so
// allocation counts mean nothing under it: this file builds only without
// -race, and make test runs it in a separate pass without the race
// detector.

package servingapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// TestReadAllocations pins POST /get-online-features of 100 entity rows ×
// 50 Float32 features from the embedded store: it adds no allocation per
// entity row (the request's integer keys are scanned, not tokenized; the
// answer is written into a pooled buffer, its memory given back to the
// server), and a bounded few beyond the store's own read. A response
// rebuilt per request on the edge shows here as thousands. serving's
// TestReadAllocations pins the Go API's share.
func TestReadAllocations(t *testing.T) {
	srv, refs, st := wideServer(t)
	ctx := t.Context()
	body := wideBody(t, refs, 100)
	keys := servingtest.WideKeys(t, 100)
	store := testing.AllocsPerRun(50, func() {
		if _, err := st.Read(ctx, keys); err != nil {
			t.Fatal(err)
		}
	})
	h := NewHandler(srv, HandlerOptions{}, nil, nil)
	post := func(body []byte) float64 {
		w := &discardResponse{hdr: http.Header{}}
		return testing.AllocsPerRun(50, func() {
			w.code = 0
			h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodPost, "/get-online-features", bytes.NewReader(body)))
			if w.code != http.StatusOK {
				t.Fatalf("status %d", w.code)
			}
		})
	}
	body1 := wideBody(t, refs, 1)
	one, hundred := post(body1), post(body)
	t.Logf("allocations: store %.0f, POST 1x50 %.0f, 100x50 %.0f", store, one, hundred)
	require.LessOrEqual(t, hundred-one, 5.0, "POST /get-online-features: %.0f allocations for 1 row, %.0f for 100", one, hundred)
	require.LessOrEqual(t, hundred-store, 105.0, "POST /get-online-features 100x50 allocates %.0f beyond the store's %.0f", hundred, store)
}
