package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature/materialize"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/connect"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/servingapi"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// featureServerFlags are `sluice feature-server`'s settings, bound to
// its flags.
type featureServerFlags struct {
	// feature is sluice.yaml's feature_server settings:
	// config.NewFeatureServer's defaults, then the flags.
	feature     config.FeatureServer
	run         featureRun
	metricsPort int
	log         telemetry.LogOptions
	sec         securityFlags
	portsFile   string // --ports-file
}

// featureRun are the feature server's settings that sluice.yaml has no
// key for; under serve -c, the default tolerance.
type featureRun struct {
	tolerance time.Duration
}

func newFeatureServerCmd() *cobra.Command {
	cmd, _ := featureServerCommand()
	return cmd
}

// featureServerCommand is newFeatureServerCmd with the settings its flags
// write.
func featureServerCommand() (*cobra.Command, *featureServerFlags) {
	f := &featureServerFlags{
		feature: config.NewFeatureServer(),
		run:     featureRun{tolerance: serving.DefaultEventTimeTolerance},
	}
	cmd := &cobra.Command{
		Use:   "feature-server",
		Short: "Serve online features over Feast's HTTP API (/get-online-features, /push, /materialize) and, with --grpc-port, its gRPC API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFeatureServer(cmd.Context(), cmd, f)
		},
	}
	fl := cmd.Flags()
	fs := &f.feature
	fl.StringVar(&fs.Repo, "repo", ".", "feature repository folder (feature_store.yaml and definitions)")
	fl.StringVar(&fs.Address, "address", fs.Address, "address the listeners bind to")
	fl.IntVar(&fs.Port, "port", fs.Port, "HTTP port (Feast's default); /metrics is served here too")
	fl.IntVar(&fs.GRPCPort, "grpc-port", 0, "port serving Feast's gRPC API (feast.serving.ServingService); 0 for none")
	fl.IntVar(&f.metricsPort, "metrics-port", 0, "extra port serving only /metrics; 0 for none")
	fl.BoolVar(&fs.Aggregate, "aggregate", false, "also run the stream aggregators (as sluice features aggregate does) in this process, against its online store: the way to keep stream feature views with the embedded store, which one process owns")
	secondsVar(fl, (*time.Duration)(&fs.RegistryPollInterval), "registry-poll-secs", "seconds between checks of the definitions and the registry for changes; 0 disables reloading (once applied, the registry serves: unapplied edits and refused type changes are reported, not served)")
	fl.Int64Var(&fs.Limits.MaxBodyBytes, "max-request-bytes", fs.Limits.MaxBodyBytes, "largest request body accepted")
	fl.DurationVar(&f.run.tolerance, "event-time-tolerance", f.run.tolerance, "how far past a request's event_timestamp a feature may be before the request is refused")
	secondsVar(fl, (*time.Duration)(&fs.ExitTimeout), "exit-timeout-secs", "seconds to wait for in-flight requests at shutdown")
	fl.StringVar(&fs.ReadAuth, "read-auth", fs.ReadAuth, "reads (/get-online-features, /metrics): open, or token (a read or operate token)")
	fl.IntVar(&fs.MaxEntityRows, "max-entity-rows", fs.MaxEntityRows, "most entity rows one feature request may ask for")
	f.sec.register(fl)
	registerPortsFile(fl, &f.portsFile)
	registerLogFlags(fl, &f.log)
	return cmd, f
}

// holderMaterializer runs materializations against the registry snapshot
// current at each call.
type holderMaterializer struct {
	holder *registry.Holder
	store  online.Store
	reg    prometheus.Registerer
}

func (m *holderMaterializer) materializer() *materialize.Materializer {
	return materialize.New(m.holder.Current(), m.store, materialize.Options{}, nil, m.reg)
}

func (m *holderMaterializer) Materialize(ctx context.Context, start, end time.Time, views []string) (any, error) {
	return m.materializer().Run(ctx, start, end, views, false)
}

func (m *holderMaterializer) MaterializeIncremental(ctx context.Context, end time.Time, views []string) (any, error) {
	return m.materializer().RunIncremental(ctx, end, views)
}

