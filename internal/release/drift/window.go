package drift

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults for WindowOptions: six ten-minute buckets of 1024 values, a
// rolling hour kept in 6144 float64s (48 KiB) per variable.
const (
	DefaultBuckets = 6
	DefaultWidth   = 10 * time.Minute
	DefaultSize    = 1024
)

// WindowOptions configures a Window. Zero values take the defaults.
type WindowOptions struct {
	// Buckets is the number of time buckets in the ring (default 6).
	Buckets int
	// Width is the span of one bucket (default 10 min): the window covers
	// the current bucket and the Buckets−1 before it, so it spans between
	// (Buckets−1)·Width and Buckets·Width of observation time.
	Width time.Duration
	// Size is the reservoir capacity of one bucket (default 1024).
	Size int
	// Seed seeds the reservoir's random choices; 0 picks a random seed.
	Seed uint64
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *WindowOptions) defaults() {
	if o.Buckets <= 0 {
		o.Buckets = DefaultBuckets
	}
	if o.Width <= 0 {
		o.Width = DefaultWidth
	}
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64() //nolint:gosec // sampling, not security
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Window is a rolling sample of one variable's live values in bounded
// memory: a ring of time buckets, each a fixed-size uniform reservoir
// (Vitter's algorithm R). All memory is allocated by NewWindow; Observe
// never allocates. A bucket is reused, and its values dropped, when the
// clock reaches the slot's next turn, so data older than the window
// expires without a background goroutine. Each stored value stands for
// count/len observations of its bucket, so the window's distribution
// weights buckets by their traffic, not by their sample size.
// A Window is safe for concurrent use.
type Window struct {
	now   func() time.Time
	width int64 // nanoseconds
	size  int

	mu      sync.Mutex // protects buckets and rng
	buckets []bucket
	rng     *rand.Rand
}

// bucket is one reservoir; epoch numbers the Width-long span it holds.
type bucket struct {
	epoch int64 // math.MinInt64 while never used
	count int64 // observations offered to this bucket
	vals  []float64
}

// NewWindow returns an empty window.
func NewWindow(opts WindowOptions) *Window {
	opts.defaults()
	w := &Window{
		now:     opts.Now,
		width:   int64(opts.Width),
		size:    opts.Size,
		buckets: make([]bucket, opts.Buckets),
		rng:     rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)), //nolint:gosec // sampling, not security
	}
	backing := make([]float64, opts.Buckets*opts.Size)
	for i := range w.buckets {
		w.buckets[i] = bucket{epoch: math.MinInt64, vals: backing[i*opts.Size : i*opts.Size : (i+1)*opts.Size]}
	}
	return w
}

func (w *Window) epochOf(t time.Time) int64 {
	ns := t.UnixNano()
	e := ns / w.width
	if ns%w.width < 0 {
		e-- // floor, for clocks before 1970
	}
	return e
}

func (w *Window) slot(e int64) *bucket {
	n := int64(len(w.buckets))
	return &w.buckets[((e%n)+n)%n]
}

// Observe adds v to the current bucket. NaN and ±Inf are ignored: they
// are not values of a distribution (count them where they are produced).
// Observe does not allocate; reading the clock is most of its cost, which
// ObserveAt saves a caller that already has the time.
func (w *Window) Observe(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	w.ObserveAt(v, w.now())
}

// ObserveAt adds v as observed at t, which should be close to the
// window's clock: an observation older than the window is dropped.
func (w *Window) ObserveAt(v float64, t time.Time) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	e := w.epochOf(t)
	w.mu.Lock()
	b := w.slot(e)
	if b.epoch != e {
		if b.epoch > e { // the slot already holds a newer bucket: v is too old
			w.mu.Unlock()
			return
		}
		b.epoch, b.count, b.vals = e, 0, b.vals[:0]
	}
	b.count++
	if len(b.vals) < w.size {
		b.vals = append(b.vals, v) // within capacity: no allocation
	} else if j := w.rng.Int64N(b.count); j < int64(w.size) {
		b.vals[j] = v
	}
	w.mu.Unlock()
}

// live reports whether b belongs to the window ending in epoch cur.
func (w *Window) live(b *bucket, cur int64) bool {
	return b.count > 0 && b.epoch > cur-int64(len(w.buckets))
}

// appendPoints appends the window's stored values with their weights to
// dst and returns it with the number of observations they stand for.
func (w *Window) appendPoints(dst []point) ([]point, int64) {
	cur := w.epochOf(w.now())
	var n int64
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		b := &w.buckets[i]
		if !w.live(b, cur) {
			continue
		}
		n += b.count
		wt := float64(b.count) / float64(len(b.vals))
		for _, v := range b.vals {
			dst = append(dst, point{v: v, w: wt})
		}
	}
	return dst, n
}

// Count returns the number of observations in the window (not the number
// stored).
func (w *Window) Count() int64 {
	cur := w.epochOf(w.now())
	var n int64
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		if b := &w.buckets[i]; w.live(b, cur) {
			n += b.count
		}
	}
	return n
}

// Len returns the number of values stored for the window; it never
// exceeds Cap.
func (w *Window) Len() int {
	cur := w.epochOf(w.now())
	var n int
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		if b := &w.buckets[i]; w.live(b, cur) {
			n += len(b.vals)
		}
	}
	return n
}

// Cap returns the most values the window stores: Buckets × Size.
func (w *Window) Cap() int { return len(w.buckets) * w.size }

// Mean returns the estimated mean of the window's observations (each
// bucket weighted by its count), or NaN when the window is empty.
func (w *Window) Mean() float64 {
	cur := w.epochOf(w.now())
	var sum, total float64
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		b := &w.buckets[i]
		if !w.live(b, cur) {
			continue
		}
		var s float64
		for _, v := range b.vals {
			s += v
		}
		sum += s / float64(len(b.vals)) * float64(b.count)
		total += float64(b.count)
	}
	if total == 0 {
		return math.NaN()
	}
	return sum / total
}

// Reset empties the window, keeping its memory.
func (w *Window) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		b := &w.buckets[i]
		b.epoch, b.count, b.vals = math.MinInt64, 0, b.vals[:0]
	}
}
