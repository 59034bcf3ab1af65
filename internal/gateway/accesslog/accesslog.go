// Package accesslog writes the gateway's sampled access log as JSON lines.
//
// Sampling policy: a request that failed (status >= 400 or an
// error set) is logged with probability ErrorsPercent (default 100 %), a
// successful one with probability SuccessPercent (default 1 %). The choice
// is not random: Sampled hashes the request id with the gateway's stable
// hash (match.Hash: FNV-1a 64, then MurmurHash3's fmix64) and maps the top
// 53 bits to [0,1); a request is chosen when that value is below the rate.
// So every replica picks the same requests and a request's entries on
// different hops line up. Requests therefore need a unique id; all requests
// without one share a single decision.
//
// Logging never blocks a request. Log puts the entry on a bounded queue read
// by one writer, Run, which encodes entries into a buffered writer and
// flushes whenever the queue runs empty. When the queue is full the entry is
// dropped and counted in sluice_gateway_access_log_dropped_total. Close stops
// accepting entries, drains everything queued before it, and flushes. New
// starts no goroutine: the owner runs Run on one of its own (Close then
// waits for it), or never does, and Close writes the queue itself.
package accesslog

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-ml/sluice/internal/telemetry"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/match"
)

// Default sampling percentages.
const (
	DefaultSuccessPercent = 1.0
	DefaultErrorsPercent  = 100.0
)

// DefaultQueueSize is the number of entries that may wait for the writer.
const DefaultQueueSize = 4096

// Entry is one access-log line.
type Entry struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	ClientID  string    `json:"client_id"`
	Service   string    `json:"service"`
	Route     string    `json:"route"`
	Backend   string    `json:"backend"`
	Endpoint  string    `json:"endpoint"`
	Model     string    `json:"model"`
	Version   string    `json:"version"`
	Source    string    `json:"source"` // who answered: backend, fallback, cache...
	Status    int       `json:"status"`
	Reason    string    `json:"reason,omitempty"`
	// FallbackCause is why the fallback rule answered in place of a
	// model that could not be reached (fallback.on_upstream_failure).
	FallbackCause string  `json:"fallback_cause,omitempty"`
	Error         string  `json:"error,omitempty"`
	LatencyMS     float64 `json:"latency_ms"`
	Retries       int     `json:"retries"`
	RequestBytes  int64   `json:"request_bytes"`
	ResponseBytes int64   `json:"response_bytes"`
	TraceID       string  `json:"trace_id,omitempty"`
}

// IsError reports whether the entry is a failed request: status >= 400 or an error set.
func (e *Entry) IsError() bool { return e.Status >= 400 || e.Error != "" }

// Options configures a Logger.
type Options struct {
	// Sampling holds the percentages; nil fields take the defaults.
	Sampling config.LogSampling
	// QueueSize bounds the entries waiting for the writer; 0 means DefaultQueueSize.
	QueueSize int
}

// Logger is an asynchronous, sampled JSON-lines access logger. It is safe
// for concurrent use.
type Logger struct {
	successRate float64
	errorRate   float64
	log         *slog.Logger
	metrics     *metrics

	w      io.Writer
	mu     sync.RWMutex // guards closed against the close of queue
	closed bool
	queue  chan Entry
	writer atomic.Bool   // the writer's role is taken, by Run or by Close
	done   chan struct{} // closed when the writer finished
	err    error         // first write error; read after done is closed
}

// New builds a Logger writing to w; Run writes. A nil logger discards; a
// nil reg leaves metrics unregistered.
func New(w io.Writer, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Logger, error) {
	success, err := percent(opts.Sampling.SuccessPercent, DefaultSuccessPercent, "success_percent")
	if err != nil {
		return nil, err
	}
	errs, err := percent(opts.Sampling.ErrorsPercent, DefaultErrorsPercent, "errors_percent")
	if err != nil {
		return nil, err
	}
	if opts.QueueSize < 0 {
		return nil, fmt.Errorf("queue size %d: must not be negative", opts.QueueSize)
	}
	if opts.QueueSize == 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Logger{
		successRate: success / 100,
		errorRate:   errs / 100,
		log:         logger,
		metrics:     newMetrics(reg),
		w:           w,
		queue:       make(chan Entry, opts.QueueSize),
		done:        make(chan struct{}),
	}
	return l, nil
}

