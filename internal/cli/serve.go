package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/backend/libtorch"
	"github.com/sluice-ml/sluice/internal/backend/onnxruntime"
	"github.com/sluice-ml/sluice/internal/backend/python"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/httpapi"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/shm"
	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

// serveFlags are the model server's settings, bound to its flags (names
// follow tritonserver's). What sluice.yaml holds is the config package's
// structs: model (model_server) and tracing (tracing); serve -c takes
// those from the file and ignores their flags, but for --strict-readiness
// and --backend-config, which win over it. What is left here is the
// command line's own: the config file, the ports file, --materialize,
// the logger and Triton's compatibility flags with what they translate
// into.
type serveFlags struct {
	// model is model_server's settings: config.NewModelServer's defaults,
	// then the flags.
	model config.ModelServer
	// tracing is the tracing section's settings.
	tracing config.Tracing
	// log is the logger's format and level; its LevelVar holds the model
	// server's level, so that Triton's logging extension can change it
	// (nil under serve -c).
	log telemetry.LogOptions
	// portsFile is --ports-file.
	portsFile string
	// backendConfig is --backend-config, <backend>,<setting>=<value>: it
	// wins over model_server.backend_config setting by setting, so that
	// one library path can be given on the command line of a chain.
	backendConfig []string

	configFile  string // -c: sluice.yaml
	materialize bool
	sec         securityFlags
	// modelStore is --model-store, Triton's old --model-repository.
	modelStore []string
	// tritonCompat are tritonserver flags accepted so that Triton start
	// commands run unchanged (--allow-metrics, --log-verbose, ...); apply
	// translates them into the settings below and the ones above.
	tritonCompat tritonCompatFlags
	// sampling is the root trace sampling, so that Triton's trace
	// extension can change it; nil under serve -c.
	sampling    *telemetry.Sampling
	traceConfig *tritonsettings.TraceConfig // Triton's --trace-config; nil: none given
	// httpMaxBody is Triton's --http-max-input-size: the KServe HTTP
	// port's body limit, over the limits' (0: the limits' own).
	httpMaxBody int64
	// stayUpOnInitError is --exit-on-error=false given explicitly: a
	// model server that cannot start its repository stays up, not live
	// and not ready, as Triton's does.
	stayUpOnInitError bool
	// noMetrics is --allow-metrics=false: no metrics listener.
	noMetrics bool
}

func newServeCmd(use, short string) *cobra.Command {
	cmd, _ := serveCommand(use, short)
	return cmd
}

// serveCommand is newServeCmd with the settings its flags write.
func serveCommand(use, short string) (*cobra.Command, *serveFlags) {
	f := &serveFlags{model: config.NewModelServer()}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), cmd, f)
		},
	}
	fl := cmd.Flags()
	f.registerModelFlags(fl)
	f.registerRuntimeFlags(fl)
	fl.StringArrayVar(&f.modelStore, "model-store", nil, "Triton's old name for --model-repository")
	_ = fl.MarkDeprecated("model-store", "use --model-repository")
	fl.StringArrayVar(&f.backendConfig, "backend-config", nil, "backend setting as <backend>,<setting>=<value>, e.g. onnxruntime,library=/path/libonnxruntime.so.1")
	f.sec.register(fl)
	registerPortsFile(fl, &f.portsFile)
	if use == "serve" { // model-server is the model server alone: no sluice.yaml
		fl.StringVarP(&f.configFile, "config", "c", "", "sluice.yaml: run the whole chain it describes (model server, feature server, gateway); the file's model_server, tracing, security and tls settings then replace the flags (each model server flag has its key in model_server, whose value or default applies; --backend-config and --strict-readiness win over the file), Triton's compatibility flags are ignored, and --log-format, --log-level and --ports-file apply")
		fl.BoolVar(&f.materialize, "materialize", true, "with -c: apply the feature repository and materialize it incrementally into the online store at start")
	}
	fl.StringVar(&f.tracing.OTLPEndpoint, "trace-otlp-endpoint", "", "OTLP/gRPC collector (host:port) to export OpenTelemetry spans to; empty: the OTEL_* environment decides (OTEL_TRACES_EXPORTER=otlp|console|none, OTEL_EXPORTER_OTLP_ENDPOINT), else tracing off")
	fl.Float64Var(&f.tracing.SampleRatio, "trace-sample-ratio", 0, "share of traces started here that are sampled (by trace id); a sampled parent is always followed; 0: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG when set, else 0.01")
	registerLogFlags(fl, &f.log)
	f.tritonCompat.register(fl)
	return cmd, f
}

