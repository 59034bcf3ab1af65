package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"google.golang.org/grpc"

	"github.com/sluice-ml/sluice/internal/admission"
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
	"github.com/sluice-ml/sluice/internal/zpool"
)

// serveFlags are the model server's flags. Names follow tritonserver's.
// The settings sluice.yaml's model_server holds are its config.ModelServer,
// bound to the flags of the same meaning, so that serve -c takes the
// file's section whole. Its BackendConfig comes from the file alone;
// --backend-config values win over it.
type serveFlags struct {
	config.ModelServer
	pollSecs        int
	exitOnError     bool
	strictReadiness bool
	backendConfig   []string
	gitCommits      []string
	maxBodyBytes    int64
	exitTimeoutSecs int
	logFormat       string
	logLevel        string
	cacheSize       int64
	cacheConfig     []string
	cacheByteSize   int64
	tritonMetrics   bool
	serverName      string
	serverVersion   string
	httpForward     string
	grpcForward     string
	compressMin     int
	maxOutputBytes  int64
	// levelVar holds the model server's log level and sampling its root
	// trace sampling, so that Triton's logging and trace extensions can
	// change them; nil under serve -c.
	levelVar      *slog.LevelVar
	sampling      *telemetry.Sampling
	configFile    string
	traceEndpoint string
	traceRatio    float64
	traceService  string
	traceExporter string                      // otlp, console, none; empty: OTEL_TRACES_EXPORTER
	traceFile     string                      // the console exporter's file; empty: stdout
	traceConfig   *tritonsettings.TraceConfig // Triton's --trace-config; nil: none given
	materialize   bool
	sec           securityFlags
	// limits come from sluice.yaml's model_server.limits; without -c,
	// from --max-request-bytes and the defaults.
	limits *config.Limits
	// httpMaxBody is Triton's --http-max-input-size: the KServe HTTP
	// port's body limit, over limits' (0: limits' own).
	httpMaxBody int64

	// stayUpOnInitError is --exit-on-error=false given explicitly: a
	// model server that cannot start its repository stays up, not live
	// and not ready, as Triton's does.
	stayUpOnInitError bool
	// modelStore is --model-store, Triton's old --model-repository.
	modelStore []string
	// tritonCompat are tritonserver flags accepted so that Triton start
	// commands run unchanged (--allow-metrics, --log-verbose, ...).
	tritonCompat tritonCompatFlags
	// noMetrics is --allow-metrics=false: no metrics listener.
	noMetrics bool
}

