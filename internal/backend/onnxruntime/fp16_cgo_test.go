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

// Triton's QA FP16 identity models (qa/common/gen_qa_identity_models.py)
// have outputs [-1,-1]: no signature predicts their shape, and the ONNX
// Runtime binding cannot return FP16 outputs it allocated itself. The
// output takes the shape of the input with the same pattern; a model
// where that guess is wrong still runs (or fails as before).
func TestFP16OutputsWithVariableDims(t *testing.T) {
	const fp16 = 10
	dir := t.TempDir()
	path := filepath.Join(dir, "model.onnx")
	identity := onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "INPUT0", Type: fp16, Dims: []int64{-1, -1}}},
		Outputs: []onnxgen.Value{{Name: "OUTPUT0", Type: fp16, Dims: []int64{-1, -1}}},
		Nodes:   []onnxgen.Node{{Op: "Identity", Inputs: []string{"INPUT0"}, Outputs: []string{"OUTPUT0"}}},
	}
	require.NoError(t, os.WriteFile(path, identity.Marshal(), 0o600))
	inst := loadModel(t, path, nil)
	data := []byte{0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38, 0xff, 0x7b, 0x00, 0x00, 0x00, 0x80} // 1, -2, 0.5, 65504, 0, -0
	for _, shape := range []infer.Shape{{2, 3}, {1, 6}, {3, 2}} {
		out, err := inst.Execute(t.Context(), []infer.Tensor{{Name: "INPUT0", DataType: infer.FP16, Shape: shape, Data: data}}, []string{"OUTPUT0"})
		require.NoError(t, err, "shape %v", shape)
		require.Equal(t, shape, out[0].Shape)
		require.Equal(t, data, out[0].Data)
	}
}

// A transpose has the input's pattern but not its shape: the guess fails
// the run, which is repeated without it, so no answer ever carries the
// guessed shape.
func TestFP16GuessedShapeWrong(t *testing.T) {
	const fp16 = 10
	path := filepath.Join(t.TempDir(), "model.onnx")
	transpose := onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "INPUT0", Type: fp16, Dims: []int64{-1, -1}}},
		Outputs: []onnxgen.Value{{Name: "OUTPUT0", Type: fp16, Dims: []int64{-1, -1}}},
		Nodes:   []onnxgen.Node{{Op: "Transpose", Inputs: []string{"INPUT0"}, Outputs: []string{"OUTPUT0"}}},
	}
	require.NoError(t, os.WriteFile(path, transpose.Marshal(), 0o600))
	inst := loadModel(t, path, nil)
	out, err := inst.Execute(t.Context(), []infer.Tensor{{Name: "INPUT0", DataType: infer.FP16, Shape: infer.Shape{2, 3}, Data: make([]byte, 12)}}, []string{"OUTPUT0"})
	if err == nil {
		require.Equal(t, infer.Shape{3, 2}, out[0].Shape)
		return
	}
	require.ErrorContains(t, err, "onnxruntime run")
}

// Triton's QA zero models with three FP16 inputs (L0_infer_zero test_hh3_*)
// give every input and output the pattern [-1,-1]: output j must take the
// shape of input j, not of the first input, or ONNX Runtime refuses the
// run whenever the inputs' shapes differ.
func TestFP16SeveralOutputsOfOnePattern(t *testing.T) {
	const fp16 = 10
	path := filepath.Join(t.TempDir(), "model.onnx")
	m := onnxgen.Model{}
	for _, i := range []string{"0", "1", "2"} {
		m.Inputs = append(m.Inputs, onnxgen.Value{Name: "INPUT" + i, Type: fp16, Dims: []int64{-1, -1}})
		m.Outputs = append(m.Outputs, onnxgen.Value{Name: "OUTPUT" + i, Type: fp16, Dims: []int64{-1, -1}})
		m.Nodes = append(m.Nodes, onnxgen.Node{Op: "Identity", Inputs: []string{"INPUT" + i}, Outputs: []string{"OUTPUT" + i}})
	}
	require.NoError(t, os.WriteFile(path, m.Marshal(), 0o600))
	inst := loadModel(t, path, nil)
	shapes := []infer.Shape{{1, 1}, {3, 2}, {2, 2}}
	var ins []infer.Tensor
	for i, s := range shapes {
		n, err := s.Elements()
		require.NoError(t, err)
		data := make([]byte, 2*n)
		for k := range data {
			data[k] = byte(i + k)
		}
		ins = append(ins, infer.Tensor{Name: "INPUT" + string(rune('0'+i)), DataType: infer.FP16, Shape: s, Data: data})
	}
	out, err := inst.Execute(t.Context(), ins, []string{"OUTPUT0", "OUTPUT1", "OUTPUT2"})
	require.NoError(t, err)
	for i := range shapes {
		require.Equal(t, shapes[i], out[i].Shape, "OUTPUT%d", i)
		require.Equal(t, ins[i].Data, out[i].Data, "OUTPUT%d", i)
	}
}
