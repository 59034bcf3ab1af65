package fallback

import (
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for MonitorOptions.
const (
	DefaultOutput    = "eta_prediction"
	DefaultHistory   = 24 * time.Hour
	DefaultBand      = 0.15
	DefaultDuration  = 10 * time.Minute
	DefaultWindow    = time.Minute
	DefaultRecentCap = 4096
	DefaultThreshold = 0.7
)

// MonitorOptions configures a Monitor. Zero values take the defaults.
type MonitorOptions struct {
	// Output is the prediction output watched (default "eta_prediction").
	Output string
	// History is how far back the baseline reaches (default 24 h), rounded
	// up to whole buckets.
	History time.Duration
	// Bucket is the width of one baseline bucket: the baseline is
	// recomputed each time a bucket completes (default 1 h).
	Bucket time.Duration
	// Band is the allowed relative deviation of the recent P90 from the
	// baseline P90 (default 0.15 = ±15 %).
	Band float64
	// Duration is how long the recent P90 must stay outside the band before
	// the trigger fires (default 10 min).
	Duration time.Duration
	// ClearBand is the relative band the P90 must be back inside for the
	// trigger to clear (default 0.8 × Band: hysteresis).
	ClearBand float64
	// ClearDuration is how long the P90 must stay inside ClearBand before
	// the trigger clears (default 1 min).
	ClearDuration time.Duration
	// Window is the span of the recent sliding window (default 1 min).
	Window time.Duration
	// RecentCap bounds the observations kept in the window (default 4096).
	RecentCap int
	// Now is the clock used by State (default time.Now).
	Now func() time.Time
}

func (o *MonitorOptions) defaults() {
	if o.Output == "" {
		o.Output = DefaultOutput
	}
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.Bucket <= 0 {
		o.Bucket = time.Hour
	}
	if o.Band <= 0 {
		o.Band = DefaultBand
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.ClearBand <= 0 || o.ClearBand > o.Band {
		o.ClearBand = 0.8 * o.Band
	}
	if o.ClearDuration <= 0 {
		o.ClearDuration = time.Minute
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.RecentCap <= 0 {
		o.RecentCap = DefaultRecentCap
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Baseline is the rolling baseline over the completed hours of history.
type Baseline struct {
	Mean  float64 // mean of the predictions
	Std   float64 // standard deviation of the predictions
	P90   float64 // mean of the per-minute recent P90s: what the trigger compares against
	Hours int     // completed hourly buckets merged; 0 means no baseline yet
}

// Lower returns Mean − 2σ.
func (b Baseline) Lower() float64 { return b.Mean - 2*b.Std }

// Upper returns Mean + 2σ.
func (b Baseline) Upper() float64 { return b.Mean + 2*b.Std }

// State is a Monitor's state for the admin API and metrics.
type State struct {
	Triggered bool
	Since     time.Time // when the trigger fired (zero when not triggered)
	Baseline  Baseline
	RecentP90 float64 // P90 of the recent window; NaN when the window is empty
}

// welford holds running count, mean and sum of squared deviations.
type welford struct {
	n    float64
	mean float64
	m2   float64
}

func (w *welford) add(x float64) {
	w.n++
	d := x - w.mean
	w.mean += d / w.n
	w.m2 += d * (x - w.mean)
}

// merge combines o into w (Chan et al. parallel update).
func (w *welford) merge(o welford) {
	if o.n == 0 {
		return
	}
	n := w.n + o.n
	d := o.mean - w.mean
	w.mean += d * o.n / n
	w.m2 += o.m2 + d*d*w.n*o.n/n
	w.n = n
}

func (w *welford) std() float64 {
	if w.n < 2 {
		return 0
	}
	return math.Sqrt(w.m2 / (w.n - 1))
}

// hourBucket is one hour of statistics, hour counted from the first
// observation.
type hourBucket struct {
	hour   int64
	values welford // the predictions
	p90s   welford // the per-minute recent P90 samples
}

type sample struct {
	at time.Time
	v  float64
}

// Monitor watches one service output and decides when fallback triggers.
// It is safe for concurrent use; it starts no goroutines.
type Monitor struct {
	service string
	opts    MonitorOptions
	hours   int64 // History in whole hours
	log     *slog.Logger
	met     *metrics

	mu sync.Mutex
	// protects everything below
	start        time.Time    // first observation; zero before any
	buckets      []hourBucket // ring, at most hours+1 entries: the last `hours` complete ones plus the current
	baseline     Baseline     // recomputed when an hour completes
	ring         []sample     // recent observations, fixed capacity RecentCap
	head         int          // next write position in ring
	full         bool
	scratch      []float64
	lastEval     time.Time // last evaluation done by Observe
	lastP90Min   time.Time // last time a per-minute P90 went into the current bucket
	p90          float64
	outsideSince time.Time // start of the current run outside Band; zero when inside
	insideSince  time.Time // start of the current run inside ClearBand; zero when outside
	triggered    bool
	since        time.Time
	completed    uint64 // counts bucket completions: persistence writes when it moves
	liveFrom     int64  // the first bucket this monitor observed itself (not seeded)
}

// NewMonitor returns a Monitor for service. log nil discards; reg nil leaves
// the metrics unregistered.
func NewMonitor(service string, opts MonitorOptions, log *slog.Logger, reg prometheus.Registerer) *Monitor {
	opts.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hours := int64((opts.History + opts.Bucket - 1) / opts.Bucket)
	m := &Monitor{
		service: service,
		opts:    opts,
		hours:   hours,
		log:     log.With("component", "fallback", "service", service),
		met:     newMetrics(reg),
		ring:    make([]sample, opts.RecentCap),
		scratch: make([]float64, 0, opts.RecentCap),
		buckets: make([]hourBucket, 0, hours+1),
		p90:     math.NaN(),
	}
	m.publish()
	return m
}

// Observe records a prediction value made at time at. Observations should
// arrive in roughly increasing time; an observation older than the current
// hour bucket still counts in it.
func (m *Monitor) Observe(at time.Time, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.start.IsZero() {
		m.start = at
	}
	if m.lastP90Min.IsZero() {
		m.lastP90Min = at
	}
	m.bucketFor(at).values.add(v)
	m.ring[m.head] = sample{at: at, v: v}
	m.head = (m.head + 1) % len(m.ring)
	if m.head == 0 {
		m.full = true
	}
	// Sorting the window costs O(n log n); once a second is plenty for a
	// 10-minute trigger.
	if m.lastEval.IsZero() || at.Sub(m.lastEval) >= evalEvery {
		m.lastEval = at
		m.evaluate(at)
	}
}

// evalEvery is the minimum observation-time gap between trigger evaluations.
const evalEvery = time.Second

// bucketFor returns the hourly bucket for at, rolling the ring and
// recomputing the baseline when a new hour starts.
func (m *Monitor) bucketFor(at time.Time) *hourBucket {
	h := int64(at.Sub(m.start) / m.opts.Bucket)
	if n := len(m.buckets); n > 0 && m.buckets[n-1].hour >= h {
		return &m.buckets[n-1]
	}
	if len(m.buckets) > 0 {
		m.completed++
	}
	m.buckets = append(m.buckets, hourBucket{hour: h})
	// Keep the current bucket plus the complete ones within History.
	cut := 0
	for cut < len(m.buckets)-1 && m.buckets[cut].hour < h-m.hours {
		cut++
	}
	if cut > 0 {
		m.buckets = append(m.buckets[:0], m.buckets[cut:]...)
	}
	m.recomputeBaseline()
	return &m.buckets[len(m.buckets)-1]
}

func (m *Monitor) recomputeBaseline() {
	var vals, p90s welford
	complete := m.buckets[:len(m.buckets)-1]
	for _, b := range complete {
		vals.merge(b.values)
		p90s.merge(b.p90s)
	}
	m.baseline = Baseline{Mean: vals.mean, Std: vals.std(), P90: p90s.mean, Hours: len(complete)}
	if p90s.n == 0 {
		// Hours too quiet for a per-minute P90: fall back to the mean.
		m.baseline.P90 = vals.mean
	}
	m.met.baselineMean.WithLabelValues(m.service).Set(m.baseline.Mean)
}

// recentP90 returns the exact P90 (nearest rank) of the ring's samples
// within Window before now; NaN when none.
func (m *Monitor) recentP90(now time.Time) float64 {
	m.scratch = m.scratch[:0]
	n := m.head
	if m.full {
		n = len(m.ring)
	}
	from := now.Add(-m.opts.Window)
	for i := range n {
		if s := m.ring[i]; s.at.After(from) && !s.at.After(now) {
			m.scratch = append(m.scratch, s.v)
		}
	}
	if len(m.scratch) == 0 {
		return math.NaN()
	}
	slices.Sort(m.scratch)
	rank := int(math.Ceil(0.9*float64(len(m.scratch)))) - 1
	return m.scratch[max(rank, 0)]
}

// evaluate updates the P90 and the trigger state at time now.
func (m *Monitor) evaluate(now time.Time) {
	m.p90 = m.recentP90(now)
	if math.IsNaN(m.p90) {
		// No evidence either way: restart both runs, keep the state.
		m.outsideSince, m.insideSince = time.Time{}, time.Time{}
		m.publish()
		return
	}
	if now.Sub(m.lastP90Min) >= m.opts.Window {
		m.lastP90Min = now
		m.bucketFor(now).p90s.add(m.p90)
	}
	ref := m.baseline.P90
	if m.baseline.Hours == 0 || ref == 0 {
		m.publish()
		return
	}
	dev := math.Abs(m.p90-ref) / math.Abs(ref)
	if dev > m.opts.Band {
		if m.outsideSince.IsZero() {
			m.outsideSince = now
		}
	} else {
		m.outsideSince = time.Time{}
	}
	if dev <= m.opts.ClearBand {
		if m.insideSince.IsZero() {
			m.insideSince = now
		}
	} else {
		m.insideSince = time.Time{}
	}
	switch {
	case !m.triggered && !m.outsideSince.IsZero() && now.Sub(m.outsideSince) >= m.opts.Duration:
		m.triggered, m.since = true, now
		m.log.Warn("fallback triggered", "p90", m.p90, "baseline_p90", ref, "baseline_mean", m.baseline.Mean)
	case m.triggered && !m.insideSince.IsZero() && now.Sub(m.insideSince) >= m.opts.ClearDuration:
		m.triggered, m.since = false, time.Time{}
		m.log.Info("fallback cleared", "p90", m.p90, "baseline_p90", ref)
	}
	m.publish()
}

func (m *Monitor) publish() {
	v := 0.0
	if m.triggered {
		v = 1
	}
	m.met.triggered.WithLabelValues(m.service).Set(v)
	if !math.IsNaN(m.p90) {
		m.met.p90.WithLabelValues(m.service).Set(m.p90)
	}
}

// Triggered reports whether fallback is active.
func (m *Monitor) Triggered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.triggered
}

// State returns the current state, re-evaluating the recent window at the
// monitor's clock.
func (m *Monitor) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.start.IsZero() {
		m.evaluate(m.opts.Now())
	}
	return State{Triggered: m.triggered, Since: m.since, Baseline: m.baseline, RecentP90: m.p90}
}

// UseRule reports whether a request with confidence conf should get the
// rule's answer (see Decide) and counts those answers. threshold ≤ 0 means
// DefaultThreshold.
func (m *Monitor) UseRule(conf, threshold float64) bool {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	use := Decide(conf, m.Triggered(), threshold)
	if use {
		m.met.answers.WithLabelValues(m.service, CauseDrift).Inc()
	}
	return use
}

// CauseDrift is the cause label of the answers UseRule chose.
const CauseDrift = "drift"

// CountAnswer counts one answer of the rule given for another cause (a
// model call that failed).
func (m *Monitor) CountAnswer(cause string) {
	m.met.answers.WithLabelValues(m.service, cause).Inc()
}

// Source values for an answer.
const (
	SourceModel = "model"
	SourceRule  = "fallback_rule"
)

// Decide reports whether a request should be answered by the fallback rule:
// only while triggered, and only when its confidence score is below
// threshold. Otherwise the model's answer stands.
func Decide(conf float64, triggered bool, threshold float64) bool {
	return triggered && conf < threshold
}
