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
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/cluster"
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
// stopped in the reverse one (group).
func runChain(ctx context.Context, cmd *cobra.Command, f *serveFlags, hup <-chan os.Signal) error {
	start := time.Now()
	logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), f.log)
	if err != nil {
		return err
	}
	cfg, err := config.Load(f.configFile)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if ignored := flagsIgnoredUnderConfig(cmd.Flags()); len(ignored) > 0 {
		logger.Warn("flags ignored under -c: sluice.yaml's settings (or their defaults) apply", "flags", ignored)
	}
	tracing := cfg.Tracing
	if tracing == nil {
		tracing = &config.Tracing{} // the OTEL_* environment decides
	}
	stopTracing, err := setupTracing(ctx, tracing, nil, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	regs := newChainRegistries(cfg)
	gd, err := newGuard(cfg.Security, cmd.ErrOrStderr(), logger, regs.process)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer gd.close()
	if cfg.ModelServer != nil && cfg.Gateway != nil && cfg.Gateway.Proxy != nil {
		// The gateway's KServe proxy vouches for its clients with a key
		// only this process holds, so that the model server never takes
		// a proxied call for a local one (docs/security.md).
		gd.forwardedKey = make([]byte, authz.ForwardedKeyBytes)
		if _, err := rand.Read(gd.forwardedKey); err != nil {
			return fmt.Errorf("forwarded-client key: %w", err)
		}
	}
	// What start-up opens closes at the end, last opened first; a failed
	// start first stops what the group already serves (abandon, deferred
	// after, so run before), then closes.
	var undo cleanups
	defer undo.run()
	grp := newGroup(ctx)
	defer grp.abandon()
	c := &chain{
		cmd: cmd, cfg: cfg, f: f, gd: gd, regs: regs, logger: logger, grp: grp, undo: &undo,
		banner: &banner{config: f.configFile, guard: gd},
	}
	// The model server first: the gateway's in-process backends and its
	// start-up check call it. The group stops it last.
	if err := c.startModels(ctx); err != nil {
		return err
	}
	// The feature server next: the gateway's check reads its registry.
	// It stops after the gateway, before the model server.
	if err := c.startFeatures(ctx); err != nil {
		return err
	}
	// The gateway last: it stops first, draining while the servers
	// behind it still answer what it forwards.
	if err := c.startGateway(ctx); err != nil {
		return err
	}
	gd.run(grp.ctx, grp.eg)
	// SIGHUP reloads what POST /reload does, plus the certificates and the
	// feature definitions.
	grp.Go(func() error { return onHangup(grp.ctx, hup, logger, c.reload) })
	b := c.banner
	logger.Info("sluice ready", "config", f.configFile, "gateway", b.gateway, "admin", b.admin,
		"models_http", b.models, "models_grpc", b.grpc, "features", b.features,
		"startup_seconds", time.Since(start).Seconds(), "listeners", gd.Listeners())
	// One write: a reader of stdout sees the whole banner or none of it.
	var out bytes.Buffer
	b.write(&out, cfg)
	_, _ = cmd.OutOrStdout().Write(out.Bytes())
	removePorts, err := gd.writePortsFile(f.portsFile)
	if err != nil {
		return err
	}
	defer removePorts()
	sigs := notifyStop()
	defer signal.Stop(sigs)
	defer grp.hurryOn(sigs)()
	return grp.run(ctx)
}

// chainFlags are the flags of sluice serve that apply under -c; the file
// replaces the others.
var chainFlags = []string{"config", "materialize", "log-format", "log-level", "ports-file", "backend-config", "strict-readiness"}

// flagsIgnoredUnderConfig names the flags given that serve -c ignores.
func flagsIgnoredUnderConfig(fl *pflag.FlagSet) []string {
	var out []string
	fl.Visit(func(f *pflag.Flag) {
		if !slices.Contains(chainFlags, f.Name) {
			out = append(out, "--"+f.Name)
		}
	})
	return out
}

