package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/console"
	"github.com/sluice-ml/sluice/internal/feature/materialize"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kserve"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// runChain runs what sluice.yaml describes in one process: the model
// server, the feature server and the gateway, started in that order and
// stopped in the reverse one.
func runChain(ctx context.Context, cmd *cobra.Command, f *serveFlags, hup <-chan os.Signal) error {
	start := time.Now()
	logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), telemetry.LogOptions{Format: f.logFormat, Level: f.logLevel})
	if err != nil {
		return err
	}
	cfg, err := config.Load(f.configFile)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if t := cfg.Tracing; t != nil {
		f.traceEndpoint, f.traceRatio = t.OTLPEndpoint, t.SampleRatio
		f.traceService = t.ServiceName
		f.traceExporter, f.traceFile = t.Exporter, t.File
	}
	stopTracing, err := setupTracing(ctx, f, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	regs := newChainRegistries(cfg)
	reg := regs.process
	gd, err := newGuard(cfg.Security, cmd.ErrOrStderr(), logger, reg)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer gd.close()
	g, gctx := errgroup.WithContext(ctx)
	gatewayDone := make(chan struct{})
	banner := &banner{config: f.configFile, guard: gd}
	var reloadGateway func(context.Context) error

	if cfg.ModelServer != nil && cfg.Gateway != nil && cfg.Gateway.Proxy != nil {
		// The gateway's KServe proxy vouches for its clients with a key
		// only this process holds, so that the model server never takes
		// a proxied call for a local one (docs/security.md).
		gd.forwardedKey = make([]byte, authz.ForwardedKeyBytes)
		if _, err := rand.Read(gd.forwardedKey); err != nil {
			return fmt.Errorf("forwarded-client key: %w", err)
		}
	}
	var ms *modelServer
	if m := cfg.ModelServer; m != nil {
		mf := *f
		mf.repos = m.ModelRepository
		mf.controlMode = m.ControlMode
		mf.loadModels = m.LoadModel
		mf.pollSecs = max(1, int(m.RepositoryPollInterval.Std()/time.Second))
		mf.cacheDir = m.RepositoryCacheDir
		if m.RepositoryCacheBytes > 0 {
			mf.cacheBytes = m.RepositoryCacheBytes
		}
		mf.strictConfig = m.StrictModelConfig
		mf.strictReadiness = chainStrictReadiness(cmd, m)
		mf.address = m.Address
		mf.httpPort, mf.grpcPort, mf.metricsPort = m.HTTPPort, m.GRPCPort, m.MetricsPort
		mf.backendSettings = m.BackendConfig
		mf.httpRestricted, mf.grpcRestricted = m.HTTPRestrictedAPI, m.GRPCRestrictedProtocol
		mf.allowClientSHM = m.AllowClientSHM
		mf.limits = &m.Limits
		if ms, err = startModelServer(ctx, &mf, m.TLS, gd, logger, regs.models); err != nil {
			return err
		}
		defer ms.closeBackends()
		banner.models = ms.httpLn.Addr().String()
		banner.grpc = ms.grpcLn.Addr().String()
		banner.metrics = ms.metrics.Addr().String()
		g.Go(func() error { return ms.metrics.Run(gctx) })
		ms.run(ctx, gctx, g, gatewayDone)
	}

	var fs *featureServer
	if fc := cfg.FeatureServer; fc != nil {
		if f.materialize {
			if err := applyFeatures(ctx, fc.Repo, logger); err != nil {
				return err
			}
		}
		ff := &featureServerFlags{
			repo: fc.Repo, address: fc.Address, port: fc.Port, grpcPort: fc.GRPCPort, pollSecs: 10,
			maxBodyBytes: fc.Limits.MaxBodyBytes, tolerance: serving.DefaultEventTimeTolerance,
			exitTimeoutSecs: f.exitTimeoutSecs, readAuth: fc.ReadAuth, maxEntityRows: fc.MaxEntityRows,
			limits: &fc.Limits,
		}
		if fs, err = startFeatureServer(ctx, ff, fc.TLS, gd, logger, regs.features); err != nil {
			return err
		}
		defer fs.close()
		if f.materialize {
			if err := materializeAtStart(ctx, fs, logger); err != nil {
				_ = fs.ln.Close()
				return err
			}
		}
		if fc.Aggregate {
			agg := aggregateFlags{ackWait: 30 * time.Second, batch: 500, background: true}
			closeAgg, err := agg.startAggregators(ctx, gctx, g, fs.holder.Current(), fs.store, logger, regs.features)
			if err != nil {
				_ = fs.ln.Close()
				return err
			}
			defer closeAgg()
		}
		banner.features = fs.ln.Addr().String()
		banner.featuresMetrics = true
		fs.run(ctx, gctx, g, gatewayDone)
	}

	if cfg.Gateway != nil {
		if reloadGateway, err = startGateway(ctx, gctx, g, cfg, f, ms, fs, gd, reg, logger, banner, gatewayDone); err != nil {
			return err
		}
	} else {
		close(gatewayDone)
	}
	gd.run(gctx, g)
	// SIGHUP reloads what POST /reload does, plus the certificates and the
	// feature definitions.
	g.Go(func() error {
		return onHangup(gctx, hup, logger, func() error {
			gd.reloadTLS()
			var errs []error
			if fs != nil {
				if _, err := fs.holder.Reload(gctx); err != nil {
					errs = append(errs, err)
				}
			}
			if ms != nil {
				errs = append(errs, ms.mgr.Poll(gctx))
			}
			if reloadGateway != nil {
				errs = append(errs, reloadGateway(gctx))
			}
			return errors.Join(errs...)
		})
	})
	logger.Info("sluice ready", "config", f.configFile, "gateway", banner.gateway, "admin", banner.admin,
		"models_http", banner.models, "models_grpc", banner.grpc, "features", banner.features,
		"startup_seconds", time.Since(start).Seconds(), "listeners", gd.Listeners())
	// One write: a reader of stdout sees the whole banner or none of it.
	var out bytes.Buffer
	banner.write(&out, cfg)
	_, _ = cmd.OutOrStdout().Write(out.Bytes())
	err = g.Wait()
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// startGateway builds the gateway over the in-process servers and starts
// its listeners. Its shutdown drains first and closes done when finished,
// which lets the servers behind it stop.
func startGateway(ctx, gctx context.Context, g *errgroup.Group, cfg *config.Config, f *serveFlags,
	ms *modelServer, fs *featureServer, gd *guard, reg *prometheus.Registry, logger *slog.Logger, b *banner, done chan struct{},
) (func(context.Context) error, error) {
	gc := cfg.Gateway
	remote := kserve.New(kserve.Options{}, logger)
	var repo *registry.Repo
	if fs != nil {
		repo = fs.holder.Current()
	}
	sig := func(ctx context.Context, b config.Backend, model, version string) (infer.Signature, error) {
		if b.Kind != gateway.KindInProcess {
			return remoteSignature(ctx, remote, b, model, version)
		}
		if ms == nil {
			return infer.Signature{}, errors.New("backend is in_process but there is no model_server section")
		}
		md, err := ms.mgr.Metadata(ctx, model, version)
		if err != nil {
			return infer.Signature{}, err
		}
		return infer.Signature{Inputs: md.Inputs, Outputs: md.Outputs}, nil
	}
	if err := checkGateway(ctx, cfg, repo, sig, os.Stderr); err != nil {
		return nil, err
	}
	opts := gateway.Options{
		Remote: remote,
		// One client per kserve_grpc backend with a tls block.
		RemoteTLS:    func(c *tls.Config) gateway.RemoteClient { return kserve.New(kserve.Options{TLS: c}, logger) },
		Reload:       func(context.Context) (*config.Config, error) { return config.Load(f.configFile) },
		MaxBodyBytes: gc.Limits.MaxBodyBytes,
		ForwardedKey: gd.forwardedKey,
		Audit:        gd.audit,
	}
	if ms != nil {
		opts.Models = ms.mgr
	}
	if fs != nil {
		opts.Features = fs.srv
		opts.FeatureRepo = fs.holder.Current
	}
	access, closeAccess, err := openAccessLog(gc.AccessLog, os.Stdout)
	if err != nil {
		return nil, err
	}
	// The console's recent-errors page reads the access log's error lines.
	errLog := console.NewErrorLog(0)
	opts.AccessLog = io.MultiWriter(access, errLog)
	recorder, err := openRecorder(ctx, gc, logger, reg)
	if err != nil {
		closeAccess()
		return nil, err
	}
	if recorder != nil {
		opts.Recorder = recorder
	}
	fleet, cl, err := openFleet(ctx, cfg.Cluster, logger, reg)
	if err != nil {
		if recorder != nil {
			_ = recorder.Close(context.Background())
		}
		closeAccess()
		return nil, err
	}
	opts.Fleet = fleet
	acc, err := openAccuracy(ctx, cfg, logger, reg)
	if err != nil {
		if recorder != nil {
			_ = recorder.Close(context.Background())
		}
		closeFleet(cl)
		closeAccess()
		return nil, err
	}
	if acc != nil {
		opts.Accuracy = acc.joiner
	}
	gw, err := gateway.New(cfg, opts, logger, reg)
	if err != nil {
		closeFleet(cl)
		if recorder != nil {
			_ = recorder.Close(context.Background())
		}
		if acc != nil {
			_ = acc.close(context.Background())
		}
		closeAccess()
		return nil, &exitError{code: 2, err: err}
	}
	ok := false
	var closers []func()
	if cl != nil {
		closers = append(closers, cl.Close)
	}
	if acc != nil {
		closers = append(closers, func() { _ = acc.close(context.Background()) })
	}
	defer func() {
		if !ok {
			for _, c := range closers {
				c()
			}
			closeAccess()
		}
	}()
	pubTLS, err := gd.tlsFor("gateway", gc.TLS)
	if err != nil {
		return nil, err
	}
	adminTLS, err := gd.tlsFor("admin", gc.AdminTLS)
	if err != nil {
		return nil, err
	}
	clientsMode := fmt.Sprintf("api keys (%d clients)", len(gc.Clients))
	if gc.Anonymous.Allowed {
		clientsMode += ", anonymous allowed"
	}
	if gc.TLS != nil && gc.TLS.ClientCAFile != "" {
		clientsMode += ", client certificates"
	}
	ln, err := gd.listen(ctx, "gateway", gc.Listen, pubTLS, gc.TLS, clientsMode)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = ln.Close() })
	// The admin port: reads are open only while it binds loopback; writes
	// (reload, rollout commands) and the profiler need an operate token
	// unless it binds loopback and no token exists (Validate refuses a
	// tokenless admin port beyond loopback).
	adminAddr := gc.Admin
	var lc net.ListenConfig
	rawAdmin, err := lc.Listen(ctx, "tcp", adminAddr)
	if err != nil {
		return nil, fmt.Errorf("listen gateway admin: %w", err)
	}
	closers = append(closers, func() { _ = rawAdmin.Close() })
	adminLoopback := config.IsLoopback(rawAdmin.Addr().String())
	adminOpenWrites := adminLoopback && !gd.hasTokens()
	if !adminLoopback && !gd.hasOperateToken() {
		return nil, &exitError{code: 2, err: fmt.Errorf("gateway.admin %s is reachable beyond loopback but no operate token is configured", rawAdmin.Addr())}
	}
	adminPolicy, err := gd.policy(adminLoopback, adminOpenWrites, nil)
	if err != nil {
		return nil, err
	}
	gd.record("admin", rawAdmin.Addr().String(), gc.AdminTLS, authMode(adminLoopback, adminOpenWrites))
	adminLn := rawAdmin
	if adminTLS != nil {
		adminLn = adminTLS.Listener(rawAdmin)
	}
	b.gateway, b.admin = ln.Addr().String(), rawAdmin.Addr().String()
	b.tls, b.adminTLS = pubTLS != nil, adminTLS != nil
	var grpcSrv *grpc.Server
	if gc.GRPC != "" {
		// gRPC does its own TLS handshake through its credentials.
		gln, err := gd.listen(ctx, "gateway_grpc", gc.GRPC, nil, gc.TLS, clientsMode)
		if err != nil {
			return nil, err
		}
		b.gatewayGRPC = gln.Addr().String()
		grpcSrv = grpc.NewServer(append(gd.grpcOptions("gateway_grpc", gc.Limits, pubTLS, nil, nil), gw.GRPCServerOptions()...)...)
		gw.RegisterGRPC(grpcSrv)
		g.Go(func() error {
			if err := grpcSrv.Serve(gln); err != nil {
				return fmt.Errorf("serve gateway grpc: %w", err)
			}
			return nil
		})
	}
	srv := gd.httpServer("gateway", gc.Limits, gw)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg})
	admin := gw.AdminHandler(metrics)
	src := console.Sources{Gateway: console.GatewayFromAdmin(admin), Errors: errLog, Metrics: chainGatherers(reg, ms, fs)}
	if ms != nil {
		src.Models = console.ModelsFromManager(ms.mgr)
	}
	if fs != nil {
		src.Features = console.FeaturesFromStore(fs.holder, fs.store, time.Now)
	}
	src.GrafanaURL, src.TraceURL = gc.Console.GrafanaURL, gc.Console.TraceURL
	src.HistoryFile = gc.Console.HistoryFile
	con := console.New(src, logger)
	adminMux := http.NewServeMux()
	adminMux.Handle(console.Prefix, con)
	adminMux.Handle("/", admin)
	// The admin port takes no large body; its header bounds are every
	// port's defaults.
	adminSrv := gd.httpServer("admin", admission.DefaultLimits(1<<20), adminGuard(adminPolicy, gd.audit, adminMux))
	g.Go(func() error { return con.Run(gctx) })
	scheme := "http://"
	if adminTLS != nil {
		scheme = "https://"
	}
	b.console = scheme + displayAddr(rawAdmin.Addr().String()) + console.Prefix
	// Run's control loops (health checks, drift, rollouts) stop with
	// gctx; its access-log writer and shadow workers go on serving the
	// requests the listeners drain, until gw.Close below waits for them.
	g.Go(func() error { return gw.Run(gctx) })
	if cl != nil {
		// The fleet's watchers and publishers stop with gctx; the
		// connection closes once the gateway is done (below).
		g.Go(func() error { return cl.Run(gctx) })
	}
	if acc != nil {
		// The joiner stores what requests log until acc.close below.
		g.Go(func() error { return acc.run(gctx) })
	}
	ok = true
	for _, s := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{srv, ln}, {adminSrv, adminLn}} {
		g.Go(func() error {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve gateway: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(done)
		defer closeAccess()
		if cl != nil {
			defer cl.Close()
		}
		<-gctx.Done()
		// Drain: readiness fails so load balancers stop sending, requests
		// keep being served for the drain period, then the listener closes
		// and in-flight requests finish.
		gw.SetDraining()
		drain := gc.DrainPeriod.Std()
		logger.Info("gateway draining", "drain_seconds", drain.Seconds())
		time.Sleep(drain)
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(f.exitTimeoutSecs)*time.Second)
		defer cancel()
		if grpcSrv != nil {
			stopped := make(chan struct{})
			go func() { grpcSrv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-shutCtx.Done():
				grpcSrv.Stop()
			}
		}
		err := srv.Shutdown(shutCtx)
		err = errors.Join(err, adminSrv.Shutdown(shutCtx), gw.Close(shutCtx))
		if acc != nil {
			// After the gateway: no request logs a prediction any more.
			err = errors.Join(err, acc.close(shutCtx))
		}
		return err
	})
	reload := func(ctx context.Context) error {
		next, err := config.Load(f.configFile)
		if err != nil {
			return err
		}
		return gw.Reload(next)
	}
	return reload, nil
}

