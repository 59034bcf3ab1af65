package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Names and platforms the backends register under.
const (
	// Name is the backend of Triton's Python models (config.pbtxt
	// backend: "python").
	Name = "python"
	// PyTorchName is the backend of PyTorch models; PyTorchPlatform is
	// Triton's platform name for them.
	PyTorchName     = "pytorch"
	PyTorchPlatform = "pytorch_libtorch"
)

// The built-in models the pytorch backend runs, as modules of the worker's
// sluice_builtin package.
const (
	builtinTorchScript = "sluice_builtin.torchscript"
	builtinStateDict   = "sluice_builtin.state_dict"
)

// Files of the PyTorch formats in a version folder.
const (
	torchScriptFile = "model.pt"
	stateDictFile   = "model.pth"
	stateDictMeta   = "model_config.json"
	stateDictClass  = "model.py"
)

// Backend runs Triton Python-backend models (model.py with a
// TritonPythonModel class), one worker process per instance. PyTorch
// returns the same workers under the "pytorch" backend name. Create it
// with New and close it after every instance it loaded.
type Backend struct {
	opts   Options
	logger *slog.Logger
	m      *metrics
	custom *customMetrics // the models' pb_utils.MetricFamily metrics

	filesOnce sync.Once
	filesDir  string
	filesErr  error

	mu     sync.Mutex // protects groups and server
	groups map[groupKey]*group
	server backend.Server // runs the models' BLS requests; nil until SetServer
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.ConfigSigner = (*Backend)(nil)
	_ backend.Decoupler    = (*Backend)(nil)
	_ backend.Caller       = (*Backend)(nil)
	_ backend.Backend      = (*PyTorch)(nil)
	_ backend.ConfigSigner = (*PyTorch)(nil)
)

// New returns a Python backend. It starts nothing: the worker files are
// written to a private temporary folder at the first load, and a missing
// interpreter is reported then, so servers without Python models need no
// Python. A nil logger discards logs; a nil reg registers no metrics.
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) *Backend {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{
		opts:   opts.withDefaults(),
		logger: logger.With("component", "python"),
		m:      newMetrics(reg),
		custom: newCustomMetrics(reg),
		groups: map[groupKey]*group{},
	}
}

// Name returns "python".
func (b *Backend) Name() string { return Name }

// Decoupled reports that Python models may be decoupled: their instances
// send a request's responses through an InferenceResponseSender
// (ExecuteStreams).
func (b *Backend) Decoupled() bool { return true }

// DefaultFilename returns "model.py".
func (b *Backend) DefaultFilename() string { return "model.py" }

// Signature always fails: a Python model's inputs and outputs are those of
// its configuration (see ConfigSignature).
func (b *Backend) Signature(context.Context, string) (infer.Signature, error) {
	return infer.Signature{}, errNeedsConfig(Name)
}

// ConfigSignature checks that the version folder holds the model file
// (config default_model_filename, else model.py) and returns the inputs
// and outputs cfg declares.
func (b *Backend) ConfigSignature(_ context.Context, versionDir string, cfg *inferencepb.ModelConfig) (infer.Signature, error) {
	sig, err := configSignature(Name, cfg)
	if err != nil {
		return sig, err
	}
	file := cfg.GetDefaultModelFilename()
	if file == "" {
		file = b.DefaultFilename()
	}
	if err := needFile(filepath.Join(versionDir, file)); err != nil {
		return infer.Signature{}, err
	}
	return sig, nil
}

// Load starts one worker for the model file at opts.Path and waits until
// its initialize() has returned.
func (b *Backend) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	if err := needFile(opts.Path); err != nil {
		return nil, err
	}
	return b.load(ctx, opts, target{file: opts.Path})
}

// Close removes the worker files. Call it after every instance has been
// closed.
func (b *Backend) Close() error {
	b.filesOnce.Do(func() { b.filesErr = errors.New("python backend closed") })
	if b.filesDir != "" {
		return os.RemoveAll(b.filesDir)
	}
	return nil
}

// PyTorch returns the backend of PyTorch models. It shares this backend's
// workers, settings and metrics; close only this one.
func (b *Backend) PyTorch() *PyTorch { return &PyTorch{b: b} }

// PyTorch runs PyTorch models through built-in TritonPythonModel
// implementations: a TorchScript file (model.pt, or a default_model_filename
// ending in .pt) with torch.jit.load, or a state_dict (model.pth) with
// model_config.json and the model.py defining its nn.Module class.
type PyTorch struct{ b *Backend }

// Name returns "pytorch".
func (p *PyTorch) Name() string { return PyTorchName }

// DefaultFilename returns "model.pt", Triton's default for PyTorch models.
func (p *PyTorch) DefaultFilename() string { return torchScriptFile }

