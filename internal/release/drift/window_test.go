package drift

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestWindowReservoirBoundedAndUnbiased(t *testing.T) {
	clock := newFakeClock()
	w := NewWindow(WindowOptions{Buckets: 1, Size: 1024, Seed: 7, Now: clock.Now})
	backing := &w.buckets[0].vals[:1][0]
	const n = 1_000_000
	// A sequential stream: a reservoir that favoured early or late values
	// would show it in the mean and in the positions kept.
	for i := range n {
		w.Observe(float64(i) / n)
	}
	if got := w.Len(); got != 1024 {
		t.Fatalf("Len = %d after %d observations, want 1024", got, n)
	}
	if got := w.Count(); got != n {
		t.Fatalf("Count = %d, want %d", got, n)
	}
	if b := &w.buckets[0]; cap(b.vals) != 1024 || &b.vals[0] != backing {
		t.Fatalf("reservoir storage changed: cap %d", cap(b.vals))
	}
	// The mean of 1024 draws from U(0,1) has σ = 0.2887/32 ≈ 0.009.
	if got := w.Mean(); !near(got, 0.5, 0.04) {
		t.Fatalf("Mean = %v, want 0.5 ± 0.04", got)
	}
	// Each tenth of the stream should hold about 102 of the kept values.
	var deciles [10]int
	for _, v := range w.buckets[0].vals {
		deciles[min(int(v*10), 9)]++
	}
	for i, c := range deciles {
		if c < 60 || c > 150 {
			t.Fatalf("decile %d kept %d values, want about 102: %v", i, c, deciles)
		}
	}
}

func TestWindowMemoryBoundedAcrossRotations(t *testing.T) {
	clock := newFakeClock()
	w := NewWindow(WindowOptions{Buckets: 4, Width: time.Minute, Size: 256, Seed: 1, Now: clock.Now})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1_000_000 {
		if i%1000 == 0 {
			clock.Advance(7 * time.Second) // ~10 rotations per 100k observations
		}
		w.Observe(rng.NormFloat64())
		if i%50_000 == 0 && w.Len() > w.Cap() {
			t.Fatalf("Len %d exceeds Cap %d", w.Len(), w.Cap())
		}
	}
	if w.Cap() != 4*256 {
		t.Fatalf("Cap = %d, want 1024", w.Cap())
	}
	for i := range w.buckets {
		if c := cap(w.buckets[i].vals); c != 256 {
			t.Fatalf("bucket %d grew to capacity %d", i, c)
		}
	}
	if got := w.Mean(); !near(got, 0, 0.15) {
		t.Fatalf("Mean = %v, want 0 ± 0.15", got)
	}
}

