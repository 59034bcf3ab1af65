package python

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

// fakeServer answers BLS requests: "add_sub" adds and subtracts its two
// inputs; any other model is unknown.
type fakeServer struct {
	mu   sync.Mutex
	reqs []*infer.Request
}

func (f *fakeServer) Infer(_ context.Context, req *infer.Request) (*infer.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if req.Model != "add_sub" {
		return nil, apierr.Errorf(apierr.KindNotFound, "model_not_found", "Request for unknown model: '%s' is not found", req.Model)
	}
	a, b := req.Input("INPUT0"), req.Input("INPUT1")
	var sum, diff []float32
	for i := range 4 {
		x, y := f32At(a, i), f32At(b, i)
		sum, diff = append(sum, x+y), append(diff, x-y)
	}
	return &infer.Response{Model: req.Model, Outputs: []infer.Tensor{
		f32Tensor("OUTPUT0", infer.Shape{4}, sum...), f32Tensor("OUTPUT1", infer.Shape{4}, diff...),
	}}, nil
}

func f32At(t *infer.Tensor, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
}

func blsInstance(t *testing.T, srv *fakeServer) *Instance {
	t.Helper()
	b, _ := testBackend(t, Options{})
	b.SetServer(srv)
	text, err := os.ReadFile(filepath.Join("testdata", "models", "bls", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	return loadInstances(t, b, "bls", modelPath(t, "bls"), testConfig(t, "bls", string(text)), 1, 1)[0]
}

func blsInputs(model string) []infer.Tensor {
	name := []byte{byte(len(model)), 0, 0, 0}
	return []infer.Tensor{
		{Name: "MODEL_NAME", DataType: infer.Bytes, Shape: infer.Shape{1}, Data: append(name, model...)},
		f32Tensor("INPUT0", infer.Shape{4}, 1, 2, 3, 4),
		f32Tensor("INPUT1", infer.Shape{4}, 10, 20, 30, 40),
	}
}

// A model's BLS requests (exec(), and async_exec() twice at once) run on
// the server with their inputs and the outputs they name; an error of
// the call reaches the model as response.error(), and a request to the
// model itself is refused before it could wait for its own instance.
// Before, exec() raised "not supported".
func TestBLS(t *testing.T) {
	srv := &fakeServer{}
	in := blsInstance(t, srv)
	outs := []string{"OUTPUT0", "OUTPUT1"}

	got, err := in.Execute(t.Context(), blsInputs("add_sub"), outs)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(f32s(t, got[0]), f32s(t, got[1])) != "[11 22 33 44] [-9 -18 -27 -36]" {
		t.Errorf("outputs = %v %v", f32s(t, got[0]), f32s(t, got[1]))
	}
	srv.mu.Lock()
	if len(srv.reqs) != 1 || fmt.Sprint(srv.reqs[0].Outputs) != "[{OUTPUT0 map[]} {OUTPUT1 map[]}]" || len(srv.reqs[0].Inputs) != 2 {
		t.Errorf("server got %+v", srv.reqs)
	}
	srv.mu.Unlock()

	res, errs := in.ExecuteRequests(t.Context(), [][]infer.Tensor{blsInputs("add_sub")}, [][]string{outs}, []infer.Parameters{{"async": true}})
	if errs[0] != nil || f32s(t, res[0][0])[0] != 11 {
		t.Errorf("async_exec: %v %v", res, errs[0])
	}
	srv.mu.Lock()
	if len(srv.reqs) != 3 {
		t.Errorf("server got %d requests, want 3 (one exec, two async_exec)", len(srv.reqs))
	}
	srv.mu.Unlock()

	// Triton's bls example (sync_model.py) passes the model name as the
	// bytes its TYPE_STRING input holds; before, that failed with
	// "Object of type bytes is not JSON serializable".
	res, errs = in.ExecuteRequests(t.Context(), [][]infer.Tensor{blsInputs("add_sub")}, [][]string{outs}, []infer.Parameters{{"bytes_name": true}})
	if errs[0] != nil || f32s(t, res[0][0])[0] != 11 {
		t.Errorf("bytes model name: %v %v", res, errs[0])
	}

	_, err = in.Execute(t.Context(), blsInputs("nope"), outs)
	if err == nil || err.Error() != "BLS: Request for unknown model: 'nope' is not found" {
		t.Errorf("unknown model: %v", err)
	}

	_, err = in.Execute(t.Context(), blsInputs("bls"), outs)
	if err == nil || !contains(err.Error(), "BLS request from model 'bls' to model 'bls' refused", "call chain bls -> bls") {
		t.Errorf("self call: %v", err)
	}
}

// streamServer also answers decoupled BLS requests: "square" answers IN
// responses, each OUT = IN, then the final flag alone (as Triton's
// decoupled square_int32 example); "flaky" one response, then an error
// response, then the final flag; a model that is not decoupled
// ("add_sub") its one response, final; an unknown model fails before any
// response.
type streamServer struct {
	fakeServer
	streams []*infer.Request
}

func (f *streamServer) InferStream(ctx context.Context, req *infer.Request, send backend.StreamSend) error {
	f.mu.Lock()
	f.streams = append(f.streams, req)
	f.mu.Unlock()
	in := req.Input("IN")
	switch req.Model {
	case "square":
		n := int32(binary.LittleEndian.Uint32(in.Data))
		for range n {
			if err := send(&infer.Response{Outputs: []infer.Tensor{i32Tensor("OUT", infer.Shape{1}, n)}}, nil, false); err != nil {
				return err
			}
		}
		return send(nil, nil, true)
	case "flaky":
		if err := send(&infer.Response{Outputs: []infer.Tensor{i32Tensor("OUT", infer.Shape{1}, 7)}}, nil, false); err != nil {
			return err
		}
		if err := send(nil, apierr.Errorf(apierr.KindInternal, "x", "flaky failed"), false); err != nil {
			return err
		}
		return send(nil, nil, true)
	case "add_sub":
		return send(&infer.Response{Outputs: []infer.Tensor{i32Tensor("OUT", infer.Shape{1}, 5)}}, nil, true)
	}
	return apierr.Errorf(apierr.KindNotFound, "model_not_found", "Request for unknown model: '%s' is not found", req.Model)
}

func blsDecoupledInputs(model string, n int32) []infer.Tensor {
	name := []byte{byte(len(model)), 0, 0, 0}
	return []infer.Tensor{
		{Name: "MODEL_NAME", DataType: infer.Bytes, Shape: infer.Shape{1}, Data: append(name, model...)},
		i32Tensor("IN", infer.Shape{1}, n),
	}
}

// A decoupled BLS request (exec(decoupled=True), and async_exec twice at
// once), as Triton's bls_decoupled sync and async examples make it to
// their decoupled square_int32 model: the model iterates over every
// response the server sends, the final flag alone coming as a last
// response without outputs; an error response reaches the model among
// the others, and a request that fails before any response is one error
// response. Before, exec(decoupled=True) raised "not supported".
func TestBLSDecoupled(t *testing.T) {
	srv := &streamServer{}
	b, _ := testBackend(t, Options{})
	b.SetServer(srv)
	text, err := os.ReadFile(filepath.Join("testdata", "models", "bls_decoupled", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	in := loadInstances(t, b, "bls_decoupled", modelPath(t, "bls_decoupled"), testConfig(t, "bls_decoupled", string(text)), 1, 1)[0]
	outs := []string{"SUM", "RESPONSES", "EMPTY"}
	run := func(model string, n int32, params infer.Parameters) (string, error) {
		res, errs := in.ExecuteRequests(t.Context(), [][]infer.Tensor{blsDecoupledInputs(model, n)}, [][]string{outs}, []infer.Parameters{params})
		if errs[0] != nil {
			return "", errs[0]
		}
		return fmt.Sprint(i32s(t, res[0][0]), i32s(t, res[0][1]), i32s(t, res[0][2])), nil
	}

	for _, tc := range []struct {
		model  string
		n      int32
		params infer.Parameters
		want   string // sum, responses, empty responses
	}{
		{"square", 4, nil, "[16] [5] [1]"},
		{"square", 0, nil, "[0] [1] [1]"},
		{"square", 3, infer.Parameters{"async": true}, "[18] [8] [2]"},
		{"add_sub", 1, nil, "[5] [1] [0]"},
	} {
		got, err := run(tc.model, tc.n, tc.params)
		if err != nil || got != tc.want {
			t.Errorf("%s(%d) %v: got %s, %v; want %s", tc.model, tc.n, tc.params, got, err, tc.want)
		}
	}
	srv.mu.Lock()
	if len(srv.streams) != 5 || len(srv.reqs) != 0 || fmt.Sprint(srv.streams[0].Outputs) != "[{OUT map[]}]" {
		t.Errorf("server got %d streamed and %d unary requests, first %+v", len(srv.streams), len(srv.reqs), srv.streams[0])
	}
	srv.mu.Unlock()

	if _, err := run("flaky", 1, nil); err == nil || err.Error() != "BLS: flaky failed (after 3 responses)" {
		t.Errorf("error response: %v", err)
	}
	if _, err := run("nope", 1, nil); err == nil || err.Error() != "BLS: Request for unknown model: 'nope' is not found (after 1 responses)" {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := run("bls_decoupled", 1, nil); err == nil || !contains(err.Error(), "BLS request from model 'bls_decoupled' to model 'bls_decoupled' refused") {
		t.Errorf("self call: %v", err)
	}
}