func percent(p *float64, def float64, name string) (float64, error) {
	if p == nil {
		return def, nil
	}
	if *p < 0 || *p > 100 || *p != *p {
		return 0, fmt.Errorf("%s %v: must be between 0 and 100", name, *p)
	}
	return *p, nil
}

// Sampled reports whether the request with this id falls in the sampled
// share rate (a fraction in [0,1]). The decision depends only on the id and
// the rate, so it is the same on every call, Logger and replica.
func Sampled(requestID string, rate float64) bool {
	if rate <= 0 {
		return false
	}
	if rate >= 1 {
		return true
	}
	// The top 53 bits give a uniform float64 in [0,1).
	x := float64(match.Hash(requestID)>>11) / (1 << 53)
	return x < rate
}

// Log records e if the sampling policy picks it and reports whether it was
// queued. It never blocks: when the queue is full, or the Logger is closed,
// the entry is dropped and counted. A zero Time is set to now.
func (l *Logger) Log(e Entry) bool {
	isErr := e.IsError()
	rate := l.successRate
	if isErr {
		rate = l.errorRate
	}
	if !Sampled(e.RequestID, rate) {
		return false
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.metrics.dropped.Inc()
		return false
	}
	select {
	case l.queue <- e:
		return true
	default:
		l.metrics.dropped.Inc()
		return false
	}
}

// Run writes the queued entries until Close, and returns once every entry
// queued before Close is written and flushed. It returns at once when
// another Run, or Close, took the writer's role first.
func (l *Logger) Run() {
	if l.writer.CompareAndSwap(false, true) {
		l.run(l.w)
	}
}

// Close stops accepting entries, waits until every entry queued before it is
// written and flushed, and returns the first write error. Without a Run,
// Close writes them itself. If ctx ends first (a writer that never
// returns), Close returns ctx's error and Run finishes on its own once the
// writer returns.
func (l *Logger) Close(ctx context.Context) error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.queue)
	}
	l.mu.Unlock()
	if l.writer.CompareAndSwap(false, true) {
		l.run(l.w) // no Run: the queue is closed, so this ends
	}
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return fmt.Errorf("drain access log: %w", ctx.Err())
	}
}

func (l *Logger) run(w io.Writer) {
	defer close(l.done)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	var errs []error
	fail := func(err error) {
		if len(errs) == 0 {
			l.log.Warn("access log write failed", "err", err)
		}
		errs = append(errs, err)
	}
	for e := range l.queue {
		kind := kindSampled
		if e.IsError() {
			kind = kindError
		}
		if err := enc.Encode(&e); err != nil {
			fail(fmt.Errorf("encode access log entry: %w", err))
			l.metrics.writeErrors.Inc()
		} else {
			l.metrics.entries.WithLabelValues(kind).Inc()
		}
		if len(l.queue) == 0 {
			if err := bw.Flush(); err != nil {
				fail(fmt.Errorf("write access log: %w", err))
				l.metrics.writeErrors.Inc()
				// bufio keeps failing after an error; start afresh so a
				// transient error does not silence the log for good.
				bw.Reset(w)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		fail(fmt.Errorf("write access log: %w", err))
		l.metrics.writeErrors.Inc()
	}
	if len(errs) > 0 {
		l.err = errs[0]
	}
}

const (
	kindSampled = "sampled"
	kindError   = "error"
)

type metrics struct {
	entries     *prometheus.CounterVec
	dropped     prometheus.Counter
	writeErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		entries: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_access_log_entries_total",
			Help: "Access-log entries written, by kind (sampled success or error).",
		}, []string{"kind"})),
		dropped: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_access_log_dropped_total",
			Help: "Access-log entries chosen by sampling but dropped because the writer could not keep up or the log was closed.",
		})),
		writeErrors: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_access_log_write_errors_total",
			Help: "Failed access-log encodes or writes.",
		})),
	}
	m.entries.WithLabelValues(kindSampled)
	m.entries.WithLabelValues(kindError)
	return m
}