// registerModelFlags binds the flags of model_server's settings to
// f.model, whose values are their defaults.
func (f *serveFlags) registerModelFlags(fl *pflag.FlagSet) {
	m := &f.model
	fl.StringArrayVar(&m.ModelRepository, "model-repository", nil, "model repository folder (Triton layout) or object-storage location (s3://bucket/path, s3://https://host:port/bucket/path, gs://bucket/path, as://account/container/path); may repeat")
	fl.StringVar(&m.RepositoryCacheDir, "repository-cache-dir", "", "folder for the local copies of object-storage model repositories (default: the user cache folder's sluice/model-repositories)")
	fl.Int64Var(&m.RepositoryCacheBytes, "repository-cache-bytes", m.RepositoryCacheBytes, "largest object-storage model repository the local copy holds, in bytes")
	fl.StringVar(&m.ControlMode, "model-control-mode", m.ControlMode, "model control mode: none, poll or explicit")
	fl.StringArrayVar(&m.LoadModel, "load-model", nil, "model to load at start-up in explicit mode; '*' loads all; may repeat")
	secondsVar(fl, (*time.Duration)(&m.RepositoryPollInterval), "repository-poll-secs", "seconds between repository polls in poll mode")
	fl.BoolVar(&m.StrictModelConfig, "strict-model-config", false, "require a complete config.pbtxt; no auto-complete from the model")
	fl.BoolVar(&m.StrictModelConfig, "disable-auto-complete-config", false, "Triton's newer name for --strict-model-config")
	fl.BoolVar(m.StrictReadiness, "strict-readiness", *m.StrictReadiness, "server readiness (/v2/health/ready) requires every model to be ready, as Triton's default; with -c the default is false (model_server.strict_readiness), so one broken model does not take the whole process out of rotation")
	fl.StringVar(&m.Address, "address", m.Address, "address the HTTP, gRPC and metrics listeners bind to (Triton's default: every interface; with -c the config's model_server.address, default 127.0.0.1, applies)")
	fl.StringArrayVar(&m.HTTPRestrictedAPI, "http-restricted-api", nil, "restrict KServe API groups on HTTP as Triton does: <API>[,<API>...]:<key>=<value> (e.g. model-repository:admin-key=secret); may repeat")
	fl.StringArrayVar(&m.GRPCRestrictedProtocol, "grpc-restricted-protocol", nil, "restrict KServe API groups on gRPC as Triton does: <API>[,<API>...]:<key>=<value>; may repeat")
	fl.BoolVar(&m.AllowClientSHM, "allow-client-shm", false, "let clients register system shared-memory regions (/dev/shm objects the server then reads inputs from and writes outputs to), as Triton's flag; off by default, as in Triton: register and unregister are refused, status lists nothing")
	fl.IntVar(&m.HTTPPort, "http-port", m.HTTPPort, "KServe v2 HTTP port")
	fl.IntVar(&m.GRPCPort, "grpc-port", m.GRPCPort, "KServe v2 gRPC port")
	fl.IntVar(&m.MetricsPort, "metrics-port", m.MetricsPort, "Prometheus /metrics port")
	fl.Int64Var(&m.Limits.MaxBodyBytes, "max-request-bytes", m.Limits.MaxBodyBytes, "largest HTTP body or gRPC message accepted")
}

