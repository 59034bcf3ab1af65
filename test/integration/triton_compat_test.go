package integration_test

import (
	"bytes"
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

// tritonRepo writes a repository of Triton-style test models, made with
// onnxgen (no Python):
//
//   - simple_string: Triton's simple_string example (qa/L0_infer,
//     docs/user_guide examples): BYTES INPUT0 and INPUT1 [16] holding
//     decimal numbers, Cast to INT32, OUTPUT0 = sum and OUTPUT1 =
//     difference Cast back to strings. No model_warmup: the automatic
//     warm-up must not make it unavailable.
//   - classifier: FP32 x [4] whose model output y is [4,1,1], declared
//     with dims [4] and reshape [4,1,1] (output reshape) and a
//     label_filename (classification extension).
//   - prio: the project brief's priority config (priority_levels 2,
//     default_priority_level 0), which must be refused.
func tritonRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(rel string, data []byte) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	str := []int64{-1, 16}
	simpleString := onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "INPUT0", Type: onnxgen.String, Dims: str}, {Name: "INPUT1", Type: onnxgen.String, Dims: str}},
		Outputs: []onnxgen.Value{{Name: "OUTPUT0", Type: onnxgen.String, Dims: str}, {Name: "OUTPUT1", Type: onnxgen.String, Dims: str}},
		Nodes: []onnxgen.Node{
			{Op: "Cast", Inputs: []string{"INPUT0"}, Outputs: []string{"a"}, Ints: map[string]int64{"to": int64(onnxgen.Int32)}},
			{Op: "Cast", Inputs: []string{"INPUT1"}, Outputs: []string{"b"}, Ints: map[string]int64{"to": int64(onnxgen.Int32)}},
			{Op: "Add", Inputs: []string{"a", "b"}, Outputs: []string{"sum"}},
			{Op: "Sub", Inputs: []string{"a", "b"}, Outputs: []string{"diff"}},
			{Op: "Cast", Inputs: []string{"sum"}, Outputs: []string{"OUTPUT0"}, Ints: map[string]int64{"to": int64(onnxgen.String)}},
			{Op: "Cast", Inputs: []string{"diff"}, Outputs: []string{"OUTPUT1"}, Ints: map[string]int64{"to": int64(onnxgen.String)}},
		},
	}
	write("simple_string/1/model.onnx", simpleString.Marshal())
	write("simple_string/config.pbtxt", []byte(`name: "simple_string"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
`))

	var shape []byte
	for _, d := range []int64{-1, 4, 1, 1} {
		shape = binary.LittleEndian.AppendUint64(shape, uint64(d))
	}
	classifier := onnxgen.Model{
		Inputs:       []onnxgen.Value{{Name: "x", Type: onnxgen.Float, Dims: []int64{-1, 4}}},
		Outputs:      []onnxgen.Value{{Name: "y", Type: onnxgen.Float, Dims: []int64{-1, 4, 1, 1}}},
		Initializers: []onnxgen.Tensor{{Name: "shape", Type: onnxgen.Int64, Dims: []int64{4}, Raw: shape}},
		Nodes:        []onnxgen.Node{{Op: "Reshape", Inputs: []string{"x", "shape"}, Outputs: []string{"y"}}},
	}
	for _, m := range []string{"classifier", "prio"} {
		write(m+"/1/model.onnx", classifier.Marshal())
	}
	// An FP16 identity, as the QA identity models (qa/common/gen_qa_identity_models.py)
	// are: ONNX element type 10.
	const fp16 = 10
	identity := onnxgen.Model{
		Inputs:  []onnxgen.Value{{Name: "INPUT0", Type: fp16, Dims: []int64{-1, -1}}},
		Outputs: []onnxgen.Value{{Name: "OUTPUT0", Type: fp16, Dims: []int64{-1, -1}}},
		Nodes:   []onnxgen.Node{{Op: "Identity", Inputs: []string{"INPUT0"}, Outputs: []string{"OUTPUT0"}}},
	}
	write("identity_fp16/1/model.onnx", identity.Marshal())
	write("classifier/labels.txt", []byte("cat\ndog\nbird\nfish\n"))
	write("classifier/config.pbtxt", []byte(`platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 4, 1, 1 ] } label_filename: "labels.txt" } ]
`))
	write("prio/config.pbtxt", []byte(`platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 4, 1, 1 ] } } ]
dynamic_batching {
  priority_levels: 2
  default_priority_level: 0
}
`))
	return dir
}

