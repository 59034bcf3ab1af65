//go:build cgo

package onnxruntime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

// ortEnv tracks this package's use of ONNX Runtime's environment. The
// environment is global to the process (onnxruntime_go keeps it in package
// variables), so its bookkeeping has to be global too.
var ortEnv struct {
	mu      sync.Mutex // protects the fields below
	refs    int        // open Backends
	owned   bool       // this package created the environment
	library string     // the library it was created with
}

// Backend runs ONNX models. Create it with New and close it after every
// instance it loaded has been closed.
type Backend struct {
	logger    *slog.Logger
	closeOnce sync.Once
	closeErr  error
}

var _ backend.Backend = (*Backend)(nil)

// New loads the ONNX Runtime library (once per process) and returns a
// Backend. A nil logger discards logs.
func New(opts Options, logger *slog.Logger) (*Backend, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "onnxruntime")
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, errors.New("onnxruntime backend needs a little-endian machine")
	}
	lib := opts.LibraryPath
	if lib == "" {
		var err error
		if lib, err = FindLibrary(""); err != nil {
			return nil, err
		}
	}

	ortEnv.mu.Lock()
	defer ortEnv.mu.Unlock()
	switch {
	case ortEnv.refs > 0:
		if lib != ortEnv.library {
			logger.Warn("onnxruntime already loaded; ignoring library path", "library", lib, "loaded", ortEnv.library)
		}
	case ort.IsInitialized():
		// Someone outside this package set it up; use it, never destroy it.
		ortEnv.owned, ortEnv.library = false, lib
	default:
		ort.SetSharedLibraryPath(lib)
		if err := ort.InitializeEnvironment(ort.WithLogLevelWarning()); err != nil {
			return nil, fmt.Errorf("initialize onnxruntime from %s: %w", lib, err)
		}
		ortEnv.owned, ortEnv.library = true, lib
		logger.Info("onnxruntime loaded", "library", lib, "version", ort.GetVersion())
	}
	ortEnv.refs++
	return &Backend{logger: logger}, nil
}

// LoadedVersion is the version string of the loaded ONNX Runtime library,
// from its own API (OrtApiBase's GetVersionString).
func (b *Backend) LoadedVersion() string { return ort.GetVersion() }

// Name returns "onnxruntime", the config.pbtxt backend name.
func (b *Backend) Name() string { return "onnxruntime" }

// DefaultFilename returns "model.onnx".
func (b *Backend) DefaultFilename() string { return "model.onnx" }

// Close releases the Backend's hold on ONNX Runtime. The last Backend to
// close destroys the environment if this package created it. Close is
// idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		ortEnv.mu.Lock()
		defer ortEnv.mu.Unlock()
		ortEnv.refs--
		if ortEnv.refs > 0 || !ortEnv.owned {
			return
		}
		ortEnv.owned, ortEnv.library = false, ""
		if err := ort.DestroyEnvironment(); err != nil {
			b.closeErr = fmt.Errorf("destroy onnxruntime environment: %w", err)
		}
	})
	return b.closeErr
}

// Signature reads the model's inputs and outputs. Variable dimensions are
// -1. Models with non-tensor inputs or outputs (sequences, maps) are
// refused.
func (b *Backend) Signature(ctx context.Context, path string) (infer.Signature, error) {
	if err := ctx.Err(); err != nil {
		return infer.Signature{}, err
	}
	return readSignature(path)
}

func readSignature(path string) (infer.Signature, error) {
	// A throwaway session: no graph optimization, one thread.
	o, err := ort.NewSessionOptions()
	if err != nil {
		return infer.Signature{}, fmt.Errorf("create session options: %w", err)
	}
	// Destroy fails only on options that were never created.
	defer func() { _ = o.Destroy() }()
	if err := errors.Join(o.SetIntraOpNumThreads(1), o.SetInterOpNumThreads(1),
		o.SetGraphOptimizationLevel(ort.GraphOptimizationLevelDisableAll)); err != nil {
		return infer.Signature{}, fmt.Errorf("set session options: %w", err)
	}
	ins, outs, err := ort.GetInputOutputInfoWithOptions(path, o)
	if err != nil {
		return infer.Signature{}, fmt.Errorf("read onnx model %s: %w", path, err)
	}
	var sig infer.Signature
	for _, in := range ins {
		spec, err := specFromInfo("input", in)
		if err != nil {
			return infer.Signature{}, fmt.Errorf("onnx model %s: %w", path, err)
		}
		sig.Inputs = append(sig.Inputs, spec)
	}
	for _, out := range outs {
		spec, err := specFromInfo("output", out)
		if err != nil {
			return infer.Signature{}, fmt.Errorf("onnx model %s: %w", path, err)
		}
		sig.Outputs = append(sig.Outputs, spec)
	}
	// Inputs backed by initializers, after the required ones. A file that
	// cannot be scanned (ONNX Runtime read it) simply has none listed.
	if opt, err := initializerInputs(path); err == nil {
		for _, o := range opt {
			if !slices.ContainsFunc(sig.Inputs, func(s infer.TensorSpec) bool { return s.Name == o.Name }) {
				sig.Inputs = append(sig.Inputs, o)
			}
		}
	}
	return sig, nil
}

