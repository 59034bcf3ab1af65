package record

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Writer defaults.
const (
	DefaultQueueSize = 4096
	DefaultBatchSize = 256
	// DefaultRetryMax caps the back-off between attempts to drain the
	// spool into a sink that fails.
	DefaultRetryMax = 5 * time.Second
)

// minRetry is the first back-off after a failed drain attempt.
const minRetry = 100 * time.Millisecond

// maxPeekBytes bounds one drain batch read from the spool.
const maxPeekBytes = 1 << 20

// WriterOptions configures a Writer.
type WriterOptions struct {
	// QueueSize bounds the records accepted but not yet handed to the sink.
	// Default DefaultQueueSize.
	QueueSize int
	// BatchSize bounds the records per sink write. Default
	// DefaultBatchSize.
	BatchSize int
	// SinkLabel is the "sink" label of the writer's metrics, e.g. "jsonl" or
	// "nats". Default "default".
	SinkLabel string
	// Spool, when set, takes every accepted record the sink does not store
	// (and, while it holds records, every new one, so that they reach the
	// sink in order); a goroutine drains it into the sink with back-off.
	// Records it holds from an earlier process are drained too. The
	// writer owns the spool from now on and closes it.
	Spool *Spool
	// CloseTimeout bounds how long Close tries to store what is queued or
	// spooled before it leaves the rest in the spool (without a spool:
	// counts it failed). 0: only Close's context bounds it.
	CloseTimeout time.Duration
	// RetryMax caps the back-off between drain attempts. Default
	// DefaultRetryMax.
	RetryMax time.Duration
}

// WriterStats are a Writer's counts since it started. At any quiescent
// point (nothing queued or being written), and after Close,
//
//	Accepted + Recovered == Written + Spooled + DroppedByPolicy + Failed + Damaged
//
// Records in the spool are on disk and stored by this writer's drain or
// the next process's; Failed, DroppedByPolicy and Damaged are lost
// (Lost).
type WriterStats struct {
	// Accepted counts Offer returning true.
	Accepted uint64 `json:"accepted"`
	// Dropped counts Offer returning false: queue full or writer closed.
	// These records were never accepted.
	Dropped uint64 `json:"dropped"`
	// Written counts records the sink stored (for NATS: acknowledged),
	// spooled ones once drained.
	Written uint64 `json:"written"`
	// Failed counts accepted records that are lost: they could not be
	// encoded; without a spool, the sink refused them or Close gave up on
	// them; with one, the spool could not write or read them back.
	Failed uint64 `json:"failed"`
	// Recovered counts records found in the spool at start, left there by
	// an earlier process: the intact ones and the damaged ones (which are
	// also in Damaged).
	Recovered uint64 `json:"recovered"`
	// Damaged counts spooled records lost to damage on disk: frames that
	// do not check out, found when the spool was opened or read back. The
	// intact records around them are kept.
	Damaged uint64 `json:"damaged"`
	// Spooled is the number of records in the spool now, waiting for the
	// sink.
	Spooled uint64 `json:"spooled"`
	// DroppedByPolicy counts accepted records discarded because the spool
	// was full (SpoolDropNewest, or SpoolBlock when Close gave up).
	DroppedByPolicy uint64 `json:"dropped_by_policy"`
}

// Lost returns the accepted (or recovered) records that will never be
// stored: Failed + DroppedByPolicy + Damaged.
func (s WriterStats) Lost() uint64 { return s.Failed + s.DroppedByPolicy + s.Damaged }

// Writer puts a bounded queue in front of a Sink so that the request path
// never waits for storage: Offer hands a record over or drops it, and a
// background goroutine writes the queue to the sink in batches. With a
// Spool, what the sink does not store goes to disk and is drained into the
// sink when it takes records again.
type Writer struct {
	sink     Sink
	es       entrySink
	spool    *Spool
	opts     WriterOptions
	log      *slog.Logger
	m        *writerMetrics
	idPrefix string
	seq      uint64 // dedup id sequence; used by run only

	mu     sync.RWMutex // protects closed and sends on queue against close(queue)
	closed bool
	queue  chan *Record

	ctx    context.Context // for sink writes; cancelled when Close gives up
	cancel context.CancelCauseFunc
	giveUp atomic.Bool   // Close gave up on the sink: the rest goes to the spool
	done   chan struct{} // closed when run returns

	wake      chan struct{} // cap 1: the spool took records
	drained   chan struct{} // cap 1: the drainer stored records, or found the spool empty
	closing   chan struct{} // closed when Close starts: the drainer retries sooner
	stopDrain chan struct{} // closed to stop the drainer
	drainDone chan struct{} // closed when the drainer returns
	loopDone  chan struct{} // closed when loop returns

	started   atomic.Bool // Run (or Close, for a writer never run) started the loops
	closeOnce sync.Once
	closeErr  error
	closedCh  chan struct{} // closed when the first Close returns

	accepted, dropped, written, failed, droppedByPolicy, damaged atomic.Uint64
	recovered                                                    uint64
}

