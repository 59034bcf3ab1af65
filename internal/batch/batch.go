package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

// Executor runs one batch on one model instance; backend.Instance
// satisfies it.
//
// Execute gets the batch's inputs, with the batch dimension first when the
// model batches, and the names of the outputs wanted; it returns one tensor
// per name, in that order, each with the batch dimension first. The input
// tensors are only borrowed: the batcher reuses their buffers once Execute
// returns, so Execute must not keep them. The returned tensors become the
// caller's: their Data is handed to the requests (sliced by rows, not
// copied), so it must not be reused by the executor. Each Executor is
// called by one goroutine at a time.
type Executor interface {
	Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error)
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error)

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	return f(ctx, inputs, outputs)
}

// TimeoutAction is what happens to a request that waits in the queue
// longer than its timeout.
type TimeoutAction uint8

// The timeout actions of Triton's ModelQueuePolicy.
const (
	// Reject removes the request and answers it with queue_timeout.
	Reject TimeoutAction = iota
	// Delay keeps the request queued behind the requests of its priority
	// level that have not timed out.
	Delay
)

// QueuePolicy is Triton's ModelQueuePolicy.
type QueuePolicy struct {
	TimeoutAction TimeoutAction
	// DefaultTimeout bounds a request's time in the queue; 0 means none.
	DefaultTimeout time.Duration
	// AllowTimeoutOverride lets a request's Timeout lower DefaultTimeout
	// (or set one when DefaultTimeout is 0). A larger value is ignored.
	AllowTimeoutOverride bool
	// MaxQueueSize bounds the requests queued at a level; 0 = unbounded.
	MaxQueueSize int
}

// Options configure one model version's scheduler.
type Options struct {
	Model, Version string // metric labels and error messages
	// Dynamic is true when the config has dynamic_batching; false runs
	// each request alone, still through the queue and the instance pool.
	Dynamic bool
	// MaxBatchSize is the model's max_batch_size; 0 means the model does
	// not batch and requests have no batch dimension.
	MaxBatchSize        int
	PreferredBatchSizes []int
	MaxQueueDelay       time.Duration
	// SpinBelow makes the batcher time waits shorter than this on a
	// thread of its own that sleeps in the kernel with 1 ns timer slack,
	// instead of on a Go timer. Go's timers can fire about 1 ms late on an
	// idle Linux machine (the netpoller sleeps in whole milliseconds),
	// which would stretch a 200 µs max_queue_delay to over a millisecond.
	// Longer waits use a timer until SpinBelow before their due time, then
	// the thread. 0 turns the thread off (the fake clock of
	// testing/synctest needs that). The name is historical: the wait once
	// spun, which took a whole core from the clients of a busy machine.
	SpinBelow        time.Duration
	PreserveOrdering bool
	// PriorityLevels is the number of priority levels; 0 or 1 = one.
	PriorityLevels int
	// DefaultPriority is the 1-based level of requests without a
	// priority; 0 picks the middle level.
	DefaultPriority     int
	DefaultQueuePolicy  QueuePolicy
	PriorityQueuePolicy map[int]QueuePolicy // keyed by 1-based level
	// RaggedInputs are the inputs with allow_ragged_batch: requests whose
	// shapes of them differ share a batch, and the executor gets each
	// flattened into one dimension (see the package documentation).
	RaggedInputs map[string]bool
	// BatchInputs are computed from each batch and added to its inputs;
	// BatchOutputs are split by the shape of a request input.
	BatchInputs  []BatchInput
	BatchOutputs []BatchOutput
	// HoldUntilQueued is Triton's TRITONSERVER_DELAY_SCHEDULER test hook:
	// the batcher sends nothing until this many requests are queued, then
	// batches as usual from then on. The requests' queue delays still run
	// from their arrival. 0 turns it off.
	HoldUntilQueued int
}

