package httpapi

import (
	"context"
	"encoding/binary"
	"sync"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// fakeModels is a hand-written modelrepo.Models. It knows two models:
//
//   - "simple": Triton's classic example, INT32 INPUT0 and INPUT1 of shape
//     [-1,16] (max_batch_size 8); OUTPUT0 = INPUT0+INPUT1, OUTPUT1 =
//     INPUT0-INPUT1.
//   - "identity": one FP32 input IN of shape [-1,4] (batching); OUT echoes it.
//
// It validates inputs and requested outputs the way the repository does,
// so the handler's mapping of those errors is exercised. infer, when set,
// replaces the model logic.
type fakeModels struct {
	live, ready bool
	infer       func(ctx context.Context, req *infer.Request) (*infer.Response, error)

	mu         sync.Mutex // protects the fields below
	lastReq    *infer.Request
	lastLoad   modelrepo.LoadOptions
	loadName   string
	lastUnload modelrepo.UnloadOptions
	lastReady  bool
	statsArgs  [2]string
}

func newFakeModels() *fakeModels { return &fakeModels{live: true, ready: true} }

var fakeSignatures = map[string]infer.Signature{
	"simple": {
		Inputs: []infer.TensorSpec{
			{Name: "INPUT0", DataType: infer.Int32, Shape: infer.Shape{-1, 16}},
			{Name: "INPUT1", DataType: infer.Int32, Shape: infer.Shape{-1, 16}},
		},
		Outputs: []infer.TensorSpec{
			{Name: "OUTPUT0", DataType: infer.Int32, Shape: infer.Shape{-1, 16}},
			{Name: "OUTPUT1", DataType: infer.Int32, Shape: infer.Shape{-1, 16}},
		},
	},
	"identity": {
		Inputs:  []infer.TensorSpec{{Name: "IN", DataType: infer.FP32, Shape: infer.Shape{-1, 4}}},
		Outputs: []infer.TensorSpec{{Name: "OUT", DataType: infer.FP32, Shape: infer.Shape{-1, 4}}},
	},
}

func notFound(name string) error {
	return apierr.Errorf(apierr.KindNotFound, modelrepo.ReasonModelNotFound, "model '%s' is not in the repository", name)
}

func (f *fakeModels) Infer(ctx context.Context, req *infer.Request) (*infer.Response, error) {
	f.mu.Lock()
	f.lastReq = req
	f.mu.Unlock()
	if f.infer != nil {
		return f.infer(ctx, req)
	}
	sig, ok := fakeSignatures[req.Model]
	if !ok {
		return nil, notFound(req.Model)
	}
	for _, spec := range sig.Inputs {
		t := req.Input(spec.Name)
		if t == nil {
			return nil, apierr.Errorf(apierr.KindInvalid, modelrepo.ReasonMissingInput, "input '%s' is missing", spec.Name)
		}
		if t.DataType != spec.DataType {
			return nil, apierr.Errorf(apierr.KindInvalid, modelrepo.ReasonInvalidDatatype, "input '%s': expected %s, got %s", spec.Name, spec.DataType, t.DataType)
		}
		if !t.Shape.Matches(spec.Shape) {
			return nil, apierr.Errorf(apierr.KindInvalid, modelrepo.ReasonInvalidShape, "input '%s': expected shape %s, got %s", spec.Name, spec.Shape, t.Shape)
		}
	}
	var outs []infer.Tensor
	switch req.Model {
	case "simple":
		a, b := req.Input("INPUT0"), req.Input("INPUT1")
		if !a.Shape.Matches(b.Shape) || len(a.Data) != len(b.Data) {
			return nil, apierr.Errorf(apierr.KindInvalid, modelrepo.ReasonInvalidShape, "inputs differ in shape")
		}
		sum := make([]byte, len(a.Data))
		diff := make([]byte, len(a.Data))
		for i := 0; i < len(a.Data); i += 4 {
			x, y := int32(binary.LittleEndian.Uint32(a.Data[i:])), int32(binary.LittleEndian.Uint32(b.Data[i:]))
			binary.LittleEndian.PutUint32(sum[i:], uint32(x+y))
			binary.LittleEndian.PutUint32(diff[i:], uint32(x-y))
		}
		outs = []infer.Tensor{
			{Name: "OUTPUT0", DataType: infer.Int32, Shape: a.Shape.Clone(), Data: sum},
			{Name: "OUTPUT1", DataType: infer.Int32, Shape: a.Shape.Clone(), Data: diff},
		}
	case "identity":
		in := req.Input("IN")
		outs = []infer.Tensor{{Name: "OUT", DataType: infer.FP32, Shape: in.Shape.Clone(), Data: in.Data}}
	}
	if len(req.Outputs) > 0 {
		var sel []infer.Tensor
		for _, o := range req.Outputs {
			found := false
			for _, t := range outs {
				if t.Name == o.Name {
					sel = append(sel, t)
					found = true
				}
			}
			if !found {
				return nil, apierr.Errorf(apierr.KindInvalid, modelrepo.ReasonUnknownOutput, "output '%s' is not an output of model '%s'", o.Name, req.Model)
			}
		}
		outs = sel
	}
	return &infer.Response{ID: req.ID, Model: req.Model, Version: "1", Outputs: outs}, nil
}

func (f *fakeModels) Metadata(_ context.Context, name, version string) (*modelrepo.Metadata, error) {
	sig, ok := fakeSignatures[name]
	if !ok {
		return nil, notFound(name)
	}
	if version != "" && version != "1" {
		return nil, apierr.Errorf(apierr.KindNotFound, modelrepo.ReasonVersionNotFound, "model '%s' has no version '%s'", name, version)
	}
	md := &modelrepo.Metadata{Name: name, Versions: []string{"1"}, Platform: "onnxruntime_onnx", Inputs: sig.Inputs, Outputs: sig.Outputs}
	if name == "simple" {
		md.Label, md.GitCommit = "2.1.0-a1b2c3d", "a1b2c3d"
	}
	return md, nil
}

func (f *fakeModels) Config(_ context.Context, name, _ string) (*inferencepb.ModelConfig, error) {
	if _, ok := fakeSignatures[name]; !ok {
		return nil, notFound(name)
	}
	return &inferencepb.ModelConfig{Name: name, Platform: "onnxruntime_onnx", MaxBatchSize: 8}, nil
}

func (f *fakeModels) ModelReady(_ context.Context, name, version string) error {
	switch {
	case name == "loading":
		return apierr.Errorf(apierr.KindUnavailable, modelrepo.ReasonModelNotReady, "model '%s' is LOADING", name)
	case fakeSignatures[name].Inputs == nil:
		return notFound(name)
	case version != "" && version != "1":
		return apierr.Errorf(apierr.KindNotFound, modelrepo.ReasonVersionNotFound, "model '%s' has no version '%s'", name, version)
	}
	return nil
}

func (f *fakeModels) Live() bool  { return f.live }
func (f *fakeModels) Ready() bool { return f.ready }

func (f *fakeModels) Index(_ context.Context, readyOnly bool) []modelrepo.IndexEntry {
	f.mu.Lock()
	f.lastReady = readyOnly
	f.mu.Unlock()
	out := []modelrepo.IndexEntry{{Name: "identity", Version: "1", State: modelrepo.StateReady}}
	if !readyOnly {
		out = append(out, modelrepo.IndexEntry{Name: "broken", Version: "3", State: modelrepo.StateUnavailable, Reason: "checksum mismatch"})
	}
	return out
}

func (f *fakeModels) Load(_ context.Context, name string, opts modelrepo.LoadOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loadName, f.lastLoad = name, opts
	if name == "nope" {
		return notFound(name)
	}
	return nil
}

func (f *fakeModels) Unload(_ context.Context, name string, opts modelrepo.UnloadOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastUnload = opts
	if name == "nope" {
		return notFound(name)
	}
	return nil
}

func (f *fakeModels) Statistics(_ context.Context, name, version string) ([]modelrepo.ModelStats, error) {
	f.mu.Lock()
	f.statsArgs = [2]string{name, version}
	f.mu.Unlock()
	if name != "" && fakeSignatures[name].Inputs == nil {
		return nil, notFound(name)
	}
	return []modelrepo.ModelStats{{
		Name: "simple", Version: "1", LastInference: 1700000000000, InferenceCount: 10, ExecutionCount: 4,
		Success: modelrepo.Duration{Count: 10, Ns: 5000}, Fail: modelrepo.Duration{Count: 1, Ns: 20},
		Queue: modelrepo.Duration{Count: 10, Ns: 100}, ComputeInfer: modelrepo.Duration{Count: 4, Ns: 4000},
		CacheHit: modelrepo.Duration{Count: 3, Ns: 30}, CacheMiss: modelrepo.Duration{Count: 7, Ns: 70},
		BatchStats: []modelrepo.BatchStats{{BatchSize: 2, ComputeInfer: modelrepo.Duration{Count: 4, Ns: 4000}}},
	}}, nil
}

var _ modelrepo.Models = (*fakeModels)(nil)