// Signature always fails: a PyTorch model's inputs and outputs are those of
// its configuration (see ConfigSignature).
func (p *PyTorch) Signature(context.Context, string) (infer.Signature, error) {
	return infer.Signature{}, errNeedsConfig(PyTorchName)
}

// ConfigSignature checks that the version folder holds a PyTorch model in
// one of the supported formats and returns the inputs and outputs cfg
// declares.
func (p *PyTorch) ConfigSignature(_ context.Context, versionDir string, cfg *inferencepb.ModelConfig) (infer.Signature, error) {
	sig, err := configSignature(PyTorchName, cfg)
	if err != nil {
		return sig, err
	}
	if _, err := pytorchTarget(versionDir, cfg.GetDefaultModelFilename()); err != nil {
		return infer.Signature{}, err
	}
	return sig, nil
}

// Load starts one worker running the built-in model for the version
// folder's format.
func (p *PyTorch) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	name := ""
	if opts.Config != nil {
		name = opts.Config.GetDefaultModelFilename()
	}
	t, err := pytorchTarget(filepath.Dir(opts.Path), name)
	if err != nil {
		return nil, err
	}
	t.libDirs = p.b.opts.TorchLibraryDirs
	return p.b.load(ctx, opts, t)
}

// target is what a worker loads: a model.py file, or a built-in module.
type target struct {
	file    string
	builtin string
	// libDirs go first on the worker's LD_LIBRARY_PATH.
	libDirs []string
}

// pytorchTarget picks the built-in model for a version folder: TorchScript
// when it holds the configured .pt file (or model.pt), else state_dict
// when it holds model.pth and model_config.json.
func pytorchTarget(versionDir, configured string) (target, error) {
	script := torchScriptFile
	if strings.HasSuffix(configured, ".pt") {
		script = configured
	}
	if fileExists(filepath.Join(versionDir, script)) {
		return target{builtin: builtinTorchScript}, nil
	}
	if fileExists(filepath.Join(versionDir, stateDictFile)) && fileExists(filepath.Join(versionDir, stateDictMeta)) {
		return target{builtin: builtinStateDict}, nil
	}
	if fileExists(filepath.Join(versionDir, stateDictFile)) {
		return target{}, fmt.Errorf("%w: %s holds %s but no %s naming its model class", fs.ErrNotExist,
			versionDir, stateDictFile, stateDictMeta)
	}
	return target{}, fmt.Errorf("%w: %s holds no PyTorch model: want %s (TorchScript) or %s with %s and %s (state_dict)",
		fs.ErrNotExist, versionDir, script, stateDictFile, stateDictMeta, stateDictClass)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func needFile(path string) error {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: model file %s is missing", fs.ErrNotExist, path)
		}
		return err
	}
	return nil
}

func errNeedsConfig(backendName string) error {
	if backendName == Name {
		return errors.New("python models need input and output: in config.pbtxt, or added by model.py's TritonPythonModel.auto_complete_config (none added them)")
	}
	return fmt.Errorf("%s models need input and output in config.pbtxt (their files do not declare them)", backendName)
}

