package record

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Writer defaults.
const (
	DefaultQueueSize = 4096
	DefaultBatchSize = 256
)

// WriterOptions configures a Writer.
type WriterOptions struct {
	// QueueSize bounds the records accepted but not yet handed to the sink.
	// Default DefaultQueueSize.
	QueueSize int
	// BatchSize bounds the records per Sink.Write. Default DefaultBatchSize.
	BatchSize int
	// SinkLabel is the "sink" label of the writer's metrics, e.g. "jsonl" or
	// "nats". Default "default".
	SinkLabel string
}

// WriterStats are a Writer's counts since it started.
type WriterStats struct {
	Accepted uint64 `json:"accepted"` // Offer returned true
	Dropped  uint64 `json:"dropped"`  // Offer returned false: queue full or writer closed
	Written  uint64 `json:"written"`  // stored by the sink
	Failed   uint64 `json:"failed"`   // accepted, but the sink failed them or Close gave up on them
}

// Writer puts a bounded queue in front of a Sink so that the request path
// never waits for storage: Offer hands a record over or drops it, and a
// background goroutine writes the queue to the sink in batches.
type Writer struct {
	sink Sink
	opts WriterOptions
	log  *slog.Logger
	m    *writerMetrics

	mu     sync.RWMutex // protects closed and sends on queue against close(queue)
	closed bool
	queue  chan *Record

	ctx    context.Context // for sink writes; cancelled when Close gives up
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when run returns

	closeOnce sync.Once
	closeErr  error
	closedCh  chan struct{} // closed when the first Close returns

	accepted, dropped, written, failed atomic.Uint64
}

// NewWriter starts a Writer in front of sink; Close stops it and closes the
// sink. A nil logger discards; a nil reg registers nothing.
func NewWriter(sink Sink, opts WriterOptions, logger *slog.Logger, reg prometheus.Registerer) *Writer {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.SinkLabel == "" {
		opts.SinkLabel = "default"
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	w := &Writer{
		sink:     sink,
		opts:     opts,
		log:      logger.With("component", "record_writer", "sink", opts.SinkLabel),
		m:        newWriterMetrics(reg, opts.SinkLabel),
		queue:    make(chan *Record, opts.QueueSize),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		closedCh: make(chan struct{}),
	}
	go w.run()
	return w
}

// Offer queues rec for writing and reports whether it was accepted. It
// never blocks: when the queue is full, or the writer is closed, it drops
// rec and counts it. An accepted record belongs to the writer; the caller
// must not modify it afterwards. A nil rec is dropped.
func (w *Writer) Offer(rec *Record) bool {
	if rec != nil {
		w.mu.RLock()
		if !w.closed {
			select {
			case w.queue <- rec:
				w.accepted.Add(1) // under the lock: Close must see it
				w.mu.RUnlock()
				w.m.queueLen.Set(float64(len(w.queue)))
				return true
			default:
			}
		}
		w.mu.RUnlock()
	}
	w.dropped.Add(1)
	w.m.dropped.Inc()
	return false
}

// Stats returns the writer's counts. After Close returns, Accepted equals
// Written + Failed.
func (w *Writer) Stats() WriterStats {
	return WriterStats{
		Accepted: w.accepted.Load(),
		Dropped:  w.dropped.Load(),
		Written:  w.written.Load(),
		Failed:   w.failed.Load(),
	}
}

// Close stops accepting records, writes every accepted record to the sink
// and closes the sink. If ctx ends first, the records still queued are
// counted as failed and the sink is closed with the ended ctx. The error
// reports records that were not written and the sink's Close error. Later
// calls wait for the first to finish and return its error.
func (w *Writer) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		defer close(w.closedCh)
		w.mu.Lock()
		w.closed = true
		close(w.queue)
		w.mu.Unlock()

		select {
		case <-w.done:
		case <-ctx.Done():
			w.cancel(fmt.Errorf("writer close: %w", context.Cause(ctx)))
			<-w.done
		}
		w.cancel(nil)
		var errs []error
		if f := w.failed.Load(); f > 0 {
			errs = append(errs, fmt.Errorf("record writer: %d of %d accepted records not written", f, w.accepted.Load()))
		}
		if err := w.sink.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		w.closeErr = errors.Join(errs...)
	})
	select {
	case <-w.closedCh:
		return w.closeErr
	default:
	}
	select { // another Close is still running
	case <-w.closedCh:
		return w.closeErr
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// run writes the queue to the sink until Close closes the queue.
func (w *Writer) run() {
	defer close(w.done)
	batch := make([]*Record, 0, w.opts.BatchSize)
	var lastLog time.Time
	for rec := range w.queue {
		batch = append(batch[:0], rec)
	fill:
		for len(batch) < w.opts.BatchSize {
			select {
			case r, ok := <-w.queue:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		w.m.queueLen.Set(float64(len(w.queue)))
		if err := w.write(batch); err != nil && time.Since(lastLog) >= 10*time.Second {
			// At most one line per 10s: a full disk fails every batch.
			lastLog = time.Now()
			w.log.Warn("recording write failed", "records", len(batch), "err", err)
		}
		clear(batch) // drop references to written records
	}
	w.m.queueLen.Set(0)
}

// write hands batch to the sink and counts the outcome.
func (w *Writer) write(batch []*Record) error {
	if err := w.ctx.Err(); err != nil {
		w.countFailed(len(batch))
		return context.Cause(w.ctx)
	}
	n, err := w.sink.Write(w.ctx, batch)
	n = min(max(n, 0), len(batch))
	w.written.Add(uint64(n))
	w.m.written.Add(float64(n))
	w.countFailed(len(batch) - n)
	return err
}

func (w *Writer) countFailed(n int) {
	if n > 0 {
		w.failed.Add(uint64(n))
		w.m.failed.Add(float64(n))
	}
}
