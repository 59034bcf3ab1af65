package onnxruntime

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

// biasModel is Y = X + B where the graph input B has an initializer
// [10, 20]: an input ONNX Runtime does not list but a request may give
// (Triton's qa/L0_optional_input idea: an input the config marks
// optional: true).
func biasModel() onnxgen.Model {
	return onnxgen.Model{
		Inputs: []onnxgen.Value{
			{Name: "X", Type: onnxgen.Float, Dims: []int64{2}},
			{Name: "B", Type: onnxgen.Float, Dims: []int64{2}},
		},
		Outputs:      []onnxgen.Value{{Name: "Y", Type: onnxgen.Float, Dims: []int64{2}}},
		Initializers: []onnxgen.Tensor{{Name: "B", Type: onnxgen.Float, Dims: []int64{2}, Raw: onnxgen.Float32s(10, 20)}},
		Nodes:        []onnxgen.Node{{Op: "Add", Inputs: []string{"X", "B"}, Outputs: []string{"Y"}}},
	}
}

func TestParseInitializerInputs(t *testing.T) {
	specs, err := parseInitializerInputs(biasModel().Marshal())
	require.NoError(t, err)
	require.Equal(t, []infer.TensorSpec{{Name: "B", DataType: infer.FP32, Shape: infer.Shape{2}, Optional: true}}, specs)

	specs, err = parseInitializerInputs(onnxgen.Accumulator(0).Marshal())
	require.NoError(t, err)
	require.Empty(t, specs, "no initializer backs the accumulator's inputs")

	_, err = parseInitializerInputs([]byte{0x3a, 0x05, 0x01})
	require.Error(t, err, "a truncated graph is malformed")
}

// FuzzParseInitializerInputs: model files reach the parser through the
// repository and the load API; no input may panic or hang it.
func FuzzParseInitializerInputs(f *testing.F) {
	f.Add(biasModel().Marshal())
	f.Add(onnxgen.Accumulator(onnxgen.String).Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := parseInitializerInputs(data)
		if err != nil {
			return
		}
		for _, s := range specs {
			if !s.Optional || !s.DataType.Valid() {
				t.Fatalf("spec %+v", s)
			}
		}
	})
}
