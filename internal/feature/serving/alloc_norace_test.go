//go:build !race

// The race detector allocates on its own and drops pooled objects, so
// allocation counts mean nothing under it: this file builds only without
// -race, and make test runs it in a separate pass without the race
// detector.

package serving

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// TestReadAllocations pins the feature assembly of 100 entity rows × 50
// Float32 features from the embedded store: what GetOnlineFeatures
// allocates beyond the store's own read is a handful of slabs for the
// whole answer (never one per value or per row), none at all once the
// answers are given back (Release), and POST /get-online-features adds
// no allocation per entity row (the request's integer keys are scanned,
// not tokenized; the answer is written into a pooled buffer, its memory
// given back). The 100x50 answer is about 5,000 values and 1 MB: one
// allocation per value, or a response rebuilt per request on the edge,
// shows here as thousands.
func TestReadAllocations(t *testing.T) {
	srv, refs := wideServer(t)
	ctx := t.Context()
	req, body := wideRequest(t, refs, 100)
	keys := make([]online.Key, 100)
	for i, id := range req.Entities["user_id"] {
		ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{id})
		require.NoError(t, err)
		keys[i] = online.Key{View: "wide", Entity: ek}
	}
	store := testing.AllocsPerRun(50, func() {
		if _, err := srv.store.Read(ctx, keys); err != nil {
			t.Fatal(err)
		}
	})
	kept := testing.AllocsPerRun(50, func() {
		if _, err := srv.GetOnlineFeatures(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	// The response, its columns, statuses, timestamps and values; the
	// plan cache lookup's and the metrics' few.
	require.LessOrEqual(t, kept-store, 10.0, "GetOnlineFeatures allocates %.0f beyond the store's %.0f", kept, store)
	released := testing.AllocsPerRun(50, func() {
		resp, err := srv.GetOnlineFeatures(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		srv.Release(resp)
	})
	require.LessOrEqual(t, released-store, 3.0, "a released GetOnlineFeatures allocates %.0f beyond the store's %.0f", released, store)

	h := NewHandler(srv, HandlerOptions{})
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
	_, body1 := wideRequest(t, refs, 1)
	one, hundred := post(body1), post(body)
	t.Logf("allocations: store %.0f, GetOnlineFeatures %.0f (released %.0f), POST 1x50 %.0f, 100x50 %.0f", store, kept, released, one, hundred)
	require.LessOrEqual(t, hundred-one, 5.0, "POST /get-online-features: %.0f allocations for 1 row, %.0f for 100", one, hundred)
	require.LessOrEqual(t, hundred-store, 105.0, "POST /get-online-features 100x50 allocates %.0f beyond the store's %.0f", hundred, store)
}
