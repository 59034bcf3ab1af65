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

	_, err = in.Execute(t.Context(), blsInputs("nope"), outs)
	if err == nil || err.Error() != "BLS: Request for unknown model: 'nope' is not found" {
		t.Errorf("unknown model: %v", err)
	}

	_, err = in.Execute(t.Context(), blsInputs("bls"), outs)
	if err == nil || !contains(err.Error(), "BLS request from model 'bls' to model 'bls' refused", "call chain bls -> bls") {
		t.Errorf("self call: %v", err)
	}
}
