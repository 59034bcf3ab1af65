//go:build cgo

package onnxruntime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

// An ONNX input backed by an initializer is listed as optional; a request
// without it runs on the initializer, one with it overrides it.
func TestInitializerBackedInputIsOptional(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.onnx")
	require.NoError(t, os.WriteFile(path, biasModel().Marshal(), 0o600))
	sig, err := testBackend(t).Signature(t.Context(), path)
	require.NoError(t, err)
	require.Equal(t, []infer.TensorSpec{
		{Name: "X", DataType: infer.FP32, Shape: infer.Shape{2}},
		{Name: "B", DataType: infer.FP32, Shape: infer.Shape{2}, Optional: true},
	}, sig.Inputs)

	inst := loadModel(t, path, nil)
	x := infer.Tensor{Name: "X", DataType: infer.FP32, Shape: infer.Shape{2}, Data: onnxgen.Float32s(1, 2)}
	outs, err := inst.Execute(t.Context(), []infer.Tensor{x}, []string{"Y"})
	require.NoError(t, err)
	require.Equal(t, onnxgen.Float32s(11, 22), outs[0].Data, "without B the initializer is used")

	b := infer.Tensor{Name: "B", DataType: infer.FP32, Shape: infer.Shape{2}, Data: onnxgen.Float32s(100, 200)}
	outs, err = inst.Execute(t.Context(), []infer.Tensor{b, x}, []string{"Y"})
	require.NoError(t, err)
	require.Equal(t, onnxgen.Float32s(101, 202), outs[0].Data, "a given B overrides the initializer")
}
