package libtorch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// The engines the load log names.
const (
	EngineInProcess = "libtorch"
	EngineWorker    = "python-worker"
)

// EngineParameter is the config parameter that picks the engine of a
// TorchScript model: "libtorch" (the default: in-process when the shim
// library opened) or "python" (the Python worker, e.g. to keep a model's
// crashes out of the server's process).
const EngineParameter = "SLUICE_PYTORCH_ENGINE"

// engine is the opened shim (engine_cgo.go); tests may replace it.
type engine interface {
	version() string
	load(path string, o loadSettings) (module, error)
}

// module is one loaded TorchScript module.
type module interface {
	args() (names, types []string)
	returns() string
	forward(inputs []*infer.Tensor) ([]rawTensor, error)
	free()
}

// rawTensor is one element of forward()'s result.
type rawTensor struct {
	dataType infer.DataType // Invalid for element types KServe v2 lacks
	shape    infer.Shape
	data     []byte
}

// loadSettings are the config parameters the shim applies at load.
type loadSettings struct {
	optimized, inference       bool
	intraThreads, interThreads int
	jitExecutor, jitProfiling  int // -1 keep, 0 off, 1 on
}

// Options configure a Backend.
type Options struct {
	// LibraryPath is libsluice_torch.so's path
	// (--backend-config=pytorch,library=PATH); New calls
	// FindLibrary(LibraryPath), so empty means the usual places.
	LibraryPath string
	// CPUs is the number of cores instances share for their intra-op
	// threads when no INTRA_OP_THREAD_COUNT is set; 0 means
	// runtime.NumCPU().
	CPUs int
}

// Backend is the pytorch backend: TorchScript models in-process through
// libtorch when the shim library opens, everything else on its fallback.
type Backend struct {
	fallback backend.Backend
	libPath  string
	opened   sync.Once
	lib      engine // set by open; nil: every model goes to fallback
	why      string // why lib is nil
	cpus     int
	logger   *slog.Logger
}

var (
	_ backend.Backend        = (*Backend)(nil)
	_ backend.ConfigSigner   = (*Backend)(nil)
	_ backend.VersionChecker = (*Backend)(nil)
)

// New returns the backend. It opens the shim library (and so libtorch,
// about 0.3 s and 150 MB here) on the first TorchScript model it is asked
// to run in-process, not here: a server without one never pays for it.
// It never fails: when the library cannot be opened, every model runs on
// fallback (which must implement backend.ConfigSigner, as the Python
// worker's pytorch backend does) and the server logs why once.
func New(opts Options, fallback backend.Backend, logger *slog.Logger) *Backend {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Backend{fallback: fallback, cpus: opts.CPUs, libPath: opts.LibraryPath, logger: logger}
	if b.cpus <= 0 {
		b.cpus = runtime.NumCPU()
	}
	return b
}

// open opens the shim library once; afterwards b.lib is set, or b.why
// says why not.
func (b *Backend) open() {
	b.opened.Do(func() {
		path, err := FindLibrary(b.libPath)
		if err == nil {
			b.lib, err = openLibrary(path)
		}
		if err != nil {
			b.why = err.Error()
			b.logger.Warn("pytorch: TorchScript models run in the Python worker, not in-process with libtorch", "reason", b.why)
			return
		}
		blas := BundledBLAS(path)
		if blas == "" {
			blas = "the machine's libblas.so.3"
		}
		b.logger.Info("pytorch: TorchScript models run in-process with libtorch", "libtorch", b.lib.version(), "library", path, "blas", blas)
	})
}

// InProcess reports whether the shim library is open, and why not.
func (b *Backend) InProcess() (bool, string) {
	b.open()
	return b.lib != nil, b.why
}

// Name returns the fallback's name, "pytorch".
func (b *Backend) Name() string { return b.fallback.Name() }

// DefaultFilename returns the fallback's, "model.pt".
func (b *Backend) DefaultFilename() string { return b.fallback.DefaultFilename() }