// registerRuntimeFlags binds the flags of what the model server does at
// start, at shutdown and in its answers to f.model (sluice.yaml's
// model_server has a key for each).
func (f *serveFlags) registerRuntimeFlags(fl *pflag.FlagSet) {
	m := &f.model
	fl.BoolVar(&m.ExitOnError, "exit-on-error", false, "exit at start-up if any model fails to load (Triton's default is true; Sluice keeps serving the others); given as false, a model repository that cannot be read at start leaves the server up, not live and not ready, as Triton does, instead of exiting")
	fl.Var(commitsValue{&m.ModelGitCommit}, "model-git-commit", "expected git commit of a model as <model>=<sha>; a mismatch refuses the load; may repeat")
	secondsVar(fl, (*time.Duration)(&m.ExitTimeout), "exit-timeout-secs", "seconds to wait for in-flight requests at shutdown")
	fl.Int64Var(&m.CacheSize, "cache-size", 0, "bytes of the response cache shared by models with response_cache { enable: true }; 0 disables it")
	fl.BoolVar(m.TritonMetrics, "triton-metrics", *m.TritonMetrics, "also export the inference metrics under Triton's names (nv_inference_*), for Triton dashboards and alerts")
	fl.StringVar(&m.ServerName, "server-name", m.ServerName, "name in the server metadata (GET /v2, ServerMetadata); \"triton\" for clients that check it")
	fl.StringVar(&m.ServerVersion, "server-version", "", "version in the server metadata; default: this build's version")
	fl.StringVar(&m.HTTPHeaderForwardPattern, "http-header-forward-pattern", "", "regular expression: HTTP inference request headers whose lower-case names match reach the model as string request parameters (as Triton's flag)")
	fl.IntVar(&m.CompressMinBytes, "compress-min-bytes", m.CompressMinBytes, "smallest inference response compressed for a client that accepts gzip or deflate (HTTP Accept-Encoding, a compressed gRPC request); smaller ones go out uncompressed; -1: never compress")
	fl.Int64Var(&m.MaxOutputBytes, "max-output-bytes", m.MaxOutputBytes, "most output bytes one request may get from a model whose config.pbtxt sets no max_output_bytes parameter; larger outputs are refused with 413 response_too_large")
	fl.StringVar(&m.GRPCHeaderForwardPattern, "grpc-header-forward-pattern", "", "regular expression: gRPC request metadata whose keys match reach the model as string request parameters (as Triton's flag)")
}

// commitsValue is --model-git-commit <model>=<sha>, repeatable, bound to
// model_server.model_git_commit's map.
type commitsValue struct{ m *map[string]string }

func (v commitsValue) String() string {
	if len(*v.m) == 0 {
		return ""
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(*v.m)) {
		out = append(out, name+"="+(*v.m)[name])
	}
	return "[" + strings.Join(out, ",") + "]"
}

func (v commitsValue) Set(s string) error {
	name, sha, ok := strings.Cut(s, "=")
	if !ok || name == "" || sha == "" {
		return errors.New("want <model>=<sha>")
	}
	if *v.m == nil {
		*v.m = map[string]string{}
	}
	(*v.m)[name] = sha
	return nil
}

func (commitsValue) Type() string { return "stringArray" }

// delaySchedulerEnv is Triton's test hook that holds each dynamic
// batcher until that many requests are queued, so that a test can queue
// several before any is scheduled (qa/L0_batcher test.sh sets it).
const delaySchedulerEnv = "TRITONSERVER_DELAY_SCHEDULER"

// delaySchedulerHook reads delaySchedulerEnv: the number of queued
// requests each batcher waits for before it starts; 0 when unset.
func delaySchedulerHook(lookup func(string) (string, bool), logger *slog.Logger) (int, error) {
	return testHook(lookup, logger, delaySchedulerEnv, "requests", "every batcher holds its requests until enough are queued")
}

// cacheSizeFlags reconciles --cache-size with Triton's two spellings,
// --response-cache-byte-size N (older) and --cache-config
// <cache>,<key>=<value> (repeatable; local,size=N sets the size). As in
// Triton, two cache kinds are refused ("multiple cache configurations"),
// and so is giving more than one spelling ("incompatible flags", Triton's
// words for --response-cache-byte-size with --cache-config). Sluice has
// the local cache only.
func cacheSizeFlags(size, byteSize int64, configs []string) (int64, error) {
	if byteSize != 0 {
		if size != 0 || len(configs) > 0 {
			return 0, errors.New("incompatible flags: --response-cache-byte-size with --cache-size or --cache-config; use one")
		}
		if byteSize < 0 {
			return 0, errors.New("--response-cache-byte-size must be a number of bytes, 0 or more")
		}
		return byteSize, nil
	}
	if len(configs) == 0 {
		return size, nil
	}
	if size != 0 {
		return 0, errors.New("incompatible flags: --cache-size and --cache-config both set the response cache; use one")
	}
	kind := ""
	set := false
	for _, c := range configs {
		name, kv, ok := strings.Cut(c, ",")
		key, val, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || name == "" || key == "" {
			return 0, fmt.Errorf("--cache-config %q: want <cache>,<setting>=<value>, e.g. local,size=1048576", c)
		}
		if kind != "" && name != kind {
			return 0, fmt.Errorf("--cache-config: multiple cache configurations (%s, %s); only one cache may be configured", kind, name)
		}
		kind = name
		if name != "local" {
			return 0, fmt.Errorf("--cache-config %q: the %s cache is not supported; Sluice has the local cache (local,size=<bytes>)", c, name)
		}
		if key != "size" {
			return 0, fmt.Errorf("--cache-config %q: the local cache has one setting, size", c)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("--cache-config %q: size must be a number of bytes, 0 or more", c)
		}
		size, set = n, true
	}
	if !set {
		return 0, errors.New("--cache-config local: size=<bytes> is required")
	}
	return size, nil
}

