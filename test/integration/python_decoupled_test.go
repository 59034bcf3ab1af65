package integration_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// TestPythonDecoupledStreams serves Triton-style decoupled Python models
// (the backend's own repeat and square test models, which send their
// responses through request.get_response_sender(), repeat from a thread
// after execute returned) and reads their streams as Triton's clients
// do: HTTP generate_stream as Server-Sent Events, gRPC ModelStreamInfer
// with triton_final_response. Before, decoupled models were refused at
// load.
func TestPythonDecoupledStreams(t *testing.T) {
	t.Parallel()
	s := startServerCmd(t, "model-server", "--model-repository", "internal/backend/python/testdata/models",
		"--model-control-mode", "explicit", "--load-model", "repeat", "--load-model", "square", "--load-model", "params")
	base := "http://" + s.http

	// sse posts a generate_stream request and returns its events' data.
	sse := func(t *testing.T, model, body string) (int, string, []string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v2/models/"+model+"/generate_stream", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header.Get("Content-Type"), []string{string(b)}
		}
		var events []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				events = append(events, data)
			} else if line != "" {
				t.Errorf("unexpected SSE line %q", line)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), events
	}

	t.Run("generate_stream", func(t *testing.T) {
		code, ctype, events := sse(t, "repeat", `{"IN":[4,-5,6],"DELAY":[0,0,0],"WAIT":[0]}`)
		if code != http.StatusOK || ctype != "text/event-stream" {
			t.Fatalf("generate_stream = %d %s %v", code, ctype, events)
		}
		want := []string{
			`{"model_name":"repeat","model_version":"1","OUT":4,"IDX":0}`,
			`{"error":"negative value -5 at 1"}`,
			`{"model_name":"repeat","model_version":"1","OUT":6,"IDX":2}`,
		}
		if fmt.Sprint(events) != fmt.Sprint(want) {
			t.Errorf("events =\n%s\nwant\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("generate_stream of no response", func(t *testing.T) {
		code, _, events := sse(t, "square", `{"IN":0}`)
		if code != http.StatusOK || len(events) != 0 {
			t.Errorf("generate_stream = %d %v, want 200 and no event", code, events)
		}
	})

	t.Run("generate_stream of a model that is not decoupled", func(t *testing.T) {
		code, _, events := sse(t, "params", `{"INPUT0":1,"parameters":{"k":"v"}}`)
		if code != http.StatusOK || len(events) != 1 || events[0] != `{"model_name":"params","model_version":"1","PARAMS":"{\"k\":\"v\"}"}` {
			t.Errorf("generate_stream = %d %v", code, events)
		}
	})

	t.Run("generate", func(t *testing.T) {
		code, _, body := do(t, http.MethodPost, base+"/v2/models/square/generate", []byte(`{"IN":1}`), nil)
		if code != http.StatusOK || string(body) != `{"model_name":"square","model_version":"1","OUT":1}` {
			t.Errorf("generate = %d %s", code, body)
		}
		code, _, body = do(t, http.MethodPost, base+"/v2/models/square/generate", []byte(`{"IN":2}`), nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), `"reason":"multiple_responses"`) {
			t.Errorf("generate of 2 responses = %d %s, want 400 multiple_responses", code, body)
		}
		code, _, body = do(t, http.MethodPost, base+"/v2/models/square/generate", []byte(`{"NOPE":2}`), nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), `"reason":"unknown_input"`) || !strings.Contains(string(body), "NOPE") {
			t.Errorf("generate of an unknown input = %d %s, want 400 unknown_input", code, body)
		}
	})

	t.Run("infer refuses a decoupled model", func(t *testing.T) {
		code, _, body := do(t, http.MethodPost, base+"/v2/models/square/infer",
			[]byte(`{"inputs":[{"name":"IN","datatype":"INT32","shape":[1],"data":[1]}]}`), nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "decoupled") {
			t.Errorf("infer = %d %s", code, body)
		}
	})

	t.Run("gRPC ModelStreamInfer", func(t *testing.T) {
		client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))
		stream, err := client.ModelStreamInfer(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		i32 := func(vals ...int32) []byte {
			var b []byte
			for _, v := range vals {
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			}
			return b
		}
		req := &inferencepb.ModelInferRequest{
			ModelName: "repeat", Id: "r1",
			Parameters: map[string]*inferencepb.InferParameter{
				"triton_enable_empty_final_response": {ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: true}},
			},
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "IN", Datatype: "INT32", Shape: []int64{3}},
				{Name: "DELAY", Datatype: "UINT32", Shape: []int64{3}},
				{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}},
			},
			RawInputContents: [][]byte{i32(10, 11, 12), i32(0, 0, 0), i32(0)},
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			if msg.GetErrorMessage() != "" {
				t.Fatalf("error response: %s", msg.GetErrorMessage())
			}
			r := msg.GetInferResponse()
			final := r.GetParameters()["triton_final_response"].GetBoolParam()
			entry := fmt.Sprintf("id=%s final=%v", r.GetId(), final)
			for i, o := range r.GetOutputs() {
				entry += fmt.Sprintf(" %s=%d", o.GetName(), int32(binary.LittleEndian.Uint32(r.GetRawOutputContents()[i])))
			}
			got = append(got, entry)
			if final {
				break
			}
		}
		want := []string{
			"id=r1 final=false OUT=10 IDX=0",
			"id=r1 final=false OUT=11 IDX=1",
			"id=r1 final=false OUT=12 IDX=2",
			"id=r1 final=true",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("stream =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("after CloseSend: %v, want EOF", err)
		}
	})

	t.Run("statistics count the streamed requests", func(t *testing.T) {
		code, _, body := do(t, http.MethodGet, base+"/v2/models/repeat/stats", nil, nil)
		var st struct {
			ModelStats []struct {
				InferenceStats struct {
					Success struct{ Count int } `json:"success"`
				} `json:"inference_stats"`
			} `json:"model_stats"`
		}
		if err := json.Unmarshal(body, &st); code != http.StatusOK || err != nil || len(st.ModelStats) != 1 || st.ModelStats[0].InferenceStats.Success.Count < 2 {
			t.Errorf("stats = %d %s", code, bytes.TrimSpace(body))
		}
	})
}
