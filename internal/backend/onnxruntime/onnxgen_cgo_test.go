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

// The accumulator that the sequence batcher's tests drive is a graph
// written from Go; ONNX Runtime must load and run it as documented.
func TestOnnxgenAccumulatorRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.onnx")
	require.NoError(t, os.WriteFile(path, onnxgen.Accumulator(onnxgen.Uint64).Marshal(), 0o600))
	inst := loadModel(t, path, nil)
	i32 := func(name string, vs ...int32) infer.Tensor {
		return infer.Tensor{Name: name, DataType: infer.Int32, Shape: infer.Shape{int64(len(vs)), 1}, Data: onnxgen.Int32s(vs...)}
	}
	corr := infer.Tensor{Name: "CORRID", DataType: infer.Uint64, Shape: infer.Shape{3, 1}, Data: make([]byte, 24)}
	corr.Data[8] = 7
	outs, err := inst.Execute(t.Context(), []infer.Tensor{
		i32("INPUT", 5, 6, 7), i32("START", 1, 0, 0), i32("READY", 1, 1, 0), i32("INPUT_STATE", 100, 100, 100), corr,
	}, []string{"OUTPUT", "CORRID_OUT"})
	require.NoError(t, err)
	require.Equal(t, onnxgen.Int32s(5, 106, 100), outs[0].Data, "start resets, ready adds, not ready keeps the state")
	require.Equal(t, corr.Data, outs[1].Data)
}
