package admission

import "sync/atomic"

// DefaultBudgetBytes is the default process-wide budget of request bytes
// held in memory at once: 256 MiB, four requests of the largest default
// body limit (64 MiB). See the package documentation for why.
const DefaultBudgetBytes = 256 << 20

// Budget is the process-wide budget of request bytes held in memory at
// once. It is safe for concurrent use; a process makes one and shares it
// among every listener, so that no mix of requests over any number of
// ports holds more than its maximum.
type Budget struct {
	max  int64 // <= 0: unlimited
	used atomic.Int64
	m    *Metrics
}

// NewBudget returns a budget of maxBytes. maxBytes <= 0 means unlimited:
// every acquisition succeeds but is still counted, so InUse and the
// in-flight gauge stay meaningful. m may be nil.
func NewBudget(maxBytes int64, m *Metrics) *Budget {
	b := &Budget{max: max(maxBytes, 0), m: m}
	if m != nil {
		m.budget.Set(float64(b.max))
	}
	return b
}

// Max returns the budget's size in bytes; 0 means unlimited.
func (b *Budget) Max() int64 { return b.max }

// TryAcquire takes n bytes from the budget and reports whether it could.
// It never waits: a caller that cannot have its bytes now is to refuse
// the work (503 overloaded), not queue it. n <= 0 always succeeds and
// takes nothing.
func (b *Budget) TryAcquire(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		cur := b.used.Load()
		if b.max > 0 && cur+n > b.max {
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
// acquired is a bug in the caller and panics.
func (b *Budget) Release(n int64) {
	if n <= 0 {
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
