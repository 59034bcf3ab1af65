package batch

import (
	"container/heap"
	"context"
	"runtime"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// pstate is where a pending request is in its life.
type pstate uint8

const (
	stateFree     pstate = iota // in the pool
	stateQueued                 // in a level's list
	stateRunning                // taken into a batch
	stateDropped                // removed from the queue because its context ended
	stateAnswered               // answered from the queue (timeout, close)
)

// pending is one submitted request. Pendings are pooled: the caller's
// Submit recycles its pending once nothing else refers to it. Fields up to
// res are set by Submit before the request is queued and read-only after;
// the links and flags are protected by Batcher.mu; res and err are written
// by whoever answers the request before it signals done.
type pending struct {
	req      *Request
	ctx      context.Context
	enq      time.Time
	deadline time.Time // zero: no queue timeout
	bs       int       // batch size, at least 1
	level    int       // 0-based priority level
	action   TimeoutAction

	state        pstate
	prev, next   *pending // level list links
	late         bool     // in the level's late list (Delay, timed out)
	heapIdx      int      // index in the deadline heap; -1 when not there
	oprev, onext *pending // order list links (PreserveOrdering)
	ordered      bool     // linked in the order list
	ready        bool     // answered, waiting for its turn to be released

	outIdx []int   // the request's outputs as indices into the batch's output union
	out    *Result // points into its batch's results
	err    error
	done   chan struct{} // capacity 1; signalled once per use
}

// put recycles p.
func (b *Batcher) put(p *pending) {
	*p = pending{done: p.done, outIdx: p.outIdx[:0], heapIdx: -1}
	b.pool.Put(p)
}

// list is a FIFO of pendings linked through prev and next.
type list struct {
	head, tail *pending
	n          int
}

func (l *list) push(p *pending) {
	p.prev, p.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = p
	} else {
		l.head = p
	}
	l.tail = p
	l.n++
}

func (l *list) remove(p *pending) {
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		l.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		l.tail = p.prev
	}
	p.prev, p.next = nil, nil
	l.n--
}

// orderList is the submission order of pendings, linked through oprev and
// onext.
type orderList struct {
	head, tail *pending
}

func (l *orderList) push(p *pending) {
	p.oprev, p.onext = l.tail, nil
	if l.tail != nil {
		l.tail.onext = p
	} else {
		l.head = p
	}
	l.tail = p
}

func (l *orderList) remove(p *pending) {
	if p.oprev != nil {
		p.oprev.onext = p.onext
	} else {
		l.head = p.onext
	}
	if p.onext != nil {
		p.onext.oprev = p.oprev
	} else {
		l.tail = p.oprev
	}
	p.oprev, p.onext = nil, nil
}

// deadlineHeap orders the queued requests that have a queue timeout by
// deadline (container/heap).
type deadlineHeap []*pending

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *deadlineHeap) Push(x any) {
	p := x.(*pending)
	p.heapIdx = len(*h)
	*h = append(*h, p)
}

func (h *deadlineHeap) Pop() any {
	old := *h
	n := len(old) - 1
	p := old[n]
	old[n] = nil
	p.heapIdx = -1
	*h = old[:n]
	return p
}

// enqueueLocked appends p to its level.
func (b *Batcher) enqueueLocked(p *pending) {
	b.levels[p.level].main.push(p)
	b.queued++
	p.state = stateQueued
	if !p.deadline.IsZero() {
		heap.Push(&b.deadlines, p)
	}
	if b.preserve {
		b.order.push(p)
		p.ordered = true
	}
	b.m.pending.Inc()
}

// unqueueLocked removes p from its level and the deadline heap.
func (b *Batcher) unqueueLocked(p *pending) {
	lv := &b.levels[p.level]
	if p.late {
		lv.late.remove(p)
		p.late = false
	} else {
		lv.main.remove(p)
	}
	b.queued--
	if p.heapIdx >= 0 {
		heap.Remove(&b.deadlines, p.heapIdx)
	}
	b.m.pending.Dec()
}

// unorderLocked takes p out of the submission order, which may let the
// requests behind it go.
func (b *Batcher) unorderLocked(p *pending) {
	if !p.ordered {
		return
	}
	b.order.remove(p)
	p.ordered = false
	b.releaseLocked()
}

// releaseLocked signals the answered requests at the front of the
// submission order.
func (b *Batcher) releaseLocked() {
	for p := b.order.head; p != nil && p.ready; p = b.order.head {
		b.order.remove(p)
		p.ordered = false
		p.done <- struct{}{}
	}
}

// answerLocked answers a request that was taken off the queue without
// running.
func (b *Batcher) answerLocked(p *pending, err error) {
	p.err = err
	p.state = stateAnswered
	if p.ordered {
		p.ready = true
		b.releaseLocked()
		return
	}
	p.done <- struct{}{}
}

