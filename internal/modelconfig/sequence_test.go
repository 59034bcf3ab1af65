package modelconfig

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// A sequence model's control inputs and implicit states are model tensors
// the configuration does not list (Triton's qa/L0_sequence_batcher and
// qa/L0_implicit_state model configs): they must not count as unlisted
// inputs, must exist in the model with the control's type, and
// auto-complete must not offer them to clients.
func TestSequenceTensorsAgainstTheModel(t *testing.T) {
	col := []int64{-1, 1}
	sig := infer.Signature{
		Inputs: []infer.TensorSpec{
			spec("INPUT", infer.Int32, col...), spec("START", infer.Int32, col...),
			spec("READY", infer.Int32, col...), spec("INPUT_STATE", infer.Int32, col...),
		},
		Outputs: []infer.TensorSpec{spec("OUTPUT", infer.Int32, col...), spec("OUTPUT_STATE", infer.Int32, col...)},
	}
	const cfgText = `
max_batch_size: 4
input { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }
sequence_batching {
  control_input { name: "START" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } }
  control_input { name: "READY" control { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } }
  state { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] }
}`
	cfg, src, err := Parse("config.pbtxt", []byte(cfgText))
	require.NoError(t, err)
	ApplyDefaults(cfg, "acc")
	require.Empty(t, Validate(cfg, src))
	require.Empty(t, ValidateSignature(cfg, sig, src))

	bad := strings.Replace(cfgText, `name: "READY" control { kind: CONTROL_SEQUENCE_READY int32_false_true`, `name: "READY" control { kind: CONTROL_SEQUENCE_READY fp32_false_true`, 1)
	bad = strings.Replace(bad, `input_name: "INPUT_STATE"`, `input_name: "H"`, 1)
	cfg, src, err = Parse("config.pbtxt", []byte(bad))
	require.NoError(t, err)
	got := lines(ValidateSignature(cfg, sig, src))
	require.Equal(t, []string{
		"config.pbtxt:3:1: input 'INPUT_STATE': the model has this input (TYPE_INT32 [-1,1]) but the configuration does not list it",
		"config.pbtxt:7:3: sequence_batching: control input 'READY' is TYPE_FP32 in the configuration but TYPE_INT32 in the model",
		"config.pbtxt:8:3: sequence_batching: state input 'H': the model has no such tensor",
	}, got)

	auto, _, err := Parse("config.pbtxt", []byte(strings.NewReplacer(
		`input { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }`, "",
		`output { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }`, "").Replace(cfgText)))
	require.NoError(t, err)
	require.NoError(t, AutoComplete(auto, sig))
	require.Len(t, auto.Input, 1, "only INPUT is the client's")
	require.Equal(t, "INPUT", auto.Input[0].Name)
	require.Len(t, auto.Output, 1)
	require.Equal(t, "OUTPUT", auto.Output[0].Name)
}

// A scalar model tensor declared with dims [1] loads, as Triton's
// backends accept it, and gets reshape { shape: [] }.
func TestScalarsAsOne(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		sig       infer.Signature
	}{
		{
			name: "no batching",
			cfg:  `input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }`,
			sig:  infer.Signature{Inputs: []infer.TensorSpec{spec("x", infer.FP32)}, Outputs: []infer.TensorSpec{spec("y", infer.FP32)}},
		},
		{
			name: "batching",
			cfg:  `max_batch_size: 4 input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }`,
			sig:  infer.Signature{Inputs: []infer.TensorSpec{spec("x", infer.FP32, -1)}, Outputs: []infer.TensorSpec{spec("y", infer.FP32, -1)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, src, err := Parse("config.pbtxt", []byte(tc.cfg))
			require.NoError(t, err)
			require.NotEmpty(t, ValidateSignature(cfg, tc.sig, src), "without the rule, [1] does not match a scalar")
			ScalarsAsOne(cfg, tc.sig)
			require.Empty(t, ValidateSignature(cfg, tc.sig, src))
			require.NotNil(t, cfg.Input[0].Reshape)
			require.Empty(t, cfg.Input[0].Reshape.Shape)
			require.NotNil(t, cfg.Output[0].Reshape)
			require.Equal(t, []int64{1}, cfg.Input[0].Dims, "clients still see dims [1]")
		})
	}
	cfg, _, err := Parse("config.pbtxt", []byte(`input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }`))
	require.NoError(t, err)
	ScalarsAsOne(cfg, infer.Signature{Inputs: []infer.TensorSpec{spec("x", infer.FP32, 1)}, Outputs: []infer.TensorSpec{spec("y", infer.FP32, 1)}})
	require.Nil(t, cfg.Input[0].Reshape, "a model tensor of shape [1] needs no reshape")
}

// An ONNX input backed by an initializer need not be listed, and may be
// listed as optional (Triton's qa/L0_optional_input configs).
func TestOptionalModelInputs(t *testing.T) {
	sig := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("X", infer.FP32, 2), {Name: "B", DataType: infer.FP32, Shape: infer.Shape{2}, Optional: true}},
		Outputs: []infer.TensorSpec{spec("Y", infer.FP32, 2)},
	}
	for _, text := range []string{
		`input { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } output { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }`,
		`input { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } input { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true } output { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }`,
	} {
		cfg, src, err := Parse("config.pbtxt", []byte(text))
		require.NoError(t, err)
		require.Empty(t, ValidateSignature(cfg, sig, src), text)
	}
	auto := &inferencepb.ModelConfig{}
	require.NoError(t, AutoComplete(auto, sig))
	require.Len(t, auto.Input, 1, "auto-complete offers only the required input")

	batching := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("X", infer.FP32, -1, 2), {Name: "B", DataType: infer.FP32, Shape: infer.Shape{2}, Optional: true}},
		Outputs: []infer.TensorSpec{spec("Y", infer.FP32, -1, 2)},
	}
	auto = &inferencepb.ModelConfig{}
	require.NoError(t, AutoComplete(auto, batching))
	require.Equal(t, int32(DefaultMaxBatchSize), auto.MaxBatchSize, "an initializer-backed input does not stop auto-complete from batching")
}
