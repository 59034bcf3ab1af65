package integration_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

// writeFiles writes files (path relative to dir -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// partialAddSubPy returns OUTPUT0 = INPUT0 + INPUT1 and skips OUTPUT1,
// as Triton's qa/L0_simple_ensemble partial_add_sub model does.
const partialAddSubPy = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b)]))
        return responses
`

// optionalIdentityPy answers OUTPUTn for each INPUTn the request has.
const optionalIdentityPy = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outs = []
            for i in ("0", "1"):
                t = pb_utils.get_input_tensor_by_name(request, "INPUT" + i)
                if t is not None:
                    outs.append(pb_utils.Tensor("OUTPUT" + i, t.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outs))
        return responses
`

const twoInTwoOut = `max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] %[1]s },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] %[1]s }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
`

// An ensemble step that answers with a subset of its outputs passes the
// subset on, as Triton does: the ensemble output nobody produced is left
// out of the response (qa/L0_simple_ensemble
// test_ensemble_partial_add_sub, which also greps the server log for
// "Composing models did not output tensor OUTPUT1"), and a next step
// whose optional input was not produced runs without it
// (qa/L0_optional_input test_ensemble_optional_connecting_tensor).
func TestEnsemblePartialOutputs(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	sprintf := func(opt string) string { return strings.ReplaceAll(twoInTwoOut, "%[1]s", opt) }
	writeFiles(t, repo, map[string]string{
		"partial_add_sub/config.pbtxt":   `backend: "python"` + "\n" + sprintf(""),
		"partial_add_sub/1/model.py":     partialAddSubPy,
		"optional_identity/config.pbtxt": `backend: "python"` + "\n" + sprintf("optional: true"),
		"optional_identity/1/model.py":   optionalIdentityPy,
		"ensemble_partial_add_sub/config.pbtxt": `platform: "ensemble"` + "\n" + sprintf("") + `
ensemble_scheduling { step [ {
  model_name: "partial_add_sub" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" }
} ] }
`,
		"ensemble_partial_add_sub/1/.keep": "",
		"optional_connecting_tensor/config.pbtxt": `platform: "ensemble"` + "\n" + sprintf("") + `
ensemble_scheduling { step [ {
  model_name: "partial_add_sub" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "internal_output0" } output_map { key: "OUTPUT1" value: "internal_output1" }
}, {
  model_name: "optional_identity" model_version: -1
  input_map { key: "INPUT0" value: "internal_output0" } input_map { key: "INPUT1" value: "internal_output1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" }
} ] }
`,
		"optional_connecting_tensor/1/.keep": "",
	})
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http
	body := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,4],"data":[1,2,3,4]},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[1,4],"data":[10,20,30,40]}],` +
		`"outputs":[{"name":"OUTPUT0"},{"name":"OUTPUT1"}]}`
	for _, model := range []string{"ensemble_partial_add_sub", "optional_connecting_tensor", "partial_add_sub"} {
		code, out, raw := inferJSON(t, base, model, body)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s\n%s", model, code, raw, s.logs)
		}
		if len(out.Outputs) != 1 || out.Outputs[0].Name != "OUTPUT0" {
			t.Fatalf("%s: outputs %s, want OUTPUT0 only", model, raw)
		}
		if got := out.Outputs[0].Data; len(got) != 4 || got[0] != 11 || got[3] != 44 {
			t.Errorf("%s: OUTPUT0 = %v, want [11 22 33 44]", model, got)
		}
	}
	if !strings.Contains(s.logs.String(), "Composing models did not output tensor OUTPUT1") {
		t.Errorf("server log lacks Triton's line for the skipped output:\n%s", s.logs)
	}
}

// Requests sent one after another on one ModelStreamInfer stream are
// queued, and so batched, in the order they were sent, while still
// running concurrently (qa/L0_batch_input test_accumulated_element_count
// sends four requests on one stream and wants the batch's accumulated
// element counts [2,6,7,10], the order it sent them in). Each row of the
// model's output is the running sum of the batch's inputs up to that row,
// so each answer tells where its request sat in the batch.
func TestStreamRequestsBatchedInOrder(t *testing.T) {
	t.Parallel()
	const n = 16
	repo := t.TempDir()
	writeModel(t, repo, "cumsum", onnxgen.Model{
		Inputs:       []onnxgen.Value{{Name: "X", Type: onnxgen.Float, Dims: []int64{-1, 1}}},
		Outputs:      []onnxgen.Value{{Name: "Y", Type: onnxgen.Float, Dims: []int64{-1, 1}}},
		Initializers: []onnxgen.Tensor{{Name: "axis", Type: onnxgen.Int64, Dims: []int64{}, Raw: binary.LittleEndian.AppendUint64(nil, 0)}},
		Nodes:        []onnxgen.Node{{Op: "CumSum", Inputs: []string{"X", "axis"}, Outputs: []string{"Y"}}},
	}, fmt.Sprintf(`name: "cumsum"
