// Package backend defines what a model execution engine provides and keeps
// the registry of engines keyed by Triton platform and backend names.
// Backends know no protocol and no scheduler.
package backend

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// LoadOptions tell a backend how to build one instance of a model version.
type LoadOptions struct {
	Model   string // model name, for logs and errors
	Version int64
	// Path is the model file (or folder) inside the version folder.
	Path string
	// Parameters are config.pbtxt's parameters map (string values).
	Parameters map[string]string
	// InstanceCount is how many instances of this model the server runs
	// in total; backends use it to size thread pools.
	InstanceCount int
	// Config is the version's complete configuration (defaults applied,
	// auto-completed, validated), or nil when the caller has none.
	// Backends must not modify it.
	Config *inferencepb.ModelConfig
	// LoadID is the same for every instance of one load of a version and
	// differs between loads, so that a backend can tell an instance's
	// siblings from the instances of a reload loading beside them. 0
	// means unknown.
	LoadID uint64
	// MaxOutputBytes is the most output bytes (all outputs' tensor data)
	// one request may get; the model repository refuses larger outputs
	// whatever the backend does, and a backend that can tell the size
	// before it holds the outputs (the Python backend, from a worker's
	// frame header) refuses them without reading them. 0: no limit.
	MaxOutputBytes int64
}

// Backend is one execution engine, e.g. ONNX Runtime.
type Backend interface {
	// Name is the backend name used in config.pbtxt's backend field,
	// e.g. "onnxruntime".
	Name() string
	// DefaultFilename is the model file name used when the config sets no
	// default_model_filename, e.g. "model.onnx".
	DefaultFilename() string
	// Signature reads a model file's inputs and outputs without keeping it
	// loaded.
	Signature(ctx context.Context, path string) (infer.Signature, error)
	// Load builds one executable instance.
	Load(ctx context.Context, opts LoadOptions) (Instance, error)
}

// ConfigSigner is implemented by backends whose model files do not
// declare their inputs and outputs (Python code). For them the repository
// neither requires the default model file nor calls Signature: it calls
// ConfigSignature with the version folder and the configuration (defaults
// applied, not auto-completed), which checks that the folder holds what
// the backend needs and returns the inputs and outputs the configuration
// declares, shapes including the batch dimension. An error wrapping
// fs.ErrNotExist means a model file is missing; any other error is a
// configuration problem.
type ConfigSigner interface {
	ConfigSignature(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) (infer.Signature, error)
}

// ConfigCompleter is implemented by backends whose model code can complete
// its own configuration, as a Triton Python model's auto_complete_config
// does. With auto-complete on, the repository calls CompleteConfig for
// each version before ConfigSignature, with the version folder and the
// configuration so far (defaults applied; not modified), and uses the
// configuration it returns, which it still validates. A version whose
// code completes nothing gets cfg back. Errors name what was wrong.
type ConfigCompleter interface {
	CompleteConfig(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) (*inferencepb.ModelConfig, error)
}

// Decoupler is implemented by backends whose models may be decoupled
// (model_transaction_policy { decoupled: true }): any number of responses
// per request. Their instances implement batch.StreamExecutor. The
// repository refuses decoupled models of other backends.
type Decoupler interface {
	Decoupled() bool
}

// Server runs inference requests: the model server, as a backend's
// models see it when they call other models.
type Server interface {
	Infer(ctx context.Context, req *infer.Request) (*infer.Response, error)
}

// StreamSend receives one response of a request answered by
// StreamServer.InferStream: a response, or the error a decoupled model
// answered with (the request goes on), or, with both nil, only the final
// flag. final is set on the last call. A non-nil return stops the
// responses: InferStream returns it.
type StreamSend func(resp *infer.Response, err error, final bool) error

// StreamServer is a Server that also runs requests answered with any
// number of responses (a decoupled model's); a Python model's decoupled
// BLS requests (exec(decoupled=True)) need it.
type StreamServer interface {
	Server
	// InferStream calls send for each response, in order, the last with
	// final set; it returns once the final response was sent, or with
	// the error that failed the request before any response.
	InferStream(ctx context.Context, req *infer.Request, send StreamSend) error
}

// Caller is implemented by backends whose models call other models the
// server serves (a Python model's Business Logic Scripting). The
// repository hands them itself when it is created.
type Caller interface {
	SetServer(s Server)
}

// HealthReporter is implemented by instances that can stop serving after
// they loaded, such as an out-of-process worker that keeps crashing. The
// repository index shows the reason.
type HealthReporter interface {
	// Unhealthy returns why the instance cannot serve, or "" while it
	// can (or is recovering by itself).
	Unhealthy() string
}

// Instance is one loaded copy of a model version.
type Instance interface {
	// Execute runs the model once. Inputs are concrete tensors (including
	// the batch dimension when the model batches). outputs names the
	// outputs wanted, in order; the result has one tensor per name. An
	// instance may be called from several goroutines at once.
	Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error)
	// Close frees the instance. It is called once, after every Execute
	// has returned.
	Close() error
}

// Registry maps backend names and platforms to backends. The zero value is
// empty and ready to use.
type Registry struct {
	mu        sync.RWMutex // protects the maps
	backends  map[string]Backend
	platforms map[string]string // platform -> backend name
}

// Register adds b under its name and under each of the given Triton
// platform names (e.g. "onnxruntime_onnx").
func (r *Registry) Register(b Backend, platforms ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.backends == nil {
		r.backends = map[string]Backend{}
		r.platforms = map[string]string{}
	}
	r.backends[b.Name()] = b
	for _, p := range platforms {
		r.platforms[p] = b.Name()
	}
}

// Lookup finds the backend for a config's backend or platform field. The
// backend field wins when both are set.
func (r *Registry) Lookup(backendName, platform string) (Backend, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if backendName != "" {
		if b, ok := r.backends[backendName]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("unknown backend %q (available: %v)", backendName, r.namesLocked())
	}
	if platform != "" {
		if n, ok := r.platforms[platform]; ok {
			return r.backends[n], nil
		}
		return nil, fmt.Errorf("unknown platform %q (available: %v)", platform, r.namesLocked())
	}
	return nil, fmt.Errorf("config sets neither backend nor platform")
}

// Platform returns the first platform registered for a backend name.
func (r *Registry) Platform(backendName string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var ps []string
	for p, n := range r.platforms {
		if n == backendName {
			ps = append(ps, p)
		}
	}
	sort.Strings(ps)
	if len(ps) == 0 {
		return ""
	}
	return ps[0]
}

// Backends returns the registered backends, sorted by name.
func (r *Registry) Backends() []Backend {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Backend, 0, len(r.backends))
	for _, b := range r.backends {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

func (r *Registry) namesLocked() []string {
	var ns []string
	for n := range r.backends {
		ns = append(ns, n)
	}
	for p := range r.platforms {
		ns = append(ns, p)
	}
	sort.Strings(ns)
	return ns
}