// NewWriter returns a Writer in front of sink. It starts nothing: Run
// writes what Offer accepts (and drains the spool); Close stops it and
// closes the sink (and the spool). A nil logger discards; a nil reg
// registers nothing.
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
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	es, ok := sink.(entrySink)
	if !ok {
		es = recordSink{sink}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	w := &Writer{
		sink:      sink,
		es:        es,
		spool:     opts.Spool,
		opts:      opts,
		log:       logger.With("component", "record_writer", "sink", opts.SinkLabel),
		m:         newWriterMetrics(reg, opts.SinkLabel),
		idPrefix:  newIDPrefix(),
		queue:     make(chan *Record, opts.QueueSize),
		ctx:       ctx,
		cancel:    cancel,
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		drained:   make(chan struct{}, 1),
		closing:   make(chan struct{}),
		stopDrain: make(chan struct{}),
		drainDone: make(chan struct{}),
		loopDone:  make(chan struct{}),
		closedCh:  make(chan struct{}),
	}
	if w.spool != nil {
		recs, damaged, cut := w.spool.Recovered()
		w.recovered = uint64(recs + damaged)
		w.damage(damaged)
		w.m.spoolCorrupt.Add(float64(cut))
		w.spool.setWriteErrorHook(func(cause string) { w.m.spoolWriteErrors.WithLabelValues(cause).Inc() })
		w.spoolGauges()
	} else {
		close(w.drainDone)
	}
	return w
}

// Run writes the records Offer accepts to the sink in batches and, with a
// spool, drains it into the sink with back-off (on a second goroutine,
// which Run waits for). It returns once Close has stopped it and both are
// done; a second Run, or a Run after Close, returns at once. A writer
// that never runs keeps what Offer accepts in its queue until Close,
// which then does the work itself.
func (w *Writer) Run() {
	if !w.started.CompareAndSwap(false, true) {
		return
	}
	w.loop()
}