// configSignature returns the inputs and outputs cfg declares, in the
// shapes the model sees (reshape applied, batch dimension first when the
// model batches), and refuses what the workers cannot run.
func configSignature(backendName string, cfg *inferencepb.ModelConfig) (infer.Signature, error) {
	if cfg == nil || len(cfg.GetInput()) == 0 || len(cfg.GetOutput()) == 0 {
		return infer.Signature{}, errNeedsConfig(backendName)
	}
	if cfg.GetModelTransactionPolicy().GetDecoupled() && backendName != Name {
		return infer.Signature{}, fmt.Errorf("%s models: decoupled mode (model_transaction_policy { decoupled: true }) is not supported", backendName)
	}
	var errs []error
	spec := func(kind, name string, dt inferencepb.DataType, dims []int64, reshape *inferencepb.ModelTensorReshape) infer.TensorSpec {
		t := modelconfig.ToInfer(dt)
		if t == infer.BF16 {
			errs = append(errs, fmt.Errorf("%s '%s': TYPE_BF16 is not supported by %s models (numpy has no bfloat16)", kind, name, backendName))
		}
		shape := dims
		if reshape != nil {
			shape = reshape.GetShape()
		}
		s := infer.Shape{}
		if cfg.GetMaxBatchSize() > 0 {
			s = append(s, -1)
		}
		return infer.TensorSpec{Name: name, DataType: t, Shape: append(s, shape...)}
	}
	var sig infer.Signature
	for _, in := range cfg.GetInput() {
		sig.Inputs = append(sig.Inputs, spec("input", in.GetName(), in.GetDataType(), in.GetDims(), in.GetReshape()))
	}
	for _, out := range cfg.GetOutput() {
		sig.Outputs = append(sig.Outputs, spec("output", out.GetName(), out.GetDataType(), out.GetDims(), out.GetReshape()))
	}
	// The sequence batcher's control inputs and implicit states are the
	// server's to feed and read: a Python model is given them (and
	// returns a state's output) without listing them, as Triton's Python
	// models are (qa/python_models/sequence_int32 reads START and READY,
	// which its configuration names only as control inputs).
	listed := func(specs []infer.TensorSpec, name string) bool {
		return name == "" || slices.ContainsFunc(specs, func(s infer.TensorSpec) bool { return s.Name == name })
	}
	sb := cfg.GetSequenceBatching()
	for _, ci := range sb.GetControlInput() {
		if listed(sig.Inputs, ci.GetName()) || len(ci.GetControl()) == 0 {
			continue
		}
		dt := modelconfig.SequenceControlType(ci.GetControl()[0])
		if dt == inferencepb.DataType_TYPE_INVALID {
			continue // the configuration's validation names the problem
		}
		sig.Inputs = append(sig.Inputs, spec("control input", ci.GetName(), dt, []int64{1}, nil))
	}
	for _, st := range sb.GetState() {
		if !listed(sig.Inputs, st.GetInputName()) {
			sig.Inputs = append(sig.Inputs, spec("state input", st.GetInputName(), st.GetDataType(), st.GetDims(), nil))
		}
		if !listed(sig.Outputs, st.GetOutputName()) {
			sig.Outputs = append(sig.Outputs, spec("state output", st.GetOutputName(), st.GetDataType(), st.GetDims(), nil))
		}
	}
	return sig, errors.Join(errs...)
}

// workerDir returns the folder holding the worker files, writing them the
// first time.
func (b *Backend) workerDir() (string, error) {
	b.filesOnce.Do(func() {
		b.filesDir, b.filesErr = extractWorker()
	})
	return b.filesDir, b.filesErr
}

// initArgs is the opInit payload.
type initArgs struct {
	Args      map[string]string `json:"args"`
	ModelFile string            `json:"model_file,omitempty"`
	Builtin   string            `json:"builtin,omitempty"`
}

// resultSlack is what a result frame holds beside the tensor data of its
// outputs: names, shapes, datatypes, parameters, per response.
const resultSlack = 1 << 20

// resultLimit is the largest result frame a worker may send for one call:
// the model's maximum output per request times the requests one call may
// carry, plus slack for the metadata, within maxMessage. 0 (no maximum
// output) is maxMessage.
func resultLimit(maxOutput int64, maxBatch int32, maxMessage int) int {
	if maxOutput <= 0 {
		return maxMessage
	}
	n := maxOutput*int64(max(maxBatch, 1)) + resultSlack
	return int(min(n, int64(maxMessage)))
}

// load starts one instance's worker.
func (b *Backend) load(ctx context.Context, opts backend.LoadOptions, t target) (*Instance, error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("python backend needs the model configuration to load a model")
	}
	if _, err := configSignature(Name, cfg); err != nil {
		return nil, err
	}
	if _, err := os.Stat(b.opts.Interpreter); err != nil {
		return nil, fmt.Errorf("python interpreter %s: %w (install python3, python3-numpy and, for PyTorch models, python3-torch; scripts/setup.sh does as root; or set --backend-config python,interpreter=PATH)", b.opts.Interpreter, err)
	}
	dir, err := b.workerDir()
	if err != nil {
		return nil, err
	}
	cfgJSON, err := modelconfig.MarshalJSON(cfg)
	if err != nil {
		return nil, err
	}

	key := groupKey{model: opts.Model, version: opts.Version, load: opts.LoadID}
	g := b.group(key)
	index := g.reserve()
	vstr := strconv.FormatInt(opts.Version, 10)
	vdir := filepath.Dir(opts.Path)
	name := instanceName(opts.Model, cfg, index)
	init, err := json.Marshal(initArgs{
		Args: map[string]string{
			"model_config":             string(cfgJSON),
			"model_instance_kind":      "CPU",
			"model_instance_name":      name,
			"model_instance_device_id": "0",
			"model_repository":         filepath.Dir(vdir),
			"model_version":            vstr,
			"model_name":               opts.Model,
		},
		ModelFile: t.file,
		Builtin:   t.builtin,
	})
	if err != nil {
		b.ungroup(key, nil)
		return nil, err
	}
	logger := b.logger.With("model", opts.Model, "version", vstr, "instance", name)
	spec := &workerSpec{
		interpreter: b.opts.Interpreter,
		dir:         dir,
		args:        []string{"--model", opts.Model, "--version", vstr, "--instance", name},
		env:         workerEnv(os.Environ(), opts.InstanceCount, runtime.NumCPU(), t.libDirs),
		init:        init,
		maxMessage:  b.opts.MaxMessageBytes,
		maxResult:   resultLimit(opts.MaxOutputBytes, cfg.GetMaxBatchSize(), b.opts.MaxMessageBytes),
		logger:      logger,
		bls:         func(w *worker, f frame) { b.serveBLS(opts.Model, w, f) },
		metric:      func(p []byte) { b.custom.apply(opts.Model, vstr, p, logger) },
	}
	startCtx, cancel := context.WithTimeout(ctx, b.opts.StartTimeout)
	w, err := startWorker(startCtx, spec)
	cancel()
	if err != nil {
		b.ungroup(key, nil)
		return nil, fmt.Errorf("model '%s' version %d instance %s: %w", opts.Model, opts.Version, name, err)
	}
	in := newInstance(b, spec, key, g, name, cfg, w)
	g.add(in)
	logger.Info("python worker started", "pid", w.pid)
	return in, nil
}