// chain is the assembly of "sluice serve -c": its parts, as they start.
type chain struct {
	cmd    *cobra.Command
	cfg    *config.Config
	f      *serveFlags
	gd     *guard
	regs   chainRegistries
	logger *slog.Logger
	grp    *group
	undo   *cleanups
	banner *banner
	ms     *modelServer   // nil without model_server
	fs     *featureServer // nil without feature_server
	gw     *gateway.Gateway
}

// reload is SIGHUP's: certificates, feature definitions, the model
// repository and the gateway's configuration.
func (c *chain) reload() error {
	ctx := c.grp.ctx
	c.gd.reloadTLS()
	var errs []error
	if c.fs != nil {
		if _, err := c.fs.holder.Reload(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ms != nil {
		errs = append(errs, c.ms.mgr.Poll(ctx))
	}
	if c.gw != nil {
		next, err := config.Load(c.f.configFile)
		if err == nil {
			err = c.gw.Reload(next)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startModels starts the model server of model_server, if any.
func (c *chain) startModels(ctx context.Context) error {
	m := c.cfg.ModelServer
	if m == nil {
		return nil
	}
	if c.cmd.Flags().Changed("strict-readiness") {
		m.StrictReadiness = c.f.model.StrictReadiness // the flag wins over the file
	}
	ms, err := startModelServer(ctx, m, c.f, m.TLS, c.gd, c.logger, c.regs.models, c.undo)
	if err != nil {
		return err
	}
	c.ms = ms
	c.banner.models = ms.httpLn.Addr().String()
	c.banner.grpc = ms.grpcLn.Addr().String()
	c.banner.metrics = ms.metrics.Addr().String()
	c.grp.Go(func() error { return ms.metrics.Run(c.grp.ctx) })
	ms.add(c.grp)
	return nil
}

// startFeatures starts the feature server of feature_server, if any:
// applied and materialized first with --materialize, its aggregators
// beside it with aggregate: true.
func (c *chain) startFeatures(ctx context.Context) error {
	fc := c.cfg.FeatureServer
	if fc == nil {
		return nil
	}
	if c.f.materialize {
		if err := applyFeatures(ctx, fc.Repo, c.logger); err != nil {
			return err
		}
	}
	run := featureRun{tolerance: serving.DefaultEventTimeTolerance}
	fs, err := startFeatureServer(ctx, fc, run, fc.TLS, c.gd, c.logger, c.regs.features)
	if err != nil {
		return err
	}
	c.undo.push(fs.close)
	// Until the group serves it, its listener is closed here.
	c.undo.push(func() { _ = fs.ln.Close() })
	if c.f.materialize {
		if err := materializeAtStart(ctx, fs, c.logger); err != nil {
			return err
		}
	}
	if fc.Aggregate {
		agg := aggregateFlags{ackWait: defaultAggregateAckWait, batch: defaultAggregateBatch, background: true}
		closeAgg, err := agg.startAggregators(ctx, c.grp.ctx, c.grp.eg, fs.holder.Current(), fs.store, c.logger, c.regs.features)
		if err != nil {
			return err
		}
		c.undo.push(closeAgg)
	}
	c.fs = fs
	c.banner.features = fs.ln.Addr().String()
	c.banner.featuresMetrics = true
	fs.add(c.grp)
	return nil
}

// chainGateway is the chain's gateway with what serves it.
type chainGateway struct {
	gw               *gateway.Gateway
	srv              httpServing // h1.Server without TLS, else http.Server
	adminSrv         *http.Server
	ln, adminLn      net.Listener
	grpcSrv          *grpc.Server // nil without gateway.grpc
	grpcLn           net.Listener
	fleet            *cluster.Cluster // nil without cluster
	acc              *accuracyParts   // nil without accuracy
	con              *console.Console
	adminPolicy      *authz.Policy
	drain, exitAfter time.Duration
	logger           *slog.Logger
}

// startGateway checks the gateway's services against the in-process
// servers, builds it and binds its listeners; its shutdown drains first,
// and the group stops the servers behind it after.
func (c *chain) startGateway(ctx context.Context) error {
	gc := c.cfg.Gateway
	if gc == nil {
		return nil
	}
	remote := kserve.New(kserve.Options{}, c.logger)
	var repo *registry.Repo
	if c.fs != nil {
		repo = c.fs.holder.Current()
	}
	if err := checkGateway(ctx, c.cfg, repo, c.signatures(remote), os.Stderr); err != nil {
		return err
	}
	// The console's recent-errors page reads the access log's error lines.
	errLog := console.NewErrorLog(0)
	cg, err := c.newGateway(ctx, remote, errLog)
	if err != nil {
		return err
	}
	if err := c.listenGateway(ctx, cg); err != nil {
		return err
	}
	var adminMux *http.ServeMux
	cg.con, adminMux = c.console(cg.gw, errLog)
	// The admin port takes no large body; its header bounds are every
	// port's defaults.
	cg.adminSrv = c.gd.httpServer("admin", admission.DefaultLimits(1<<20), adminGuard(cg.adminPolicy, c.gd.audit, adminMux))
	c.gw = cg.gw
	cg.add(c.grp)
	return nil
}

// add adds the gateway to grp: its listeners and loops serve until the
// group stops; then it drains (readiness fails so load balancers stop
// sending while requests keep being served for the drain period; a
// second stop signal ends the period), its listeners close while
// in-flight requests finish, and it closes.
func (cg *chainGateway) add(grp *group) {
	grp.Go(func() error { return cg.con.Run(grp.ctx) })
	// Run's control loops (health checks, drift, rollouts) stop with
	// grp.ctx; its access-log writer and shadow workers go on serving the
	// requests the listeners drain, until gw.Close in the shutdown waits
	// for them.
	grp.Go(func() error { return cg.gw.RunBackground(grp.ctx) })
	if cg.fleet != nil {
		// The fleet's watchers and publishers stop with grp.ctx; the
		// connection closes once the gateway is done (the cleanups).
		grp.Go(func() error { return cg.fleet.Run(grp.ctx) })
	}
	if cg.acc != nil {
		// The joiner stores what requests log until the shutdown's
		// acc.close.
		grp.Go(func() error { return cg.acc.run(grp.ctx) })
	}
	if cg.grpcSrv != nil {
		grp.add(func() error {
			if err := cg.grpcSrv.Serve(cg.grpcLn); err != nil {
				return fmt.Errorf("serve gateway grpc: %w", err)
			}
			return nil
		}, nil)
	}
	for _, s := range []struct {
		srv httpServing
		ln  net.Listener
	}{{cg.adminSrv, cg.adminLn}, {cg.srv, cg.ln}} {
		grp.add(func() error {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve gateway: %w", err)
			}
			return nil
		}, nil)
	}
	grp.add(nil, cg.shutdown)
}

// shutdown drains the gateway and closes it.
func (cg *chainGateway) shutdown(hurry context.Context) error {
	cg.gw.SetDraining()
	cg.logger.Info("gateway draining", "drain_seconds", cg.drain.Seconds())
	waitDrain(hurry, cg.drain)
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(hurry), cg.exitAfter)
	defer cancel()
	err := errors.Join(shutdownServers(shutCtx, cg.srv, cg.grpcSrv), cg.adminSrv.Shutdown(shutCtx), cg.gw.Close(shutCtx))
	if cg.acc != nil {
		// After the gateway: no request logs a prediction any more.
		err = errors.Join(err, cg.acc.close(shutCtx))
	}
	return err
}

// signatures looks a model's signature up for the gateway's check: in
// the model server for in_process backends, else on the remote ones.
func (c *chain) signatures(remote *kserve.Client) gateway.SignatureFunc {
	return func(ctx context.Context, b config.Backend, model, version string) (infer.Signature, error) {
		if b.Kind != gateway.KindInProcess {
			return remoteSignature(ctx, remote, b, model, version)
		}
		if c.ms == nil {
			return infer.Signature{}, errors.New("backend is in_process but there is no model_server section")
		}
		md, err := c.ms.mgr.Metadata(ctx, model, version)
		if err != nil {
			return infer.Signature{}, err
		}
		return infer.Signature{Inputs: md.Inputs, Outputs: md.Outputs}, nil
	}
}

// newGateway opens what the gateway writes to and builds it. The
// recorder opens last: gateway.New takes it over, and from then on only
// the gateway closes it (on a failed New as on Close).
func (c *chain) newGateway(ctx context.Context, remote *kserve.Client, errLog io.Writer) (*chainGateway, error) {
	gc, logger, reg := c.cfg.Gateway, c.logger, c.regs.process
	cg := &chainGateway{drain: gc.DrainPeriod.Std(), exitAfter: gc.ExitTimeout.Std(), logger: logger}
	opts := gateway.Options{
		Remote: remote,
		// One client per kserve_grpc backend with a tls block.
		RemoteTLS:    func(t *tls.Config) gateway.RemoteClient { return kserve.New(kserve.Options{TLS: t}, logger) },
		Reload:       func(context.Context) (*config.Config, error) { return config.Load(c.f.configFile) },
		MaxBodyBytes: gc.Limits.MaxBodyBytes,
		ForwardedKey: c.gd.forwardedKey,
		Audit:        c.gd.audit,
	}
	if c.ms != nil {
		opts.Models = c.ms.mgr
	}
	if c.fs != nil {
		opts.Features = c.fs.srv
		opts.FeatureRepo = c.fs.holder.Current
	}
	access, closeAccess, err := openAccessLog(gc.AccessLog, os.Stdout)
	if err != nil {
		return nil, err
	}
	c.undo.push(closeAccess) // after gw.Close, which flushes into it
	opts.AccessLog = io.MultiWriter(access, errLog)
	fleet, cl, err := openFleet(ctx, c.cfg.Cluster, logger, reg)
	if err != nil {
		return nil, err
	}
	// The connection closes once the gateway is done.
	c.undo.push(func() { closeFleet(cl) })
	opts.Fleet, cg.fleet = fleet, cl
	if cg.acc, err = openAccuracy(ctx, c.cfg, logger, reg); err != nil {
		return nil, err
	}
	if cg.acc != nil {
		opts.Accuracy = cg.acc.joiner
		// After the gateway: no request logs a prediction any more.
		// Closing twice is harmless: the shutdown closes it in time.
		c.undo.push(func() { _ = cg.acc.close(context.Background()) })
	}
	recorder, err := openRecorder(ctx, gc, logger, reg)
	if err != nil {
		return nil, err
	}
	if recorder != nil {
		opts.Recorder = recorder
	}
	if cg.gw, err = gateway.New(c.cfg, opts, logger, reg); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	// Close is idempotent: after the shutdown's, this one does nothing;
	// a listener that fails to bind leaves it to this one.
	c.undo.push(func() { _ = cg.gw.Close(context.Background()) })
	return cg, nil
}

// listenGateway binds the gateway's public, gRPC and admin listeners.
func (c *chain) listenGateway(ctx context.Context, cg *chainGateway) error {
	gc, gd, b := c.cfg.Gateway, c.gd, c.banner
	pubTLS, err := gd.tlsFor("gateway", gc.TLS)
	if err != nil {
		return err
	}
	adminTLS, err := gd.tlsFor("admin", gc.AdminTLS)
	if err != nil {
		return err
	}
	clientsMode := gatewayClientsMode(gc)
	if cg.ln, err = gd.listen(ctx, "gateway", gc.Listen, pubTLS, gc.TLS, clientsMode); err != nil {
		return err
	}
	c.undo.push(func() { _ = cg.ln.Close() })
	if gc.GRPC != "" {
		// gRPC does its own TLS handshake through its credentials.
		if cg.grpcLn, err = gd.listen(ctx, "gateway_grpc", gc.GRPC, nil, gc.TLS, clientsMode); err != nil {
			return err
		}
		c.undo.push(func() { _ = cg.grpcLn.Close() })
		b.gatewayGRPC = cg.grpcLn.Addr().String()
		cg.grpcSrv = grpc.NewServer(append(gd.grpcOptions("gateway_grpc", gc.Limits, pubTLS, nil, nil), cg.gw.GRPCServerOptions()...)...)
		cg.gw.RegisterGRPC(cg.grpcSrv)
	}
	// The admin port: reads are open only while it binds loopback; writes
	// (reload, rollout commands) and the profiler need an operate token
	// unless it binds loopback and no token exists (Validate refuses a
	// tokenless admin port beyond loopback).
	var lc net.ListenConfig
	rawAdmin, err := lc.Listen(ctx, "tcp", gc.Admin)
	if err != nil {
		return fmt.Errorf("listen gateway admin: %w", err)
	}
	c.undo.push(func() { _ = rawAdmin.Close() })
	adminLoopback := config.IsLoopback(rawAdmin.Addr().String())
	adminOpenWrites := adminLoopback && !gd.hasTokens()
	if !adminLoopback && !gd.hasOperateToken() {
		return &exitError{code: 2, err: fmt.Errorf("gateway.admin %s is reachable beyond loopback but no operate token is configured", rawAdmin.Addr())}
	}
	adminPolicy, err := gd.policy(adminLoopback, adminOpenWrites, nil)
	if err != nil {
		return err
	}
	gd.record("admin", rawAdmin.Addr().String(), gc.AdminTLS, authMode(adminLoopback, adminOpenWrites))
	cg.adminLn = rawAdmin
	scheme := "http://"
	if adminTLS != nil {
		cg.adminLn = adminTLS.Listener(rawAdmin)
		scheme = "https://"
	}
	b.gateway, b.admin = cg.ln.Addr().String(), rawAdmin.Addr().String()
	b.tls, b.adminTLS = pubTLS != nil, adminTLS != nil
	b.console = scheme + displayAddr(rawAdmin.Addr().String()) + console.Prefix
	if pubTLS == nil {
		// Plaintext: the lean HTTP/1.1 server (package h1), which costs
		// the KServe passthrough less CPU per request than net/http's.
		cg.srv = gd.h1Server("gateway", gc.Limits, cg.gw, c.logger)
	} else {
		cg.srv = gd.httpServer("gateway", gc.Limits, cg.gw)
	}
	cg.adminPolicy = adminPolicy
	return nil
}

// gatewayClientsMode is how the gateway's listeners take clients, for the
// listener table.
func gatewayClientsMode(gc *config.Gateway) string {
	mode := fmt.Sprintf("api keys (%d clients)", len(gc.Clients))
	if gc.Anonymous.Allowed {
		mode += ", anonymous allowed"
	}
	if gc.TLS != nil && gc.TLS.ClientCAFile != "" {
		mode += ", client certificates"
	}
	return mode
}

// console builds the admin port's handler: the gateway's admin API and
// the console over every part of the chain.
func (c *chain) console(gw *gateway.Gateway, errLog *console.ErrorLog) (*console.Console, *http.ServeMux) {
	gc, reg := c.cfg.Gateway, c.regs.process
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg})
	admin := gw.AdminHandler(metrics)
	src := console.Sources{Gateway: console.GatewayFromAdmin(admin), Errors: errLog, Metrics: chainGatherers(reg, c.ms, c.fs)}
	if c.ms != nil {
		src.Models = console.ModelsFromManager(c.ms.mgr)
	}
	if c.fs != nil {
		src.Features = console.FeaturesFromStore(c.fs.holder, c.fs.store, time.Now)
	}
	src.GrafanaURL, src.TraceURL = gc.Console.GrafanaURL, gc.Console.TraceURL
	src.HistoryFile = gc.Console.HistoryFile
	con := console.New(src, c.logger)
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, con)
	mux.Handle("/", admin)
	return con, mux
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