func runFeatureServer(ctx context.Context, cmd *cobra.Command, f *featureServerFlags) error {
	logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), f.log)
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()
	hup := notifyHangup()
	defer signal.Stop(hup)
	gd, tlsOpts, err := f.sec.guard(cmd.ErrOrStderr(), logger, reg)
	if err != nil {
		return err
	}
	defer gd.close()
	fsrv, err := startFeatureServer(ctx, &f.feature, f.run, tlsOpts, gd, logger, reg)
	if err != nil {
		return err
	}
	defer fsrv.close()
	grp := newGroup(ctx)
	if f.metricsPort > 0 {
		ms, err := telemetry.NewMetricsServer(ctx, net.JoinHostPort(f.feature.Address, strconv.Itoa(f.metricsPort)), reg, logger)
		if err != nil {
			grp.abandon()
			_ = fsrv.ln.Close()
			return err
		}
		// --tls-cert-file serves every listener over TLS, this one too.
		if fsrv.tls != nil {
			ms.UseTLS(fsrv.tls.Config())
		}
		gd.guardMetrics("features_metrics", f.feature.Limits, ms)
		gd.record("features_metrics", ms.Addr().String(), tlsOpts, "open (reads only)")
		grp.Go(func() error { return ms.Run(grp.ctx) })
	}
	if f.feature.Aggregate {
		agg := aggregateFlags{ackWait: defaultAggregateAckWait, batch: defaultAggregateBatch}
		closeAgg, err := agg.startAggregators(ctx, grp.ctx, grp.eg, fsrv.holder.Current(), fsrv.store, logger, reg)
		if err != nil {
			grp.abandon()
			_ = fsrv.ln.Close()
			return err
		}
		defer closeAgg()
	}
	gd.run(grp.ctx, grp.eg)
	grp.Go(func() error {
		return onHangup(grp.ctx, hup, logger, func() error {
			gd.reloadTLS()
			_, err := fsrv.holder.Reload(grp.ctx)
			return err
		})
	})
	gd.writeListeners(cmd.OutOrStdout())
	fsrv.add(grp)
	repo := fsrv.holder.Current()
	grpcAddr := ""
	if fsrv.grpcLn != nil {
		grpcAddr = fsrv.grpcLn.Addr().String()
	}
	logger.Info("feature server ready", "http", fsrv.ln.Addr().String(), "grpc", grpcAddr, "project", repo.Project,
		"views", len(repo.Views), "online_store", repo.Config.Online.Type, "listeners", gd.Listeners())
	removePorts, err := gd.writePortsFile(f.portsFile)
	if err != nil {
		grp.abandon()
		return err
	}
	defer removePorts()
	sigs := notifyStop()
	defer signal.Stop(sigs)
	defer grp.hurryOn(sigs)()
	return grp.run(ctx)
}

// featureServer is a started feature server: registry loaded, online
// store open, listener bound.
type featureServer struct {
	holder      *registry.Holder
	store       online.Store
	srv         *serving.Server
	ln          net.Listener
	tls         *tlsconfig.Server // nil without TLS
	httpSrv     *http.Server
	grpcLn      net.Listener // nil without --grpc-port
	grpcSrv     *grpc.Server
	pollEvery   time.Duration
	exitTimeout time.Duration
	logger      *slog.Logger
	reg         prometheus.Registerer
}

func (fs *featureServer) close() {
	if err := fs.store.Close(); err != nil {
		fs.logger.Warn("close online store", "err", err)
	}
}