func bytesElems(vals ...string) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func f32le(vals ...float32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// TestTritonCompat drives the Triton features of issue 16 part B through
// the real binary and ONNX Runtime, over HTTP and gRPC.
func TestTritonCompat(t *testing.T) {
	t.Parallel()
	repo := tritonRepo(t)
	// --allow-client-shm: client shared memory is off by default, as in Triton.
	s := startServer(t, "--model-repository", repo, "--allow-client-shm")
	base := "http://" + s.http
	client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))

	t.Run("index", func(t *testing.T) {
		code, _, body := do(t, http.MethodPost, base+"/v2/repository/index", []byte(`{}`), nil)
		if code != http.StatusOK {
			t.Fatalf("index = %d %s", code, body)
		}
		var idx []struct{ Name, Version, State, Reason string }
		if err := json.Unmarshal(body, &idx); err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		for _, e := range idx {
			states[e.Name] = e.State + " " + e.Reason
		}
		for _, m := range []string{"simple_string", "classifier", "identity_fp16"} {
			if !strings.HasPrefix(states[m], "READY") {
				t.Errorf("%s: %s, want READY; logs:\n%s", m, states[m], s.logs)
			}
		}
		// The brief's priority config is refused with file:line:col.
		want := "config.pbtxt:7:3: dynamic_batching: default_priority_level 0 must be in [1, 2]"
		if !strings.HasPrefix(states["prio"], "UNAVAILABLE") || !strings.Contains(states["prio"], want) {
			t.Errorf("prio: %q, want UNAVAILABLE with %q", states["prio"], want)
		}
	})

	// simple_string (Triton's example; qa/L0_infer's string cases): BYTES
	// decimal strings in, their sum and difference as strings out.
	var a, b []string
	var sum, diff []string
	for i := range 16 {
		a, b = append(a, strconv.Itoa(i)), append(b, strconv.Itoa(2*i+1))
		sum, diff = append(sum, strconv.Itoa(3*i+1)), append(diff, strconv.Itoa(-i-1))
	}
	t.Run("simple_string HTTP", func(t *testing.T) {
		req, _ := json.Marshal(map[string]any{"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{1, 16}, "data": a},
			map[string]any{"name": "INPUT1", "datatype": "BYTES", "shape": []int{1, 16}, "data": b},
		}})
		code, _, body := do(t, http.MethodPost, base+"/v2/models/simple_string/infer", req, nil)
		if code != http.StatusOK {
			t.Fatalf("infer = %d %s", code, body)
		}
		var resp struct {
			ID      *string `json:"id"`
			Outputs []struct {
				Name  string
				Shape []int64
				Data  []string
			}
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.ID != nil {
			t.Errorf("the answer has \"id\" %q though the request had none", *resp.ID)
		}
		got := map[string][]string{}
		for _, o := range resp.Outputs {
			got[o.Name] = o.Data
		}
		if fmt.Sprint(got["OUTPUT0"]) != fmt.Sprint(sum) || fmt.Sprint(got["OUTPUT1"]) != fmt.Sprint(diff) {
			t.Errorf("outputs %v, want sum %v and difference %v", got, sum, diff)
		}
	})
	t.Run("simple_string gRPC", func(t *testing.T) {
		resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName: "simple_string", Id: "s1",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, 16}},
				{Name: "INPUT1", Datatype: "BYTES", Shape: []int64{1, 16}},
			},
			RawInputContents: [][]byte{bytesElems(a...), bytesElems(b...)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.GetRawOutputContents()[0], bytesElems(sum...)) || !bytes.Equal(resp.GetRawOutputContents()[1], bytesElems(diff...)) {
			t.Errorf("raw outputs %q, want sum and difference", resp.GetRawOutputContents())
		}
	})

	// Output reshape (model configuration doc, "Reshape"; qa/L0_infer_reshape):
	// metadata and answers show dims [4], not the model's [4,1,1].
	t.Run("reshape", func(t *testing.T) {
		code, _, body := do(t, http.MethodGet, base+"/v2/models/classifier", nil, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"name":"y","datatype":"FP32","shape":[-1,4]`) {
			t.Errorf("metadata = %d %s, want y shape [-1,4]", code, body)
		}
		code, _, body = do(t, http.MethodPost, base+"/v2/models/classifier/infer",
			[]byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8]}]}`), nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"shape":[2,4]`) {
			t.Errorf("HTTP answer = %d %s, want y shape [2,4]", code, body)
		}
		resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName:        "classifier",
			Inputs:           []*inferencepb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}}},
			RawInputContents: [][]byte{f32le(1, 2, 3, 4)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetOutputs()[0].GetShape(); fmt.Sprint(got) != "[1 4]" {
			t.Errorf("gRPC answer shape %v, want [1 4]", got)
		}
	})

	// Classification extension (docs/protocol/extension_classification.md;
	// qa/L0_infer class_count cases): top-k "value:index:label".
	t.Run("classification HTTP", func(t *testing.T) {
		code, _, body := do(t, http.MethodPost, base+"/v2/models/classifier/infer",
			[]byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[0.5,3,-1,2]}],"outputs":[{"name":"y","parameters":{"classification":2}}]}`), nil)
		want := `{"name":"y","datatype":"BYTES","shape":[1,2],"data":["3.000000:1:dog","2.000000:3:fish"]}`
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("answer = %d %s, want %s", code, body, want)
		}
	})
	t.Run("classification gRPC", func(t *testing.T) {
		resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName: "classifier",
			Inputs:    []*inferencepb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}}},
			Outputs: []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y", Parameters: map[string]*inferencepb.InferParameter{
				"classification": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 3}},
			}}},
			RawInputContents: [][]byte{f32le(0.5, 3, -1, 2)},
		})
		if err != nil {
			t.Fatal(err)
		}
		o := resp.GetOutputs()[0]
		if o.GetDatatype() != "BYTES" || fmt.Sprint(o.GetShape()) != "[1 3]" ||
			!bytes.Equal(resp.GetRawOutputContents()[0], bytesElems("3.000000:1:dog", "2.000000:3:fish", "0.500000:0:cat")) {
			t.Errorf("answer %v %v %q", o.GetDatatype(), o.GetShape(), resp.GetRawOutputContents()[0])
		}
	})

	// System shared memory (docs/protocol/extension_shared_memory.md;
	// qa/L0_shared_memory): a region made by the test, the input read
	// from it and the output written to it, over both transports.
	t.Run("shared memory", func(t *testing.T) {
		name := fmt.Sprintf("sluice-it-%d-%s", os.Getpid(), filepath.Base(t.TempDir()))
		path := filepath.Join("/dev/shm", name)
		if err := os.WriteFile(path, append(f32le(4, 3, 2, 1), make([]byte, 48)...), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(path) })
		reg := fmt.Sprintf(`{"key":"/%s","offset":0,"byte_size":64}`, name)
		if code, _, body := do(t, http.MethodPost, base+"/v2/systemsharedmemory/region/r/register", []byte(reg), nil); code != http.StatusOK {
			t.Fatalf("register = %d %s", code, body)
		}
		code, _, body := do(t, http.MethodPost, base+"/v2/models/classifier/infer", []byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],
		  "parameters":{"shared_memory_region":"r","shared_memory_byte_size":16}}],
		  "outputs":[{"name":"y","parameters":{"shared_memory_region":"r","shared_memory_byte_size":16,"shared_memory_offset":16}}]}`), nil)
		if code != http.StatusOK || strings.Contains(string(body), `"data"`) || !strings.Contains(string(body), `"shared_memory_region":"r"`) {
			t.Fatalf("HTTP infer = %d %s", code, body)
		}
		st, err := client.SystemSharedMemoryStatus(t.Context(), &inferencepb.SystemSharedMemoryStatusRequest{})
		if err != nil || st.GetRegions()["r"].GetByteSize() != 64 {
			t.Fatalf("gRPC status = %v %v, want the region HTTP registered", st, err)
		}
		resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName: "classifier",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Parameters: map[string]*inferencepb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "r"}},
				"shared_memory_byte_size": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 16}},
			}}},
			Outputs: []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y", Parameters: map[string]*inferencepb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "r"}},
				"shared_memory_byte_size": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 16}},
				"shared_memory_offset":    {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 32}},
			}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetRawOutputContents()[0]) != 0 {
			t.Errorf("gRPC answer carries %d bytes of a shared-memory output", len(resp.GetRawOutputContents()[0]))
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[16:32], f32le(4, 3, 2, 1)) || !bytes.Equal(got[32:48], f32le(4, 3, 2, 1)) {
			t.Errorf("region after the two answers: %v", got[:48])
		}
		if code, _, body := do(t, http.MethodPost, base+"/v2/systemsharedmemory/unregister", nil, nil); code != http.StatusOK {
			t.Fatalf("unregister = %d %s", code, body)
		}
	})

	// An FP16 model with no config and no model_warmup (auto-complete,
	// automatic warm-up) loads and answers.
	t.Run("fp16 identity", func(t *testing.T) {
		code, _, body := do(t, http.MethodPost, base+"/v2/models/identity_fp16/infer",
			[]byte(`{"inputs":[{"name":"INPUT0","datatype":"FP16","shape":[1,3],"data":[1.5,-2,0.25]}]}`), nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"data":[1.5,-2,0.25]`) {
			t.Errorf("infer = %d %s", code, body)
		}
		code, _, body = do(t, http.MethodGet, base+"/v2/models/identity_fp16/config", nil, nil)
		for _, want := range []string{`"platform":"onnxruntime_onnx"`, `"backend":"onnxruntime"`, `"default_model_filename":"model.onnx"`, `"max_batch_size":4`, `"dynamic_batching"`} {
			if code != http.StatusOK || !strings.Contains(string(body), want) {
				t.Errorf("auto-completed config = %d %s, want %s", code, body, want)
			}
		}
	})

	// Triton's error text for the errors its clients match on; Sluice's
	// reason code stays (qa/L0_infer, qa/L0_lifecycle).
	t.Run("error text", func(t *testing.T) {
		code, _, body := do(t, http.MethodPost, base+"/v2/models/nope/infer", []byte(`{"inputs":[]}`), nil)
		if code != http.StatusNotFound || !strings.Contains(string(body), `"error":"Request for unknown model: 'nope' is not found"`) ||
			!strings.Contains(string(body), `"reason":"model_not_found"`) {
			t.Errorf("unknown model = %d %s", code, body)
		}
		_, err := client.ModelMetadata(t.Context(), &inferencepb.ModelMetadataRequest{Name: "classifier", Version: "9"})
		if err == nil || !strings.Contains(err.Error(), "Request for unknown model: 'classifier' version 9 is not found") {
			t.Errorf("unknown version over gRPC: %v", err)
		}
	})

	// /v2/logging and the gRPC LogSettings see the same level.
	t.Run("logging", func(t *testing.T) {
		code, _, body := do(t, http.MethodPost, base+"/v2/logging", []byte(`{"log_verbose_level":1}`), nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"log_verbose_level":1`) {
			t.Fatalf("POST /v2/logging = %d %s", code, body)
		}
		got, err := client.LogSettings(t.Context(), &inferencepb.LogSettingsRequest{})
		if err != nil || got.GetSettings()["log_verbose_level"].GetUint32Param() != 1 {
			t.Errorf("LogSettings = %v %v", got, err)
		}
		if code, _, body := do(t, http.MethodPost, base+"/v2/logging", []byte(`{"log_verbose_level":0}`), nil); code != http.StatusOK {
			t.Errorf("POST /v2/logging = %d %s", code, body)
		}
	})

	// Triton's metric names (docs/user_guide/metrics.md) after the
	// traffic above: classifier served 6 requests (reshape, classification
	// and shared memory, each once over HTTP and once over gRPC), each
	// executed alone (no dynamic batching), all at batch 1 but the first
	// (batch 2).
	t.Run("nv metrics", func(t *testing.T) {
		_, _, body := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
		text := string(body)
		for _, want := range []string{
			`nv_inference_request_success{model="classifier",version="1"} 6`,
			`nv_inference_count{model="classifier",version="1"} 7`,
			`nv_inference_exec_count{model="classifier",version="1"} 6`,
			`nv_inference_request_success{model="simple_string",version="1"} 2`,
			`nv_inference_pending_request_count{model="classifier",version="1"} 0`,
			`# TYPE nv_inference_request_duration_us counter`,
			`# TYPE nv_inference_compute_infer_duration_us counter`,
			`# TYPE nv_inference_queue_duration_us counter`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if t.Failed() {
			t.Logf("nv_ lines:\n%s", nvLines(text, "nv_"))
		}
	})
}

func nvLines(text, prefix string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