// Signature is the fallback's: a PyTorch model's inputs and outputs are
// those of its configuration.
func (b *Backend) Signature(ctx context.Context, path string) (infer.Signature, error) {
	return b.fallback.Signature(ctx, path)
}

// ConfigSignature is the fallback's: the same folder checks and the inputs
// and outputs cfg declares, whichever engine runs the model.
func (b *Backend) ConfigSignature(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) (infer.Signature, error) {
	cs, ok := b.fallback.(backend.ConfigSigner)
	if !ok {
		return infer.Signature{}, fmt.Errorf("%s: the fallback backend reads no configuration", b.Name())
	}
	return cs.ConfigSignature(ctx, versionDir, cfg)
}

// CheckVersion is the fallback's offline check.
func (b *Backend) CheckVersion(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) []backend.Problem {
	if vc, ok := b.fallback.(backend.VersionChecker); ok {
		return vc.CheckVersion(ctx, versionDir, cfg)
	}
	return nil
}

// Load runs the version in-process when it can, else on the fallback; the
// load log says which, and why not in-process.
func (b *Backend) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	var file, why string
	switch e := strings.TrimSpace(opts.Parameters[EngineParameter]); e {
	case "", EngineInProcess:
		file, why = b.eligible(opts)
	case "python":
		why = "parameter " + EngineParameter + " is \"python\""
	default:
		return nil, fmt.Errorf("model %s version %d: parameter %s %q: want %q or \"python\"", opts.Model, opts.Version, EngineParameter, e, EngineInProcess)
	}
	if why == "" {
		in, w, err := b.loadInProcess(file, opts)
		if err != nil {
			return nil, err
		}
		if in != nil {
			b.logger.Info("pytorch model loaded", "model", opts.Model, "version", opts.Version, "engine", EngineInProcess, "libtorch", b.lib.version())
			return in, nil
		}
		why = w
	}
	b.logger.Info("pytorch model loaded", "model", opts.Model, "version", opts.Version, "engine", EngineWorker, "reason", why)
	return b.fallback.Load(ctx, opts)
}

// eligible returns the TorchScript file to load in-process, or why the
// version goes to the fallback.
func (b *Backend) eligible(opts backend.LoadOptions) (string, string) {
	b.open()
	if b.lib == nil {
		return "", b.why
	}
	cfg := opts.Config
	if cfg == nil {
		return "", "no model configuration"
	}
	name := "model.pt"
	if c := cfg.GetDefaultModelFilename(); strings.HasSuffix(c, ".pt") {
		name = c
	}
	file := filepath.Join(filepath.Dir(opts.Path), name)
	if st, err := os.Stat(file); err != nil || !st.Mode().IsRegular() {
		return "", "not a TorchScript model (no " + name + ")"
	}
	if cfg.GetSequenceBatching() != nil {
		return "", "sequence batching"
	}
	for _, t := range cfg.GetInput() {
		if why := tensorEligible("input", t.GetName(), t.GetDataType(), t.GetReshape()); why != "" {
			return "", why
		}
	}
	for _, t := range cfg.GetOutput() {
		if why := tensorEligible("output", t.GetName(), t.GetDataType(), t.GetReshape()); why != "" {
			return "", why
		}
	}
	return file, ""
}

func tensorEligible(kind, name string, dt inferencepb.DataType, reshape *inferencepb.ModelTensorReshape) string {
	switch d := modelconfig.ToInfer(dt); {
	case d == infer.Bytes:
		return fmt.Sprintf("%s '%s' is TYPE_STRING", kind, name)
	case !d.Valid() || d == infer.Uint16 || d == infer.Uint32 || d == infer.Uint64:
		return fmt.Sprintf("%s '%s' is %s, which libtorch has no type for", kind, name, dt)
	}
	if reshape != nil {
		return fmt.Sprintf("%s '%s' has a reshape", kind, name)
	}
	return ""
}