// startFeatureServer loads the feature repository, opens its online store
// and binds the HTTP listener, with f's settings (sluice.yaml's
// feature_server under serve -c) and run's; the caller runs it with add
// and closes it.
func startFeatureServer(ctx context.Context, f *config.FeatureServer, run featureRun, tlsOpts *config.TLS, gd *guard, logger *slog.Logger, reg *prometheus.Registry) (*featureServer, error) {
	holder, err := registry.NewHolder(ctx, f.Repo, logger, reg)
	if err != nil {
		return nil, err
	}
	repo := holder.Current()
	store, err := connect.Open(ctx, repo.Config.Online, repo.Project, repo.Dir, logger, reg)
	if err != nil {
		return nil, err
	}
	fs := &featureServer{
		holder: holder, store: store, logger: logger, reg: reg,
		pollEvery:   f.RegistryPollInterval.Std(),
		exitTimeout: f.ExitTimeout.Std(),
	}
	fs.srv = serving.New(holder, store, serving.Options{EventTimeTolerance: run.tolerance}, logger, reg)
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg})
	limits := f.Limits
	h := servingapi.NewHandler(fs.srv, servingapi.HandlerOptions{
		MaxBodyBytes:  limits.MaxBodyBytes,
		MaxEntityRows: f.MaxEntityRows,
		Materializer:  &holderMaterializer{holder: holder, store: store, reg: reg},
		Metrics:       metricsHandler,
	}, logger, reg)
	// Writes (/push, /materialize*) need an operate token whenever the
	// listener reaches beyond loopback; on loopback without tokens they
	// stay open so the embedded demo needs no set-up.
	addr := net.JoinHostPort(f.Address, strconv.Itoa(f.Port))
	loopback := config.IsLoopback(addr)
	openWrites := loopback && !gd.hasTokens()
	if !loopback && !gd.hasOperateToken() {
		logger.Warn("feature writes (/push, /materialize) are refused: the listener reaches beyond loopback and no operate token is configured",
			"address", addr, "fix", "--security-config with an operate token, or --address 127.0.0.1")
	}
	openReads := f.ReadAuth != "token"
	policy, err := gd.policy(openReads, openWrites, nil)
	if err != nil {
		fs.close()
		return nil, err
	}
	tlsSrv, err := gd.tlsFor("features", tlsOpts)
	if err != nil {
		fs.close()
		return nil, err
	}
	fs.tls = tlsSrv
	fs.ln, err = gd.listen(ctx, "features", addr, tlsSrv, tlsOpts, authMode(openReads, openWrites))
	if err != nil {
		fs.close()
		return nil, err
	}
	fs.httpSrv = gd.httpServer("features", limits, featureGuard(policy, gd.audit, telemetry.TraceHTTP("features.http", h)))
	if f.GRPCPort > 0 {
		// gRPC does its own handshake through its credentials (grpcOptions).
		fs.grpcLn, err = gd.listen(ctx, "features_grpc", net.JoinHostPort(f.Address, strconv.Itoa(f.GRPCPort)), nil, tlsOpts, authMode(openReads, openWrites))
		if err != nil {
			_ = fs.ln.Close()
			fs.close()
			return nil, err
		}
		fs.grpcSrv = grpc.NewServer(gd.grpcOptions("features_grpc", limits, tlsSrv, policy, featureMethodGroup)...)
		feastpb.RegisterServingServiceServer(fs.grpcSrv, servingapi.NewGRPCService(fs.srv, servingapi.GRPCOptions{MaxEntityRows: f.MaxEntityRows, Version: Version}, logger, reg))
	}
	return fs, nil
}

// featureMethodGroup classifies the feature server's gRPC methods: Feast's
// reads need what /get-online-features needs (the read role unless reads
// are open); anything else needs operate, so an unclassified method is
// never open.
func featureMethodGroup(fullMethod string) (string, authz.Role) {
	switch fullMethod {
	case feastpb.ServingService_GetOnlineFeatures_FullMethodName, feastpb.ServingService_GetFeastServingInfo_FullMethodName:
		return "", authz.RoleRead
	}
	return "", authz.RoleOperate
}

// add adds the feature server to grp: its registry watch and listeners
// serve until the group stops; then the listeners stop taking requests
// while in-flight ones finish (for the exit timeout at most). Whatever
// was added to grp after it (the gateway in front) has stopped by then.
func (fs *featureServer) add(grp *group) {
	if fs.pollEvery > 0 {
		grp.Go(func() error { return fs.holder.Watch(grp.ctx, fs.pollEvery) })
	}
	grp.Go(func() error { return fs.srv.Run(grp.ctx) })
	if fs.grpcSrv != nil {
		grp.add(func() error {
			if err := fs.grpcSrv.Serve(fs.grpcLn); err != nil {
				return fmt.Errorf("serve grpc: %w", err)
			}
			return nil
		}, nil)
	}
	grp.add(func() error {
		if err := fs.httpSrv.Serve(fs.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	}, func(hurry context.Context) error {
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(hurry), fs.exitTimeout)
		defer cancel()
		return shutdownServers(shutCtx, fs.httpSrv, fs.grpcSrv)
	})
}