// openRecorder opens the recording sink when a service mirrors traffic:
// rotated JSONL files, or a NATS JetStream stream with a local disk spool
// for what the broker does not take (drained when it is back, and at the
// next start), behind a bounded writer. It returns nil when nothing is
// recorded.
func openRecorder(ctx context.Context, gc *config.Gateway, logger *slog.Logger, reg *prometheus.Registry) (*record.Writer, error) {
	rc := gc.Recording
	shadows := false
	for _, s := range gc.Services {
		shadows = shadows || s.Shadow != nil
	}
	if !shadows || rc.Sink == "off" {
		return nil, nil
	}
	wopts := record.WriterOptions{QueueSize: rc.QueueSize, SinkLabel: rc.Sink}
	var sink record.Sink
	switch rc.Sink {
	case "nats":
		// The spool first: a directory another process holds fails the
		// start before anything connects.
		spool, err := record.OpenSpool(record.SpoolOptions{
			Dir: rc.Spool.Dir, MaxBytes: rc.Spool.MaxBytes, Full: record.SpoolPolicy(rc.Spool.Full),
		}, logger)
		if err != nil {
			return nil, fmt.Errorf("gateway.recording.spool: %w", err)
		}
		nopts := record.NATSOptions{URL: rc.NATS.URL, Stream: rc.NATS.Stream, SubjectPrefix: rc.NATS.SubjectPrefix}
		if t := rc.NATS.TLS; t != nil {
			if nopts.TLS, err = tlsconfig.ClientConfig(*t); err != nil {
				_ = spool.Close()
				return nil, fmt.Errorf("gateway.recording.nats.tls: %w", err)
			}
			for _, w := range t.Warnings() {
				logger.Warn("recording nats tls is not safe", "warning", w)
			}
		}
		ns, err := record.NewNATSSink(ctx, nopts, logger, reg)
		if err != nil {
			_ = spool.Close()
			return nil, fmt.Errorf("gateway.recording: %w", err)
		}
		sink = ns
		// Only the NATS writer gets the close deadline: what it cannot
		// publish in time stays in the spool. JSONL writes are local and
		// are finished (bounded by the shutdown timeout alone).
		wopts.Spool, wopts.CloseTimeout = spool, rc.CloseTimeout.Std()
		logger.Info("recording shadow traffic", "sink", rc.Sink, "stream", rc.NATS.Stream,
			"spool", rc.Spool.Dir, "spool_max_bytes", rc.Spool.MaxBytes, "spool_full", rc.Spool.Full,
			"duplicate_window", ns.DuplicateWindow().String())
	default:
		fopts := record.FileOptions{Dir: rc.Dir, MaxBytes: rc.MaxBytes, MaxAge: rc.MaxAge.Std()}
		if rc.Archive.Location != "" {
			asink, err := record.NewArchivedFileSink(ctx, fopts, record.ArchiveOptions{
				Location: rc.Archive.Location, Interval: rc.Archive.Interval.Std(), Label: "recordings",
			}, logger, reg)
			if err != nil {
				return nil, fmt.Errorf("gateway.recording.archive: %w", err)
			}
			sink = asink
			logger.Info("recording shadow traffic", "sink", rc.Sink, "dir", rc.Dir, "archive", rc.Archive.Location)
			break
		}
		fsink, err := record.NewFileSink(fopts, logger)
		if err != nil {
			return nil, fmt.Errorf("gateway.recording: %w", err)
		}
		sink = fsink
		logger.Info("recording shadow traffic", "sink", rc.Sink, "dir", rc.Dir)
	}
	return record.NewWriter(sink, wopts, logger, reg), nil
}

