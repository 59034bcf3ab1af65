package upstream

import "time"

// windowBuckets is the number of buckets of the rolling error-rate window;
// the window slides in steps of Interval/windowBuckets.
const windowBuckets = 10

// window counts outcomes over a rolling interval in fixed buckets.
type window struct {
	width   time.Duration
	buckets [windowBuckets]bucket
}

type bucket struct {
	start         time.Time // zero when unused
	total, failed int
}

func newWindow(interval time.Duration) window {
	return window{width: max(interval/windowBuckets, time.Nanosecond)}
}

func (w *window) add(now time.Time, failed bool) {
	start := now.Truncate(w.width)
	b := &w.buckets[(start.UnixNano()/int64(w.width))%windowBuckets]
	if !b.start.Equal(start) {
		*b = bucket{start: start}
	}
	b.total++
	if failed {
		b.failed++
	}
}

// sum returns the outcomes of the buckets that still overlap the window.
func (w *window) sum(now time.Time) (total, failed int) {
	oldest := now.Truncate(w.width).Add(-w.width * (windowBuckets - 1))
	for _, b := range w.buckets {
		if !b.start.IsZero() && !b.start.Before(oldest) {
			total += b.total
			failed += b.failed
		}
	}
	return total, failed
}

func (w *window) reset() { w.buckets = [windowBuckets]bucket{} }