// Request is one validated request: Inputs are in the model's input order
// with concrete shapes (leading batch dimension when MaxBatchSize > 0),
// Outputs the names wanted (in order).
type Request struct {
	Inputs  []infer.Tensor
	Outputs []string
	// BatchSize is the request's batch dimension (1 when MaxBatchSize is
	// 0); it must equal the first dimension of every input.
	BatchSize int
	// Priority is the request's "priority" parameter; 0 = default level.
	Priority int
	// Timeout is the request's "timeout" parameter; 0 = none.
	Timeout time.Duration
	// Params are the request parameters the model sees, or nil. Only a
	// RequestExecutor gets them, so a request with parameters goes to
	// its ExecuteRequests even alone.
	Params infer.Parameters
	// Sender, when set, receives the responses of a request to a
	// decoupled model: the batch goes to a StreamExecutor's
	// ExecuteStreams, and the request's Result carries no outputs.
	Sender infer.Sender
}

// Result is one request's share of an executed batch.
type Result struct {
	// Outputs are this request's rows only, in Request.Outputs order.
	// Their Data may share a backing array with other requests' outputs,
	// capped so that appending to it cannot spill into them.
	Outputs []infer.Tensor
	// QueueTime is the time from Submit to the start of the batch.
	QueueTime time.Duration
	// ComputeTime is the batch's Execute time (Triton's compute_infer).
	ComputeTime time.Duration
	// InputTime is the time spent packing the batch's inputs and
	// OutputTime the time spent splitting its outputs.
	InputTime, OutputTime time.Duration
	// ExecBatch is the total batch size of the execution this request
	// rode in.
	ExecBatch int
}

// Observer receives one call per successfully executed batch (for
// Triton's batch_stats and execution_count). It is called from the
// executor goroutines, possibly concurrently.
type Observer interface {
	Executed(batchSize int, input, infer, output time.Duration)
}

// Batcher schedules the requests of one model version onto its
// executors. It is safe for concurrent use.
type Batcher struct {
	model, version string
	batching       bool // dynamic batching with a batch dimension
	maxBatch       int
	delay          time.Duration
	preferred      []bool // preferred[n]: n is a preferred batch size
	ragged         bool   // Options.raggedMode
	raggedInputs   map[string]bool
	batchInputs    []BatchInput
	batchOutputs   []BatchOutput
	maxPreferred   int // the largest preferred batch size; maxBatch when none
	preserve       bool
	hold           int  // Options.HoldUntilQueued until it is reached; then 0 (under mu)
	levelsOn       bool // the model has priority levels
	defLevel       int  // 0-based
	obs            Observer
	m              observers
	log            *slog.Logger
	pool           sync.Pool // of *pending
	execCtx        context.Context
	cancelExec     context.CancelFunc
	closing        atomic.Bool
	running        atomic.Int32  // executor and sleeper goroutines still running
	exited         chan struct{} // closed when the last of them returns
	drained        chan struct{} // closed once stopped
	timer          *time.Timer
	spinBelow      time.Duration
	spinDue        atomic.Int64  // unix ns the sleeper fires at; 0 = nothing due
	sleepWake      chan struct{} // capacity 1: spinDue was set

	mu        sync.Mutex // protects the fields below and the links of queued pendings
	levels    []level
	queued    int
	deadlines deadlineHeap
	cand      []*pending // scratch of formLocked
	slots     []*slot
	idle      []*slot
	timerAt   time.Time // when the timer (or the sleeper) fires; zero = stopped
	sleeping  bool      // the sleeper goroutine has been started
	order     orderList // PreserveOrdering: unanswered requests in submission order
	closed    bool      // Close was called
	stopped   bool      // no more dispatching; work channels closed
}

// level is one priority level's queue.
type level struct {
	policy QueuePolicy
	main   list // requests that have not timed out, FIFO
	late   list // Delay requests that timed out, FIFO, after main
}

// size is the number of requests queued at the level.
func (l *level) size() int { return l.main.n + l.late.n }

