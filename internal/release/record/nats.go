package record

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
	DefaultAckTimeout    = 5 * time.Second
	DefaultRetries       = 3
	// DefaultDuplicateWindow is the duplicate window of a stream the sink
	// creates: a record published again (a retry, a spool drained after a
	// restart) within it is stored once.
	DefaultDuplicateWindow = 10 * time.Minute
)

// natsWriteTimeout bounds one write to the NATS connection. A server that
// stops reading (hung, SIGSTOP) then fails the connection within it
// instead of holding publishes (and Close) for the client's default
// minute.
const natsWriteTimeout = 2 * time.Second

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
	// TLS, when set, makes the connection TLS with it (mTLS when it
	// presents a client certificate); nil leaves it to the URL (tls://
	// means TLS with the system roots).
	TLS *tls.Config

	// The fields below apply to the sink only.

	// MaxPending bounds the publishes awaiting an ack; a publish waits (up
	// to AckTimeout) for room. Default DefaultMaxPending.
	MaxPending int
	// AckTimeout is how long a publish waits for its ack before it counts
	// as failed. Default DefaultAckTimeout.
	AckTimeout time.Duration
	// Retries is how often Write publishes a record whose publish failed
	// again before it gives up on it. Default DefaultRetries; negative:
	// none. (A Writer does not use it: what fails goes to its spool.)
	Retries int
	// StreamMaxAge and StreamMaxBytes limit a stream the sink creates
	// (0: unlimited). An existing stream keeps its configuration.
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
	// DuplicateWindow is the duplicate window of a stream the sink creates.
	// Default DefaultDuplicateWindow. An existing stream keeps its own.
	DuplicateWindow time.Duration
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
	if o.DuplicateWindow <= 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
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
	Published  uint64 // messages handed to the connection, retries included
	Acked      uint64 // publishes the stream acknowledged as new messages
	Duplicates uint64 // publishes acknowledged as already held (a retry of a stored record): stored once
	Failed     uint64 // publishes refused by the connection or whose ack failed or timed out
}

// NATSSink publishes records to a JetStream stream, one message per record
// on <SubjectPrefix>.<service>. A write publishes its records
// asynchronously and then waits for their acks (bounded by AckTimeout and
// its context), so a record counts as stored only once the stream
// acknowledged it. Each record carries a Nats-Msg-Id, the same for every
// attempt at it, so the stream stores a record published again within its
// duplicate window once.
//
// The connection reconnects for ever; while it is down, publishes fail at
// once (no client-side reconnect buffer: the Writer's spool is the
// buffer), and a server that stops reading fails the connection within
// seconds. Acks pending when the connection drops fail.
type NATSSink struct {
	opts     NATSOptions
	log      *slog.Logger
	m        *natsMetrics
	nc       *nats.Conn
	js       jetstream.JetStream
	idPrefix string
	seq      atomic.Uint64
	window   time.Duration // the stream's duplicate window

	published, acked, duplicates, failed atomic.Uint64
	closed                               atomic.Bool
}

// NewNATSSink connects to opts.URL and makes sure the stream exists,
// creating it with subjects <SubjectPrefix>.> when it does not; an existing
// stream must already take those subjects. A nil logger discards; a nil
// reg registers nothing. The metrics are registered before it connects.
func NewNATSSink(ctx context.Context, opts NATSOptions, logger *slog.Logger, reg prometheus.Registerer) (*NATSSink, error) {
	opts.defaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &NATSSink{
		opts:     opts,
		log:      logger.With("component", "record_nats_sink", "stream", opts.Stream),
		m:        newNATSMetrics(reg, opts.Stream),
		idPrefix: newIDPrefix(),
	}
	nc, err := connect(ctx, opts.URL, s.log,
		secure(opts.TLS),
		nats.FlusherTimeout(natsWriteTimeout),
		nats.ReconnectOnFlusherError(),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(5*time.Second),
		nats.MaxPingsOutstanding(2),
	)
	if err != nil {
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	s.nc = nc
	s.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.MaxPending),
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
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

// newIDPrefix returns a random prefix for dedup ids: ids are the prefix and
// a sequence number, unique across processes and restarts.
func newIDPrefix() string {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return hex.EncodeToString(id[:]) + "-"
}

// secure is the connection option for cfg: TLS with it, or nothing.
func secure(cfg *tls.Config) nats.Option {
	return func(o *nats.Options) error {
		if cfg == nil {
			return nil
		}
		return nats.Secure(cfg)(o)
	}
}

// connect dials url, bounded by ctx's deadline when it has one, and
// reconnects forever afterwards.
func connect(ctx context.Context, url string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name("sluice-recordings"),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("nats connection error", "err", err)
		}),
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
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
			Duplicates:  s.opts.DuplicateWindow,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = s.js.Stream(ctx, s.opts.Stream) // another replica won the race
		}
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.opts.Stream, err)
	}
	cfg := st.CachedInfo().Config
	s.window = cfg.Duplicates
	probe := s.opts.Subject("probe")
	for _, subj := range cfg.Subjects {
		if subjectMatches(subj, probe) {
			return nil
		}
	}
	return fmt.Errorf("stream %s takes subjects %v, not %s", s.opts.Stream, cfg.Subjects, want)
}

