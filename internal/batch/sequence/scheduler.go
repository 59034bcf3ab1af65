package sequence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
)

// Request is one validated request of a sequence: Inputs in the model's
// input order with concrete shapes (a leading batch dimension of 1 when
// MaxBatchSize > 0), Outputs the names wanted.
type Request struct {
	Inputs  []infer.Tensor
	Outputs []string
	ID      CorrID
	Start   bool // sequence_start: the first request of a sequence
	End     bool // sequence_end: the last request of a sequence
	// Client is who sent it (a credential's id, else the peer's address;
	// see Options.MaxSequencesPerClient); "" for a caller with no
	// identity, which no per-client cap applies to.
	Client string
}

// seq is one sequence known to the scheduler.
type seq struct {
	id      CorrID
	slot    int        // index into Scheduler.slots; -1 while in the backlog
	queue   []*pending // FIFO, not yet running
	running bool       // one of its requests is executing
	ending  bool       // a request with END was accepted: no more requests join
	state   [][]byte   // per Options.States, the current value
	last    time.Time  // last arrival or completion
	client  string     // Request.Client of its START
}

// holding counts one client's sequences.
type holding struct {
	slots, waiting int
}

// pending is one submitted request.
type pending struct {
	req  *Request
	ctx  context.Context
	enq  time.Time
	seq  *seq
	done chan struct{} // closed once answered
	out  *batch.Result
	err  error
}

// Scheduler is the sequence batcher of one model version. It is safe for
// concurrent use. New starts no goroutine: a batch runs on a goroutine
// started when it is formed, and a timer (time.AfterFunc) wakes the
// scheduler for queue delays and idle timeouts. Close waits for them.
type Scheduler struct {
	opts     Options
	execs    []batch.Executor
	perInst  int // Direct: slots per executor
	maxRows  int // rows per execution
	maxPref  int // Oldest: the largest preferred size (maxRows when none)
	obs      batch.Observer
	m        observers
	log      *slog.Logger
	execCtx  context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // batch goroutines
	drained  chan struct{}  // closed once closed and nothing is queued or running
	stopOnce sync.Once

	mu      sync.Mutex // protects the fields below and every seq and pending
	seqs    map[CorrID]*seq
	clients map[string]*holding // per Request.Client, while it holds any
	slots   []*seq              // nil = free
	backlog []*seq              // waiting for a slot, FIFO
	busy    []bool              // per executor
	queued  int                 // requests queued over all sequences
	running int                 // batches executing
	timer   *time.Timer
	timerAt time.Time
	closed  bool
	holding bool // Options.HoldUntilQueued/HoldUntilBacklogged not reached yet
}

