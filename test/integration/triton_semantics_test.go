package integration_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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

// Scalar (rank-0) model tensors declared with dims [1] load, as Triton's
// backends accept them; a batching model whose tensors are [batch] serves
// requests of [batch, 1] (the config's dims are what clients send and
// get). Non-batching rank-0 tensors load but answer a clear error.
func TestScalarTensorsDeclaredAsOne(t *testing.T) {
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
	// Rank-0 tensors cannot pass through the ONNX Runtime binding
	// (onnxruntime_go refuses shapes without dimensions): non-batching
	// scalar models load but answer a clear 400, not a 500.
	code, _, raw := inferJSON(t, base, "scalar_out", `{"inputs":[{"name":"X","datatype":"FP32","shape":[2],"data":[1.5,2]}]}`)
	if code != http.StatusBadRequest || !strings.Contains(raw, "scalar_output") {
		t.Errorf("non-batching scalar output: %d %s, want 400 scalar_output", code, raw)
	}
	code, _, raw = inferJSON(t, base, "scalar", `{"inputs":[{"name":"X","datatype":"FP32","shape":[1],"data":[1.5]}]}`)
	if code != http.StatusBadRequest || !strings.Contains(raw, "scalar_input") {
		t.Errorf("non-batching scalar input: %d %s, want 400 scalar_input", code, raw)
	}
	var out v2Out
	code, out, raw = inferJSON(t, base, "scalar_batch", `{"inputs":[{"name":"X","datatype":"FP32","shape":[2,1],"data":[1,2]}]}`)
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