// openAccessLog opens the access log destination: "stdout" (default),
// "stderr", "off" or a file appended to.
func openAccessLog(dest string, stdout io.Writer) (io.Writer, func(), error) {
	if dest == "" {
		dest = "stdout"
	}
	w, closeFn, err := openLogDest(dest, stdout, os.Stderr, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway.access_log: %w", err)
	}
	return w, closeFn, nil
}

// applyFeatures validates the feature repository and writes its registry,
// like "sluice features apply".
func applyFeatures(ctx context.Context, dir string, logger *slog.Logger) error {
	r, err := registry.Load(ctx, dir)
	if errs, ok := errors.AsType[registry.Errors](err); ok {
		for _, e := range errs {
			logger.Error("feature definition", "err", e.Error())
		}
		return &exitError{code: 2, err: fmt.Errorf("%d definition error(s) in %s", len(errs), dir)}
	}
	if err != nil {
		return err
	}
	if err := registry.WriteSnapshot(r.Path(r.Config.Registry), r.Snapshot()); err != nil {
		return err
	}
	logger.Info("feature repository applied", "repo", dir, "views", len(r.Views), "services", len(r.Services))
	return nil
}

// materializeAtStart brings the online store up to now: every view from
// where its last run ended (or now − ttl).
func materializeAtStart(ctx context.Context, fs *featureServer, logger *slog.Logger) error {
	begin := time.Now()
	m := materialize.New(fs.holder.Current(), fs.store, materialize.Options{}, logger, fs.reg)
	rep, err := m.RunIncremental(ctx, time.Now(), nil)
	if err != nil {
		return fmt.Errorf("materialize the feature repository at start (run with --materialize=false to skip): %w", err)
	}
	var rows int64
	for _, v := range rep.Views {
		rows += v.Written
	}
	logger.Info("features materialized", "seconds", time.Since(begin).Seconds(), "views", len(rep.Views), "rows", rows)
	return nil
}