// New builds a scheduler over executors. obs may be nil; a nil m records
// into unregistered collectors; a nil logger discards.
func New(opts Options, executors []batch.Executor, obs batch.Observer, m *Metrics, logger *slog.Logger) (*Scheduler, error) {
	if err := opts.validate(len(executors)); err != nil {
		return nil, fmt.Errorf("model '%s' version %s: sequence batching: %w", opts.Model, opts.Version, err)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBacklog == 0 {
		opts.MaxBacklog = DefaultMaxBacklog
	}
	if opts.MaxQueuedPerSequence == 0 {
		opts.MaxQueuedPerSequence = DefaultMaxQueuedPerSequence
	}
	s := &Scheduler{
		opts:    opts,
		execs:   executors,
		perInst: max(opts.MaxBatchSize, 1),
		maxRows: max(opts.MaxBatchSize, 1),
		obs:     obs,
		m:       m.observers(opts.Model, opts.Version),
		log:     logger.With("component", "sequence", "model", opts.Model, "version", opts.Version),
		drained: make(chan struct{}),
		seqs:    map[CorrID]*seq{},
		clients: map[string]*holding{},
		busy:    make([]bool, len(executors)),
		holding: opts.HoldUntilQueued > 0 || opts.HoldUntilBacklogged > 0,
	}
	s.maxPref = s.maxRows
	if len(opts.PreferredBatchSizes) > 0 {
		s.maxPref = slices.Max(opts.PreferredBatchSizes)
	}
	nslots := s.perInst * len(executors)
	if opts.Strategy == Oldest {
		nslots = opts.MaxCandidates
		if nslots == 0 {
			nslots = s.perInst * len(executors)
		}
	}
	s.slots = make([]*seq, nslots)
	if s.opts.MaxSequencesPerClient == 0 {
		s.opts.MaxSequencesPerClient = DefaultMaxSequencesPerClient(nslots)
	}
	if s.opts.ContendedIdleTimeout == 0 {
		s.opts.ContendedIdleTimeout = min(s.opts.IdleTimeout, DefaultContendedIdleTimeout)
	}
	s.execCtx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Slots is the number of sequences that can be active at once.
func (s *Scheduler) Slots() int { return len(s.slots) }

// Submit queues req behind the earlier requests of its sequence, waits
// for it to execute and returns its outputs. Errors are *apierr.Error
// values. A request of an unknown sequence must carry Start; a Start on a
// sequence that is still active ends that sequence early and starts a new
// one with fresh state, as Triton does. When ctx ends while the request
// is queued it is dropped and Submit returns at once.
func (s *Scheduler) Submit(ctx context.Context, req *Request) (*batch.Result, error) {
	if req.ID.IsZero() {
		return nil, apierr.Errorf(apierr.KindInvalid, ReasonMissingCorrelationID,
			"inference request to model '%s' must specify a non-zero or non-empty correlation ID", s.opts.Model)
	}
	if ierr := s.check(req); ierr != nil {
		return nil, ierr
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxError(ctx)
	}
	p := &pending{req: req, ctx: ctx, enq: time.Now(), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.unloadingError()
	}
	sq := s.seqs[req.ID]
	if sq != nil && req.Start {
		// A new sequence under an id still active (its END was never
		// sent): as in Triton, the earlier one ends early and the new one
		// takes its place, in the same slot (or backlog place), behind
		// what the earlier one queued; its START request runs from fresh
		// state (qa/L0_sequence_batcher
		// test_backlog_same_correlation_id_no_end expects four full
		// batches, the new sequence's requests in the earlier one's slot).
		s.log.Warn("sequence started again before it ended; the earlier one ends early", "correlation_id", req.ID.String())
		s.m.started.Inc()
	}
	if sq == nil {
		if !req.Start {
			s.mu.Unlock()
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonSequenceNotStarted,
				"inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", req.ID, s.opts.Model)
		}
		var err *apierr.Error
		if sq, err = s.newSeqLocked(req.ID, req.Client, p.enq); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	if len(sq.queue) >= s.opts.MaxQueuedPerSequence {
		s.mu.Unlock()
		return nil, apierr.Errorf(apierr.KindUnavailable, batch.ReasonQueueFull,
			"model '%s' version %s: sequence %s already has %d requests queued", s.opts.Model, s.opts.Version, req.ID, len(sq.queue))
	}
	p.seq = sq
	sq.queue = append(sq.queue, p)
	sq.last = p.enq
	s.queued++
	if req.End {
		s.endLocked(sq)
	}
	s.dispatchLocked()
	s.mu.Unlock()
	infer.Queued(ctx) // its place is taken: a stream may read the next request

	select {
	case <-p.done:
	case <-ctx.Done():
		s.mu.Lock()
		if i := slices.Index(p.seq.queue, p); i >= 0 {
			p.seq.queue = slices.Delete(p.seq.queue, i, i+1)
			s.queued--
			s.maybeReleaseLocked(p.seq)
			s.dispatchLocked()
			s.mu.Unlock()
			return nil, ctxError(ctx)
		}
		s.mu.Unlock()
		<-p.done // running: the executor may still read its buffers
	}
	if p.err != nil {
		return nil, p.err
	}
	return p.out, nil
}

// newSeqLocked registers a new sequence in a free slot, or in the backlog
// when none is free. A client already holding MaxSequencesPerClient
// sequences is refused.
func (s *Scheduler) newSeqLocked(id CorrID, client string, now time.Time) (*seq, *apierr.Error) {
	if h := s.clients[client]; client != "" && h != nil && h.slots+h.waiting >= s.opts.MaxSequencesPerClient {
		s.m.clientRefused.Inc()
		return nil, apierr.Errorf(apierr.KindResourceExhausted, ReasonClientSequenceLimit,
			"model '%s' version %s: this client already holds %d sequences (%d in slots, %d waiting for one), the most one client may hold; end one (sequence_end) before starting another",
			s.opts.Model, s.opts.Version, h.slots+h.waiting, h.slots, h.waiting)
	}
	sq := &seq{id: id, slot: -1, last: now, client: client}
	if i := s.freeSlotLocked(); i >= 0 && len(s.backlog) == 0 {
		s.takeSlotLocked(sq, i)
	} else {
		if len(s.backlog) >= s.opts.MaxBacklog {
			return nil, apierr.Errorf(apierr.KindUnavailable, batch.ReasonQueueFull,
				"model '%s' version %s: all %d sequence slots are busy and %d sequences already wait for one", s.opts.Model, s.opts.Version, len(s.slots), len(s.backlog))
		}
		s.backlog = append(s.backlog, sq)
		s.holdingLocked(client).waiting++
		s.m.backlog.Inc()
	}
	s.seqs[id] = sq
	s.m.started.Inc()
	return sq, nil
}

// holdingLocked returns client's counts, creating them.
func (s *Scheduler) holdingLocked(client string) *holding {
	h := s.clients[client]
	if h == nil {
		h = &holding{}
		s.clients[client] = h
	}
	return h
}

// dropHoldingLocked forgets client's counts once it holds nothing.
func (s *Scheduler) dropHoldingLocked(client string) {
	if h := s.clients[client]; h != nil && h.slots == 0 && h.waiting == 0 {
		delete(s.clients, client)
	}
}

// takeSlotLocked puts sq (not in the backlog) into free slot i.
func (s *Scheduler) takeSlotLocked(sq *seq, i int) {
	s.slots[i] = sq
	sq.slot = i
	s.holdingLocked(sq.client).slots++
	s.m.active.Inc()
}

// endLocked stops a sequence from taking new requests; it releases its
// slot once what it queued has run.
func (s *Scheduler) endLocked(sq *seq) {
	sq.ending = true
	if s.seqs[sq.id] == sq {
		delete(s.seqs, sq.id)
	}
	s.maybeReleaseLocked(sq)
}

// maybeReleaseLocked frees the slot of an ending sequence with nothing
// left to run.
func (s *Scheduler) maybeReleaseLocked(sq *seq) {
	if !sq.ending || sq.running || len(sq.queue) > 0 {
		return
	}
	s.releaseLocked(sq)
}

// releaseLocked forgets a sequence and frees its slot (or backlog place).
func (s *Scheduler) releaseLocked(sq *seq) {
	if s.seqs[sq.id] == sq {
		delete(s.seqs, sq.id)
	}
	if sq.slot >= 0 {
		s.slots[sq.slot] = nil
		sq.slot = -1
		s.m.active.Dec()
		s.holdingLocked(sq.client).slots--
		s.dropHoldingLocked(sq.client)
		return
	}
	if i := slices.Index(s.backlog, sq); i >= 0 {
		s.backlog = slices.Delete(s.backlog, i, i+1)
		s.m.backlog.Dec()
		s.holdingLocked(sq.client).waiting--
		s.dropHoldingLocked(sq.client)
	}
}

// expireLocked releases the sequences idle for IdleTimeout and returns
// when the next one would expire (zero when none can).
func (s *Scheduler) expireLocked(now time.Time) time.Time {
	var next time.Time
	check := func(sq *seq) bool {
		if sq == nil || sq.running || len(sq.queue) > 0 {
			return false
		}
		at := sq.last.Add(s.opts.IdleTimeout)
		if !now.Before(at) {
			return true
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
		return false
	}
	for _, sq := range s.slots {
		if check(sq) {
			if !sq.ending {
				s.m.idleReleased.Inc()
				s.log.Info("sequence released after its idle timeout", "correlation_id", sq.id.String(), "idle_timeout", s.opts.IdleTimeout)
			}
			s.releaseLocked(sq)
		}
	}
	for _, sq := range slices.Clone(s.backlog) {
		if check(sq) {
			s.releaseLocked(sq)
		}
	}
	if at := s.releaseContendedLocked(now); !at.IsZero() && (next.IsZero() || at.Before(next)) {
		next = at
	}
	return next
}

// fairShareLocked is how many slots each client may keep while another
// waits: the slots divided among the clients holding or waiting for one
// (at least 1).
func (s *Scheduler) fairShareLocked() int {
	return max(1, len(s.slots)/max(1, len(s.clients)))
}

// contendedLocked reports whether a client below its fair share waits
// for a slot.
func (s *Scheduler) contendedLocked(share int) bool {
	for _, sq := range s.backlog {
		if s.clients[sq.client].slots < share {
			return true
		}
	}
	return false
}

// releaseContendedLocked frees, while a client below its fair share
// waits for a slot, the slots of clients above their share whose
// sequences have been idle (nothing queued or running) for
// ContendedIdleTimeout, longest idle first, down to the share: one client
// cannot hold slots it does not use while others wait, however many
// sequences it starts. It returns when the next such sequence falls due
// (zero when none).
func (s *Scheduler) releaseContendedLocked(now time.Time) time.Time {
	share := s.fairShareLocked()
	if len(s.clients) < 2 || !s.contendedLocked(share) {
		return time.Time{}
	}
	var next time.Time
	var idle []*seq
	for _, sq := range s.slots {
		if sq == nil || sq.running || len(sq.queue) > 0 || s.clients[sq.client].slots <= share {
			continue
		}
		idle = append(idle, sq)
	}
	slices.SortFunc(idle, func(a, b *seq) int { return a.last.Compare(b.last) })
	for _, sq := range idle {
		if s.clients[sq.client].slots <= share {
			continue
		}
		at := sq.last.Add(s.opts.ContendedIdleTimeout)
		if now.Before(at) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if !sq.ending {
			s.m.contendedReleased.Inc()
			s.log.Info("sequence released: idle while other clients wait for a slot", "correlation_id", sq.id.String(),
				"client_slots", s.clients[sq.client].slots, "fair_share", share, "contended_idle_timeout", s.opts.ContendedIdleTimeout)
		}
		s.releaseLocked(sq)
	}
	return next
}

// freeSlotLocked returns the free slot a new sequence takes, or -1. As
// Triton's sequence batcher does, Direct spreads sequences over the
// instances: the lowest row that is free on any instance, the lowest
// instance first, so two sequences on a model with two instances run on
// both (qa/L0_sequence_batcher test_half_batch expects batches of 1 on
// each of two instances, not batches of 2 on one).
func (s *Scheduler) freeSlotLocked() int {
	if s.opts.Strategy != Direct {
		return slices.Index(s.slots, nil)
	}
	for r := range s.perInst {
		for e := range s.execs {
			if i := e*s.perInst + r; s.slots[i] == nil {
				return i
			}
		}
	}
	return -1
}

// fillSlotsLocked moves backlogged sequences into free slots: each free
// slot goes to the longest-waiting sequence of the client holding the
// fewest slots, so that one client's backlog cannot queue ahead of every
// other client (with a single client this is plain arrival order).
func (s *Scheduler) fillSlotsLocked() {
	for len(s.backlog) > 0 {
		i := s.freeSlotLocked()
		if i < 0 {
			return
		}
		pick := 0
		for j, sq := range s.backlog {
			if s.clients[sq.client].slots < s.clients[s.backlog[pick].client].slots {
				pick = j
			}
		}
		sq := s.backlog[pick]
		s.backlog = slices.Delete(s.backlog, pick, pick+1)
		s.m.backlog.Dec()
		s.clients[sq.client].waiting--
		s.takeSlotLocked(sq, i)
	}
}

// row is one row of an execution: a request, or padding (p nil) in a
// Direct slot with nothing to run.
type row struct {
	p *pending
}

// dispatchLocked releases idle sequences, fills slots from the backlog,
// starts every batch that is due on a free executor, and arms the timer
// for the next thing that falls due.
func (s *Scheduler) dispatchLocked() {
	now := time.Now()
	due := s.expireLocked(now)
	s.fillSlotsLocked()
	if s.holding && !s.closed && !s.holdReachedLocked() {
		s.armLocked(now, due)
		return
	}
	s.holding = false
	for e := range s.execs {
		if s.busy[e] {
			continue
		}
		rows, at := s.formLocked(e, now)
		if rows == nil {
			if !at.IsZero() && (due.IsZero() || at.Before(due)) {
				due = at
			}
			continue
		}
		for _, r := range rows {
			if r.p == nil {
				continue
			}
			sq := r.p.seq
			sq.queue = sq.queue[1:]
			sq.running = true
			s.queued--
		}
		s.busy[e] = true
		s.running++
		s.wg.Add(1)
		go s.run(e, rows)
	}
	if s.closed && s.queued == 0 && s.running == 0 {
		s.stopOnce.Do(func() { close(s.drained) })
	}
	s.armLocked(now, due)
}

// holdReachedLocked reports whether the test hold is over: the sequences
// in slots have HoldUntilQueued requests queued and the backlogged ones
// HoldUntilBacklogged, counted over all instances as Triton counts them.
func (s *Scheduler) holdReachedLocked() bool {
	inSlots, backlogged := 0, 0
	for _, sq := range s.slots {
		if sq != nil {
			inSlots += len(sq.queue)
		}
	}
	for _, sq := range s.backlog {
		backlogged += len(sq.queue)
	}
	return inSlots >= s.opts.HoldUntilQueued && backlogged >= s.opts.HoldUntilBacklogged
}

// ready reports whether sq's next request can run now.
func ready(sq *seq) bool { return sq != nil && !sq.running && len(sq.queue) > 0 }

// formLocked picks the rows executor e runs next, or returns nil and when
// a waiting batch falls due (zero: nothing to wait for).
func (s *Scheduler) formLocked(e int, now time.Time) ([]row, time.Time) {
	if s.opts.Strategy == Direct {
		return s.formDirectLocked(e, now)
	}
	return s.formOldestLocked(now)
}

// formDirectLocked: the heads of executor e's slots, one row per slot up
// to the highest active slot (one holding a sequence); slots without a
// request, or with one whose shapes differ from the first request's in
// slot order, are padding. As in Triton's direct strategy, so that its
// batch sizes (qa/L0_sequence_batcher test_ragged_batch: four sequences
// of three shapes run in nine batches of 4) and the rows a model sees
// agree with Triton's.
func (s *Scheduler) formDirectLocked(e int, now time.Time) ([]row, time.Time) {
	first := e * s.perInst
	mine := s.slots[first : first+s.perInst]
	var head *pending
	withReq, top := 0, -1
	var oldest time.Time
	for i, sq := range mine {
		if sq == nil {
			continue
		}
		top = i
		if !ready(sq) {
			continue
		}
		p := sq.queue[0]
		if head == nil {
			head = p
		}
		if oldest.IsZero() || p.enq.Before(oldest) {
			oldest = p.enq
		}
		withReq++
	}
	if head == nil {
		return nil, time.Time{}
	}
	if s.opts.MaxQueueDelay > 0 && !s.closed && float64(withReq) < s.opts.MinSlotUtilization*float64(s.perInst) {
		if at := oldest.Add(s.opts.MaxQueueDelay); now.Before(at) {
			return nil, at
		}
	}
	rows := make([]row, top+1)
	for i := 0; i <= top; i++ {
		if sq := mine[i]; ready(sq) && compatible(head.req, sq.queue[0].req) {
			rows[i].p = sq.queue[0]
		}
	}
	return rows, time.Time{}
}

// formOldestLocked: the oldest heads across the active sequences, at most
// one per sequence, up to the batch size.
func (s *Scheduler) formOldestLocked(now time.Time) ([]row, time.Time) {
	var heads []*pending
	for _, sq := range s.slots {
		if ready(sq) {
			heads = append(heads, sq.queue[0])
		}
	}
	if len(heads) == 0 {
		return nil, time.Time{}
	}
	slices.SortFunc(heads, func(a, b *pending) int { return a.enq.Compare(b.enq) })
	rows := make([]row, 0, s.maxRows)
	for _, p := range heads {
		if len(rows) == s.maxRows {
			break
		}
		if compatible(heads[0].req, p.req) {
			rows = append(rows, row{p: p})
		}
	}
	n := len(rows)
	preferred := slices.Contains(s.opts.PreferredBatchSizes, n)
	if n >= s.maxPref || preferred || s.opts.MaxQueueDelay == 0 || s.closed || len(rows) < len(heads) {
		return rows, time.Time{}
	}
	if at := heads[0].enq.Add(s.opts.MaxQueueDelay); now.Before(at) {
		return nil, at
	}
	return rows, time.Time{}
}

// compatible reports whether two requests can share a batch: the same
// inputs with the same shapes.
func compatible(a, b *Request) bool {
	if len(a.Inputs) != len(b.Inputs) {
		return false
	}
	for i := range a.Inputs {
		x, y := &a.Inputs[i], &b.Inputs[i]
		if x.Name != y.Name || x.DataType != y.DataType || !slices.Equal(x.Shape, y.Shape) {
			return false
		}
	}
	return true
}

// armLocked points the timer at due (zero stops it).
func (s *Scheduler) armLocked(now, due time.Time) {
	if due.IsZero() || s.closed && s.queued == 0 {
		if s.timer != nil && !s.timerAt.IsZero() {
			s.timer.Stop()
			s.timerAt = time.Time{}
		}
		return
	}
	if due.Equal(s.timerAt) {
		return
	}
	s.timerAt = due
	if s.timer == nil {
		s.timer = time.AfterFunc(due.Sub(now), s.onTimer)
		return
	}
	s.timer.Reset(due.Sub(now))
}

func (s *Scheduler) onTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timerAt = time.Time{}
	s.dispatchLocked()
}

// run executes one batch on executor e and answers its requests.
func (s *Scheduler) run(e int, rows []row) {
	defer s.wg.Done()
	start := time.Now()
	inputs, names, held := s.pack(rows)
	packed := time.Now()
	ctx := s.execCtx
	if len(rows) == 1 {
		ctx = rows[0].p.ctx // alone: its caller may stop the run
	}
	outs, err := s.execs[e].Execute(ctx, inputs, names)
	computed := time.Now()
	results := make([]batch.Result, len(rows))
	var states [][][]byte // per row, per state
	if err == nil {
		states, err = s.split(rows, outs, names, results)
	}
	if err != nil {
		err = s.backendError(err)
	} else if s.obs != nil {
		// The batch size of the statistics counts every row the model
		// ran, padding included, as Triton's sequence batcher does
		// (qa/L0_sequence_batcher test_backlog_fill_no_end expects
		// batches of 3 where one row has a request).
		s.obs.Executed(len(rows), packed.Sub(start), computed.Sub(packed), time.Since(computed))
	}
	done := time.Now()
	s.mu.Lock()
	for i, r := range rows {
		p := r.p
		if p == nil {
			continue
		}
		sq := p.seq
		sq.running = false
		sq.last = done
		if err != nil {
			p.err = err
		} else {
			sq.state = states[i]
			res := &results[i]
			res.QueueTime = start.Sub(p.enq)
			res.InputTime, res.ComputeTime, res.OutputTime = packed.Sub(start), computed.Sub(packed), done.Sub(computed)
			res.ExecBatch = held
			p.out = res
		}
		if p.req.End {
			s.maybeReleaseLocked(sq)
		}
		close(p.done)
	}
	s.busy[e] = false
	s.running--
	s.dispatchLocked()
	s.mu.Unlock()
}

// Close stops accepting requests (Submit then fails with
// model_unloading), lets the queued and running requests finish and
// waits for the batch goroutines. When ctx ends first, the requests still
// queued fail with model_unloading and running executions are cancelled.
func (s *Scheduler) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.dispatchLocked()
	s.mu.Unlock()
	var err error
	select {
	case <-s.drained:
	case <-ctx.Done():
		s.mu.Lock()
		for _, sq := range s.slots {
			s.failQueuedLocked(sq)
		}
		for _, sq := range s.backlog {
			s.failQueuedLocked(sq)
		}
		s.mu.Unlock()
		s.cancel()
		err = fmt.Errorf("close model '%s' version %s sequence scheduler: %w", s.opts.Model, s.opts.Version, context.Cause(ctx))
	}
	s.wg.Wait()
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.cancel()
	return err
}

func (s *Scheduler) failQueuedLocked(sq *seq) {
	if sq == nil {
		return
	}
	for _, p := range sq.queue {
		p.err = s.unloadingError()
		close(p.done)
		s.queued--
	}
	sq.queue = nil
}

// Active returns the number of sequences holding a slot and waiting for
// one.
func (s *Scheduler) Active() (inSlots, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sq := range s.slots {
		if sq != nil {
			inSlots++
		}
	}
	return inSlots, len(s.backlog)
}

func (s *Scheduler) backendError(err error) error {
	if ie, ok := errors.AsType[*apierr.Error](err); ok {
		return ie
	}
	return &apierr.Error{
		Kind: apierr.KindInternal, Reason: batch.ReasonBackendError,
		Msg: fmt.Sprintf("model '%s' version %s: execute", s.opts.Model, s.opts.Version), Err: err,
	}
}

func (s *Scheduler) unloadingError() *apierr.Error {
	return apierr.Errorf(apierr.KindUnavailable, batch.ReasonModelUnloading, "model '%s' version %s is unloading", s.opts.Model, s.opts.Version)
}

func ctxError(ctx context.Context) *apierr.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &apierr.Error{Kind: apierr.KindTimeout, Reason: batch.ReasonDeadlineExceeded, Msg: "request deadline exceeded", Err: context.Cause(ctx)}
	}
	return &apierr.Error{Kind: apierr.KindUnavailable, Reason: batch.ReasonCanceled, Msg: "request canceled", Err: context.Cause(ctx)}
}