backend: "onnxruntime"
max_batch_size: %d
input { name: "X" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }
dynamic_batching { preferred_batch_size: [ %d ] max_queue_delay_microseconds: 60000000 }
`, n, n))
	s := startServer(t, "--model-repository", repo)
	client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))
	stream, err := client.ModelStreamInfer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		err := stream.Send(&inferencepb.ModelInferRequest{
			ModelName: "cumsum", Id: strconv.Itoa(i),
			Inputs:           []*inferencepb.ModelInferRequest_InferInputTensor{{Name: "X", Datatype: "FP32", Shape: []int64{1, 1}}},
			RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(i+1)))},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := float32(0)
	for i := range n {
		r, err := stream.Recv()
		if err != nil || r.GetErrorMessage() != "" {
			t.Fatalf("response %d: %v %q", i, err, r.GetErrorMessage())
		}
		want += float32(i + 1)
		resp := r.GetInferResponse()
		got := math.Float32frombits(binary.LittleEndian.Uint32(resp.GetRawOutputContents()[0]))
		if resp.GetId() != strconv.Itoa(i) || got != want {
			t.Errorf("response %d: id %q running sum %v, want id %d sum %v (the batch did not hold the requests in stream order)", i, resp.GetId(), got, i, want)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	st := modelStats(t, "http://"+s.http, "cumsum")
	if st.ModelStats[0].ExecutionCount != 1 {
		t.Errorf("%d requests ran in %d executions, want one batch", n, st.ModelStats[0].ExecutionCount)
	}
}

// An implicit state with variable dims and no initial_state loads and
// starts each sequence from zeros with 1 for each variable dimension, as
// Triton does (qa/L0_implicit_state, trial v: gen_qa_implicit_models.py
// makes such states of dims [-1]); it was refused at load before.
func TestImplicitStateVariableDimsWithoutInitialState(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	m := onnxgen.Accumulator(0)
	for i := range m.Inputs {
		m.Inputs[i].Dims = []int64{-1, -1}
	}
	for i := range m.Outputs {
		m.Outputs[i].Dims = []int64{-1, -1}
	}
	writeModel(t, repo, "acc_var", m, `name: "acc_var"
backend: "onnxruntime"
max_batch_size: 4
input { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] }
output { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] }
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ -1 ] } ]
}
`)
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http
	if code, _, body := do(t, http.MethodGet, base+"/v2/models/acc_var/ready", nil, nil); code != http.StatusOK {
		t.Fatalf("acc_var not ready: %d %s\n%s", code, body, s.logs)
	}
	for _, st := range []struct {
		value int
		flags string
		want  float64
	}{
		{5, `"sequence_start":true`, 5},
		{2, `"sequence_end":false`, 7},
		{3, `"sequence_end":true`, 10},
	} {
		code, out, raw := inferJSON(t, base, "acc_var", fmt.Sprintf(
			`{"parameters":{"sequence_id":42,%s},"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[%d]}]}`, st.flags, st.value))
		if code != http.StatusOK || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 1 || out.Outputs[0].Data[0] != st.want {
			t.Fatalf("value %d: %d %s, want running sum %v", st.value, code, raw, st.want)
		}
	}
}

// An ONNX Runtime instance group without a count gets 2 CPU instances, as
// Triton's default for that backend (qa/L0_model_config
// autofill_noplatform_success/onnx/cpu_instance expects count: 2), with
// or without config.pbtxt; a Python model's stays 1; a count given is kept.
func TestOnnxDefaultCPUInstanceCountIsTwo(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	onnx := readFile(t, "examples/models/simple/1/model.onnx")
	pyCfg := `backend: "python"
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
`
	writeFiles(t, repo, map[string]string{
		"grouped/config.pbtxt": "platform: \"onnxruntime_onnx\"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_CPU } ]\n",
		"grouped/1/model.onnx": string(onnx),
		"bare/1/model.onnx":    string(onnx),
		"given/config.pbtxt":   "backend: \"onnxruntime\"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n",
		"given/1/model.onnx":   string(onnx),
		"py/config.pbtxt":      pyCfg,
		"py/1/model.py":        partialAddSubPy,
	})
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http
	for model, want := range map[string]float64{"grouped": 2, "bare": 2, "given": 1, "py": 1} {
		code, _, body := do(t, http.MethodGet, base+"/v2/models/"+model+"/config", nil, nil)
		if code != http.StatusOK {
			t.Fatalf("config of %s = %d %s", model, code, body)
		}
		var cfg struct {
			InstanceGroup []struct {
				Count float64 `json:"count"`
				Kind  string  `json:"kind"`
			} `json:"instance_group"`
		}
		if err := json.Unmarshal(body, &cfg); err != nil {
			t.Fatal(err)
		}
		if len(cfg.InstanceGroup) != 1 || cfg.InstanceGroup[0].Count != want || cfg.InstanceGroup[0].Kind != "KIND_CPU" {
			t.Errorf("%s: instance_group %+v, want one KIND_CPU group of count %v", model, cfg.InstanceGroup, want)
		}
	}
	in := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[` + strings.Repeat("1,", 15) + `1]},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[` + strings.Repeat("2,", 15) + `2]}]}`
	for _, model := range []string{"grouped", "bare"} {
		code, _, body := do(t, http.MethodPost, base+"/v2/models/"+model+"/infer", []byte(in), nil)
		if code != http.StatusOK {
			t.Fatalf("infer %s = %d %s", model, code, body)
		}
		if r := decodeV2(t, body); r.Outputs[0].Data[0] != 3 {
			t.Errorf("infer %s: %s", model, body)
		}
	}
}