// chainRegistries are the registries of a chain's components. Each port
// serves its own component's metrics, as the separate commands do, so a
// Prometheus that scrapes all three ports counts nothing twice and the
// same scrape configuration (jobs sluice-models, sluice-features,
// sluice-gateway) serves a chain and a split deployment alike. The
// process's own collectors (go_*, process_*, the listeners' admission
// and security metrics) go with the gateway's admin port, else with the
// model server's metrics port, else with the feature server's port.
type chainRegistries struct {
	process, models, features *prometheus.Registry // the gateway's is process
}

func newChainRegistries(cfg *config.Config) chainRegistries {
	r := chainRegistries{process: telemetry.NewRegistry()}
	r.models, r.features = prometheus.NewRegistry(), prometheus.NewRegistry()
	switch {
	case cfg.Gateway != nil:
	case cfg.ModelServer != nil:
		r.models = r.process
	default:
		r.features = r.process
	}
	return r
}

// chainGatherers reads every registry of the chain once: the console
// charts the whole process.
func chainGatherers(reg *prometheus.Registry, ms *modelServer, fs *featureServer) prometheus.Gatherers {
	gs := prometheus.Gatherers{reg}
	if ms != nil && ms.reg != nil && ms.reg != reg {
		gs = append(gs, ms.reg)
	}
	if fs != nil {
		if fr, ok := fs.reg.(*prometheus.Registry); ok && fr != reg {
			gs = append(gs, fr)
		}
	}
	return gs
}