// New builds a batcher over executors and starts one goroutine per
// executor; the first wait shorter than SpinBelow starts one more, which
// times such waits from then on (see Options.SpinBelow). obs may be nil;
// a nil m records into unregistered collectors; a nil logger discards.
// Close stops them all.
func New(opts Options, executors []Executor, obs Observer, m *Metrics, logger *slog.Logger) (*Batcher, error) {
	if err := opts.validate(len(executors)); err != nil {
		return nil, fmt.Errorf("model '%s' version %s: %w", opts.Model, opts.Version, err)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	nlevels := max(opts.PriorityLevels, 1)
	b := &Batcher{
		model:     opts.Model,
		version:   opts.Version,
		batching:  opts.Dynamic && opts.MaxBatchSize > 0,
		maxBatch:  opts.MaxBatchSize,
		delay:     opts.MaxQueueDelay,
		spinBelow: opts.SpinBelow,
		preserve:  opts.PreserveOrdering,
		hold:      opts.HoldUntilQueued,
		levelsOn:  opts.PriorityLevels > 0,
		defLevel:  (nlevels+1)/2 - 1,
		obs:       obs,
		m:         m.observers(opts.Model, opts.Version),
		log:       logger.With("component", "batch", "model", opts.Model, "version", opts.Version),
		drained:   make(chan struct{}),
		exited:    make(chan struct{}),
		levels:    make([]level, nlevels),
	}
	if opts.DefaultPriority > 0 {
		b.defLevel = opts.DefaultPriority - 1
	}
	if !opts.Dynamic {
		b.delay = 0
	}
	b.preferred = make([]bool, opts.MaxBatchSize+1)
	b.ragged = opts.raggedMode()
	b.raggedInputs, b.batchInputs, b.batchOutputs = opts.RaggedInputs, opts.BatchInputs, opts.BatchOutputs
	b.maxPreferred = opts.MaxBatchSize
	if len(opts.PreferredBatchSizes) > 0 {
		b.maxPreferred = slices.Max(opts.PreferredBatchSizes)
	}
	for _, n := range opts.PreferredBatchSizes {
		b.preferred[n] = true
	}
	for i := range b.levels {
		b.levels[i].policy = opts.DefaultQueuePolicy
		if p, ok := opts.PriorityQueuePolicy[i+1]; ok {
			b.levels[i].policy = p
		}
	}
	b.pool.New = func() any { return &pending{done: make(chan struct{}, 1), heapIdx: -1} }
	b.execCtx, b.cancelExec = context.WithCancel(context.Background())
	b.timer = time.AfterFunc(time.Hour, b.onTimer)
	b.timer.Stop()
	b.slots = make([]*slot, len(executors))
	b.idle = make([]*slot, 0, len(executors))
	for i, e := range executors {
		s := &slot{exec: e, work: make(chan struct{}, 1)}
		b.slots[i] = s
		b.idle = append(b.idle, s)
	}
	b.sleepWake = make(chan struct{}, 1)
	b.running.Store(int32(len(b.slots)))
	for _, s := range b.slots {
		go b.run(s)
	}
	return b, nil
}

func (o *Options) validate(executors int) error {
	var errs []error
	if executors == 0 {
		errs = append(errs, errors.New("no executors"))
	}
	if o.MaxBatchSize < 0 {
		errs = append(errs, fmt.Errorf("max batch size %d is negative", o.MaxBatchSize))
	}
	for _, n := range o.PreferredBatchSizes {
		if n < 1 || n > o.MaxBatchSize {
			errs = append(errs, fmt.Errorf("preferred batch size %d outside [1, %d]", n, o.MaxBatchSize))
		}
	}
	if err := o.validateRagged(); err != nil {
		errs = append(errs, err)
	}
	if o.SpinBelow < 0 {
		errs = append(errs, fmt.Errorf("spin threshold %s is negative", o.SpinBelow))
	}
	if o.MaxQueueDelay < 0 {
		errs = append(errs, fmt.Errorf("max queue delay %s is negative", o.MaxQueueDelay))
	}
	if o.HoldUntilQueued < 0 {
		errs = append(errs, fmt.Errorf("hold until %d queued is negative", o.HoldUntilQueued))
	}
	if o.PriorityLevels < 0 {
		errs = append(errs, fmt.Errorf("priority levels %d is negative", o.PriorityLevels))
	}
	levels := max(o.PriorityLevels, 1)
	if o.DefaultPriority < 0 || o.DefaultPriority > levels {
		errs = append(errs, fmt.Errorf("default priority %d outside [1, %d]", o.DefaultPriority, levels))
	}
	check := func(what string, p QueuePolicy) {
		if p.DefaultTimeout < 0 {
			errs = append(errs, fmt.Errorf("%s: default timeout %s is negative", what, p.DefaultTimeout))
		}
		if p.MaxQueueSize < 0 {
			errs = append(errs, fmt.Errorf("%s: max queue size %d is negative", what, p.MaxQueueSize))
		}
		if p.TimeoutAction > Delay {
			errs = append(errs, fmt.Errorf("%s: unknown timeout action %d", what, p.TimeoutAction))
		}
	}
	check("default queue policy", o.DefaultQueuePolicy)
	for _, l := range slices.Sorted(maps.Keys(o.PriorityQueuePolicy)) {
		if l < 1 || l > levels {
			errs = append(errs, fmt.Errorf("queue policy for priority level %d outside [1, %d]", l, levels))
		}
		check(fmt.Sprintf("queue policy of priority level %d", l), o.PriorityQueuePolicy[l])
	}
	return errors.Join(errs...)
}

// timeout is the queue timeout of a request asking for req (0 = none).
func (p *QueuePolicy) timeout(req time.Duration) time.Duration {
	t := p.DefaultTimeout
	if req > 0 && p.AllowTimeoutOverride && (t == 0 || req < t) {
		t = req
	}
	return t
}

// levelOf maps a request priority to a 0-based level.
func (b *Batcher) levelOf(priority int) (int, *apierr.Error) {
	switch {
	case priority < 0 || (b.levelsOn && priority > len(b.levels)):
		return 0, apierr.Errorf(apierr.KindInvalid, ReasonInvalidPriority,
			"priority %d outside [1, %d] for model '%s'", priority, len(b.levels), b.model)
	case priority == 0 || !b.levelsOn:
		return b.defLevel, nil
	}
	return priority - 1, nil
}

// Submit queues req, waits for its batch to execute and returns its share
// of the outputs. Errors are *apierr.Error values (see the Reason
// constants). When ctx ends while the request is still queued, the request
// is dropped and Submit returns at once; once its batch has started,
// Submit waits for the execution to end. req and its buffers must stay
// unchanged until Submit returns.
func (b *Batcher) Submit(ctx context.Context, req *Request) (*Result, error) {
	if b.closing.Load() {
		return nil, b.unloadingError()
	}
	li, ierr := b.levelOf(req.Priority)
	if ierr != nil {
		return nil, ierr
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx)
	}
	lv := &b.levels[li]
	p := b.pool.Get().(*pending)
	p.req, p.ctx, p.level = req, ctx, li
	p.bs = max(req.BatchSize, 1)
	p.action = lv.policy.TimeoutAction
	p.enq = time.Now()
	if t := lv.policy.timeout(req.Timeout); t > 0 {
		p.deadline = p.enq.Add(t)
	}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.put(p)
		return nil, b.unloadingError()
	}
	if limit := lv.policy.MaxQueueSize; limit > 0 && lv.size() >= limit {
		b.mu.Unlock()
		b.put(p)
		b.m.rejectFull.Inc()
		return nil, b.queueFullError(li, limit)
	}
	if s := b.inlineSlotLocked(); s != nil {
		infer.Queued(ctx) // it runs now: a stream may pass on the next request
		return b.runInline(s, p)
	}
	b.enqueueLocked(p)
	b.dispatchLocked()
	b.mu.Unlock()
	infer.Queued(ctx) // its place is taken: a stream may pass on the next request

	select {
	case <-p.done:
		return b.collect(p)
	case <-ctx.Done():
		return b.giveUp(p)
	}
}

