package modelconfig

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// A ragged model as in Triton's ragged-batching guide and
// qa/L0_batch_input: INPUT allow_ragged_batch (the model takes it as one
// flat dimension), batch inputs the model has but the config does not
// list, OUTPUT split by INPUT's shape.
func TestRaggedBatchConfig(t *testing.T) {
	const text = `
max_batch_size: 4
input { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }
output { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }
batch_input { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_INT32 source_input: "INPUT" }
batch_output { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT" source_input: "INPUT" }
`
	sig := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("INPUT", infer.FP32, -1), spec("INDEX", infer.Int32, -1)},
		Outputs: []infer.TensorSpec{spec("OUTPUT", infer.FP32, -1)},
	}
	cfg, src, err := Parse("config.pbtxt", []byte(text))
	require.NoError(t, err)
	ApplyDefaults(cfg, "ragged")
	require.Empty(t, Validate(cfg, src))
	require.Empty(t, ValidateSignature(cfg, sig, src))

	bad := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("INPUT", infer.FP32, -1, -1), spec("INDEX", infer.FP32, -1)},
		Outputs: []infer.TensorSpec{spec("OUTPUT", infer.FP32, -1)},
	}
	require.Equal(t, []string{
		"config.pbtxt:3:1: input 'INPUT' has allow_ragged_batch: the model takes it flattened, in one dimension, but its shape is [-1,-1]",
		"config.pbtxt:5:1: batch input 'INDEX' is TYPE_INT32 in the configuration but TYPE_FP32 in the model",
	}, lines(ValidateSignature(cfg, bad, src)))

	cfg, src, err = Parse("config.pbtxt", []byte(`
max_batch_size: 4
input { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] }
output { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }
batch_input { kind: BATCH_ELEMENT_COUNT target_name: "INPUT" data_type: TYPE_INT64 source_input: [ "NOPE" ] }
batch_output { target_name: "Y" source_input: "INPUT" }
`))
	require.NoError(t, err)
	ApplyDefaults(cfg, "ragged")
	require.Equal(t, []string{
		"config.pbtxt:5:41: batch_input[0]: target 'INPUT' is also listed as an input; the server computes it, clients do not send it",
		"config.pbtxt:5:62: batch_input[0]: data_type must be TYPE_INT32 or TYPE_FP32, got TYPE_INT64",
		"config.pbtxt:5:84: batch_input[0]: source input 'NOPE' is not a listed input",
		"config.pbtxt:6:16: batch_output[0]: target 'Y' is not a listed output",
	}, lines(Validate(cfg, src)))
}

// A Python model sees each request on its own, so an allow_ragged_batch
// input keeps the config's shape ([batch, -1] from dims [-1]) rather than
// one flat dimension: Triton loads such models, and so does Sluice
// (issue 25 item 10; it was refused as not flattened).
func TestRaggedInputOfPythonModel(t *testing.T) {
	cfg, src, err := Parse("config.pbtxt", []byte(`
backend: "python"
max_batch_size: 4
input { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }
output { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }
`))
	require.NoError(t, err)
	ApplyDefaults(cfg, "py_ragged")
	require.Empty(t, Validate(cfg, src))
	sig := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("INPUT", infer.FP32, -1, -1)},
		Outputs: []infer.TensorSpec{spec("OUTPUT", infer.FP32, -1, -1)},
	}
	require.Empty(t, ValidateSignature(cfg, sig, src))
}