func newServeCmd(use, short string) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.ModelRepository, "model-repository", nil, "model repository folder (Triton layout) or object-storage location (s3://bucket/path, s3://https://host:port/bucket/path, gs://bucket/path, as://account/container/path); may repeat")
	fl.StringVar(&f.RepositoryCacheDir, "repository-cache-dir", "", "folder for the local copies of object-storage model repositories (default: the user cache folder's sluice/model-repositories)")
	fl.Int64Var(&f.RepositoryCacheBytes, "repository-cache-bytes", modelrepo.DefaultRemoteCacheBytes, "largest object-storage model repository the local copy holds, in bytes")
	fl.StringArrayVar(&f.modelStore, "model-store", nil, "Triton's old name for --model-repository")
	_ = fl.MarkDeprecated("model-store", "use --model-repository")
	fl.StringVar(&f.ControlMode, "model-control-mode", config.DefaultControlMode, "model control mode: none, poll or explicit")
	fl.StringArrayVar(&f.LoadModel, "load-model", nil, "model to load at start-up in explicit mode; '*' loads all; may repeat")
	fl.IntVar(&f.pollSecs, "repository-poll-secs", int(config.DefaultRepositoryPollInterval/time.Second), "seconds between repository polls in poll mode")
	fl.BoolVar(&f.StrictModelConfig, "strict-model-config", false, "require a complete config.pbtxt; no auto-complete from the model")
	fl.BoolVar(&f.StrictModelConfig, "disable-auto-complete-config", false, "Triton's newer name for --strict-model-config")
	fl.BoolVar(&f.exitOnError, "exit-on-error", false, "exit at start-up if any model fails to load (Triton's default is true; Sluice keeps serving the others); given as false, a model repository that cannot be read at start leaves the server up, not live and not ready, as Triton does, instead of exiting")
	fl.BoolVar(&f.strictReadiness, "strict-readiness", true, "server readiness (/v2/health/ready) requires every model to be ready, as Triton's default; with -c the default is false (model_server.strict_readiness), so one broken model does not take the whole process out of rotation")
	fl.StringArrayVar(&f.backendConfig, "backend-config", nil, "backend setting as <backend>,<setting>=<value>, e.g. onnxruntime,library=/path/libonnxruntime.so.1")
	fl.StringArrayVar(&f.gitCommits, "model-git-commit", nil, "expected git commit of a model as <model>=<sha>; a mismatch refuses the load; may repeat")
	fl.StringVar(&f.Address, "address", config.DefaultListenAddress, "address the HTTP, gRPC and metrics listeners bind to (Triton's default: every interface; with -c the config's model_server.address, default 127.0.0.1, applies)")
	fl.StringArrayVar(&f.HTTPRestrictedAPI, "http-restricted-api", nil, "restrict KServe API groups on HTTP as Triton does: <API>[,<API>...]:<key>=<value> (e.g. model-repository:admin-key=secret); may repeat")
	fl.StringArrayVar(&f.GRPCRestrictedProtocol, "grpc-restricted-protocol", nil, "restrict KServe API groups on gRPC as Triton does: <API>[,<API>...]:<key>=<value>; may repeat")
	fl.BoolVar(&f.AllowClientSHM, "allow-client-shm", false, "let clients register system shared-memory regions (/dev/shm objects the server then reads inputs from and writes outputs to), as Triton's flag; off by default, as in Triton: register and unregister are refused, status lists nothing")
	f.sec.register(fl)
	fl.IntVar(&f.HTTPPort, "http-port", config.DefaultModelHTTPPort, "KServe v2 HTTP port")
	fl.IntVar(&f.GRPCPort, "grpc-port", config.DefaultModelGRPCPort, "KServe v2 gRPC port")
	fl.IntVar(&f.MetricsPort, "metrics-port", config.DefaultModelMetricsPort, "Prometheus /metrics port")
	fl.Int64Var(&f.maxBodyBytes, "max-request-bytes", config.DefaultModelMaxBodyBytes, "largest HTTP body or gRPC message accepted")
	fl.IntVar(&f.exitTimeoutSecs, "exit-timeout-secs", int(config.DefaultExitTimeout/time.Second), "seconds to wait for in-flight requests at shutdown")
	fl.Int64Var(&f.cacheSize, "cache-size", 0, "bytes of the response cache shared by models with response_cache { enable: true }; 0 disables it")
	fl.StringArrayVar(&f.cacheConfig, "cache-config", nil, "Triton's spelling of --cache-size: local,size=<bytes> (the local cache is the one supported)")
	fl.Int64Var(&f.cacheByteSize, "response-cache-byte-size", 0, "Triton's older spelling of --cache-size")
	fl.BoolVar(&f.tritonMetrics, "triton-metrics", true, "also export the inference metrics under Triton's names (nv_inference_*), for Triton dashboards and alerts")
	fl.StringVar(&f.serverName, "server-name", "sluice", "name in the server metadata (GET /v2, ServerMetadata); \"triton\" for clients that check it")
	fl.StringVar(&f.serverVersion, "server-version", "", "version in the server metadata; default: this build's version")
	fl.StringVar(&f.httpForward, "http-header-forward-pattern", "", "regular expression: HTTP inference request headers whose lower-case names match reach the model as string request parameters (as Triton's flag)")
	fl.IntVar(&f.compressMin, "compress-min-bytes", zpool.DefaultMinBytes, "smallest inference response compressed for a client that accepts gzip or deflate (HTTP Accept-Encoding, a compressed gRPC request); smaller ones go out uncompressed; -1: never compress")
	fl.Int64Var(&f.maxOutputBytes, "max-output-bytes", modelrepo.DefaultMaxOutputBytes, "most output bytes one request may get from a model whose config.pbtxt sets no max_output_bytes parameter; larger outputs are refused with 413 response_too_large")
	fl.StringVar(&f.grpcForward, "grpc-header-forward-pattern", "", "regular expression: gRPC request metadata whose keys match reach the model as string request parameters (as Triton's flag)")
	if use == "serve" { // model-server is the model server alone: no sluice.yaml
		fl.StringVarP(&f.configFile, "config", "c", "", "sluice.yaml: run the whole chain it describes (model server, feature server, gateway); the model-server flags are then ignored except --backend-config, --strict-readiness, --log-format and --log-level")
		fl.BoolVar(&f.materialize, "materialize", true, "with -c: apply the feature repository and materialize it incrementally into the online store at start")
	}
	fl.StringVar(&f.traceEndpoint, "trace-otlp-endpoint", "", "OTLP/gRPC collector (host:port) to export OpenTelemetry spans to; empty: the OTEL_* environment decides (OTEL_TRACES_EXPORTER=otlp|console|none, OTEL_EXPORTER_OTLP_ENDPOINT), else tracing off")
	fl.Float64Var(&f.traceRatio, "trace-sample-ratio", 0, "share of traces started here that are sampled (by trace id); a sampled parent is always followed; 0: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG when set, else 0.01")
	fl.StringVar(&f.logFormat, "log-format", "json", "log format: json or text")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.tritonCompat.register(fl)
	return cmd
}

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

