package integration_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

// writeModel puts an ONNX model and its config.pbtxt into repo/name.
func writeModel(t *testing.T, repo, name string, m onnxgen.Model, cfg string) {
	t.Helper()
	dir := filepath.Join(repo, name, "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), m.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// doubler is Y = X + X over FP32 tensors of the given shape.
func doubler(dims ...int64) onnxgen.Model {
	return onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "X", Type: onnxgen.Float, Dims: dims}},
		Outputs: []onnxgen.Value{{Name: "Y", Type: onnxgen.Float, Dims: dims}},
		Nodes:   []onnxgen.Node{{Op: "Add", Inputs: []string{"X", "X"}, Outputs: []string{"Y"}}},
	}
}

type v2Out struct {
	Outputs []struct {
		Name  string    `json:"name"`
		Shape []int64   `json:"shape"`
		Data  []float64 `json:"data"`
	} `json:"outputs"`
}

func inferJSON(t *testing.T, base, model string, body string) (int, v2Out, string) {
	t.Helper()
	code, _, resp := do(t, http.MethodPost, base+"/v2/models/"+model+"/infer", []byte(body), map[string]string{"Content-Type": "application/json"})
	var out v2Out
	if code == http.StatusOK {
		if err := json.Unmarshal(resp, &out); err != nil {
			t.Fatalf("%v: %s", err, resp)
		}
	}
	return code, out, string(resp)
}

// Scalar (rank-0) model tensors declared with dims [1] load and serve, as
// in Triton (qa/L0_scalar_io: onnx_scalar_1dim serves [1] in and out over
// rank-0 model tensors); a batching model whose tensors are [batch] serves
// requests of [batch, 1] (the config's dims are what clients send and
// get).
func TestScalarTensorsDeclaredAsOne(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	writeModel(t, repo, "scalar", doubler(), `name: "scalar"
backend: "onnxruntime"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }
`)
	writeModel(t, repo, "scalar_batch", doubler(-1), `name: "scalar_batch"
backend: "onnxruntime"
max_batch_size: 4
input { name: "X" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }
`)
	writeModel(t, repo, "scalar_out", onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "X", Type: onnxgen.Float, Dims: []int64{2}}},
		Outputs: []onnxgen.Value{{Name: "S", Type: onnxgen.Float, Dims: []int64{}}},
		Nodes:   []onnxgen.Node{{Op: "ReduceSum", Inputs: []string{"X"}, Outputs: []string{"S"}, Ints: map[string]int64{"keepdims": 0}}},
	}, `name: "scalar_out"
backend: "onnxruntime"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: [ 2 ] }
output { name: "S" data_type: TYPE_FP32 dims: [ 1 ] }
`)
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http

	for _, m := range []string{"scalar", "scalar_batch", "scalar_out"} {
		if code, _, body := do(t, http.MethodGet, base+"/v2/models/"+m+"/ready", nil, nil); code != http.StatusOK {
			t.Errorf("%s not ready: %d %s\n%s", m, code, body, s.logs)
		}
	}
	// Non-batching rank-0 tensors serve as [1] (before, the ONNX Runtime
	// binding's refusal of shapes without dimensions made them a 400).
	for _, c := range []struct{ model, body, want string }{
		{"scalar_out", `{"inputs":[{"name":"X","datatype":"FP32","shape":[2],"data":[1.5,2]}]}`, "3.5"},
		{"scalar", `{"inputs":[{"name":"X","datatype":"FP32","shape":[1],"data":[1.5]}]}`, "3"},
	} {
		code, out, raw := inferJSON(t, base, c.model, c.body)
		if code != http.StatusOK || len(out.Outputs) != 1 || !slices.Equal(out.Outputs[0].Shape, []int64{1}) ||
			strconv.FormatFloat(out.Outputs[0].Data[0], 'g', -1, 64) != c.want {
			t.Errorf("non-batching scalar model %s: %d %s, want shape [1] data [%s]", c.model, code, raw, c.want)
		}
	}
	var out v2Out
	code, out, raw := inferJSON(t, base, "scalar_batch", `{"inputs":[{"name":"X","datatype":"FP32","shape":[2,1],"data":[1,2]}]}`)
	if code != http.StatusOK || len(out.Outputs) != 1 || len(out.Outputs[0].Shape) != 2 || out.Outputs[0].Shape[0] != 2 || out.Outputs[0].Shape[1] != 1 ||
		out.Outputs[0].Data[0] != 2 || out.Outputs[0].Data[1] != 4 {
		t.Fatalf("batching scalar model: %d %s", code, raw)
	}
	_, _, md := do(t, http.MethodGet, base+"/v2/models/scalar_batch", nil, nil)
	var meta struct {
		Inputs []struct {
			Shape []int64 `json:"shape"`
		} `json:"inputs"`
	}
	if err := json.Unmarshal(md, &meta); err != nil || len(meta.Inputs) != 1 || len(meta.Inputs[0].Shape) != 2 || meta.Inputs[0].Shape[1] != 1 {
		t.Errorf("metadata shows the config's dims [-1,1]: %s", md)
	}
}