// chainStrictReadiness is the chain's readiness mode: --strict-readiness
// when given, else model_server.strict_readiness, else false. Triton's
// default is strict; a chain serves several models behind one pod, and
// one that fails to load should show in its own readiness
// (/v2/models/<name>/ready, the console) rather than take the others
// out of a load balancer's rotation.
func chainStrictReadiness(cmd *cobra.Command, m *config.ModelServer) bool {
	if fl := cmd.Flags().Lookup("strict-readiness"); fl != nil && fl.Changed {
		v, err := cmd.Flags().GetBool("strict-readiness")
		return err == nil && v
	}
	if m.StrictReadiness != nil {
		return *m.StrictReadiness
	}
	return false
}

// banner is what "sluice serve -c" prints once it is ready.
type banner struct {
	config                                                       string
	gateway, gatewayGRPC, admin, models, grpc, metrics, features string
	featuresMetrics                                              bool // the feature server's port serves its /metrics
	console                                                      string
	tls, adminTLS                                                bool
	guard                                                        *guard
}

func (b *banner) write(w io.Writer, cfg *config.Config) {
	fmt.Fprintf(w, "\nSluice is serving %s\n", b.config)
	scheme, adminScheme := "http", "http"
	if b.tls {
		scheme = "https"
	}
	if b.adminTLS {
		adminScheme = "https"
	}
	if b.gateway != "" {
		fmt.Fprintf(w, "  gateway        %s://%s   (admin %s://%s, metrics %s://%s/metrics)\n",
			scheme, displayAddr(b.gateway), adminScheme, displayAddr(b.admin), adminScheme, displayAddr(b.admin))
		if b.console != "" {
			fmt.Fprintf(w, "  console        %s\n", b.console)
		}
		if b.gatewayGRPC != "" {
			fmt.Fprintf(w, "  gateway gRPC   %s   (sluice.gateway.v1.Gateway/Predict)\n", displayAddr(b.gatewayGRPC))
		}
	}
	if b.models != "" {
		fmt.Fprintf(w, "  model server   http://%s   (KServe v2; gRPC %s, metrics http://%s/metrics)\n",
			displayAddr(b.models), displayAddr(b.grpc), displayAddr(b.metrics))
	}
	if b.features != "" {
		if b.featuresMetrics {
			fmt.Fprintf(w, "  feature server http://%s   (Feast HTTP API, metrics http://%s/metrics)\n", displayAddr(b.features), displayAddr(b.features))
		} else {
			fmt.Fprintf(w, "  feature server http://%s   (Feast HTTP API)\n", displayAddr(b.features))
		}
	}
	if b.guard != nil {
		b.guard.writeListeners(w)
	}
	if cfg.Gateway == nil || b.gateway == "" {
		return
	}
	for _, s := range cfg.Gateway.Services {
		method, path, _ := strings.Cut(s.Path, " ")
		body, err := json.Marshal(exampleBody(s))
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "\nA prediction from service %s:\n  curl -s -X %s '%s://%s%s'%s -d '%s'\n", s.Name, method, scheme, displayAddr(b.gateway), path, bannerAuth(cfg.Gateway), body)
	}
	fmt.Fprintln(w)
}