func TestWindowObserveDoesNotAllocate(t *testing.T) {
	clock := newFakeClock()
	w := NewWindow(WindowOptions{Buckets: 3, Width: time.Second, Size: 64, Now: clock.Now})
	i := 0
	allocs := testing.AllocsPerRun(10_000, func() {
		i++
		if i%100 == 0 {
			clock.Advance(time.Second) // include bucket rotation
		}
		w.Observe(float64(i))
	})
	if allocs != 0 {
		t.Fatalf("Observe allocates %v times per call", allocs)
	}
	m, err := NewMonitor("svc", []Variable{{Name: "x"}, {Name: "r", Kind: Categorical, Categories: []string{"a", "b"}}}, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	allocs = testing.AllocsPerRun(10_000, func() {
		m.Observe("x", 1)
		m.ObserveAt("x", 1, now)
		m.ObserveCategory("r", "b")
		m.ObserveCategoryAt("r", "unknown", now)
	})
	if allocs != 0 {
		t.Fatalf("Monitor.Observe allocates %v times per call", allocs)
	}
}

func TestWindowWeightsBucketsByCount(t *testing.T) {
	clock := newFakeClock()
	w := NewWindow(WindowOptions{Buckets: 2, Width: time.Minute, Size: 128, Now: clock.Now})
	for range 100 {
		w.Observe(0)
	}
	clock.Advance(time.Minute)
	for range 10_000 {
		w.Observe(1)
	}
	// 10,000 of 10,100 observations were 1, though each bucket keeps ≤ 128.
	if got, want := w.Mean(), 10_000.0/10_100; !near(got, want, 1e-12) {
		t.Fatalf("Mean = %v, want %v", got, want)
	}
	pts, n := w.appendPoints(nil)
	if n != 10_100 || len(pts) != 100+128 {
		t.Fatalf("appendPoints: %d points for %d observations, want 228 for 10100", len(pts), n)
	}
	e := newECDF(pts)
	if got := e.before(1); !near(got, 100.0/10_100, 1e-12) {
		t.Fatalf("weighted P(X < 1) = %v, want %v", got, 100.0/10_100)
	}
}

func TestWindowExpiry(t *testing.T) {
	clock := newFakeClock()
	// Align to a bucket boundary so the arithmetic below is exact.
	clock.ns.Store(clock.ns.Load() / int64(time.Minute) * int64(time.Minute))
	w := NewWindow(WindowOptions{Buckets: 3, Width: time.Minute, Size: 16, Now: clock.Now})
	observe := func(v float64, times int) {
		for range times {
			w.Observe(v)
		}
	}
	observe(1, 10)
	clock.Advance(time.Minute)
	observe(2, 20)
	clock.Advance(time.Minute)
	observe(3, 30)
	if got := w.Count(); got != 60 {
		t.Fatalf("Count = %d, want 60", got)
	}
	clock.Advance(time.Minute) // the first bucket leaves the window
	if got := w.Count(); got != 50 {
		t.Fatalf("Count after one rotation = %d, want 50", got)
	}
	if got := w.Mean(); !near(got, (2*20+3*30)/50.0, 1e-12) {
		t.Fatalf("Mean = %v, want %v", got, (2*20+3*30)/50.0)
	}
	observe(4, 5) // reuses the first bucket's slot
	if got, n := w.Count(), w.Len(); got != 55 || n != 16+16+5 {
		t.Fatalf("Count, Len = %d, %d; want 55, 37", got, n)
	}
	// An observation older than the window is dropped, not mixed in.
	clock.Advance(-3 * time.Minute)
	observe(100, 3)
	clock.Advance(3 * time.Minute)
	if got := w.Count(); got != 55 {
		t.Fatalf("Count after late observations = %d, want 55", got)
	}
	clock.Advance(3 * time.Minute)
	if got, n := w.Count(), w.Len(); got != 0 || n != 0 {
		t.Fatalf("Count, Len after the window passed = %d, %d; want 0, 0", got, n)
	}
	if got := w.Mean(); !math.IsNaN(got) {
		t.Fatalf("Mean of an empty window = %v, want NaN", got)
	}
	observe(5, 3)
	w.Reset()
	if got := w.Count(); got != 0 {
		t.Fatalf("Count after Reset = %d, want 0", got)
	}
}

func TestWindowIgnoresNonFinite(t *testing.T) {
	w := NewWindow(WindowOptions{})
	w.Observe(math.NaN())
	w.Observe(math.Inf(1))
	w.Observe(math.Inf(-1))
	w.Observe(2)
	if got := w.Count(); got != 1 {
		t.Fatalf("Count = %d, want 1", got)
	}
}

func TestWindowConcurrentObserve(t *testing.T) {
	clock := newFakeClock()
	w := NewWindow(WindowOptions{Buckets: 4, Width: time.Second, Size: 128, Now: clock.Now})
	const goroutines, each = 8, 20_000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				w.Observe(float64(g*each + i))
				if i%5000 == 0 {
					_ = w.Len()
					_ = w.Mean()
				}
			}
		})
	}
	wg.Wait()
	if got := w.Count(); got != goroutines*each {
		t.Fatalf("Count = %d, want %d", got, goroutines*each)
	}
}

func TestObserveAt(t *testing.T) {
	clock := newFakeClock()
	opts := Options{Window: WindowOptions{Buckets: 2, Width: time.Minute, Now: clock.Now}}
	m, err := NewMonitor("svc", []Variable{{Name: "x"}, {Name: "r", Kind: Categorical, Categories: []string{"a"}}}, opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	if !m.ObserveAt("x", 1, now) || !m.ObserveAt("x", 2, now.Add(-time.Minute)) || !m.ObserveCategoryAt("r", "a", now) {
		t.Fatal("ObserveAt refused a declared variable")
	}
	m.ObserveAt("x", 3, now.Add(-10*time.Minute)) // older than the window
	if m.ObserveAt("r", 1, now) || m.ObserveCategoryAt("x", "a", now) || m.ObserveAt("nope", 1, now) {
		t.Fatal("ObserveAt accepted the wrong kind or an undeclared name")
	}
	if got := m.Window("x").Count(); got != 2 {
		t.Fatalf("Count = %d, want 2", got)
	}
	if got := m.Window("x").Mean(); got != 1.5 {
		t.Fatalf("Mean = %v, want 1.5", got)
	}
	if got := m.vars["r"].win.Count(); got != 1 {
		t.Fatalf("category Count = %d, want 1", got)
	}
}