// delayGRPCResponseEnv is Triton's test hook that delays every gRPC
// response but inference by that many seconds, so that a test can see
// client deadlines expire (qa/L0_client_timeout test.sh sets it).
const delayGRPCResponseEnv = "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC"

// delayGRPCResponseHook reads delayGRPCResponseEnv; 0 when unset.
func delayGRPCResponseHook(lookup func(string) (string, bool), logger *slog.Logger) (time.Duration, error) {
	n, err := testHook(lookup, logger, delayGRPCResponseEnv, "seconds", "every gRPC call but inference waits before it is answered")
	return time.Duration(n) * time.Second, err
}

// backendSettings parses --backend-config values into backend → key → value.
func backendSettings(values []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, v := range values {
		name, kv, ok := strings.Cut(v, ",")
		key, val, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || name == "" || key == "" {
			return nil, fmt.Errorf("--backend-config %q: want <backend>,<setting>=<value>", v)
		}
		if out[name] == nil {
			out[name] = map[string]string{}
		}
		out[name][key] = val
	}
	return out, nil
}

// newBackends builds the backend registry. A missing ONNX Runtime library is
// a start-up error that names the install script. The Python backend
// (python, and pytorch / pytorch_libtorch on the same workers) starts
// nothing until a model needs it; mreg takes its metrics (nil: none). The
// pytorch backend runs TorchScript models in-process with libtorch when
// its shim library opens, and says so (or why not) in the log.
func newBackends(settings map[string]map[string]string, logger *slog.Logger, mreg prometheus.Registerer) (*backend.Registry, func() error, error) {
	reg := &backend.Registry{}
	lib, err := onnxruntime.FindLibrary(settings["onnxruntime"]["library"])
	if err != nil {
		return nil, nil, err
	}
	pyOpts, err := python.ParseSettings(settings[python.Name])
	if err != nil {
		return nil, nil, err
	}
	ort, err := onnxruntime.New(onnxruntime.Options{LibraryPath: lib}, logger)
	if err != nil {
		return nil, nil, err
	}
	reg.Register(ort, onnxruntime.Platform)
	// PyTorch models on the worker compute with the BLAS the in-process
	// engine bundles, so that the engine chosen does not change answers.
	if torchLib, err := libtorch.FindLibrary(settings[python.PyTorchName]["library"]); err == nil {
		if dir := libtorch.BundledBLAS(torchLib); dir != "" {
			pyOpts.TorchLibraryDirs = []string{dir}
		}
	}
	py := python.New(pyOpts, logger, mreg)
	reg.Register(py)
	// TorchScript models run in-process through libtorch when
	// scripts/build-torch-shim.sh has built its library; otherwise, and for
	// the models it does not run, on the Python worker.
	torch := libtorch.New(libtorch.Options{LibraryPath: settings[python.PyTorchName]["library"]}, py.PyTorch(), logger)
	reg.Register(torch, python.PyTorchPlatform)
	return reg, func() error { return errors.Join(ort.Close(), py.Close()) }, nil
}

// drainingModels makes readiness fail as soon as shutdown begins, so load
// balancers stop sending before the listeners close.
type drainingModels struct {
	*modelrepo.Manager
	draining atomic.Bool
	// failed is set when the repository could not start and
	// --exit-on-error=false keeps the server up: neither live nor ready.
	failed atomic.Bool
}