func parseCommits(values []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		name, sha, ok := strings.Cut(v, "=")
		if !ok || name == "" || sha == "" {
			return nil, fmt.Errorf("--model-git-commit %q: want <model>=<sha>", v)
		}
		out[name] = sha
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
	f.stayUpOnInitError = cmd.Flags().Changed("exit-on-error") && !f.exitOnError
	if err := f.tritonCompat.apply(cmd.Flags(), f); err != nil {
		return err
	}
	start := time.Now()
	f.levelVar = new(slog.LevelVar)
	if f.traceRatio > 0 || os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		f.sampling = telemetry.NewSampling(f.traceRatio) // else the environment's sampler rules
	}
	logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), telemetry.LogOptions{Format: f.logFormat, Level: f.logLevel, LevelVar: f.levelVar})
	if err != nil {
		return err
	}
	f.tritonCompat.explain(cmd.Flags(), logger)
	stopTracing, err := setupTracing(ctx, f, logger)
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
	ms, err := startModelServer(ctx, f, tlsOpts, gd, logger, reg, &undo)
	if err != nil {
		return err
	}
	logger.Info("sluice ready",
		"http", ms.httpLn.Addr().String(), "grpc", ms.grpcLn.Addr().String(), "metrics", ms.metricsAddr(),
		"startup_seconds", time.Since(start).Seconds(), "listeners", gd.Listeners())
	gd.writeListeners(cmd.OutOrStdout())
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

