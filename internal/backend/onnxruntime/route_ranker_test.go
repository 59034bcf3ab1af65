//go:build cgo

package onnxruntime

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// route_ranker is the compute-bound example (scripts/make_models.py): its
// large weights are FP16 initializers cast to FP32 in the graph, which
// must compute exactly what PyTorch computed with the same rounded
// weights, alone and batched.
func TestRouteRankerMatchesPyTorch(t *testing.T) {
	var ref reference
	readJSON(t, filepath.Join(examples, "reference", "route_ranker.json"), &ref)
	inst := loadModel(t, modelPath("route_ranker", 1), map[string]string{ParamIntraOpThreads: "1"})
	require.Equal(t, infer.Shape{-1, 256}, inst.Signature().Inputs[0].Shape)
	require.True(t, inst.pool.usable, "its shapes follow from the batch size")
	in := ref.Inputs[0]
	want := ref.Outputs[0]
	check := func(t *testing.T, got infer.Tensor, rows []int) {
		t.Helper()
		vals := f32s(t, got)
		require.Len(t, vals, len(rows))
		for i, r := range rows {
			require.InDelta(t, want.Data[r], float64(vals[i]), 1e-4, "row %d", r)
		}
	}
	t.Run("batch of 4", func(t *testing.T) {
		out, err := inst.Execute(t.Context(), []infer.Tensor{f32Tensor("features", in.Shape, in.f32())}, nil)
		require.NoError(t, err)
		require.Equal(t, infer.Shape{4, 1}, out[0].Shape)
		check(t, out[0], []int{0, 1, 2, 3})
	})
	for r := range 4 {
		t.Run(fmt.Sprintf("row %d alone", r), func(t *testing.T) {
			row := in.f32()[r*256 : (r+1)*256]
			out, err := inst.Execute(t.Context(), []infer.Tensor{f32Tensor("features", infer.Shape{1, 256}, row)}, nil)
			require.NoError(t, err)
			check(t, out[0], []int{r})
		})
	}
}