func (d *drainingModels) Ready() bool {
	return !d.draining.Load() && !d.failed.Load() && d.Manager.Ready()
}

func (d *drainingModels) Live() bool { return !d.failed.Load() && d.Manager.Live() }

func runServe(ctx context.Context, cmd *cobra.Command, f *serveFlags) error {
	hup := notifyHangup()
	defer signal.Stop(hup)
	if f.configFile != "" {
		return runChain(ctx, cmd, f, hup)
	}
	f.stayUpOnInitError = cmd.Flags().Changed("exit-on-error") && !f.model.ExitOnError
	if err := f.tritonCompat.apply(cmd.Flags(), f); err != nil {
		return err
	}
	f.model.ModelRepository = append(f.model.ModelRepository, f.modelStore...)
	start := time.Now()
	f.log.LevelVar = new(slog.LevelVar)
	if f.tracing.SampleRatio > 0 || os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		f.sampling = telemetry.NewSampling(f.tracing.SampleRatio) // else the environment's sampler rules
	}
	logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), f.log)
	if err != nil {
		return err
	}
	f.tritonCompat.explain(cmd.Flags(), logger)
	stopTracing, err := setupTracing(ctx, &f.tracing, f.sampling, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	reg := telemetry.NewRegistry()
	gd, tlsOpts, err := f.sec.guard(cmd.ErrOrStderr(), logger, reg)
	if err != nil {
		return err
	}
	defer gd.close()
	var undo cleanups
	defer undo.run()
	ms, err := startModelServer(ctx, &f.model, f, tlsOpts, gd, logger, reg, &undo)
	if err != nil {
		return err
	}
	logger.Info("sluice ready",
		"http", ms.httpLn.Addr().String(), "grpc", ms.grpcLn.Addr().String(), "metrics", ms.metricsAddr(),
		"startup_seconds", time.Since(start).Seconds(), "listeners", gd.Listeners())
	gd.writeListeners(cmd.OutOrStdout())
	removePorts, err := gd.writePortsFile(f.portsFile)
	if err != nil {
		return err
	}
	defer removePorts()
	sigs := notifyStop()
	defer signal.Stop(sigs)
	grp := newGroup(ctx)
	defer grp.hurryOn(sigs)()
	if ms.metrics != nil {
		grp.Go(func() error { return ms.metrics.Run(grp.ctx) })
	}
	gd.run(grp.ctx, grp.eg)
	ms.add(grp)
	grp.Go(func() error {
		return onHangup(grp.ctx, hup, logger, func() error {
			gd.reloadTLS()
			return ms.mgr.Poll(grp.ctx)
		})
	})
	return grp.run(ctx)
}

// modelServer is a started model server: models loaded, listeners open.
type modelServer struct {
	mgr         *modelrepo.Manager
	models      *drainingModels
	httpLn      net.Listener
	grpcLn      net.Listener
	metrics     *telemetry.MetricsServer // nil with --allow-metrics=false
	reg         *prometheus.Registry     // what metrics serves
	httpSrv     *http.Server
	grpcSvc     *grpcapi.Service
	grpcSrv     *grpc.Server
	shm         *shm.Registry
	closeBack   func() error
	logger      *slog.Logger
	exitTimeout time.Duration
}

func (ms *modelServer) closeBackends() {
	if err := ms.closeBack(); err != nil {
		ms.logger.Warn("close backends", "err", err)
	}
}