// inlineSlotLocked returns an idle executor slot when the request just
// submitted would be sent alone, at once, anyway: nothing is queued, an
// executor is idle, and no batching delay could make it wait for company.
// Running such a request on the caller's goroutine saves two goroutine
// hand-offs (tens of microseconds on a busy machine). PreserveOrdering
// keeps the queue path, which owns the ordering bookkeeping.
func (b *Batcher) inlineSlotLocked() *slot {
	if b.queued > 0 || len(b.idle) == 0 || b.stopped || b.preserve || b.hold > 0 || (b.batching && b.delay > 0) {
		return nil
	}
	s := b.idle[len(b.idle)-1]
	b.idle = b.idle[:len(b.idle)-1]
	return s
}

// runInline executes p alone on slot s in the caller's goroutine, then
// gives s back to the pool. Called with b.mu held; returns with it released.
func (b *Batcher) runInline(s *slot, p *pending) (*Result, error) {
	p.state = stateRunning
	s.batch = append(s.batch, p)
	b.mu.Unlock()
	b.execute(s) // signals p.done
	b.mu.Lock()
	if !b.stopped {
		b.idle = append(b.idle, s)
		b.dispatchLocked() // serve what queued meanwhile; stops a closed batcher
	}
	b.mu.Unlock()
	<-p.done
	return b.collect(p)
}