// DuplicateWindow returns the stream's duplicate window: a record
// published again within it (a retry, a spool drained after a restart) is
// stored once; later, a record whose first publish was stored but not
// acknowledged can be stored twice.
func (s *NATSSink) DuplicateWindow() time.Duration { return s.window }

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

// Write publishes recs and waits for their acks. A record whose publish
// fails (the connection is down, no ack within AckTimeout, no stream
// answering) is published again, with the same dedup id, up to Retries
// times with a short back-off, while ctx lasts. It returns the number of
// records the stream stored; when err is set, the records not stored need
// not be the last ones. A record that cannot be encoded fails alone.
func (s *NATSSink) Write(ctx context.Context, recs []*Record) (int, error) {
	if s.closed.Load() {
		return 0, errors.New("nats sink: closed")
	}
	var encErrs []error
	es := make([]entry, 0, len(recs))
	for _, r := range recs {
		b, err := Encode(r)
		if err != nil {
			encErrs = append(encErrs, err)
			continue
		}
		es = append(es, entry{id: s.idPrefix + strconv.FormatUint(s.seq.Add(1), 36), service: r.Service, data: b})
	}
	stored := make([]bool, len(es))
	todo := es
	idx := make([]int, len(es)) // todo[j] is es[idx[j]]
	for i := range idx {
		idx[i] = i
	}
	backoff := 100 * time.Millisecond
	var err error
	for attempt := 0; len(todo) > 0; attempt++ {
		ok := make([]bool, len(todo))
		err = s.writeEntries(ctx, todo, ok)
		var nextTodo []entry
		var nextIdx []int
		for j, done := range ok {
			if done {
				stored[idx[j]] = true
			} else {
				nextTodo = append(nextTodo, todo[j])
				nextIdx = append(nextIdx, idx[j])
			}
		}
		todo, idx = nextTodo, nextIdx
		if len(todo) == 0 || attempt >= s.opts.Retries || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	n := 0
	for _, ok := range stored {
		if ok {
			n++
		}
	}
	if len(todo) > 0 {
		encErrs = append(encErrs, fmt.Errorf("nats sink: %d of %d records not stored: %w", len(todo), len(es), err))
	}
	return n, errors.Join(encErrs...)
}

// writeEntries publishes es asynchronously, then waits for each ack (each
// bounded by AckTimeout) until ctx ends. Once the connection refuses a
// publish for being down, the rest are not tried.
func (s *NATSSink) writeEntries(ctx context.Context, es []entry, stored []bool) error {
	if s.closed.Load() {
		return errors.New("nats sink: closed")
	}
	stall := s.opts.AckTimeout
	if d, ok := ctx.Deadline(); ok {
		stall = max(min(stall, time.Until(d)), time.Millisecond)
	}
	futures := make([]jetstream.PubAckFuture, len(es))
	var firstErr error
	fail := func(err error) {
		s.failed.Add(1)
		s.m.failed.Inc()
		if firstErr == nil {
			firstErr = err
		}
	}
	for i, e := range es {
		if err := ctx.Err(); err != nil {
			fail(fmt.Errorf("nats sink: %w", context.Cause(ctx)))
			break
		}
		msg := &nats.Msg{
			Subject: s.opts.Subject(e.service),
			Data:    e.data,
			Header:  nats.Header{jetstream.MsgIDHeader: []string{e.id}},
		}
		f, err := s.js.PublishMsgAsync(msg, jetstream.WithStallWait(stall))
		if err != nil {
			fail(fmt.Errorf("nats sink: publish: %w", err))
			if connDown(err) {
				break
			}
			continue
		}
		s.published.Add(1)
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			stored[i] = true
			if ack != nil && ack.Duplicate {
				s.duplicates.Add(1)
				s.m.duplicates.Inc()
			} else {
				s.acked.Add(1)
				s.m.acked.Inc()
			}
		case err := <-f.Err():
			fail(fmt.Errorf("nats sink: ack: %w", err))
		case <-ctx.Done():
			// The rest are in doubt: the stream may store them yet. They
			// count as not stored; their dedup ids absorb a second publish.
			for range futures[i:] {
				s.failed.Add(1)
				s.m.failed.Inc()
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("nats sink: waiting for acks: %w", context.Cause(ctx))
			}
			return firstErr
		}
	}
	return firstErr
}

// connDown reports a publish error meaning the connection takes nothing
// now, so the rest of a batch need not be tried.
func connDown(err error) bool {
	return errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrTooManyStalledMsgs) || errors.Is(err, nats.ErrConnectionDraining)
}

// Stats returns the sink's publish counts.
func (s *NATSSink) Stats() NATSStats {
	return NATSStats{
		Published:  s.published.Load(),
		Acked:      s.acked.Load(),
		Duplicates: s.duplicates.Load(),
		Failed:     s.failed.Load(),
	}
}

// Close closes the connection. Writes wait for their acks, so nothing is
// left pending; it does not wait on ctx.
func (s *NATSSink) Close(context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.nc.Close()
	return nil
}