// bannerAuth is the Authorization header of the banner's curl: the first
// client's api_key as written in the config (a shell expands
// "${SLUICE_DEMO_API_KEY:-demo-key}" to the same key the gateway hashed),
// else $SLUICE_API_KEY when anonymous calls are refused, else none.
func bannerAuth(g *config.Gateway) string {
	for _, c := range g.Clients {
		ref := c.APIKeyRef // one ${...} reference, nothing a shell would run
		if strings.HasPrefix(ref, "${") && strings.HasSuffix(ref, "}") && strings.Count(ref, "$") == 1 &&
			strings.Count(ref, "}") == 1 && !strings.ContainsAny(ref, "\"\\`") {
			return fmt.Sprintf(` -H "Authorization: Bearer %s"`, ref)
		}
	}
	if !g.Anonymous.Allowed {
		return ` -H "Authorization: Bearer $SLUICE_API_KEY"`
	}
	return ""
}

// exampleBody is the service's configured example, or one made up from
// its fields.
func exampleBody(s config.Service) map[string]any {
	if len(s.Example) > 0 {
		return s.Example
	}
	out := map[string]any{}
	for _, e := range s.Entities {
		if e.Type == "string" {
			out[e.JoinKey] = "1"
		} else {
			out[e.JoinKey] = 1
		}
	}
	for _, f := range s.RequestFields {
		switch f.Type {
		case "string":
			out[f.Name] = "example"
		case "bool":
			out[f.Name] = false
		case "int64":
			out[f.Name] = 1
		default:
			out[f.Name] = 1.0
		}
	}
	return out
}