// dropLocked removes a queued request whose context ended. Its Submit
// notices the context and recycles it.
func (b *Batcher) dropLocked(p *pending) {
	b.unqueueLocked(p)
	p.state = stateDropped
	b.unorderLocked(p)
}

// expireLocked applies the timeout action to the requests whose queue
// deadline has passed.
func (b *Batcher) expireLocked(now time.Time) {
	for len(b.deadlines) > 0 {
		p := b.deadlines[0]
		if now.Before(p.deadline) {
			return
		}
		heap.Pop(&b.deadlines)
		if p.action == Delay {
			lv := &b.levels[p.level]
			lv.main.remove(p)
			lv.late.push(p)
			p.late = true
			continue
		}
		b.unqueueLocked(p)
		b.m.rejectDeadline.Inc()
		b.answerLocked(p, queueTimeoutError())
	}
}

// failQueuedLocked answers every queued request with model_unloading.
func (b *Batcher) failQueuedLocked() {
	for i := range b.levels {
		lv := &b.levels[i]
		for _, l := range [...]*list{&lv.main, &lv.late} {
			for l.head != nil {
				p := l.head
				b.unqueueLocked(p)
				b.answerLocked(p, b.unloadingError())
			}
		}
	}
}

// dispatchLocked hands ready batches to idle executors, applies queue
// timeouts, and arms the timer for the next thing that will be due.
func (b *Batcher) dispatchLocked() {
	if b.stopped {
		return
	}
	now := time.Now()
	b.expireLocked(now)
	if b.hold > 0 && !b.closed {
		if b.queued < b.hold {
			b.armLocked(now, time.Time{}) // queue timeouts still apply
			return
		}
		b.hold = 0
	}
	var due time.Time
	for len(b.idle) > 0 {
		take, at := b.formLocked(now)
		if take == 0 {
			due = at
			break
		}
		s := b.idle[len(b.idle)-1]
		b.idle = b.idle[:len(b.idle)-1]
		for _, p := range b.cand[:take] {
			b.unqueueLocked(p)
			p.state = stateRunning
			s.batch = append(s.batch, p)
		}
		s.work <- struct{}{}
	}
	clear(b.cand)
	b.cand = b.cand[:0]
	if b.closed && b.queued == 0 && len(b.idle) == len(b.slots) {
		b.stopLocked()
		return
	}
	b.armLocked(now, due)
}

// formLocked builds, in b.cand, the batch the head of the queue would
// start, and decides how many of its requests to send now. When it is
// not time yet it returns 0 and when the batch falls due (zero when
// nothing is queued).
func (b *Batcher) formLocked(now time.Time) (int, time.Time) {
	cand := b.cand[:0]
	var head *pending
	var oldest time.Time
	total, best := 0, 0
	// cut is the candidate prefix Triton sends at once when the next
	// request would push the batch past the largest preferred size before
	// any preferred size was reached (L0_batcher sum_gt_max_preferred).
	cut := 0
	blocked := false
scan:
	for li := range b.levels {
		lv := &b.levels[li]
		for _, l := range [...]*list{&lv.main, &lv.late} {
			for p := l.head; p != nil; {
				next := p.next
				if p.ctx.Err() != nil {
					b.dropLocked(p)
					p = next
					continue
				}
				switch {
				case head == nil:
					head = p
				case total+p.bs > b.maxBatch || !compatible(head.req, p.req, b.raggedInputs):
					// FIFO: the batch cannot grow past this request.
					blocked = true
					break scan
				case best == 0 && cut == 0 && total+p.bs > b.maxPreferred:
					cut = len(cand)
				}
				cand = append(cand, p)
				total += p.bs
				if oldest.IsZero() || p.enq.Before(oldest) {
					oldest = p.enq
				}
				if total < len(b.preferred) && b.preferred[total] {
					best = len(cand) // totals only grow: this is the largest so far
				}
				if !b.batching || total >= b.maxBatch {
					break scan
				}
				p = next
			}
		}
	}
	b.cand = cand
	if len(cand) == 0 {
		return 0, time.Time{}
	}
	return b.sendCountLocked(now, formedBatch{n: len(cand), total: total, best: best, cut: cut, oldest: oldest, blocked: blocked})
}

// formedBatch is the candidate batch formLocked found at the head of the
// queue.
type formedBatch struct {
	n       int       // requests in the candidate
	total   int       // their batch size
	best    int       // the longest prefix of a preferred batch size, or 0
	cut     int       // the prefix to send before passing the largest preferred size, or 0
	oldest  time.Time // when the oldest of them was queued
	blocked bool      // the next request cannot join it
}