// An ONNX input backed by an initializer, listed as optional: true, loads;
// requests may leave it out (the initializer is used) or give it
// (Triton's qa/L0_optional_input: optional inputs may be omitted).
func TestOptionalInitializerInput(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	bias := onnxgen.Model{
		Inputs: []onnxgen.Value{
			{Name: "X", Type: onnxgen.Float, Dims: []int64{2}},
			{Name: "B", Type: onnxgen.Float, Dims: []int64{2}},
		},
		Outputs:      []onnxgen.Value{{Name: "Y", Type: onnxgen.Float, Dims: []int64{2}}},
		Initializers: []onnxgen.Tensor{{Name: "B", Type: onnxgen.Float, Dims: []int64{2}, Raw: onnxgen.Float32s(10, 20)}},
		Nodes:        []onnxgen.Node{{Op: "Add", Inputs: []string{"X", "B"}, Outputs: []string{"Y"}}},
	}
	writeModel(t, repo, "bias", bias, `name: "bias"
backend: "onnxruntime"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: [ 2 ] }
input { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true }
output { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }
`)
	writeModel(t, repo, "bias_unlisted", bias, `name: "bias_unlisted"
backend: "onnxruntime"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: [ 2 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }
`)
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http
	x := `{"name":"X","datatype":"FP32","shape":[2],"data":[1,2]}`
	for _, tc := range []struct {
		model, inputs string
		want          [2]float64
	}{
		{"bias", x, [2]float64{11, 22}},
		{"bias", x + `,{"name":"B","datatype":"FP32","shape":[2],"data":[100,200]}`, [2]float64{101, 202}},
		{"bias_unlisted", x, [2]float64{11, 22}},
	} {
		code, out, raw := inferJSON(t, base, tc.model, `{"inputs":[`+tc.inputs+`]}`)
		if code != http.StatusOK || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 2 ||
			out.Outputs[0].Data[0] != tc.want[0] || out.Outputs[0].Data[1] != tc.want[1] {
			t.Errorf("%s with %s: %d %s, want %v", tc.model, tc.inputs, code, raw, tc.want)
		}
	}
	code, _, raw := inferJSON(t, base, "bias", `{"inputs":[{"name":"B","datatype":"FP32","shape":[2],"data":[1,1]}]}`)
	if code != http.StatusBadRequest || !strings.Contains(raw, "missing_input") {
		t.Errorf("a required input left out: %d %s, want 400 missing_input", code, raw)
	}
}

// Ragged batching on ONNX Runtime, after Triton's ragged-batching guide
// and qa/L0_batch_input: INPUT has allow_ragged_batch, so requests of
// [1,3] and [1,4] share one execution; the model gets INPUT flattened and
// INDEX (BATCH_ELEMENT_COUNT of INPUT), and adds the sum of INDEX to
// every element, so each answer shows which batch it ran in;
// OUTPUT is split back by each request's INPUT shape
// (BATCH_SCATTER_WITH_INPUT_SHAPE).
func TestRaggedBatchInputOutput(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	writeModel(t, repo, "ragged", onnxgen.Model{
		Inputs: []onnxgen.Value{
			{Name: "INPUT", Type: onnxgen.Float, Dims: []int64{-1}},
			{Name: "INDEX", Type: onnxgen.Int32, Dims: []int64{-1}},
		},
		Outputs: []onnxgen.Value{{Name: "OUTPUT", Type: onnxgen.Float, Dims: []int64{-1}}},
		Nodes: []onnxgen.Node{
			{Op: "Cast", Inputs: []string{"INDEX"}, Outputs: []string{"index_f"}, Ints: map[string]int64{"to": int64(onnxgen.Float)}},
			{Op: "ReduceSum", Inputs: []string{"index_f"}, Outputs: []string{"index_sum"}, Ints: map[string]int64{"keepdims": 1}},
			{Op: "Add", Inputs: []string{"INPUT", "index_sum"}, Outputs: []string{"OUTPUT"}},
		},
	}, `name: "ragged"
backend: "onnxruntime"
max_batch_size: 4
input { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }
output { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }
batch_input { kind: BATCH_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_INT32 source_input: "INPUT" }
batch_output { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT" source_input: "INPUT" }
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 3000000 }
`)
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http
	type answer struct {
		code int
		out  v2Out
		raw  string
	}
	send := func(data string, n int) answer {
		code, out, raw := inferJSON(t, base, "ragged", `{"inputs":[{"name":"INPUT","datatype":"FP32","shape":[1,`+strconv.Itoa(n)+`],"data":[`+data+`]}]}`)
		return answer{code, out, raw}
	}
	var a, b answer
	var wg sync.WaitGroup
	wg.Go(func() { a = send("1,2,3", 3) })
	wg.Go(func() { b = send("10,20,30,40", 4) })
	wg.Wait()
	check := func(name string, got answer, shape []int64, want []float64) {
		t.Helper()
		if got.code != http.StatusOK || len(got.out.Outputs) != 1 || !slices.Equal(got.out.Outputs[0].Shape, shape) || !slices.Equal(got.out.Outputs[0].Data, want) {
			t.Errorf("%s: %d %s, want shape %v data %v", name, got.code, got.raw, shape, want)
		}
	}
	// One batch: INDEX is [3, 4] in either order, its sum 7.
	check("request of 3", a, []int64{1, 3}, []float64{8, 9, 10})
	check("request of 4", b, []int64{1, 4}, []float64{17, 27, 37, 47})
	st := modelStats(t, base, "ragged")
	if st.ModelStats[0].ExecutionCount != 1 || st.ModelStats[0].InferenceCount != 2 {
		t.Errorf("two requests of different shapes ran in %d executions (inference_count %d), want 1",
			st.ModelStats[0].ExecutionCount, st.ModelStats[0].InferenceCount)
	}
}
