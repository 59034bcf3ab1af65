package record

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// NATS defaults.
const (
	DefaultNATSURL       = "nats://127.0.0.1:4222"
	DefaultStream        = "SLUICE_RECORDINGS"
	DefaultSubjectPrefix = "sluice.recordings"
	DefaultMaxPending    = 4096
	DefaultAckTimeout    = 10 * time.Second
	DefaultRetries       = 3
)

// NATSOptions configures a NATSSink and a StreamReader.
type NATSOptions struct {
	// URL of the NATS server. Default DefaultNATSURL.
	URL string
	// Stream is the JetStream stream. Default DefaultStream.
	Stream string
	// SubjectPrefix: a record goes to <SubjectPrefix>.<service>, and a
	// stream the sink creates takes <SubjectPrefix>.>. Default
	// DefaultSubjectPrefix.
	SubjectPrefix string

	// The fields below apply to the sink only.

	// MaxPending bounds the publishes awaiting an ack; Write waits (up to
	// AckTimeout) for room. Default DefaultMaxPending.
	MaxPending int
	// AckTimeout is how long a publish may wait for its ack before it is
	// published again. Default DefaultAckTimeout.
	AckTimeout time.Duration
	// Retries is how often a publish whose ack failed or timed out is
	// published again before it counts as lost. Default DefaultRetries;
	// negative disables retries.
	Retries int
	// StreamMaxAge and StreamMaxBytes limit a stream the sink creates
	// (0: unlimited). An existing stream keeps its configuration.
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
}

func (o *NATSOptions) defaults() {
	if o.URL == "" {
		o.URL = DefaultNATSURL
	}
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = DefaultSubjectPrefix
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = DefaultAckTimeout
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
}

// Subject returns the subject records of service are published to:
// SubjectPrefix, a dot and service with characters that NATS subjects
// cannot hold (., *, >, white space, control characters) replaced by '_'.
func (o NATSOptions) Subject(service string) string {
	prefix := o.SubjectPrefix
	if prefix == "" {
		prefix = DefaultSubjectPrefix
	}
	return prefix + "." + subjectToken(service)
}

func subjectToken(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// NATSStats are a NATSSink's publish counts.
type NATSStats struct {
	Published uint64 // records Write took (handed to the connection or queued for a retry)
	Acked     uint64 // records the stream acknowledged
	Retried   uint64 // publishes repeated: the ack failed or timed out, or the connection refused it
	Lost      uint64 // records whose retries were used up
	Pending   int    // publishes awaiting an ack, plus retries not yet sent
}

// NATSSink publishes records to a JetStream stream, one message per record
// on <SubjectPrefix>.<service>, asynchronously: Write returns once the
// records are handed to the connection, and acks are tracked in the
// background. A publish whose ack fails or times out (a reconnect fails
// every pending ack) is published again on the next Write or in Close, up
// to Retries times; so is one the connection refuses while reconnecting.
// Each record carries a Nats-Msg-Id unique to this sink, so the stream
// discards a retry of a publish it did store (within its duplicate window,
// 2 minutes by default). Retries can put a record behind later ones in the
// stream.
type NATSSink struct {
	opts     NATSOptions
	log      *slog.Logger
	m        *natsMetrics
	nc       *nats.Conn
	js       jetstream.JetStream
	idPrefix string
	seq      atomic.Uint64

	mu       sync.Mutex // protects retry and attempts
	retry    []*nats.Msg
	attempts map[*nats.Msg]int

	published, acked, retried, lost atomic.Uint64
	closed                          atomic.Bool
}

// NewNATSSink connects to opts.URL and makes sure the stream exists,
// creating it with subjects <SubjectPrefix>.> when it does not; an existing
// stream must already take those subjects. A nil logger discards; a nil
// reg registers nothing.
func NewNATSSink(ctx context.Context, opts NATSOptions, logger *slog.Logger, reg prometheus.Registerer) (*NATSSink, error) {
	opts.defaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	s := &NATSSink{
		opts:     opts,
		log:      logger.With("component", "record_nats_sink", "stream", opts.Stream),
		m:        newNATSMetrics(reg, opts.Stream),
		idPrefix: hex.EncodeToString(id[:]) + "-",
		attempts: make(map[*nats.Msg]int),
	}
	nc, err := connect(ctx, opts.URL, s.log)
	if err != nil {
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	s.nc = nc
	s.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.MaxPending),
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(s.onAck),
		jetstream.WithPublishAsyncErrHandler(s.onAckError),
	)
	if err == nil {
		err = s.ensureStream(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	return s, nil
}

// connect dials url, bounded by ctx's deadline when it has one, and
// reconnects forever afterwards.
func connect(ctx context.Context, url string, log *slog.Logger) (*nats.Conn, error) {
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url,
		nats.Name("sluice-recordings"),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("nats connection error", "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", url, err)
	}
	return nc, nil
}

func (s *NATSSink) ensureStream(ctx context.Context) error {
	want := s.opts.SubjectPrefix + ".>"
	st, err := s.js.Stream(ctx, s.opts.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        s.opts.Stream,
			Description: "Sluice recordings (shadow traffic, replays)",
			Subjects:    []string{want},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      s.opts.StreamMaxAge,
			MaxBytes:    cmpOr(s.opts.StreamMaxBytes, -1),
			Duplicates:  2 * time.Minute,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = s.js.Stream(ctx, s.opts.Stream) // another replica won the race
		}
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.opts.Stream, err)
	}
	probe := s.opts.Subject("probe")
	for _, subj := range st.CachedInfo().Config.Subjects {
		if subjectMatches(subj, probe) {
			return nil
		}
	}
	return fmt.Errorf("stream %s takes subjects %v, not %s", s.opts.Stream, st.CachedInfo().Config.Subjects, want)
}