// loadInProcess loads the module and maps the configuration onto it. A nil
// instance with a reason means the module's forward() takes or returns
// something other than tensors, or its arguments do not map onto the
// configuration's inputs: the fallback runs it.
func (b *Backend) loadInProcess(file string, opts backend.LoadOptions) (*Instance, string, error) {
	set, err := b.settings(opts)
	if err != nil {
		return nil, "", fmt.Errorf("model %s version %d: %w", opts.Model, opts.Version, err)
	}
	m, err := b.lib.load(file, set)
	if err != nil {
		return nil, "", fmt.Errorf("model %s version %d: libtorch cannot load %s: %w", opts.Model, opts.Version, filepath.Base(file), err)
	}
	names, types := m.args()
	for i, t := range types {
		if t != "Tensor" {
			m.free()
			return nil, fmt.Sprintf("forward() argument '%s' is %s, not Tensor", names[i], t), nil
		}
	}
	if r := m.returns(); !tensorResult(r) {
		m.free()
		return nil, fmt.Sprintf("forward() returns %s, not tensors", r), nil
	}
	in, err := newInstance(m, opts)
	if err != nil {
		// The worker applies the same rules and reports its own error
		// when it cannot run the model either.
		m.free()
		return nil, err.Error(), nil //nolint:nilerr // a model whose arguments do not map is a reason for the fallback, not a load error
	}
	return in, "", nil
}

// tensorResult reports whether a forward() return type (TorchScript's
// spelling: "Tensor", "(Tensor, Tensor)", "Tensor[]", "List[Tensor]")
// holds tensors only.
func tensorResult(t string) bool {
	t = strings.NewReplacer("(", "", ")", "", "[]", "", "List[", "", "]", "", "Tuple[", "", " ", "").Replace(t)
	for p := range strings.SplitSeq(t, ",") {
		if p != "Tensor" {
			return false
		}
	}
	return true
}

// settings reads the Triton pytorch backend's parameters.
func (b *Backend) settings(opts backend.LoadOptions) (loadSettings, error) {
	p := opts.Parameters
	s := loadSettings{optimized: true, inference: true, jitExecutor: -1, jitProfiling: -1}
	var err error
	flag := func(key string, def bool) bool {
		v := strings.TrimSpace(strings.ToLower(p[key]))
		switch v {
		case "":
			return def
		case "1", "true", "yes", "on":
			return true
		case "0", "false", "no", "off":
			return false
		}
		if err == nil {
			err = fmt.Errorf("parameter %s %q is not a boolean", key, p[key])
		}
		return def
	}
	count := func(keys ...string) int {
		for _, k := range keys {
			if v := strings.TrimSpace(p[k]); v != "" {
				n, e := strconv.Atoi(v)
				if e != nil && err == nil {
					err = fmt.Errorf("parameter %s %q is not an integer", k, v)
				}
				return n
			}
		}
		return 0
	}
	s.optimized = !flag("DISABLE_OPTIMIZED_EXECUTION", false)
	s.inference = flag("INFERENCE_MODE", true)
	tri := func(key string) int {
		if strings.TrimSpace(p[key]) == "" {
			return -1
		}
		if flag(key, true) {
			return 1
		}
		return 0
	}
	s.jitExecutor = tri("ENABLE_JIT_EXECUTOR")
	s.jitProfiling = tri("ENABLE_JIT_PROFILING")
	s.intraThreads = count("INTRA_OP_THREAD_COUNT", "intra_op_thread_count")
	if s.intraThreads <= 0 && os.Getenv("OMP_NUM_THREADS") == "" {
		// The Python worker's default: an equal share of the cores per
		// instance.
		s.intraThreads = max(1, b.cpus/max(opts.InstanceCount, 1))
	}
	s.interThreads = count("INTER_OP_THREAD_COUNT", "inter_op_thread_count")
	if s.interThreads <= 0 {
		s.interThreads = 1
	}
	return s, err
}

// namedIndex matches Triton's <name>__<index> tensor names.
var namedIndex = regexp.MustCompile(`^.*__(\d+)$`)