// instanceName is Triton's name for the index-th instance:
// <group name>_<index in group>, where an unnamed group is
// <model>_<group index>.
func instanceName(model string, cfg *inferencepb.ModelConfig, index int) string {
	for gi, ig := range cfg.GetInstanceGroup() {
		n := max(int(ig.GetCount()), 1)
		if index < n {
			name := ig.GetName()
			if name == "" {
				name = model + "_" + strconv.Itoa(gi)
			}
			return name + "_" + strconv.Itoa(index)
		}
		index -= n
	}
	return model + "_0_" + strconv.Itoa(index)
}

// workerEnv is the worker's environment: the server's, plus what the
// worker needs. Unless the environment sets OMP_NUM_THREADS, each worker
// gets an equal share of the cores for its intra-op thread pool (torch
// and numpy's BLAS otherwise start one thread per core in every worker,
// and instances fight over the cores). libDirs go first on
// LD_LIBRARY_PATH, ahead of the server's own.
func workerEnv(base []string, instances, cpus int, libDirs []string) []string {
	env := make([]string, 0, len(base)+5)
	omp := false
	ldPath := ""
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "SLUICE_WORKER_FD", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED":
			continue
		case "OMP_NUM_THREADS":
			omp = true
		case "LD_LIBRARY_PATH":
			if len(libDirs) > 0 {
				ldPath = v
				continue
			}
		}
		env = append(env, kv)
	}
	env = append(env, "SLUICE_WORKER_FD=3", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	if !omp {
		env = append(env, "OMP_NUM_THREADS="+strconv.Itoa(max(1, cpus/max(instances, 1))))
	}
	if len(libDirs) > 0 {
		dirs := strings.Join(libDirs, ":")
		if ldPath != "" {
			dirs += ":" + ldPath
		}
		env = append(env, "LD_LIBRARY_PATH="+dirs)
	}
	return env
}

// groupKey identifies the instances of one load of a version.
type groupKey struct {
	model   string
	version int64
	load    uint64
}

// group is the instances of one load of a version: a request for an
// instance whose worker is down runs on a sibling's.
type group struct {
	mu       sync.Mutex // protects members, reserved, next
	members  []*Instance
	reserved int // instances loading or loaded
	next     int // round-robin start for picking a sibling
}

func (b *Backend) group(k groupKey) *group {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k.load == 0 {
		return &group{} // no load identity: no siblings
	}
	g := b.groups[k]
	if g == nil {
		g = &group{}
		b.groups[k] = g
	}
	return g
}

// ungroup takes an instance (nil: a failed load's reservation) out of its
// group and forgets the group once it is empty.
func (b *Backend) ungroup(k groupKey, in *Instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[k]
	if g == nil {
		return
	}
	g.mu.Lock()
	g.reserved--
	for i, m := range g.members {
		if m == in {
			g.members = append(g.members[:i], g.members[i+1:]...)
			break
		}
	}
	empty := g.reserved <= 0
	g.mu.Unlock()
	if empty {
		delete(b.groups, k)
	}
}

// reserve returns the index of the next instance of the group.
func (g *group) reserve() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reserved++
	return g.reserved - 1
}

func (g *group) add(in *Instance) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members = append(g.members, in)
}

// live returns the worker of a sibling of in that is up, taking turns.
func (g *group) live(in *Instance) *worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.members)
	for i := range n {
		m := g.members[(g.next+i)%n]
		if m == in {
			continue
		}
		if w := m.current(); w != nil && !w.failed() {
			g.next = (g.next + i + 1) % n
			return w
		}
	}
	return nil
}