func cmpOr(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// subjectMatches reports whether subject matches pattern, which may use
// the * and > wildcards.
func subjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case p != "*" && p != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}

func (s *NATSSink) onAck(_ jetstream.JetStream, msg *nats.Msg, _ *jetstream.PubAck) {
	s.acked.Add(1)
	s.m.acked.Inc()
	s.mu.Lock()
	if len(s.attempts) > 0 {
		delete(s.attempts, msg)
	}
	s.mu.Unlock()
}

// onAckError queues msg for another publish. It may run with the
// JetStream publisher's lock held, so it must not publish itself.
func (s *NATSSink) onAckError(_ jetstream.JetStream, msg *nats.Msg, err error) {
	s.mu.Lock()
	n := s.attempts[msg] + 1
	if n > s.opts.Retries {
		delete(s.attempts, msg)
		s.mu.Unlock()
		s.lost.Add(1)
		s.m.lost.Inc()
		s.log.Warn("recording publish lost", "subject", msg.Subject, "attempts", n, "err", err)
		return
	}
	s.attempts[msg] = n
	s.retry = append(s.retry, msg)
	s.mu.Unlock()
	s.retried.Add(1)
	s.m.retried.Inc()
}

// Write publishes recs and returns once they are handed to the
// connection. A publish the connection refuses while it is not closed (a
// broken pipe before the disconnect is noticed, no room for AckTimeout) is
// queued for another attempt, as long as the queue of retries holds fewer
// than MaxPending records; otherwise Write returns early with the count
// taken so far. It also returns early when ctx ends.
func (s *NATSSink) Write(ctx context.Context, recs []*Record) (int, error) {
	if s.closed.Load() {
		return 0, errors.New("nats sink: closed")
	}
	_ = s.republish() // what it cannot send stays queued
	var encErrs []error
	n := 0
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return n, errors.Join(append(encErrs, fmt.Errorf("nats sink: %w", context.Cause(ctx)))...)
		}
		b, err := Encode(r)
		if err != nil {
			encErrs = append(encErrs, err)
			continue
		}
		// The id is the same for every attempt at this record, so the
		// stream drops a retry of a publish it did store.
		msg := &nats.Msg{
			Subject: s.opts.Subject(r.Service),
			Data:    b,
			Header:  nats.Header{jetstream.MsgIDHeader: []string{s.idPrefix + strconv.FormatUint(s.seq.Add(1), 36)}},
		}
		if err := s.publish(msg); err != nil && (s.nc.IsClosed() || !s.queueRetry(msg)) {
			return n, errors.Join(append(encErrs, fmt.Errorf("nats sink: publish: %w", err))...)
		}
		n++
		s.published.Add(1)
	}
	return n, errors.Join(encErrs...)
}

func (s *NATSSink) publish(msg *nats.Msg) error {
	_, err := s.js.PublishMsgAsync(msg, jetstream.WithStallWait(s.opts.AckTimeout))
	return err
}

// queueRetry queues msg, refused by the connection, for another attempt,
// unless the queue is full.
func (s *NATSSink) queueRetry(msg *nats.Msg) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Retries < 0 || len(s.retry) >= s.opts.MaxPending {
		return false
	}
	s.attempts[msg]++
	s.retry = append(s.retry, msg)
	s.retried.Add(1)
	s.m.retried.Inc()
	return true
}

// republish sends the queued retries again; those it could not send stay
// queued.
func (s *NATSSink) republish() error {
	s.mu.Lock()
	msgs := s.retry
	s.retry = nil
	s.mu.Unlock()
	for i, m := range msgs {
		if err := s.publish(m); err != nil {
			s.mu.Lock()
			s.retry = append(msgs[i:], s.retry...)
			s.mu.Unlock()
			return fmt.Errorf("nats sink: republish: %w", err)
		}
	}
	return nil
}

// Stats returns the sink's publish counts.
func (s *NATSSink) Stats() NATSStats {
	s.mu.Lock()
	queued := len(s.retry)
	s.mu.Unlock()
	return NATSStats{
		Published: s.published.Load(),
		Acked:     s.acked.Load(),
		Retried:   s.retried.Load(),
		Lost:      s.lost.Load(),
		Pending:   s.js.PublishAsyncPending() + queued,
	}
}

// Close waits, bounded by ctx, until every publish is acknowledged,
// publishing failed ones again as needed, then closes the connection. Its
// error reports the records not acknowledged and those lost.
func (s *NATSSink) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	defer s.nc.Close()
	var rerr error
	for ctx.Err() == nil {
		rerr = s.republish()
		if s.Stats().Pending == 0 {
			break
		}
		if rerr != nil {
			// The connection refuses publishes (reconnecting): try again
			// shortly rather than spin.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		select {
		case <-s.js.PublishAsyncComplete():
		case <-ctx.Done():
		}
	}
	st := s.Stats()
	if st.Pending == 0 && st.Lost == 0 {
		return nil
	}
	err := fmt.Errorf("nats sink: %d records not acknowledged, %d lost", st.Pending, st.Lost)
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", err, context.Cause(ctx))
	}
	return errors.Join(err, rerr)
}
