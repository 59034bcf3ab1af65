package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// accuracyParts are the online-accuracy components of a gateway: the
// joiner, its store and the prediction log's writer. close stops them in
// order (the joiner stores what is queued, then the log is flushed).
type accuracyParts struct {
	joiner *accuracy.Joiner
	writer *record.Writer
	sub    *accuracy.Subscriber // nil without gateway.accuracy.outcome_subject
	closer []func(context.Context) error
	// closeOnce makes close idempotent: the gateway's shutdown closes
	// the parts, and the start-up's cleanups do when the start failed.
	closeOnce sync.Once
	closeErr  error
}

// run runs the joiner and the outcome subscriber until ctx ends (the
// joiner's worker goes on until close).
func (a *accuracyParts) run(ctx context.Context) error {
	if a.sub == nil {
		return a.joiner.Run(ctx)
	}
	var g errgroup.Group
	g.Go(func() error { return a.joiner.Run(ctx) })
	g.Go(func() error { return a.sub.Run(ctx) })
	return g.Wait()
}

// close stops the parts once; later calls return the first one's error.
func (a *accuracyParts) close(ctx context.Context) error {
	a.closeOnce.Do(func() { a.closeErr = a.closeParts(ctx) })
	return a.closeErr
}

func (a *accuracyParts) closeParts(ctx context.Context) error {
	var errs []error
	if a.joiner != nil {
		errs = append(errs, a.joiner.Close(ctx))
	}
	if a.writer != nil {
		errs = append(errs, a.writer.Close(ctx))
	}
	for _, c := range a.closer {
		errs = append(errs, c(ctx))
	}
	return errors.Join(errs...)
}

// openAccuracy opens the pending store, the prediction log and the joiner
// when a service has an accuracy block; nil otherwise. Nothing runs until
// the joiner's Run.
func openAccuracy(ctx context.Context, cfg *config.Config, logger *slog.Logger, reg prometheus.Registerer) (*accuracyParts, error) {
	gc := cfg.Gateway
	if gc == nil || gc.Accuracy == nil {
		return nil, nil
	}
	used := false
	for _, s := range gc.Services {
		used = used || s.Accuracy != nil
	}
	if !used {
		return nil, nil
	}
	ac := gc.Accuracy
	parts := &accuracyParts{}
	ok := false
	defer func() {
		if !ok {
			_ = parts.close(context.Background())
		}
	}()
	log, err := openPredictionLog(ctx, gc, logger, reg)
	if err != nil {
		return nil, err
	}
	parts.writer = log
	var joiner *accuracy.Joiner
	evicted := func(e *accuracy.Entry) { joiner.Evicted(e) }
	var store accuracy.Store
	switch ac.Store {
	case "nats":
		// The cluster's NATS (and credentials) when the file has a
		// cluster section, else the recording's; accuracy.nats.url wins.
		kvo := accuracy.KVOptions{URL: gc.Recording.NATS.URL, Bucket: ac.NATS.Bucket, TTL: ac.Lookback.Std(), MaxEntries: ac.MaxPending}
		if cl := cfg.Cluster; cl != nil {
			kvo.URL, kvo.Credentials = cl.NATS.URL, cl.NATS.Credentials
			if t := cl.NATS.TLS; t != nil {
				var err error
				if kvo.TLS, err = tlsconfig.ClientConfig(*t); err != nil {
					return nil, fmt.Errorf("cluster.nats.tls: %w", err)
				}
			}
			if ac.NATS.Bucket == accuracyspec.DefaultBucket {
				// One bucket per fleet, named like the cluster's own.
				kvo.Bucket = cl.BucketPrefix + "_" + cl.Name + "_accuracy"
			}
		}
		if ac.NATS.URL != "" {
			kvo.URL = ac.NATS.URL
		}
		kv, err := accuracy.OpenKV(ctx, kvo, logger)
		if err != nil {
			return nil, fmt.Errorf("gateway.accuracy: %w", err)
		}
		store = kv
	default:
		b, err := accuracy.OpenBolt(ac.Path, ac.MaxPending, evicted)
		if err != nil {
			return nil, fmt.Errorf("gateway.accuracy: %w", err)
		}
		store = b
	}
	opts := accuracy.Options{Lookback: ac.Lookback.Std(), QueueSize: ac.QueueSize}
	if log != nil {
		opts.Log = log
	}
	joiner = accuracy.New(store, opts, logger, reg)
	parts.joiner = joiner
	if ac.OutcomeSubject != "" {
		url := gc.Recording.NATS.URL
		var nopts []nats.Option
		if cl := cfg.Cluster; cl != nil {
			url = cl.NATS.URL
			if cl.NATS.Credentials != "" {
				nopts = append(nopts, nats.UserCredentials(cl.NATS.Credentials))
			}
			if t := cl.NATS.TLS; t != nil {
				tc, err := tlsconfig.ClientConfig(*t)
				if err != nil {
					return nil, fmt.Errorf("cluster.nats.tls: %w", err)
				}
				nopts = append(nopts, nats.Secure(tc))
			}
		}
		if ac.NATS.URL != "" {
			url = ac.NATS.URL
		}
		nc, err := nats.Connect(url, append(nopts, nats.Name("sluice-outcomes"), nats.MaxReconnects(-1))...)
		if err != nil {
			return nil, fmt.Errorf("gateway.accuracy.outcome_subject: connect %s: %w", url, err)
		}
		parts.closer = append(parts.closer, func(context.Context) error { nc.Close(); return nil })
		parts.sub = accuracy.NewSubscriber(nc, ac.OutcomeSubject, joiner, logger)
	}
	ok = true
	logger.Info("online accuracy on", "store", ac.Store, "path", ac.Path, "lookback", ac.Lookback.Std().String(),
		"max_pending", ac.MaxPending, "log", ac.Log.Sink)
	return parts, nil
}

