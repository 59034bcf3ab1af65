//go:build cgo

package onnxruntime

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

// Rank-0 (scalar) inputs and outputs pass through the binding as its
// Scalar values (Triton's qa/L0_scalar_io serves onnx_scalar_1dim, whose
// model tensors are rank 0): X [] + X [] gives Y [], and a sum of a [2]
// input reduced without keepdims gives S [].
func TestScalarTensors(t *testing.T) {
	dir := t.TempDir()
	doubler := filepath.Join(dir, "doubler.onnx")
	require.NoError(t, os.WriteFile(doubler, onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "X", Type: onnxgen.Float, Dims: []int64{}}},
		Outputs: []onnxgen.Value{{Name: "Y", Type: onnxgen.Float, Dims: []int64{}}},
		Nodes:   []onnxgen.Node{{Op: "Add", Inputs: []string{"X", "X"}, Outputs: []string{"Y"}}},
	}.Marshal(), 0o600))
	inst := loadModel(t, doubler, nil)
	f32 := func(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
	outs, err := inst.Execute(t.Context(), []infer.Tensor{{Name: "X", DataType: infer.FP32, Shape: infer.Shape{}, Data: f32(1.5)}}, []string{"Y"})
	require.NoError(t, err)
	require.Equal(t, infer.Tensor{Name: "Y", DataType: infer.FP32, Shape: infer.Shape{}, Data: f32(3)}, outs[0])

	sum := filepath.Join(dir, "sum.onnx")
	require.NoError(t, os.WriteFile(sum, onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "X", Type: onnxgen.Float, Dims: []int64{2}}},
		Outputs: []onnxgen.Value{{Name: "S", Type: onnxgen.Float, Dims: []int64{}}},
		Nodes:   []onnxgen.Node{{Op: "ReduceSum", Inputs: []string{"X"}, Outputs: []string{"S"}, Ints: map[string]int64{"keepdims": 0}}},
	}.Marshal(), 0o600))
	inst = loadModel(t, sum, nil)
	for range 2 { // the preallocated scalar is per call
		outs, err = inst.Execute(t.Context(), []infer.Tensor{{Name: "X", DataType: infer.FP32, Shape: infer.Shape{2}, Data: append(f32(1.5), f32(2)...)}}, []string{"S"})
		require.NoError(t, err)
		require.Equal(t, infer.Tensor{Name: "S", DataType: infer.FP32, Shape: infer.Shape{}, Data: f32(3.5)}, outs[0])
	}
}
