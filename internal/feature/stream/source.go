package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Message is one event read from a source.
type Message struct {
	Data []byte
	// Seq identifies the event within its source: the same event
	// redelivered has the same Seq, two events never share one.
	Seq uint64
	// Arrival is when the source stored the event (ns since the epoch):
	// lateness is measured against it.
	Arrival int64
	ack     func() error
}

// Source is a stream of events that aggregators consume.
type Source interface {
	// Fetch returns up to n messages, waiting at most wait for them; an
	// empty batch is not an error.
	Fetch(ctx context.Context, n int, wait time.Duration) ([]Message, error)
	// Ack confirms messages whose effects are stored; unacknowledged
	// messages are delivered again.
	Ack(ctx context.Context, msgs []Message) error
	// Close releases the source.
	Close() error
}

// JetStreamOptions tune a JetStream source.
type JetStreamOptions struct {
	// AckWait is how long the server waits for an acknowledgement before
	// it delivers a message again (to this or another process). Default
	// 30s.
	AckWait time.Duration
	// MaxAckPending bounds unacknowledged messages across the
	// consumer's processes. Default 20000.
	MaxAckPending int
}

// JetStream reads a stream source through a durable pull consumer.
type JetStream struct {
	nc   *nats.Conn
	cons jetstream.Consumer
}

// OpenJetStream connects to src's server, creates its stream when it does
// not exist (file storage, the source's subject) and binds to (or
// creates) its durable consumer.
func OpenJetStream(ctx context.Context, src *feature.Source, opts JetStreamOptions, logger *slog.Logger) (*JetStream, error) {
	st := src.Stream
	if st == nil {
		return nil, fmt.Errorf("source '%s' is not a stream source", src.Name)
	}
	if opts.AckWait <= 0 {
		opts.AckWait = 30 * time.Second
	}
	if opts.MaxAckPending <= 0 {
		opts.MaxAckPending = 20000
	}
	nc, err := nats.Connect(st.URL, nats.Name("sluice-aggregator"), nats.Timeout(5*time.Second), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "err", err)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("source '%s': connect %s: %w", src.Name, st.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("source '%s': %w", src.Name, err)
	}
	s, err := js.Stream(ctx, st.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: st.Stream, Subjects: []string{st.Subject}, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, st.Stream)
		}
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("source '%s': stream %s: %w", src.Name, st.Stream, err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       st.Consumer,
		Description:   "Sluice stream feature view aggregators",
		FilterSubject: st.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       opts.AckWait,
		MaxAckPending: opts.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("source '%s': consumer %s: %w", src.Name, st.Consumer, err)
	}
	return &JetStream{nc: nc, cons: cons}, nil
}

// Fetch implements Source. It takes what the consumer has at once
// (FetchNoWait) and, when that is nothing, polls again every 20 ms until
// wait has passed: a pull that waits for a whole batch would hold the
// first events of a slow stream until the batch fills.
func (j *JetStream) Fetch(ctx context.Context, n int, wait time.Duration) ([]Message, error) {
	deadline := time.Now().Add(wait)
	for {
		batch, err := j.cons.FetchNoWait(n)
		if err != nil {
			return nil, fmt.Errorf("fetch events: %w", err)
		}
		var out []Message
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				continue // not a stream message; never acknowledged, never applied
			}
			out = append(out, Message{Data: m.Data(), Seq: md.Sequence.Stream, Arrival: md.Timestamp.UnixNano(), ack: m.Ack})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && len(out) == 0 {
			return nil, fmt.Errorf("fetch events: %w", err)
		}
		if len(out) > 0 || !time.Now().Before(deadline) {
			return out, nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Ack implements Source.
func (j *JetStream) Ack(_ context.Context, msgs []Message) error {
	var errs []error
	for _, m := range msgs {
		if m.ack != nil {
			if err := m.ack(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Pending returns how many events the consumer has not delivered yet and
// how many wait for an acknowledgement.
func (j *JetStream) Pending(ctx context.Context) (pending uint64, ackPending int, err error) {
	ci, err := j.cons.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return ci.NumPending, ci.NumAckPending, nil
}

// Close implements Source.
func (j *JetStream) Close() error {
	j.nc.Close()
	return nil
}

// Back-off bounds of DialJetStream.
const (
	dialFirstWait = 500 * time.Millisecond
	dialMaxWait   = 30 * time.Second
)

// DialJetStream is OpenJetStream for a process whose start must not wait
// for NATS: it tries until it succeeds or ctx ends, waiting twice as long
// after each failure (from 0.5s up to 30s). The first failure is logged
// as a warning, later ones at debug level; each one is counted in
// sluice_feature_stream_connect_failures_total. It returns ctx's error
// when ctx ends first.
func DialJetStream(ctx context.Context, src *feature.Source, opts JetStreamOptions, logger *slog.Logger, reg prometheus.Registerer) (*JetStream, error) {
	failures := newMetrics(reg).connect.WithLabelValues(src.Name)
	wait := dialFirstWait
	for attempt := 1; ; attempt++ {
		js, err := OpenJetStream(ctx, src, opts, logger)
		if err == nil {
			if attempt > 1 {
				logger.Info("stream source reachable", "source", src.Name, "attempts", attempt)
			}
			return js, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		failures.Inc()
		if attempt == 1 {
			logger.Warn("stream source unreachable: its stream feature views stay missing or stale; retrying in the background",
				"source", src.Name, "err", err)
		} else {
			logger.Debug("stream source still unreachable", "source", src.Name, "attempt", attempt, "err", err)
		}
		sleep(ctx, wait)
		wait = min(2*wait, dialMaxWait)
	}
}