// startModelServer loads the models and opens the listeners: m's
// settings (sluice.yaml's model_server under serve -c, else f.model) and
// f's others. What it opens (backends, listeners) it pushes on undo,
// which the caller runs when the process ends, or now when the start
// fails; the caller serves it with add.
func startModelServer(ctx context.Context, m *config.ModelServer, f *serveFlags, tlsOpts *config.TLS, gd *guard, logger *slog.Logger, reg *prometheus.Registry, undo *cleanups) (*modelServer, error) {
	if len(m.ModelRepository) == 0 {
		return nil, errors.New("--model-repository is required")
	}
	mode := modelrepo.ControlMode(m.ControlMode)
	switch mode {
	case modelrepo.ControlNone, modelrepo.ControlPoll, modelrepo.ControlExplicit:
	default:
		return nil, fmt.Errorf("--model-control-mode %q: want none, poll or explicit", m.ControlMode)
	}
	settings, err := mergedBackendSettings(f.backendConfig, m.BackendConfig)
	if err != nil {
		return nil, err
	}
	hooks, err := readTestHooks(logger)
	if err != nil {
		return nil, err
	}
	backends, closeBackends, err := newBackends(settings, logger, reg)
	if err != nil {
		return nil, err
	}
	ms := &modelServer{closeBack: closeBackends, logger: logger, reg: reg, exitTimeout: m.ExitTimeout.Std()}
	undo.push(ms.closeBackends)
	mgr, err := modelrepo.New(modelrepo.Options{
		Repositories:     m.ModelRepository,
		ControlMode:      mode,
		StartupModels:    m.LoadModel,
		PollInterval:     m.RepositoryPollInterval.Std(),
		RemoteCacheDir:   m.RepositoryCacheDir,
		RemoteCacheBytes: m.RepositoryCacheBytes,
		StrictConfig:     m.StrictModelConfig,
		ExitOnError:      m.ExitOnError,
		ExpectedCommits:  m.ModelGitCommit,
		StrictReadiness:  m.StrictReadiness != nil && *m.StrictReadiness,
		CacheSizeBytes:   m.CacheSize,
		MaxOutputBytes:   m.MaxOutputBytes,

		DisableTritonMetrics: m.TritonMetrics != nil && !*m.TritonMetrics,
		HoldSchedulerUntil:   hooks.hold,
		HoldBacklogUntil:     hooks.backlogHold,
	}, backends, logger, reg)
	if err != nil {
		return nil, err
	}
	ms.mgr = mgr
	ms.models = &drainingModels{Manager: mgr}
	if err := ms.listen(ctx, m, f, tlsOpts, gd, hooks.grpcDelay, undo); err != nil {
		return nil, err
	}
	if err := mgr.Start(ctx); err != nil && f.stayUpOnInitError && !errors.Is(err, context.Canceled) {
		// Triton with --exit-on-error=false: the endpoints stay up so that
		// health checks and the server metadata tell what happened
		// (qa/L0_lifecycle test_parse_error_noexit).
		logger.Error("model server failed to initialize; serving neither live nor ready (--exit-on-error=false)", "err", err)
		ms.models.failed.Store(true)
	} else if err != nil {
		return nil, &exitError{code: 1, err: err}
	}
	return ms, nil
}

// mergedBackendSettings are --backend-config's settings (flags) over
// model_server.backend_config's (file).
func mergedBackendSettings(flags []string, file map[string]map[string]string) (map[string]map[string]string, error) {
	settings, err := backendSettings(flags)
	if err != nil {
		return nil, err
	}
	for name, kv := range file {
		if settings[name] == nil {
			settings[name] = map[string]string{}
		}
		for k, v := range kv {
			if _, set := settings[name][k]; !set {
				settings[name][k] = v
			}
		}
	}
	return settings, nil
}

// testHooks are Triton's test hooks read from the environment.
type testHooks struct {
	hold, backlogHold int
	grpcDelay         time.Duration
}

func readTestHooks(logger *slog.Logger) (testHooks, error) {
	var h testHooks
	var err error
	if h.hold, err = delaySchedulerHook(os.LookupEnv, logger); err != nil {
		return h, err
	}
	if h.grpcDelay, err = delayGRPCResponseHook(os.LookupEnv, logger); err != nil {
		return h, err
	}
	h.backlogHold, err = backlogDelaySchedulerHook(os.LookupEnv, logger)
	return h, err
}