// splitOptional separates the inputs a session needs from the optional
// (initializer-backed) ones readSignature lists after them.
func splitOptional(sig infer.Signature) (required, full infer.Signature, optional bool) {
	required = infer.Signature{Outputs: sig.Outputs}
	for _, in := range sig.Inputs {
		if in.Optional {
			optional = true
			continue
		}
		required.Inputs = append(required.Inputs, in)
	}
	return required, sig, optional
}

// Load creates one ONNX Runtime session for opts.Path. It reads the
// parameters intra_op_thread_count and inter_op_thread_count (default 1;
// 0 lets ONNX Runtime use one thread per core) and graph_optimization_level
// (disable_all, basic, extended or all; default all). When the model's
// instances together ask for more threads than there are cores, pool
// threads stop spinning while idle.
func (b *Backend) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := parseSessionConfig(opts.Parameters, opts.InstanceCount, runtime.NumCPU())
	if err != nil {
		return nil, err
	}
	sig, err := readSignature(opts.Path)
	if err != nil {
		return nil, err
	}
	so, err := sessionOptions(cfg)
	if err != nil {
		return nil, err
	}
	// The session keeps its own copy of the options; Destroy fails only on
	// options that were never created.
	defer func() { _ = so.Destroy() }()
	sig, full, optional := splitOptional(sig)
	session, err := ort.NewDynamicAdvancedSession(opts.Path, names(sig.Inputs), names(sig.Outputs), so)
	if err != nil {
		return nil, fmt.Errorf("create onnxruntime session for %s: %w", opts.Path, err)
	}
	var withOptional *Instance
	if optional {
		// Requests that override the initializer-backed inputs run on a
		// second session that takes them.
		fs, err := ort.NewDynamicAdvancedSession(opts.Path, names(full.Inputs), names(full.Outputs), so)
		if err != nil {
			_ = session.Destroy()
			return nil, fmt.Errorf("create onnxruntime session with optional inputs for %s: %w", opts.Path, err)
		}
		withOptional = newInstance(opts.Model, opts.Version, full, fs)
	}
	b.logger.Debug("onnxruntime session created", "model", opts.Model, "version", opts.Version,
		"intra_op_threads", cfg.intraThreads, "inter_op_threads", cfg.interThreads,
		"intra_op_spinning", cfg.intraSpin)
	in := newInstance(opts.Model, opts.Version, sig, session)
	in.withOptional = withOptional
	return in, nil
}

func sessionOptions(cfg sessionConfig) (*ort.SessionOptions, error) {
	o, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("create session options: %w", err)
	}
	errs := []error{o.SetIntraOpNumThreads(cfg.intraThreads), o.SetInterOpNumThreads(cfg.interThreads)}
	if !cfg.intraSpin {
		errs = append(errs, o.AddSessionConfigEntry("session.intra_op.allow_spinning", "0"))
	}
	if !cfg.interSpin {
		errs = append(errs, o.AddSessionConfigEntry("session.inter_op.allow_spinning", "0"))
	}
	if cfg.level != levelDefault {
		errs = append(errs, o.SetGraphOptimizationLevel(ortLevel(cfg.level)))
	}
	if err := errors.Join(errs...); err != nil {
		_ = o.Destroy() // fails only on options that were never created
		return nil, fmt.Errorf("set session options: %w", err)
	}
	return o, nil
}

func ortLevel(l graphLevel) ort.GraphOptimizationLevel {
	switch l {
	case levelDisableAll:
		return ort.GraphOptimizationLevelDisableAll
	case levelBasic:
		return ort.GraphOptimizationLevelEnableBasic
	case levelExtended:
		return ort.GraphOptimizationLevelEnableExtended
	default: // levelDefault, levelAll
		return ort.GraphOptimizationLevelEnableAll
	}
}

func names(specs []infer.TensorSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}
