//go:build !race

// The race detector drops pooled objects on purpose, so allocation counts
// mean nothing under it: this file builds only without -race, and make test
// runs it in a separate pass without the race detector.

package batch

import (
	"context"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// TestSubmitAllocations pins the hot path: a batch of one allocates only
// the Result.
func TestSubmitAllocations(t *testing.T) {
	req := request(1, 1)
	bt, err := New(Options{Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 8},
		[]Executor{passExec([]infer.Tensor{req.Inputs[0]})}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := bt.Close(t.Context()); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(500, func() {
		if _, err := bt.Submit(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("Submit allocates %.0f times per request, want at most 1 (the Result)", allocs)
	}
}
