package integration_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

// Sequence batching, end to end on ONNX Runtime, over HTTP and gRPC.
// The model is a Triton-style accumulator (onnxgen.Accumulator: START and
// READY controls, an implicit state INPUT_STATE/OUTPUT_STATE, OUTPUT the
// running sum), configured the way Triton's qa/L0_sequence_batcher and
// qa/L0_implicit_state models are; the semantics checked are those of
// Triton's sequence batcher documentation (user_guide/architecture.md,
// "Stateful Models"): correlation ids (uint64 or string), START/END flags,
// a request without a correlation id refused, an idle sequence released.

// sequenceConfig is an accumulator's config.pbtxt with the given strategy
// block and CORRID data type.
func sequenceConfig(name, strategy, corrType string, idleUS int) string {
	return fmt.Sprintf(`name: %q
backend: "onnxruntime"
max_batch_size: 4
input { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "CORRID_OUT" data_type: %s dims: [ 1 ] }
sequence_batching {
  max_sequence_idle_microseconds: %d
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ]
  %s
}
`, name, corrType, idleUS, corrType, strategy)
}

// sequenceRepo writes the accumulator models into a fresh repository.
func sequenceRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	write := func(name, cfg string, corr int32) {
		dir := filepath.Join(repo, name, "1")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "model.onnx"), onnxgen.Accumulator(corr).Marshal(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("acc_direct", sequenceConfig("acc_direct", "direct { }", "TYPE_UINT64", 60_000_000), onnxgen.Uint64)
	write("acc_oldest", sequenceConfig("acc_oldest", "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 2000 }", "TYPE_UINT64", 60_000_000), onnxgen.Uint64)
	write("acc_string", sequenceConfig("acc_string", "oldest { max_candidate_sequences: 4 }", "TYPE_STRING", 60_000_000), onnxgen.String)
	write("acc_idle", sequenceConfig("acc_idle", "direct { }", "TYPE_UINT64", 300_000), onnxgen.Uint64)
	write("acc_stream", sequenceConfig("acc_stream", "direct { }", "TYPE_STRING", 60_000_000), onnxgen.String)
	// An ensemble over a sequence model: the sequence parameters pass to
	// the step, and the ensemble's responses carry them back.
	if err := os.MkdirAll(filepath.Join(repo, "acc_pipe", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "acc_pipe", "config.pbtxt"), []byte(`name: "acc_pipe"
platform: "ensemble"
max_batch_size: 4
input { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }
ensemble_scheduling { step [ { model_name: "acc_stream" model_version: -1
  input_map { key: "INPUT" value: "IN" } output_map { key: "OUTPUT" value: "SUM" } } ] }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return repo
}

// seqStep is one request of a sequence and the running sum it must see.
type seqStep struct {
	id         any // uint64 or string
	value      int32
	start, end bool
	want       int32
}

type seqAnswer struct {
	sum    int32
	corrID string // CORRID_OUT as text
	code   int    // HTTP status, or 200
	reason string
}

func httpSequenceInfer(t *testing.T, base, model string, id any, value int32, start, end bool) seqAnswer {
	t.Helper()
	params := map[string]any{}
	if id != nil {
		params["sequence_id"] = id
	}
	if start {
		params["sequence_start"] = true
	}
	if end {
		params["sequence_end"] = true
	}
	body, err := json.Marshal(map[string]any{
		"inputs":     []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "data": []int32{value}}},
		"outputs":    []any{map[string]any{"name": "OUTPUT"}, map[string]any{"name": "CORRID_OUT"}},
		"parameters": params,
	})
	if err != nil {
		t.Fatal(err)
	}
	code, _, resp := do(t, http.MethodPost, base+"/v2/models/"+model+"/infer", body, map[string]string{"Content-Type": "application/json"})
	if code != http.StatusOK {
		var e struct{ Error, Reason string }
		_ = json.Unmarshal(resp, &e)
		return seqAnswer{code: code, reason: e.Reason}
	}
	var r struct {
		Outputs []struct {
			Name string            `json:"name"`
			Data []json.RawMessage `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		t.Fatalf("%v: %s", err, resp)
	}
	a := seqAnswer{code: code}
	for _, o := range r.Outputs {
		switch o.Name {
		case "OUTPUT":
			if err := json.Unmarshal(o.Data[0], &a.sum); err != nil {
				t.Fatal(err)
			}
		case "CORRID_OUT":
			a.corrID = strings.Trim(string(o.Data[0]), `"`)
		}
	}
	return a
}

func grpcSequenceInfer(t *testing.T, client inferencepb.GRPCInferenceServiceClient, model string, id any, value int32, start, end bool) (seqAnswer, error) {
	t.Helper()
	params := map[string]*inferencepb.InferParameter{}
	switch v := id.(type) {
	case uint64:
		params["sequence_id"] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Uint64Param{Uint64Param: v}}
	case int64:
		params["sequence_id"] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: v}}
	case string:
		params["sequence_id"] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: v}}
	}
	params["sequence_start"] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: start}}
	params["sequence_end"] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: end}}
	resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
		ModelName:  model,
		Parameters: params,
		Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT", Datatype: "INT32", Shape: []int64{1, 1}},
		},
		Outputs:          []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT"}, {Name: "CORRID_OUT"}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(value))},
	})
	if err != nil {
		return seqAnswer{}, err
	}
	var a seqAnswer
	for i, o := range resp.GetOutputs() {
		raw := resp.GetRawOutputContents()[i]
		switch o.GetName() {
		case "OUTPUT":
			a.sum = int32(binary.LittleEndian.Uint32(raw))
		case "CORRID_OUT":
			if o.GetDatatype() == "BYTES" {
				a.corrID = string(raw[4:])
			} else {
				a.corrID = fmt.Sprint(binary.LittleEndian.Uint64(raw))
			}
		}
	}
	a.code = http.StatusOK
	return a, nil
}