// startModelServer loads the models and opens the listeners. What it
// opens (backends, listeners) it pushes on undo, which the caller runs
// when the process ends, or now when the start fails; the caller serves
// it with add.
func startModelServer(ctx context.Context, f *serveFlags, tlsOpts *config.TLS, gd *guard, logger *slog.Logger, reg *prometheus.Registry, undo *cleanups) (*modelServer, error) {
	f.ModelRepository = append(f.ModelRepository, f.modelStore...)
	if len(f.ModelRepository) == 0 {
		return nil, errors.New("--model-repository is required")
	}
	mode := modelrepo.ControlMode(f.ControlMode)
	switch mode {
	case modelrepo.ControlNone, modelrepo.ControlPoll, modelrepo.ControlExplicit:
	default:
		return nil, fmt.Errorf("--model-control-mode %q: want none, poll or explicit", f.ControlMode)
	}
	settings, err := f.mergedBackendSettings()
	if err != nil {
		return nil, err
	}
	if f.cacheSize, err = cacheSizeFlags(f.cacheSize, f.cacheByteSize, f.cacheConfig); err != nil {
		return nil, err
	}
	commits, err := parseCommits(f.gitCommits)
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
	ms := &modelServer{closeBack: closeBackends, logger: logger, reg: reg, exitTimeout: time.Duration(f.exitTimeoutSecs) * time.Second}
	undo.push(ms.closeBackends)
	mgr, err := modelrepo.New(modelrepo.Options{
		Repositories:     f.ModelRepository,
		ControlMode:      mode,
		StartupModels:    f.LoadModel,
		PollInterval:     time.Duration(f.pollSecs) * time.Second,
		RemoteCacheDir:   f.RepositoryCacheDir,
		RemoteCacheBytes: f.RepositoryCacheBytes,
		StrictConfig:     f.StrictModelConfig,
		ExitOnError:      f.exitOnError,
		ExpectedCommits:  commits,
		StrictReadiness:  f.strictReadiness,
		CacheSizeBytes:   f.cacheSize,
		MaxOutputBytes:   f.maxOutputBytes,

		DisableTritonMetrics: !f.tritonMetrics,
		HoldSchedulerUntil:   hooks.hold,
		HoldBacklogUntil:     hooks.backlogHold,
	}, backends, logger, reg)
	if err != nil {
		return nil, err
	}
	ms.mgr = mgr
	ms.models = &drainingModels{Manager: mgr}
	if err := ms.listen(ctx, f, tlsOpts, gd, hooks.grpcDelay, undo); err != nil {
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

// mergedBackendSettings are --backend-config's settings over sluice.yaml's
// model_server.backend_config.
func (f *serveFlags) mergedBackendSettings() (map[string]map[string]string, error) {
	settings, err := backendSettings(f.backendConfig)
	if err != nil {
		return nil, err
	}
	for name, kv := range f.BackendConfig {
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
func (ms *modelServer) listen(ctx context.Context, f *serveFlags, tlsOpts *config.TLS, gd *guard, grpcDelay time.Duration, undo *cleanups) error {
	logger, reg := ms.logger, ms.reg

	limits := admission.DefaultLimits(f.maxBodyBytes)
	if f.limits != nil {
		limits = *f.limits
	}
	// Triton's behaviour stays: the repository API is open when nothing
	// restricts it and no operate token exists; beyond loopback that is
	// worth a warning (under serve -c the config refuses it instead). HTTP
	// and gRPC are restricted separately, so either can leave it open.
	var openProtocols []string
	if !restrictsRepository(f.HTTPRestrictedAPI) {
		openProtocols = append(openProtocols, "http")
	}
	if !restrictsRepository(f.GRPCRestrictedProtocol) {
		openProtocols = append(openProtocols, "grpc")
	}
	openWrites := !gd.hasTokens()
	if openWrites && len(openProtocols) > 0 && !config.IsLoopback(f.Address) {
		logger.Warn("the model repository API (load/unload) is open to the network without a credential",
			"address", f.Address, "protocols", openProtocols,
			"fix", "--security-config with an operate token, --http-restricted-api and --grpc-restricted-protocol model-repository:<key>=<value>, or --address 127.0.0.1")
	}
	httpPolicy, err := gd.policy(true, openWrites, f.HTTPRestrictedAPI)
	if err != nil {
		return fmt.Errorf("--http-restricted-api: %w", err)
	}
	grpcPolicy, err := gd.policy(true, openWrites, f.GRPCRestrictedProtocol)
	if err != nil {
		return fmt.Errorf("--grpc-restricted-protocol: %w", err)
	}
	tlsSrv, err := gd.tlsFor("models", tlsOpts)
	if err != nil {
		return err
	}
	auth := authMode(true, openWrites)
	if ms.httpLn, err = gd.listen(ctx, "models_http", net.JoinHostPort(f.Address, strconv.Itoa(f.HTTPPort)), tlsSrv, tlsOpts, auth); err != nil {
		return err
	}
	undo.push(func() { _ = ms.httpLn.Close() })
	// Forwarded header values keep their trailing whitespace, as Triton's.
	ms.httpLn = httpapi.RecordHeads(ms.httpLn)
	// gRPC does its own handshake through its credentials (grpcOptions).
	if ms.grpcLn, err = gd.listen(ctx, "models_grpc", net.JoinHostPort(f.Address, strconv.Itoa(f.GRPCPort)), nil, tlsOpts, auth); err != nil {
		return err
	}
	undo.push(func() { _ = ms.grpcLn.Close() })
	if !f.noMetrics {
		metricsAddr := net.JoinHostPort(f.Address, strconv.Itoa(f.MetricsPort))
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
	serverVersion := f.serverVersion
	if serverVersion == "" {
		serverVersion = Version
	}
	// System shared-memory regions, shared by HTTP and gRPC; a request reads
	// at most what its body could carry. Off unless --allow-client-shm.
	ms.shm = shm.New(shm.Options{MaxRequestBytes: limits.MaxBodyBytes, Disabled: !f.AllowClientSHM})
	httpForward, err := forwardPattern("--http-header-forward-pattern", f.httpForward)
	if err != nil {
		return err
	}
	grpcForward, err := forwardPattern("--grpc-header-forward-pattern", f.grpcForward)
	if err != nil {
		return err
	}
	var extSettings *tritonsettings.Settings // Triton's logging and trace extensions
	if f.levelVar != nil {
		extSettings = tritonsettings.New(f.levelVar, f.logFormat, f.sampling)
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
	kh := httpapi.New(ms.models, httpapi.Options{MaxBodyBytes: httpLimits.MaxBodyBytes, ServerName: f.serverName, ServerVersion: serverVersion, SharedMemory: ms.shm, Settings: extSettings, HeaderForward: httpForward, CompressMinBytes: f.compressMin, Budget: gd.budget}, logger, reg)
	ms.httpSrv = gd.kserveServer("models_http", httpLimits, httpPolicy.RequireKServe(gd.audit, "models_http", telemetry.TraceHTTP("models.http", kh)))
	ms.grpcSvc = grpcapi.New(ms.models, grpcapi.Options{ServerName: f.serverName, ServerVersion: serverVersion, SharedMemory: ms.shm, Settings: extSettings, HeaderForward: grpcForward, CompressMinBytes: f.compressMin}, logger, reg)
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

// setupTracing starts span export when an endpoint is set; the returned
// function flushes it.
func setupTracing(ctx context.Context, f *serveFlags, logger *slog.Logger) (func(), error) {
	stop, err := telemetry.SetupTracing(ctx, telemetry.TracingOptions{
		Endpoint: f.traceEndpoint, SampleRatio: f.traceRatio, ServiceName: f.traceService,
		Exporter: f.traceExporter, File: f.traceFile, Sampling: f.sampling,
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