// displayAddr shows a listener address with a loopback host when it binds
// every interface.
func displayAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// remoteSignature looks a model up on a kserve_grpc backend's endpoints,
// with client or, when the backend has a tls block, a client of its own;
// an unreachable backend makes it unknown, not wrong.
func remoteSignature(ctx context.Context, client *kserve.Client, b config.Backend, model, version string) (infer.Signature, error) {
	if b.TLS != nil {
		tc, err := tlsconfig.ClientConfig(*b.TLS)
		if err != nil {
			return infer.Signature{}, fmt.Errorf("backend %q: tls: %w", b.Name, err)
		}
		client = kserve.New(kserve.Options{TLS: tc}, nil)
		defer func() { _ = client.Close() }()
	}
	var last error
	for _, ep := range b.Endpoints {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		md, err := client.ModelMetadata(cctx, ep, model, version)
		cancel()
		if err == nil {
			return infer.Signature{Inputs: md.Inputs, Outputs: md.Outputs}, nil
		}
		if ie, ok := errors.AsType[*apierr.Error](err); ok && ie.Kind == apierr.KindNotFound {
			return infer.Signature{}, fmt.Errorf("%s: %w", ep, err)
		}
		last = err
	}
	return infer.Signature{}, fmt.Errorf("%w: no endpoint answered ModelMetadata: %w", gateway.ErrSignatureUnknown, last)
}

// checkGateway runs gateway.Check and logs what it finds; problems fail.
func checkGateway(ctx context.Context, cfg *config.Config, repo *registry.Repo, sig gateway.SignatureFunc, out io.Writer) error {
	res := gateway.Check(ctx, cfg.Gateway, repo, sig)
	for _, w := range res.Warnings {
		fmt.Fprintln(out, "warning:", w)
	}
	for _, p := range res.Problems {
		fmt.Fprintln(out, p)
	}
	if len(res.Problems) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("%d problem(s) in the gateway's services", len(res.Problems))}
	}
	return nil
}