// interleaved is two sequences, their requests alternating, each with its
// own running sum (Triton's test_simple_sequence run on two ids at once).
func interleaved(a, b any) []seqStep {
	return []seqStep{
		{id: a, value: 1, start: true, want: 1},
		{id: b, value: 100, start: true, want: 100},
		{id: a, value: 2, want: 3},
		{id: b, value: 200, want: 300},
		{id: b, value: 300, end: true, want: 600},
		{id: a, value: 3, end: true, want: 6},
	}
}

func TestSequenceBatching(t *testing.T) {
	// Not parallel: it checks what the idle timeout keeps and drops.
	s := startServer(t, "--model-repository", sequenceRepo(t))
	base := "http://" + s.http
	client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))

	for _, model := range []string{"acc_direct", "acc_oldest"} {
		t.Run(model+"/http interleaved", func(t *testing.T) {
			for i, st := range interleaved(uint64(1001), uint64(1002)) {
				a := httpSequenceInfer(t, base, model, st.id, st.value, st.start, st.end)
				if a.code != http.StatusOK || a.sum != st.want || a.corrID != fmt.Sprint(st.id) {
					t.Fatalf("step %d (%v +%d): got %+v, want sum %d", i, st.id, st.value, a, st.want)
				}
			}
		})
		t.Run(model+"/grpc interleaved", func(t *testing.T) {
			for i, st := range interleaved(uint64(2001), int64(2002)) {
				a, err := grpcSequenceInfer(t, client, model, st.id, st.value, st.start, st.end)
				if err != nil || a.sum != st.want || a.corrID != fmt.Sprint(st.id) {
					t.Fatalf("step %d (%v +%d): got %+v, %v, want sum %d", i, st.id, st.value, a, err, st.want)
				}
			}
		})
		t.Run(model+"/concurrent sequences", func(t *testing.T) {
			// Eight sequences at once on four slots: half wait in the
			// backlog; every one still sees only its own sum.
			var wg sync.WaitGroup
			for q := range 8 {
				wg.Go(func() {
					id := uint64(3000 + q)
					total := int32(0)
					for k := range 6 {
						v := int32(q + 1)
						total += v
						a, err := grpcSequenceInfer(t, client, model, id, v, k == 0, k == 5)
						if err != nil || a.sum != total {
							t.Errorf("sequence %d step %d: got %+v, %v, want %d", id, k, a, err, total)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}

	t.Run("string correlation ids", func(t *testing.T) {
		for i, st := range interleaved("session-a", "session-b") {
			a := httpSequenceInfer(t, base, "acc_string", st.id, st.value, st.start, st.end)
			if a.code != http.StatusOK || a.sum != st.want || a.corrID != st.id {
				t.Fatalf("http step %d: got %+v, want sum %d", i, a, st.want)
			}
			g, err := grpcSequenceInfer(t, client, "acc_string", "g-"+st.id.(string), st.value, st.start, st.end)
			if err != nil || g.sum != st.want || g.corrID != "g-"+st.id.(string) {
				t.Fatalf("grpc step %d: got %+v, %v, want sum %d", i, g, err, st.want)
			}
		}
	})

	t.Run("grpc stream through an ensemble", func(t *testing.T) {
		// Triton's simple_grpc_sequence_stream_infer_client pattern: two
		// sequences interleaved on one ModelStreamInfer stream.
		stream, err := client.ModelStreamInfer(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range interleaved(uint64(5001), "s-5002") {
			params := map[string]*inferencepb.InferParameter{
				"sequence_start": {ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: st.start}},
				"sequence_end":   {ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: st.end}},
			}
			switch id := st.id.(type) {
			case uint64:
				params["sequence_id"] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Uint64Param{Uint64Param: id}}
			case string:
				params["sequence_id"] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: id}}
			}
			err := stream.Send(&inferencepb.ModelInferRequest{
				ModelName: "acc_pipe", Id: fmt.Sprint(i), Parameters: params,
				Inputs:           []*inferencepb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}}},
				RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(st.value))},
			})
			if err != nil {
				t.Fatal(err)
			}
			r, err := stream.Recv()
			if err != nil || r.GetErrorMessage() != "" {
				t.Fatalf("step %d: %v %q", i, err, r.GetErrorMessage())
			}
			resp := r.GetInferResponse()
			if got := int32(binary.LittleEndian.Uint32(resp.GetRawOutputContents()[0])); got != st.want || resp.GetId() != fmt.Sprint(i) {
				t.Fatalf("step %d: sum %d id %q, want %d", i, got, resp.GetId(), st.want)
			}
			p := resp.GetParameters()
			var gotID any = p["sequence_id"].GetStringParam()
			if _, isNum := st.id.(uint64); isNum {
				gotID = p["sequence_id"].GetUint64Param() + uint64(p["sequence_id"].GetInt64Param())
			}
			if gotID != st.id || p["sequence_start"].GetBoolParam() != st.start || p["sequence_end"].GetBoolParam() != st.end {
				t.Errorf("step %d: response parameters %v, want the request's sequence flags", i, p)
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("refused requests", func(t *testing.T) {
		if a := httpSequenceInfer(t, base, "acc_direct", nil, 1, true, false); a.code != http.StatusBadRequest || a.reason != "missing_correlation_id" {
			t.Errorf("no sequence_id over HTTP: %+v, want 400 missing_correlation_id", a)
		}
		if a := httpSequenceInfer(t, base, "acc_direct", uint64(77), 1, false, false); a.code != http.StatusBadRequest || a.reason != "sequence_not_started" {
			t.Errorf("no START over HTTP: %+v, want 400 sequence_not_started", a)
		}
		if a := httpSequenceInfer(t, base, "acc_direct", "text-id", 1, true, false); a.code != http.StatusBadRequest || a.reason != "invalid_correlation_id" {
			t.Errorf("string id on a UINT64 CORRID model: %+v, want 400 invalid_correlation_id", a)
		}
		_, err := grpcSequenceInfer(t, client, "acc_direct", nil, 1, true, false)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "correlation ID") {
			t.Errorf("no sequence_id over gRPC: %v, want InvalidArgument naming the correlation ID", err)
		}
		_, err = grpcSequenceInfer(t, client, "acc_direct", uint64(78), 1, false, true)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "START") {
			t.Errorf("no START over gRPC: %v, want InvalidArgument naming START", err)
		}
	})

	t.Run("idle sequence is released", func(t *testing.T) {
		if a := httpSequenceInfer(t, base, "acc_idle", uint64(9), 5, true, false); a.sum != 5 {
			t.Fatalf("start: %+v", a)
		}
		if a := httpSequenceInfer(t, base, "acc_idle", uint64(9), 5, false, false); a.sum != 10 {
			t.Fatalf("within the idle timeout the state is kept: %+v", a)
		}
		time.Sleep(600 * time.Millisecond) // max_sequence_idle_microseconds is 300 ms
		if a := httpSequenceInfer(t, base, "acc_idle", uint64(9), 5, false, false); a.code != http.StatusBadRequest || a.reason != "sequence_not_started" {
			t.Errorf("after the idle timeout: %+v, want 400 sequence_not_started", a)
		}
		if a := httpSequenceInfer(t, base, "acc_idle", uint64(9), 5, true, true); a.sum != 5 {
			t.Errorf("a new START begins from the initial state: %+v", a)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		_, _, body := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
		text := string(body)
		for _, want := range []string{
			`sluice_model_sequences_started_total{model="acc_oldest",version="1"} 12`,
			`sluice_model_sequences_idle_released_total{model="acc_idle",version="1"} 1`,
			`sluice_model_sequences_active{model="acc_direct",version="1"} 0`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})

	t.Run("metadata shows only client tensors", func(t *testing.T) {
		_, _, body := do(t, http.MethodGet, base+"/v2/models/acc_direct", nil, nil)
		if strings.Contains(string(body), "START") || strings.Contains(string(body), "INPUT_STATE") {
			t.Errorf("metadata lists server-filled tensors: %s", body)
		}
	})
}