// sendCountLocked decides how many requests of the candidate f to send
// now: a preferred size or the cut before the queue delay runs out, all of
// them when it cannot grow or wait, else none until it falls due.
func (b *Batcher) sendCountLocked(now time.Time, f formedBatch) (int, time.Time) {
	due := f.oldest.Add(b.delay)
	exceeded := b.delay > 0 && !now.Before(due)
	switch {
	case f.best > 0 && !exceeded:
		return f.best, time.Time{}
	case f.cut > 0 && !exceeded:
		return f.cut, time.Time{}
	case f.blocked || !b.batching || f.total >= b.maxBatch || b.delay == 0 || b.closed || exceeded:
		return f.n, time.Time{}
	case f.total >= b.maxPreferred:
		// Already past every preferred size: waiting cannot reach one
		// (L0_batcher gt_max_preferred).
		return f.n, time.Time{}
	}
	return 0, due
}

// compatible reports whether two requests can share a batch: the same
// inputs with the same data types and the same non-batch dimensions,
// except for ragged inputs, whose shapes may differ.
func compatible(a, b *Request, ragged map[string]bool) bool {
	if len(a.Inputs) != len(b.Inputs) {
		return false
	}
	for i := range a.Inputs {
		x, y := &a.Inputs[i], &b.Inputs[i]
		if x.Name != y.Name || x.DataType != y.DataType || len(x.Shape) != len(y.Shape) || len(x.Shape) == 0 {
			return false
		}
		if !ragged[x.Name] && !sameDims(x.Shape[1:], y.Shape[1:]) {
			return false
		}
	}
	return true
}

func sameDims(a, b infer.Shape) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// armLocked points the timer at the earlier of due and the next queue
// deadline.
func (b *Batcher) armLocked(now, due time.Time) {
	if len(b.deadlines) > 0 {
		if d := b.deadlines[0].deadline; due.IsZero() || d.Before(due) {
			due = d
		}
	}
	switch {
	case due.IsZero():
		if !b.timerAt.IsZero() {
			b.timer.Stop()
			b.spinDue.Store(0)
			b.timerAt = time.Time{}
		}
	case !due.Equal(b.timerAt):
		b.timerAt = due
		wait := due.Sub(now)
		if b.spinBelow > 0 && wait <= b.spinBelow {
			b.timer.Stop()
			b.startSpinLocked(due)
			return
		}
		b.spinDue.Store(0)
		// With spinning on, wake up early and spin the rest of the way.
		b.timer.Reset(wait - b.spinBelow)
	}
}

// startSpinLocked makes the sleeper fire dispatch at due, starting it
// the first time. It is never called once the batcher has stopped, so the
// sleeper is counted in running before the executors can all be gone.
func (b *Batcher) startSpinLocked(due time.Time) {
	b.spinDue.Store(due.UnixNano())
	if !b.sleeping {
		b.sleeping = true
		b.running.Add(1)
		go b.sleeper()
	}
	select {
	case b.sleepWake <- struct{}{}:
	default: // a wake-up is already pending; the sleeper reads the new due time
	}
}

// maxSleepSlice bounds one kernel sleep of the sleeper, so that a due time
// moved earlier (or cleared) while it sleeps is seen this much late at
// most. A slice costs one thread wake-up, a few microseconds of CPU.
const maxSleepSlice = 200 * time.Microsecond

// sleeper is the goroutine that times the waits shorter than SpinBelow. It
// runs on a thread of its own that sleeps in the kernel with a 1 ns timer
// slack, so a 100–500 µs max_queue_delay means what it says on an idle
// process, where a Go timer would fire about 1 ms late, without burning a
// core the way busy-waiting would (on a busy machine, a spinning batcher
// takes the CPU its clients need). It fires dispatch when the due time in
// spinDue passes and returns once the batcher has stopped.
func (b *Batcher) sleeper() {
	defer b.goroutineDone()
	// The thread's timer slack is changed for good, so the goroutine
	// keeps the thread to the end: when it returns still locked, Go ends
	// the thread rather than reuse it.
	runtime.LockOSThread()
	preciseThread()
	for {
		d := b.spinDue.Load()
		if d == 0 {
			select {
			case <-b.sleepWake:
				continue
			case <-b.drained:
				return
			}
		}
		if wait := d - time.Now().UnixNano(); wait > 0 {
			preciseSleep(min(time.Duration(wait), maxSleepSlice))
			continue
		}
		b.mu.Lock()
		if cur := b.spinDue.Load(); cur != 0 && time.Now().UnixNano() < cur {
			b.mu.Unlock() // the due time moved later meanwhile: sleep on
			continue
		}
		if b.spinDue.Swap(0) != 0 {
			b.timerAt = time.Time{}
			b.dispatchLocked()
		}
		b.mu.Unlock()
	}
}

func (b *Batcher) onTimer() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timerAt = time.Time{}
	b.dispatchLocked()
}

// stopLocked ends dispatching: the executors finish what they hold and
// their goroutines return.
func (b *Batcher) stopLocked() {
	if b.stopped {
		return
	}
	b.stopped = true
	b.timer.Stop()
	b.spinDue.Store(0)
	b.timerAt = time.Time{}
	for _, s := range b.slots {
		close(s.work)
	}
	close(b.drained)
}
