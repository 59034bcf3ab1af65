//go:build !race

// The race detector allocates on its own and drops pooled objects, so
// allocation counts mean nothing under it: this file builds only without
// -race, and make test runs it in a separate pass without the race
// detector.

package serving

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// TestReadAllocations pins the feature assembly of 100 entity rows × 50
// Float32 features from the embedded store: what GetOnlineFeatures
// allocates beyond the store's own read is a handful of slabs for the
// whole answer (never one per value or per row), and none at all once
// the answers are given back (Release). The 100x50 answer is about 5,000
// values and 1 MB: one allocation per value shows here as thousands.
// servingapi's TestReadAllocations pins POST /get-online-features.
func TestReadAllocations(t *testing.T) {
	srv, refs, st := wideServer(t)
	ctx := t.Context()
	req := wideRequest(refs, 100)
	keys := servingtest.WideKeys(t, 100)
	store := testing.AllocsPerRun(50, func() {
		if _, err := st.Read(ctx, keys); err != nil {
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

	t.Logf("allocations: store %.0f, GetOnlineFeatures %.0f (released %.0f)", store, kept, released)
}