// giveUp handles a caller whose context ended while it waited.
func (b *Batcher) giveUp(p *pending) (*Result, error) {
	b.mu.Lock()
	switch {
	case p.state == stateQueued:
		b.unqueueLocked(p)
		b.unorderLocked(p)
		b.dispatchLocked() // what is left may now form a preferred batch
		b.mu.Unlock()
		err := ctxError(p.ctx)
		b.put(p)
		return nil, err
	case p.state == stateDropped:
		b.mu.Unlock()
		err := ctxError(p.ctx)
		b.put(p)
		return nil, err
	case p.ordered:
		// PreserveOrdering: stop holding the release of later requests
		// for this one. An answer that is already there is returned at
		// once; otherwise the executor signals p as soon as it is done.
		b.unorderLocked(p)
		if p.ready {
			b.mu.Unlock()
			return b.collect(p)
		}
	}
	b.mu.Unlock()
	// The batch has started: wait for it, since the executor may still
	// read the request's buffers.
	<-p.done
	return b.collect(p)
}

// collect returns p's outcome and recycles p.
func (b *Batcher) collect(p *pending) (*Result, error) {
	r, err := p.out, p.err
	b.put(p)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Close stops accepting requests (Submit then fails with
// model_unloading), lets the queued and executing requests finish and
// stops the executor goroutines. When ctx ends first, the requests still
// queued fail with model_unloading, executions of several requests are
// cancelled, and Close returns without waiting for executions in
// progress; their goroutines end when those return.
func (b *Batcher) Close(ctx context.Context) error {
	b.closing.Store(true)
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		b.dispatchLocked() // sends under-full batches without waiting now
	}
	b.mu.Unlock()
	select {
	case <-b.drained:
		// Every executor is idle and its work channel closed.
		select {
		case <-b.exited:
			b.cancelExec()
			return nil
		case <-ctx.Done():
			// Only after an earlier Close gave up: executions still run.
			return fmt.Errorf("close model '%s' version %s scheduler: %w", b.model, b.version, context.Cause(ctx))
		}
	case <-ctx.Done():
	}
	b.mu.Lock()
	n := b.queued
	b.failQueuedLocked()
	b.stopLocked()
	b.mu.Unlock()
	b.cancelExec()
	b.log.Warn("batcher closed before its work finished", "dropped_requests", n)
	return fmt.Errorf("close model '%s' version %s scheduler: %w", b.model, b.version, context.Cause(ctx))
}