// listen opens the model server's listeners and builds the servers on
// them; what it opens it pushes on undo.
func (ms *modelServer) listen(ctx context.Context, m *config.ModelServer, f *serveFlags, tlsOpts *config.TLS, gd *guard, grpcDelay time.Duration, undo *cleanups) error {
	logger, reg := ms.logger, ms.reg
	limits := m.Limits
	// Triton's behaviour stays: the repository API is open when nothing
	// restricts it and no operate token exists; beyond loopback that is
	// worth a warning (under serve -c the config refuses it instead). HTTP
	// and gRPC are restricted separately, so either can leave it open.
	var openProtocols []string
	if !restrictsRepository(m.HTTPRestrictedAPI) {
		openProtocols = append(openProtocols, "http")
	}
	if !restrictsRepository(m.GRPCRestrictedProtocol) {
		openProtocols = append(openProtocols, "grpc")
	}
	openWrites := !gd.hasTokens()
	if openWrites && len(openProtocols) > 0 && !config.IsLoopback(m.Address) {
		logger.Warn("the model repository API (load/unload) is open to the network without a credential",
			"address", m.Address, "protocols", openProtocols,
			"fix", "--security-config with an operate token, --http-restricted-api and --grpc-restricted-protocol model-repository:<key>=<value>, or --address 127.0.0.1")
	}
	httpPolicy, err := gd.policy(true, openWrites, m.HTTPRestrictedAPI)
	if err != nil {
		return fmt.Errorf("--http-restricted-api: %w", err)
	}
	grpcPolicy, err := gd.policy(true, openWrites, m.GRPCRestrictedProtocol)
	if err != nil {
		return fmt.Errorf("--grpc-restricted-protocol: %w", err)
	}
	tlsSrv, err := gd.tlsFor("models", tlsOpts)
	if err != nil {
		return err
	}
	auth := authMode(true, openWrites)
	if ms.httpLn, err = gd.listen(ctx, "models_http", net.JoinHostPort(m.Address, strconv.Itoa(m.HTTPPort)), tlsSrv, tlsOpts, auth); err != nil {
		return err
	}
	undo.push(func() { _ = ms.httpLn.Close() })
	// Forwarded header values keep their trailing whitespace, as Triton's.
	ms.httpLn = httpapi.RecordHeads(ms.httpLn)
	// gRPC does its own handshake through its credentials (grpcOptions).
	if ms.grpcLn, err = gd.listen(ctx, "models_grpc", net.JoinHostPort(m.Address, strconv.Itoa(m.GRPCPort)), nil, tlsOpts, auth); err != nil {
		return err
	}
	undo.push(func() { _ = ms.grpcLn.Close() })
	if !f.noMetrics {
		metricsAddr := net.JoinHostPort(m.Address, strconv.Itoa(m.MetricsPort))
		ms.metrics, err = telemetry.NewMetricsServer(ctx, metricsAddr, reg, logger)
		if err != nil {
			return listenError(tritonServices["metrics"], metricsAddr, err)
		}
		if tlsSrv != nil {
			ms.metrics.UseTLS(tlsSrv.Config())
		}
		gd.guardMetrics("models_metrics", limits, ms.metrics)
		gd.record("models_metrics", ms.metrics.Addr().String(), tlsOpts, "open (reads only)")
	}
	serverVersion := m.ServerVersion
	if serverVersion == "" {
		serverVersion = Version
	}
	// System shared-memory regions, shared by HTTP and gRPC; a request reads
	// at most what its body could carry. Off unless --allow-client-shm.
	ms.shm = shm.New(shm.Options{MaxRequestBytes: limits.MaxBodyBytes, Disabled: !m.AllowClientSHM})
	httpForward, err := forwardPattern("--http-header-forward-pattern", m.HTTPHeaderForwardPattern)
	if err != nil {
		return err
	}
	grpcForward, err := forwardPattern("--grpc-header-forward-pattern", m.GRPCHeaderForwardPattern)
	if err != nil {
		return err
	}
	var extSettings *tritonsettings.Settings // Triton's logging and trace extensions
	if f.log.LevelVar != nil {
		extSettings = tritonsettings.New(f.log.LevelVar, f.log.Format, f.sampling)
		if f.traceConfig != nil {
			if err := extSettings.ConfigureTrace(*f.traceConfig); err != nil {
				return err
			}
		}
	}
	httpLimits := limits
	if f.httpMaxBody > 0 {
		httpLimits.MaxBodyBytes = f.httpMaxBody
	}
	kh := httpapi.New(ms.models, httpapi.Options{MaxBodyBytes: httpLimits.MaxBodyBytes, ServerName: m.ServerName, ServerVersion: serverVersion, SharedMemory: ms.shm, Settings: extSettings, HeaderForward: httpForward, CompressMinBytes: m.CompressMinBytes, Budget: gd.budget}, logger, reg)
	ms.httpSrv = gd.kserveServer("models_http", httpLimits, httpPolicy.RequireKServe(gd.audit, "models_http", telemetry.TraceHTTP("models.http", kh)))
	ms.grpcSvc = grpcapi.New(ms.models, grpcapi.Options{ServerName: m.ServerName, ServerVersion: serverVersion, SharedMemory: ms.shm, Settings: extSettings, HeaderForward: grpcForward, CompressMinBytes: m.CompressMinBytes}, logger, reg)
	ms.grpcSrv = grpcapi.NewServer(ms.grpcSvc, grpcapi.ServerOptions{
		MaxRecvMsgSize: int(limits.MaxBodyBytes),
		DelayNonInfer:  grpcDelay,
		Extra:          gd.grpcOptions("models_grpc", limits, tlsSrv, grpcPolicy, authz.KServeMethodGroup),
	})
	// The server starts its stream workers when made: a start that fails
	// after this point must stop them (after a served run, Stop is a no-op).
	undo.push(ms.grpcSrv.Stop)
	return nil
}

