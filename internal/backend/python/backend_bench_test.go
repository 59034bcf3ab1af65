package python

import (
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// BenchmarkExecute measures one execute() call of a model that returns
// its input, at batch 1: the cost of crossing into the worker and back
// (framing, the socket, decoding into numpy, InferenceRequest and
// InferenceResponse objects, encoding the answer).
func BenchmarkExecute(b *testing.B) {
	bk := New(Options{}, nil, nil)
	defer bk.Close()
	cfg := testConfig(b, "identity", `
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 8 ] } ]`)
	path, err := filepathAbs("testdata/models/bench_identity/1/model.py")
	if err != nil {
		b.Fatal(err)
	}
	in := loadBench(b, bk, path, cfg)
	defer in.Close()
	inputs := []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1, 8}, 1, 2, 3, 4, 5, 6, 7, 8)}
	outputs := []string{"OUTPUT0"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Execute(b.Context(), inputs, outputs); err != nil {
			b.Fatal(err)
		}
	}
}
