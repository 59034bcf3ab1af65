package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/connect"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/stream"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// aggregateFlags tune the stream aggregators, in `features aggregate`
// and in `feature-server --aggregate`.
type aggregateFlags struct {
	sources []string
	ackWait time.Duration
	batch   int
	// background connects to NATS without holding up the start (serve -c).
	background bool
}

func (f *aggregateFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.sources, "source", nil, "stream sources to aggregate, comma separated or repeated (default: every stream source an online stream feature view reads)")
	cmd.Flags().DurationVar(&f.ackWait, "ack-wait", defaultAggregateAckWait, "how long NATS waits for an event's acknowledgement before delivering it again (to this or another aggregator)")
	cmd.Flags().IntVar(&f.batch, "batch", defaultAggregateBatch, "events fetched and written per batch")
}

// streamSources returns the stream sources to aggregate.
func (f *aggregateFlags) streamSources(repo *registry.Repo) ([]string, error) {
	var all []string
	for _, name := range slices.Sorted(maps.Keys(repo.Sources)) {
		if repo.Sources[name].Kind == feature.SourceStream && len(stream.Views(repo, name)) > 0 {
			all = append(all, name)
		}
	}
	if len(f.sources) == 0 {
		return all, nil
	}
	for _, s := range f.sources {
		if !slices.Contains(all, s) {
			return nil, fmt.Errorf("--source %s: not a stream source that an online stream feature view reads (those: %v)", s, all)
		}
	}
	return f.sources, nil
}

// The stream aggregators' defaults: "sluice features aggregate" flags'
// and the aggregators the feature server and the chain run in process.
const (
	defaultAggregateAckWait = 30 * time.Second
	defaultAggregateBatch   = 500
)

// startAggregators opens each source's durable consumer and runs its
// aggregator in g until gctx ends. The returned func closes the sources.
// With background set (sluice serve -c), nothing waits for NATS: each
// source connects in g, retrying with back-off (stream.DialJetStream),
// and its views stay missing or stale until it does; without it, an
// unreachable source fails the start.
func (f *aggregateFlags) startAggregators(ctx, gctx context.Context, g *errgroup.Group, repo *registry.Repo, store online.Store,
	logger *slog.Logger, reg prometheus.Registerer,
) (func(), error) {
	names, err := f.streamSources(repo)
	if err != nil {
		return nil, err
	}
	var (
		mu     sync.Mutex
		srcs   []*stream.JetStream
		closed bool
	)
	// keep records an open source; false when closeAll has run already.
	keep := func(js *stream.JetStream) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return false
		}
		srcs = append(srcs, js)
		return true
	}
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for _, s := range srcs {
			_ = s.Close() // closing a NATS connection reports nothing useful
		}
	}
	opts := stream.JetStreamOptions{AckWait: f.ackWait}
	run := func(name string, js *stream.JetStream) error {
		a, err := stream.New(repo, name, js, store, stream.Options{Batch: f.batch}, logger.With("source", name), reg)
		if err != nil {
			return err
		}
		logger.Info("stream aggregator ready", "source", name, "views", stream.Views(repo, name), "consumer", repo.Sources[name].Stream.Consumer)
		g.Go(func() error { return a.Run(gctx) })
		return nil
	}
	for _, name := range names {
		if f.background {
			g.Go(func() error {
				js, err := stream.DialJetStream(gctx, repo.Sources[name], opts, logger, reg)
				if err != nil {
					return nil //nolint:nilerr // it fails only once gctx ended: shutting down
				}
				if !keep(js) {
					_ = js.Close()
					return nil
				}
				return run(name, js)
			})
			continue
		}
		js, err := stream.OpenJetStream(ctx, repo.Sources[name], opts, logger)
		if err != nil {
			closeAll()
			return nil, err
		}
		keep(js)
		if err := run(name, js); err != nil {
			closeAll()
			return nil, err
		}
	}
	return closeAll, nil
}

func newFeaturesAggregateCmd() *cobra.Command {
	var (
		f        aggregateFlags
		repoDir  string
		metrics  string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "aggregate",
		Short: "Consume stream sources and keep their stream feature views' window aggregations in the online store",
		Long: `Consume each stream source's events from NATS JetStream and keep the time
tiles of the stream feature views that read it in the online store, where
the feature server combines them into window aggregations at read time.

Every process started for a source binds to the source's durable consumer,
so several processes share its events; an event is acknowledged only after
its tiles are written, and a tile remembers the events it applied, so a
crash or a redelivery never loses an event or counts one twice. The
embedded online store is one process's file: with it, run the aggregators
inside the feature server (sluice feature-server --aggregate); with Redis,
run as many aggregate processes as the stream needs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), telemetry.LogOptions{Format: "text", Level: logLevel})
			if err != nil {
				return err
			}
			repo, err := registry.Load(ctx, repoDir)
			if err != nil {
				return err
			}
			reg := telemetry.NewRegistry()
			store, err := connect.Open(ctx, repo.Config.Online, repo.Project, repo.Dir, logger, reg)
			if err != nil {
				return err
			}
			defer func() {
				if err := store.Close(); err != nil {
					logger.Warn("close online store", "err", err)
				}
			}()
			g, gctx := errgroup.WithContext(ctx)
			if metrics != "" {
				ms, err := telemetry.NewMetricsServer(ctx, metrics, reg, logger)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "metrics: http://%s/metrics\n", ms.Addr())
				g.Go(func() error { return ms.Run(gctx) })
			}
			closeAll, err := f.startAggregators(ctx, gctx, g, repo, store, logger, reg)
			if err != nil {
				return err
			}
			defer closeAll()
			fmt.Fprintln(cmd.OutOrStdout(), "aggregating")
			err = g.Wait()
			if err != nil && errors.Is(err, context.Canceled) {
				err = nil
			}
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&repoDir, "repo", ".", "feature repository directory (holds feature_store.yaml)")
	cmd.Flags().StringVar(&metrics, "metrics-addr", "", "address serving /metrics (e.g. 127.0.0.1:9464); empty for none")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
