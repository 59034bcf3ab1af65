package faultkserve

import (
	"context"
	"sync/atomic"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// fakeModels is a hand-written modelrepo.Models with one model, "echo",
// whose outputs are its inputs. It counts the inferences that reach it.
type fakeModels struct {
	infers atomic.Int64
}

func notFound(name string) error {
	return apierr.Errorf(apierr.KindNotFound, "model_not_found", "model '%s' is not in the repository", name)
}

func (f *fakeModels) Infer(_ context.Context, req *infer.Request) (*infer.Response, error) {
	f.infers.Add(1)
	if req.Model != "echo" {
		return nil, notFound(req.Model)
	}
	resp := &infer.Response{ID: req.ID, Model: req.Model, Version: "1"}
	for _, in := range req.Inputs {
		out := in
		out.Data = append([]byte(nil), in.Data...) // the request may alias the gRPC message
		out.Parameters = nil
		resp.Outputs = append(resp.Outputs, out)
	}
	return resp, nil
}

func (f *fakeModels) Metadata(_ context.Context, name, _ string) (*modelrepo.Metadata, error) {
	if name != "echo" {
		return nil, notFound(name)
	}
	return &modelrepo.Metadata{
		Name: "echo", Versions: []string{"1"}, Platform: "onnxruntime_onnx",
		Inputs:  []modelrepo.TensorMeta{{Name: "INPUT0", DataType: infer.Int32, Shape: infer.Shape{-1, 2}}},
		Outputs: []modelrepo.TensorMeta{{Name: "INPUT0", DataType: infer.Int32, Shape: infer.Shape{-1, 2}}},
	}, nil
}

func (f *fakeModels) Config(_ context.Context, name, _ string) (*pb.ModelConfig, error) {
	if name != "echo" {
		return nil, notFound(name)
	}
	return &pb.ModelConfig{Name: "echo", Platform: "onnxruntime_onnx", MaxBatchSize: 4}, nil
}

func (f *fakeModels) ModelReady(_ context.Context, name, _ string) error {
	if name != "echo" {
		return notFound(name)
	}
	return nil
}

func (f *fakeModels) Live() bool  { return true }
func (f *fakeModels) Ready() bool { return true }

func (f *fakeModels) Index(context.Context, bool) []modelrepo.IndexEntry {
	return []modelrepo.IndexEntry{{Name: "echo", Version: "1", State: modelrepo.StateReady}}
}

func (f *fakeModels) Load(_ context.Context, name string, _ modelrepo.LoadOptions) error {
	return notFound(name)
}

func (f *fakeModels) Unload(_ context.Context, name string, _ modelrepo.UnloadOptions) error {
	return notFound(name)
}

func (f *fakeModels) Statistics(_ context.Context, _, _ string) ([]modelrepo.ModelStats, error) {
	return []modelrepo.ModelStats{{Name: "echo", Version: "1", InferenceCount: uint64(f.infers.Load())}}, nil
}

var _ modelrepo.Models = (*fakeModels)(nil)
