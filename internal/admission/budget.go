package admission

import (
	"sync/atomic"

	"github.com/sluice-ml/sluice/internal/admission/limitspec"
)

// Budget is the process-wide budget of request bytes held in memory at
// once. It is safe for concurrent use; a process makes one and shares it
// among every listener, so that no mix of requests over any number of
// ports holds more than its maximum.
//
// The last eighth of the budget is a reserve for small requests: bytes of
// a request of declared length up to SmallBytes may take it, while larger
// requests and bodies of unknown length (chunked) may not. Without it, a
// handful of clients streaming large or chunked bodies on any port would
// hold the whole budget and every ordinary request of the process would
// be refused while they do; with it, they are refused and ordinary
// traffic keeps being served.
type Budget struct {
	max  int64 // <= 0: unlimited
	bulk int64 // what large and unknown-length bodies may hold: max less the reserve
	used atomic.Int64
	m    *Metrics
}

// NewBudget returns a budget of maxBytes. maxBytes <= 0 means unlimited:
// every acquisition succeeds but is still counted, so InUse and the
// in-flight gauge stay meaningful. m may be nil.
func NewBudget(maxBytes int64, m *Metrics) *Budget {
	b := &Budget{max: max(maxBytes, 0), bulk: limitspec.BulkBytes(max(maxBytes, 0)), m: m}
	if m != nil {
		m.budget.Set(float64(b.max))
	}
	return b
}

// Max returns the budget's size in bytes; 0 means unlimited.
func (b *Budget) Max() int64 { return b.max }

// TryAcquire takes n bytes for one request (or message) of n bytes and
// reports whether it could. n over SmallBytes may not take the reserve.
// It never waits: a caller that cannot have its bytes now is to refuse
// the work (503 overloaded), not queue it. n <= 0 always succeeds and
// takes nothing.
func (b *Budget) TryAcquire(n int64) bool { return b.acquire(n, n > SmallBytes) }

// tryAcquireBulk takes n bytes that are part of a body whose size is
// unknown or large (a chunk of a chunked body, a decompressed buffer's
// growth): whatever n, they may not take the reserve.
func (b *Budget) tryAcquireBulk(n int64) bool { return b.acquire(n, true) }

func (b *Budget) acquire(n int64, bulk bool) bool {
	if n <= 0 {
		return true
	}
	limit := b.max
	if bulk {
		limit = b.bulk
	}
	for {
		cur := b.used.Load()
		if b.max > 0 && cur+n > limit {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			if b.m != nil {
				b.m.inflight.Add(float64(n))
			}
			return true
		}
	}
}

// Release gives back n bytes taken by TryAcquire. Releasing more than was
// acquired is a bug in the caller and panics. A nil Budget releases
// nothing.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	if b.used.Add(-n) < 0 {
		panic("admission: budget released more bytes than were acquired")
	}
	if b.m != nil {
		b.m.inflight.Sub(float64(n))
	}
}

// InUse returns the bytes currently acquired.
func (b *Budget) InUse() int64 { return b.used.Load() }

// free returns the bytes that can still be acquired (math.MaxInt64 when
// unlimited).
func (b *Budget) free() int64 {
	if b.max <= 0 {
		return 1<<63 - 1
	}
	return b.max - b.used.Load()
}