// openPredictionLog opens the durable prediction log: JSONL files, or the
// recording's NATS JetStream (stream SLUICE_PREDICTIONS) with a disk
// spool. Nil when the log is off.
func openPredictionLog(ctx context.Context, gc *config.Gateway, logger *slog.Logger, reg prometheus.Registerer) (*record.Writer, error) {
	ac := gc.Accuracy
	wopts := record.WriterOptions{QueueSize: ac.QueueSize, SinkLabel: "predictions_" + ac.Log.Sink}
	switch ac.Log.Sink {
	case "off":
		return nil, nil
	case "nats":
		rc := gc.Recording
		spool, err := record.OpenSpool(record.SpoolOptions{
			Dir: ac.Log.Dir + "/spool", MaxBytes: rc.Spool.MaxBytes, Full: record.SpoolPolicy(rc.Spool.Full),
		}, logger)
		if err != nil {
			return nil, fmt.Errorf("gateway.accuracy.log: %w", err)
		}
		nopts := record.NATSOptions{URL: rc.NATS.URL, Stream: "SLUICE_PREDICTIONS", SubjectPrefix: "sluice.predictions"}
		if t := rc.NATS.TLS; t != nil {
			if nopts.TLS, err = tlsconfig.ClientConfig(*t); err != nil {
				_ = spool.Close()
				return nil, fmt.Errorf("gateway.recording.nats.tls: %w", err)
			}
		}
		ns, err := record.NewNATSSink(ctx, nopts, logger, reg)
		if err != nil {
			_ = spool.Close()
			return nil, fmt.Errorf("gateway.accuracy.log: %w", err)
		}
		wopts.Spool, wopts.CloseTimeout = spool, rc.CloseTimeout.Std()
		return record.NewWriter(ns, wopts, logger, reg), nil
	default:
		fopts := record.FileOptions{Dir: ac.Log.Dir, Base: "predictions"}
		if a := ac.Log.Archive; a.Location != "" {
			as, err := record.NewArchivedFileSink(ctx, fopts, record.ArchiveOptions{
				Location: a.Location, Interval: a.Interval.Std(), Label: "predictions",
			}, logger, reg)
			if err != nil {
				return nil, fmt.Errorf("gateway.accuracy.log.archive: %w", err)
			}
			return record.NewWriter(as, wopts, logger, reg), nil
		}
		fs, err := record.NewFileSink(fopts, logger)
		if err != nil {
			return nil, fmt.Errorf("gateway.accuracy.log: %w", err)
		}
		return record.NewWriter(fs, wopts, logger, reg), nil
	}
}
