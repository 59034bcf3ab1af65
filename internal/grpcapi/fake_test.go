package grpcapi

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// fakeModels is a hand-written modelrepo.Models. Model "echo" answers each input
// named INPUTn with an output OUTPUTn holding the same tensor; model
// "panic" panics; model "gate" queues the request (recording its id and
// calling infer.Queued, as a scheduler does) and answers like "echo" once
// gate is closed; any other name is not found.
type fakeModels struct {
	ready atomic.Bool
	gate  chan struct{}

	mu         sync.Mutex // protects the fields below
	lastInfer  *infer.Request
	lastLoad   modelrepo.LoadOptions
	lastLoadTo string
	lastUnload modelrepo.UnloadOptions
	statsName  string
	gateQueue  []string // ids of the "gate" requests queued, in order
}

func newFakeModels() *fakeModels {
	f := &fakeModels{gate: make(chan struct{})}
	f.ready.Store(true)
	return f
}

func notFound(name string) error {
	return apierr.Errorf(apierr.KindNotFound, "model_not_found", "model '%s' is not in the repository", name)
}

func (f *fakeModels) Infer(ctx context.Context, req *infer.Request) (*infer.Response, error) {
	switch req.Model {
	case "gate":
		f.mu.Lock()
		f.gateQueue = append(f.gateQueue, req.ID)
		f.mu.Unlock()
		infer.Queued(ctx)
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case "echo":
	case "panic":
		panic("fake model exploded")
	case "slow":
		return nil, apierr.Errorf(apierr.KindTimeout, "queue_timeout", "model 'slow': request timed out in the queue")
	default:
		return nil, notFound(req.Model)
	}
	// Keep a deep copy: the request may alias the gRPC message.
	cp := *req
	cp.Inputs = make([]infer.Tensor, len(req.Inputs))
	for i, t := range req.Inputs {
		t.Data = append([]byte(nil), t.Data...)
		cp.Inputs[i] = t
	}
	f.mu.Lock()
	f.lastInfer = &cp
	f.mu.Unlock()

	all := make(map[string]infer.Tensor, len(req.Inputs))
	var order []string
	for _, in := range req.Inputs {
		out := in
		out.Name = strings.Replace(in.Name, "INPUT", "OUTPUT", 1)
		out.Data = append([]byte(nil), in.Data...)
		out.Parameters = nil
		all[out.Name] = out
		order = append(order, out.Name)
	}
	resp := &infer.Response{ID: req.ID, Model: req.Model, Version: "1", Parameters: infer.Parameters{"echoed": true}}
	if len(req.Outputs) == 0 {
		for _, n := range order {
			resp.Outputs = append(resp.Outputs, all[n])
		}
		return resp, nil
	}
	for _, o := range req.Outputs {
		t, ok := all[o.Name]
		if !ok {
			return nil, apierr.Errorf(apierr.KindInvalid, "unknown_output", "output '%s': model 'echo' has no such output", o.Name)
		}
		resp.Outputs = append(resp.Outputs, t)
	}
	return resp, nil
}

func (f *fakeModels) Metadata(_ context.Context, name, _ string) (*modelrepo.Metadata, error) {
	if name != "echo" {
		return nil, notFound(name)
	}
	return &modelrepo.Metadata{
		Name:     "echo",
		Versions: []string{"1", "2"},
		Platform: "onnxruntime_onnx",
		Inputs:   []modelrepo.TensorMeta{{Name: "INPUT0", DataType: infer.Int32, Shape: infer.Shape{-1, 16}}},
		Outputs:  []modelrepo.TensorMeta{{Name: "OUTPUT0", DataType: infer.FP32, Shape: infer.Shape{-1, 1}}},
	}, nil
}

func (f *fakeModels) Config(_ context.Context, name, _ string) (*pb.ModelConfig, error) {
	if name != "echo" {
		return nil, notFound(name)
	}
	return &pb.ModelConfig{Name: "echo", Platform: "onnxruntime_onnx", MaxBatchSize: 8}, nil
}

func (f *fakeModels) ModelReady(_ context.Context, name, version string) error {
	switch {
	case name == "echo" && (version == "" || version == "1"):
		return nil
	case name == "echo":
		return apierr.Errorf(apierr.KindUnavailable, "model_version_unavailable", "model 'echo' version '%s' is not ready", version)
	case name == "broken":
		return apierr.Errorf(apierr.KindInternal, "oops", "model 'broken': readiness probe crashed")
	}
	return notFound(name)
}

func (f *fakeModels) Live() bool  { return true }
func (f *fakeModels) Ready() bool { return f.ready.Load() }

func (f *fakeModels) Index(_ context.Context, readyOnly bool) []modelrepo.IndexEntry {
	all := []modelrepo.IndexEntry{
		{Name: "echo", Version: "1", State: modelrepo.StateReady},
		{Name: "bad", Version: "3", State: modelrepo.StateUnavailable, Reason: "checksum mismatch"},
	}
	if readyOnly {
		return all[:1]
	}
	return all
}

func (f *fakeModels) Load(_ context.Context, name string, opts modelrepo.LoadOptions) error {
	if name != "echo" {
		return notFound(name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastLoadTo, f.lastLoad = name, opts
	return nil
}

func (f *fakeModels) Unload(_ context.Context, name string, opts modelrepo.UnloadOptions) error {
	if name != "echo" {
		return notFound(name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastUnload = opts
	return nil
}

func (f *fakeModels) Statistics(_ context.Context, name, _ string) ([]modelrepo.ModelStats, error) {
	f.mu.Lock()
	f.statsName = name
	f.mu.Unlock()
	if name != "" && name != "echo" {
		return nil, notFound(name)
	}
	return []modelrepo.ModelStats{{
		Name: "echo", Version: "1", LastInference: 1700000000123,
		InferenceCount: 10, ExecutionCount: 4,
		Success:      modelrepo.Duration{Count: 10, Ns: 5000},
		Queue:        modelrepo.Duration{Count: 10, Ns: 700},
		ComputeInfer: modelrepo.Duration{Count: 4, Ns: 3000},
		CacheHit:     modelrepo.Duration{Count: 3, Ns: 30},
		CacheMiss:    modelrepo.Duration{Count: 7, Ns: 70},
		BatchStats: []modelrepo.BatchStats{{
			BatchSize: 4, ComputeInfer: modelrepo.Duration{Count: 2, Ns: 1500},
		}},
	}}, nil
}

var _ modelrepo.Models = (*fakeModels)(nil)