// loop is Run's work: the drainer (with a spool) and the write loop, until
// Close closed the queue and stopped the drainer.
func (w *Writer) loop() {
	defer close(w.loopDone)
	if w.spool != nil {
		go w.drain() // waited for below
	}
	w.run()
	<-w.drainDone
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

// Stats returns the writer's counts; see WriterStats for how they add up.
func (w *Writer) Stats() WriterStats {
	st := WriterStats{
		Accepted:        w.accepted.Load(),
		Dropped:         w.dropped.Load(),
		Written:         w.written.Load(),
		Failed:          w.failed.Load(),
		Recovered:       w.recovered,
		Damaged:         w.damaged.Load(),
		DroppedByPolicy: w.droppedByPolicy.Load(),
	}
	if w.spool != nil {
		st.Spooled = uint64(w.spool.pendingRecords())
	}
	return st
}

// Close stops accepting records and, until ctx ends or CloseTimeout
// passes, writes every accepted record (and everything spooled) to the
// sink. Then it gives up on the sink: the rest goes to the spool (local
// disk, not abandoned halfway), or without a spool counts as failed. It
// closes the sink and the spool and logs the final counts. The error
// reports lost records (Failed, DroppedByPolicy), not spooled ones, and
// the sink's and the spool's Close errors. Later calls wait for the first
// to finish and return its error.
func (w *Writer) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		defer close(w.closedCh)
		w.mu.Lock()
		w.closed = true
		close(w.queue)
		w.mu.Unlock()
		close(w.closing)
		if w.started.CompareAndSwap(false, true) {
			// Never run: Close writes what was queued itself, on the
			// same loops, and waits for them below.
			go w.loop()
		}

		fctx := ctx
		if w.opts.CloseTimeout > 0 {
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeoutCause(ctx, w.opts.CloseTimeout,
				fmt.Errorf("recording close timeout %s", w.opts.CloseTimeout))
			defer cancel()
		}
		if !w.flushed(fctx) {
			w.giveUp.Store(true)
			w.cancel(fmt.Errorf("writer close: %w", context.Cause(fctx)))
		}
		<-w.done
		close(w.stopDrain)
		<-w.drainDone
		<-w.loopDone
		w.cancel(nil)
		var errs []error
		if err := w.sink.Close(fctx); err != nil {
			errs = append(errs, err)
		}
		if w.spool != nil {
			w.spoolGauges()
			if err := w.spool.Close(); err != nil {
				errs = append(errs, fmt.Errorf("record writer: close spool: %w", err))
			}
		}
		st := w.Stats()
		if lost := st.Lost(); lost > 0 {
			damaged := ""
			if st.Damaged > 0 {
				damaged = fmt.Sprintf(", %d damaged on disk", st.Damaged)
			}
			errs = append(errs, fmt.Errorf("record writer: %d of %d accepted records lost (%d failed, %d dropped by the full spool%s)",
				lost, st.Accepted+st.Recovered, st.Failed, st.DroppedByPolicy, damaged))
		}
		level := slog.LevelInfo
		if st.Spooled > 0 || st.Lost() > 0 {
			level = slog.LevelWarn
		}
		w.log.Log(context.WithoutCancel(ctx), level, "recording writer closed",
			"accepted", st.Accepted, "recovered", st.Recovered, "written", st.Written,
			"spooled", st.Spooled, "dropped_by_policy", st.DroppedByPolicy, "failed", st.Failed,
			"damaged", st.Damaged, "lost", st.Lost(), "dropped", st.Dropped)
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

// flushed waits until the queue is written and the spool is empty, and
// reports whether that happened before ctx ended.
func (w *Writer) flushed(ctx context.Context) bool {
	select {
	case <-w.done:
	case <-ctx.Done():
		return false
	}
	for w.spool != nil && w.spool.pendingRecords() > 0 {
		select {
		case <-w.drained:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// run writes the queue to the sink (or the spool) until Close closes the
// queue.
func (w *Writer) run() {
	defer close(w.done)
	batch := make([]*Record, 0, w.opts.BatchSize)
	es := make([]entry, 0, w.opts.BatchSize)
	stored := make([]bool, w.opts.BatchSize)
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
		es = w.encode(batch, es[:0], &lastLog)
		if err := w.store(es, stored[:len(es)]); err != nil && time.Since(lastLog) >= 10*time.Second {
			// At most one line per 10s: a broker outage fails every batch.
			lastLog = time.Now()
			w.log.Warn("recording write failed", "records", len(es), "spool", w.spool != nil, "err", err)
		}
		clear(batch) // drop references to written records
		clear(es)
	}
	w.m.queueLen.Set(0)
}

// encode encodes batch into entries with fresh dedup ids; a record that
// does not encode is lost.
func (w *Writer) encode(batch []*Record, es []entry, lastLog *time.Time) []entry {
	for _, r := range batch {
		b, err := Encode(r)
		if err != nil {
			w.lose(1)
			if time.Since(*lastLog) >= 10*time.Second {
				*lastLog = time.Now()
				w.log.Warn("recording dropped: record does not encode", "request_id", r.RequestID, "err", err)
			}
			continue
		}
		w.seq++
		es = append(es, entry{id: w.idPrefix + strconv.FormatUint(w.seq, 36), service: r.Service, data: b})
	}
	return es
}

// store writes es to the sink, or to the spool while it holds records (so
// that they reach the sink in order) or once Close gave up. What the sink
// does not store goes to the spool, or without one is lost.
func (w *Writer) store(es []entry, stored []bool) error {
	if len(es) == 0 {
		return nil
	}
	if w.spool != nil && (w.giveUp.Load() || w.spool.pendingRecords() > 0) {
		return w.toSpool(es)
	}
	if err := w.ctx.Err(); err != nil {
		w.lose(len(es))
		return context.Cause(w.ctx)
	}
	clear(stored)
	err := w.es.writeEntries(w.ctx, es, stored)
	rest := es[:0]
	for i, ok := range stored {
		if !ok {
			rest = append(rest, es[i])
		}
	}
	if n := len(es) - len(rest); n > 0 {
		w.written.Add(uint64(n))
		w.m.written.Add(float64(n))
	}
	if len(rest) == 0 {
		return nil
	}
	if err == nil {
		err = errors.New("sink stored fewer records than given")
	}
	if w.spool != nil {
		return errors.Join(err, w.toSpool(rest))
	}
	w.lose(len(rest))
	return err
}

// toSpool appends es to the spool and applies its policy to what does not
// fit; records the spool cannot write are lost.
func (w *Writer) toSpool(es []entry) error {
	defer w.spoolGauges()
	var errs []error
	for len(es) > 0 {
		n, err := w.spool.append(es)
		if n > 0 {
			w.m.spooled.Add(float64(n))
			es = es[n:]
			signal(w.wake)
		}
		switch {
		case err == nil:
		case errors.Is(err, errSpoolFull) && w.spool.Policy() == SpoolBlock && !w.giveUp.Load():
			w.waitForSpace()
		case errors.Is(err, errSpoolFull), errors.Is(err, errSpoolTooLarge):
			w.droppedByPolicy.Add(1)
			w.m.droppedByPolicy.Inc()
			es = es[1:]
			if len(errs) == 0 {
				errs = append(errs, fmt.Errorf("record dropped: %w", err))
			}
		default:
			w.lose(len(es))
			return errors.Join(append(errs, err)...)
		}
	}
	return errors.Join(errs...)
}

// waitForSpace waits until the drainer frees spool space, Close gives up,
// or a second passes.
func (w *Writer) waitForSpace() {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-w.spool.spaceFreed():
	case <-w.ctx.Done():
	case <-t.C:
	}
}

// drain writes the spool to the sink, oldest first, retrying with
// exponential back-off while the sink fails, until Close stops it. A
// record leaves the spool only once the sink stored it, and only in
// order; records the sink stored past the first failure are remembered
// and not sent again.
func (w *Writer) drain() {
	defer close(w.drainDone)
	backoff := minRetry
	sb := &sendBatch{
		storedIDs: map[string]bool{},
		ok:        make([]bool, w.opts.BatchSize),
		send:      make([]entry, 0, w.opts.BatchSize),
	}
	closing := w.closing
	var lastLog time.Time
	for {
		select {
		case <-w.stopDrain:
			return
		default:
		}
		es, err := w.spool.peek(w.opts.BatchSize, maxPeekBytes)
		if err != nil {
			if ce, isCorrupt := errors.AsType[*spoolCorruptError](err); isCorrupt {
				if ce.frames > 0 {
					w.damage(ce.frames)
					w.log.Error("recording spool records damaged on disk and lost; the drain goes on at the next intact record", "records", ce.frames, "err", err)
				}
				w.spoolGauges()
				continue
			}
		}
		if err == nil && len(es) == 0 {
			backoff = minRetry
			signal(w.drained)
			select {
			case <-w.wake:
			case <-w.stopDrain:
				return
			}
			continue
		}
		k := 0
		if err == nil {
			k, err = sb.write(w.ctx, w.es, es)
		}
		if k > 0 {
			w.ackDrained(k)
		}
		if err == nil && k == len(es) {
			backoff = minRetry
			continue
		}
		if err == nil {
			err = errors.New("sink stored fewer records than given")
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			w.log.Warn("recording spool drain failed; retrying", "spooled", w.spool.pendingRecords(), "retry_in", backoff, "err", err)
		}
		// Jitter: replicas that lost the same broker do not retry in step.
		wait := backoff/2 + rand.N(backoff/2+1) //nolint:gosec // G404: retry jitter, not a secret
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-closing:
			closing = nil // Close waits: retry now, then at short intervals
			backoff = minRetry
		case <-w.stopDrain:
			t.Stop()
			return
		}
		t.Stop()
		backoff = min(2*backoff, w.opts.RetryMax)
		if closing == nil {
			backoff = min(backoff, 4*minRetry)
		}
	}
}

// sendBatch sends peeked spool entries to the sink, remembering the ones
// the sink stored behind one it did not, so they are not sent again.
type sendBatch struct {
	storedIDs map[string]bool // stored, but behind one that was not
	ok        []bool          // per entry of send: stored
	send      []entry         // the entries of this try not stored before
}

// write sends the entries of es not stored before and returns how many
// of es, from the first, are now stored (and may leave the spool).
func (b *sendBatch) write(ctx context.Context, sink entrySink, es []entry) (int, error) {
	b.send = b.send[:0]
	for _, e := range es {
		if !b.storedIDs[e.id] {
			b.send = append(b.send, e)
		}
	}
	clear(b.ok)
	err := sink.writeEntries(ctx, b.send, b.ok[:len(b.send)])
	j := 0
	for _, e := range es {
		if !b.storedIDs[e.id] {
			if b.ok[j] {
				b.storedIDs[e.id] = true
			}
			j++
		}
	}
	k := 0
	for k < len(es) && b.storedIDs[es[k].id] {
		delete(b.storedIDs, es[k].id)
		k++
	}
	return k, err
}

// ackDrained drains the first k peeked records from the spool and counts
// them as written.
func (w *Writer) ackDrained(k int) {
	if aerr := w.spool.ack(k); aerr != nil {
		w.log.Warn("recording spool", "err", aerr)
	}
	w.written.Add(uint64(k))
	w.m.written.Add(float64(k))
	w.spoolGauges()
	signal(w.drained)
}

// lose counts n accepted records as failed.
// damage counts n records lost to damage in the spool.
func (w *Writer) damage(n int) {
	if n > 0 {
		w.damaged.Add(uint64(n))
		w.m.damaged.Add(float64(n))
	}
}

func (w *Writer) lose(n int) {
	if n > 0 {
		w.failed.Add(uint64(n))
		w.m.failed.Add(float64(n))
	}
}

// spoolGauges sets the spool's gauges.
func (w *Writer) spoolGauges() {
	recs, size := w.spool.Pending()
	w.m.spoolRecords.Set(float64(recs))
	w.m.spoolBytes.Set(float64(size))
}

// signal wakes a goroutine waiting on c without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