// forwardPattern compiles a header forward pattern; "" is none. Matching
// is case-insensitive, as header names are.
func forwardPattern(flag, expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	re, err := regexp.Compile("(?i)" + expr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return re, nil
}

// restrictsRepository reports whether one of the Triton restricted-API
// rules covers the model-repository group.
func restrictsRepository(rules []string) bool {
	for _, r := range rules {
		if rs, err := authz.ParseRestriction(r); err == nil && slices.Contains(rs.Groups, authz.GroupModelRepository) {
			return true
		}
	}
	return false
}

// add adds the model server to grp: its repository loop and listeners
// serve until the group stops; then readiness fails, the listeners stop
// taking requests while in-flight ones finish, and the models unload.
// Whatever was added to grp after it (the gateway in front) has stopped
// by then.
func (ms *modelServer) add(grp *group) {
	grp.Go(func() error { return ms.mgr.Run(grp.ctx) })
	grp.add(func() error {
		if err := ms.httpSrv.Serve(ms.httpLn); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	}, nil)
	grp.add(func() error {
		if err := ms.grpcSrv.Serve(ms.grpcLn); err != nil {
			return fmt.Errorf("serve grpc: %w", err)
		}
		return nil
	}, ms.shutdown)
}

// shutdown stops the model server: readiness fails, the listeners stop
// taking requests while in-flight ones finish (for the exit timeout at
// most), then the models unload.
func (ms *modelServer) shutdown(hurry context.Context) error {
	ms.models.draining.Store(true)
	ms.grpcSvc.Shutdown() // health turns NOT_SERVING; Watch streams end
	ms.logger.Info("shutting down the model server", "exit_timeout_seconds", ms.exitTimeout.Seconds())
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(hurry), ms.exitTimeout)
	defer cancel()
	err := errors.Join(shutdownServers(shutCtx, ms.httpSrv, ms.grpcSrv), ms.mgr.Close(shutCtx), ms.shm.Close())
	return err
}

// shutdownServers stops an HTTP server and, when not nil, a gRPC server
// gracefully, together; when ctx ends first, the gRPC server's calls are
// cut.
func shutdownServers(ctx context.Context, httpSrv httpServing, grpcSrv *grpc.Server) error {
	stopped := make(chan struct{})
	go func() {
		if grpcSrv != nil {
			grpcSrv.GracefulStop()
		}
		close(stopped)
	}()
	err := httpSrv.Shutdown(ctx)
	select {
	case <-stopped:
	case <-ctx.Done():
		if grpcSrv != nil {
			grpcSrv.Stop()
		}
		<-stopped
	}
	return err
}

// setupTracing starts span export as t says, with sampling as the root
// sampler when not nil; the returned function flushes it.
func setupTracing(ctx context.Context, t *config.Tracing, sampling *telemetry.Sampling, logger *slog.Logger) (func(), error) {
	stop, err := telemetry.SetupTracing(ctx, telemetry.TracingOptions{
		Endpoint: t.OTLPEndpoint, SampleRatio: t.SampleRatio, ServiceName: t.ServiceName,
		Exporter: t.Exporter, File: t.File, Sampling: sampling,
	}, logger)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stop(sctx); err != nil {
			logger.Warn("flush traces", "err", err)
		}
	}, nil
}