// check refuses what a sequence request cannot be: a batch of more than
// one row (a sequence advances one request at a time, as in Triton) or a
// string correlation id for a model whose CORRID control is numeric.
func (s *Scheduler) check(req *Request) *apierr.Error {
	if s.opts.MaxBatchSize > 0 {
		for i := range req.Inputs {
			if t := &req.Inputs[i]; len(t.Shape) == 0 || t.Shape[0] != 1 {
				return apierr.Errorf(apierr.KindInvalid, ReasonSequenceBatchSize,
					"inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher (input '%s' has shape %s)", s.opts.Model, t.Name, t.Shape)
			}
		}
	}
	if len(req.ID.Str) > MaxStringIDBytes {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidCorrelationID,
			"a string correlation ID may hold at most %d bytes, got %d", MaxStringIDBytes, len(req.ID.Str))
	}
	if req.ID.Str != "" {
		for _, c := range s.opts.Controls {
			if c.Kind == ControlCorrID && c.DataType != infer.Bytes {
				return apierr.Errorf(apierr.KindInvalid, ReasonInvalidCorrelationID,
					"sequence %s: model '%s' takes %s correlation ids (control input '%s'), not strings", req.ID, s.opts.Model, c.DataType, c.Input)
			}
		}
	}
	return nil
}
