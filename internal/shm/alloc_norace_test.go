//go:build !race

// The race detector allocates on its own, so allocation counts mean
// nothing under it: this file builds only without -race.

package shm

import (
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// TestAcquireWithoutRegionsAllocations: every request passes through
// Acquire, and most name no region; those must cost no allocation.
func TestAcquireWithoutRegionsAllocations(t *testing.T) {
	r := New(Options{})
	req := &infer.Request{
		Inputs: []infer.Tensor{
			{Name: "user_features", DataType: infer.FP32, Shape: infer.Shape{1, 2}, Data: make([]byte, 8)},
			{
				Name: "package_features", DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: make([]byte, 4),
				Parameters: infer.Parameters{"other": "x"},
			},
		},
		Outputs: []infer.RequestedOutput{{Name: "eta_prediction"}},
	}
	allocs := testing.AllocsPerRun(100, func() {
		l, err := r.Acquire(req)
		if err != nil || l != nil {
			t.Fatalf("lease %v, error %v", l, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Acquire allocates %.0f times for a request without regions, want 0", allocs)
	}
}
