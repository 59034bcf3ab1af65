package upstream

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// grpcUnavailable is gRPC's UNAVAILABLE status code; the package avoids
// importing grpc for one constant.
const grpcUnavailable = 14

// Ejection reasons, used as the reason label of
// sluice_gateway_upstream_ejections_total.
const (
	ReasonErrorRate      = "error_rate"
	ReasonConsecutive503 = "consecutive_503"
)

// ErrNoEndpoints is returned by [Set.Pick] when the set has no endpoints.
var ErrNoEndpoints = errors.New("no upstream endpoints")

// Options configures a [Set]. Zero fields take the defaults in brackets.
type Options struct {
	// Backend names the backend in metrics and logs.
	Backend string
	// ErrorRatePercent ejects an endpoint whose failed share of outcomes in
	// the window exceeds it [5].
	ErrorRatePercent float64
	// Interval is the length of the rolling error-rate window [10s].
	Interval time.Duration
	// MinRequestVolume is the number of outcomes in the window below which
	// the error rate is not judged [20].
	MinRequestVolume int
	// Consecutive503 is the number of 503 / UNAVAILABLE outcomes within
	// Consecutive503Window that ejects an endpoint [3].
	Consecutive503 int
	// Consecutive503Window is the sliding window of the 503 detector [1m].
	Consecutive503Window time.Duration
	// BaseEjectionTime is how long an ejection lasts; it does not grow with
	// repeated ejections [30s].
	BaseEjectionTime time.Duration
	// MaxEjectionPercent caps the share of endpoints ejected at once; one
	// endpoint may always be ejected [50].
	MaxEjectionPercent float64
	// PanicThresholdPercent: when fewer than this share of endpoints are
	// healthy and not ejected, picks spread across all endpoints [50].
	// Negative disables panic routing unless no endpoint is routable.
	PanicThresholdPercent float64
	// Rand is the source of P2C choices; nil seeds one randomly. It is used
	// under the set's lock only, so an unsynchronised source is fine. Tests
	// pass a seeded one.
	Rand *rand.Rand
}

func (o Options) withDefaults() Options {
	if o.ErrorRatePercent == 0 {
		o.ErrorRatePercent = 5
	}
	if o.Interval == 0 {
		o.Interval = 10 * time.Second
	}
	if o.MinRequestVolume == 0 {
		o.MinRequestVolume = 20
	}
	if o.Consecutive503 == 0 {
		o.Consecutive503 = 3
	}
	if o.Consecutive503Window == 0 {
		o.Consecutive503Window = time.Minute
	}
	if o.BaseEjectionTime == 0 {
		o.BaseEjectionTime = 30 * time.Second
	}
	if o.MaxEjectionPercent == 0 {
		o.MaxEjectionPercent = 50
	}
	if o.PanicThresholdPercent == 0 {
		o.PanicThresholdPercent = 50
	}
	if o.Rand == nil {
		//nolint:gosec // load-balancing choices need speed, not unpredictability
		o.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.ErrorRatePercent < 0 || o.ErrorRatePercent > 100 {
		errs = append(errs, fmt.Errorf("error rate percent %v not in [0, 100]", o.ErrorRatePercent))
	}
	if o.MaxEjectionPercent < 0 || o.MaxEjectionPercent > 100 {
		errs = append(errs, fmt.Errorf("max ejection percent %v not in [0, 100]", o.MaxEjectionPercent))
	}
	if o.PanicThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("panic threshold percent %v above 100", o.PanicThresholdPercent))
	}
	if o.Interval < 0 || o.Consecutive503Window < 0 || o.BaseEjectionTime < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if o.MinRequestVolume < 0 || o.Consecutive503 < 0 {
		errs = append(errs, errors.New("counts must not be negative"))
	}
	return errors.Join(errs...)
}

// Outcome is the result of one try against an endpoint. Set Status for HTTP
// calls and GRPCCode for gRPC calls; Err for transport failures (connect
// failure, reset, timeout) that produced no status.
type Outcome struct {
	// Status is the HTTP status code, 0 when none.
	Status int
	// GRPCCode is the gRPC status code, 0 (OK) when none.
	GRPCCode int
	// Err is a transport error, nil when a response arrived.
	Err error
	// Latency is how long the try took.
	Latency time.Duration
}

// Failed reports whether the outcome counts against the endpoint's error
// rate: a transport error, an HTTP 5xx, or a gRPC code that signals a server
// fault (UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE, DATA_LOSS).
// Client errors (4xx, INVALID_ARGUMENT, ...) are the caller's fault and do not
// count.
func (o Outcome) Failed() bool {
	if o.Err != nil || o.Status >= 500 {
		return true
	}
	switch o.GRPCCode {
	case 2, 4, 13, grpcUnavailable, 15:
		return true
	default:
		return false
	}
}

// Is503 reports whether the outcome is an HTTP 503 or a gRPC UNAVAILABLE.
func (o Outcome) Is503() bool {
	return o.Status == 503 || o.GRPCCode == grpcUnavailable
}

// EndpointState is an admin view of one endpoint.
type EndpointState struct {
	// Addr is the endpoint address.
	Addr string `json:"addr"`
	// Healthy is the last active health result (true until one arrives).
	Healthy bool `json:"healthy"`
	// Ejected reports an ejection by outlier detection.
	Ejected bool `json:"ejected"`
	// EjectedUntil is when the ejection ends; zero when not ejected.
	EjectedUntil time.Time `json:"ejected_until,omitzero"`
	// InFlight is the number of picks not yet reported done.
	InFlight int `json:"in_flight"`
	// ErrorRate is the failed share of outcomes in the current window, 0..1.
	ErrorRate float64 `json:"error_rate"`
	// Recent503 counts 503 / UNAVAILABLE outcomes in the sliding 503 window.
	Recent503 int `json:"recent_503"`
}

// endpoint is the state of one address; the Set's mutex guards it.
type endpoint struct {
	addr         string
	healthy      bool
	ejectedUntil time.Time // zero when not ejected
	inFlight     int
	window       window
	recent503    []time.Time // oldest first, at most Consecutive503 entries
	inFlightG    prometheus.Gauge
	ejectedG     prometheus.Gauge
}

func (e *endpoint) ejected() bool { return !e.ejectedUntil.IsZero() }

// Set is the endpoint set of one backend. It is safe for concurrent use.
type Set struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	panics  prometheus.Counter

	mu        sync.Mutex // protects endpoints' state and opts.Rand
	endpoints []*endpoint
	byAddr    map[string]*endpoint
}

// New returns the set of the given endpoint addresses. Addresses must be
// non-empty and unique. A nil logger discards; a nil registerer leaves the
// metrics unregistered.
func New(endpoints []string, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Set, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("validate upstream options: %w", err)
	}
	opts = opts.withDefaults()
	if len(endpoints) == 0 {
		return nil, ErrNoEndpoints
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := newMetrics(reg)
	s := &Set{
		opts:    opts,
		log:     logger.With("component", "upstream", "backend", opts.Backend),
		metrics: m,
		panics:  m.panics.WithLabelValues(opts.Backend),
		byAddr:  make(map[string]*endpoint, len(endpoints)),
	}
	for _, addr := range endpoints {
		if addr == "" {
			return nil, errors.New("empty upstream endpoint address")
		}
		if _, dup := s.byAddr[addr]; dup {
			return nil, fmt.Errorf("duplicate upstream endpoint %q", addr)
		}
		e := &endpoint{
			addr:      addr,
			healthy:   true,
			window:    newWindow(opts.Interval),
			inFlightG: m.inFlight.WithLabelValues(opts.Backend, addr),
			ejectedG:  m.ejected.WithLabelValues(opts.Backend, addr),
		}
		e.inFlightG.Set(0)
		e.ejectedG.Set(0)
		s.endpoints = append(s.endpoints, e)
		s.byAddr[addr] = e
	}
	return s, nil
}

// Endpoint is the lease of one pick: the caller makes one try against Addr
// and then calls Done exactly once.
type Endpoint struct {
	// Addr is the picked endpoint's address.
	Addr string
	// Reused is true when every other candidate was excluded, so the pick
	// repeats an address the caller asked to avoid.
	Reused bool
	// Panic is true when the pick was made in panic mode, across all
	// endpoints regardless of health and ejection.
	Panic bool

	set  *Set
	ep   *endpoint
	done atomic.Bool
}

// Pick returns an endpoint for one try, preferring the one with fewer
// requests in flight of two random routable endpoints. Addresses in exclude
// (those a request already tried) are skipped while another candidate
// exists. The caller must call Done on the result.
func (s *Set) Pick(exclude ...string) (*Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.endpoints) == 0 {
		return nil, ErrNoEndpoints
	}
	now := time.Now()
	s.readmit(now)

	pool := make([]*endpoint, 0, len(s.endpoints))
	for _, e := range s.endpoints {
		if e.healthy && !e.ejected() {
			pool = append(pool, e)
		}
	}
	panicking := len(pool) == 0 ||
		float64(len(pool))*100 < s.opts.PanicThresholdPercent*float64(len(s.endpoints))
	if panicking {
		pool = append(pool[:0], s.endpoints...)
		s.panics.Inc()
	}

	candidates := pool
	reused := false
	if len(exclude) > 0 {
		candidates = make([]*endpoint, 0, len(pool))
		for _, e := range pool {
			if !slices.Contains(exclude, e.addr) {
				candidates = append(candidates, e)
			}
		}
		if len(candidates) == 0 {
			candidates, reused = pool, true
		}
	}

	e := s.p2c(candidates)
	e.inFlight++
	e.inFlightG.Set(float64(e.inFlight))
	return &Endpoint{Addr: e.addr, Reused: reused, Panic: panicking, set: s, ep: e}, nil
}

// p2c draws two distinct candidates and returns the less loaded one.
func (s *Set) p2c(candidates []*endpoint) *endpoint {
	if len(candidates) == 1 {
		return candidates[0]
	}
	i := s.opts.Rand.IntN(len(candidates))
	j := s.opts.Rand.IntN(len(candidates) - 1)
	if j >= i {
		j++
	}
	a, b := candidates[i], candidates[j]
	if b.inFlight < a.inFlight {
		return b
	}
	return a
}

// Done releases the lease and records the try's outcome. Calling it twice is
// a bug and panics.
func (p *Endpoint) Done(o Outcome) {
	if !p.done.CompareAndSwap(false, true) {
		panic("upstream: Done called twice for one pick")
	}
	p.set.done(p.ep, o)
}

func (s *Set) done(e *endpoint, o Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.inFlight--
	e.inFlightG.Set(float64(e.inFlight))
	now := time.Now()
	s.readmit(now)
	if e.ejected() {
		// Late outcomes of tries started before the ejection say nothing
		// about the endpoint after its return.
		return
	}
	failed := o.Failed()
	e.window.add(now, failed)
	if o.Is503() {
		e.recent503 = append(e.recent503, now)
		if n := len(e.recent503) - s.opts.Consecutive503; n > 0 {
			e.recent503 = slices.Delete(e.recent503, 0, n)
		}
	}
	if !failed {
		return
	}
	switch {
	case len(e.recent503) >= s.opts.Consecutive503 &&
		now.Sub(e.recent503[0]) < s.opts.Consecutive503Window:
		s.eject(now, e, ReasonConsecutive503)
	case s.errorRateExceeded(now, e):
		s.eject(now, e, ReasonErrorRate)
	}
}

func (s *Set) errorRateExceeded(now time.Time, e *endpoint) bool {
	total, failed := e.window.sum(now)
	if total == 0 || total < s.opts.MinRequestVolume {
		return false
	}
	return float64(failed)*100 > s.opts.ErrorRatePercent*float64(total)
}

// eject ejects e unless the ejection cap is reached.
func (s *Set) eject(now time.Time, e *endpoint, reason string) {
	ejected := 0
	for _, o := range s.endpoints {
		if o.ejected() {
			ejected++
		}
	}
	limit := max(1, int(s.opts.MaxEjectionPercent*float64(len(s.endpoints))/100))
	if ejected >= limit {
		s.log.Debug("ejection skipped at cap", "endpoint", e.addr, "reason", reason, "ejected", ejected)
		return
	}
	e.ejectedUntil = now.Add(s.opts.BaseEjectionTime)
	e.ejectedG.Set(1)
	s.metrics.ejections.WithLabelValues(s.opts.Backend, e.addr, reason).Inc()
	s.log.Warn("upstream endpoint ejected", "endpoint", e.addr, "reason", reason,
		"until", e.ejectedUntil)
}

// readmit ends the ejections that have run their time; the endpoint returns
// on probation with empty windows.
func (s *Set) readmit(now time.Time) {
	for _, e := range s.endpoints {
		if e.ejected() && !now.Before(e.ejectedUntil) {
			e.ejectedUntil = time.Time{}
			e.window.reset()
			e.recent503 = e.recent503[:0]
			e.ejectedG.Set(0)
			s.log.Info("upstream endpoint readmitted", "endpoint", e.addr)
		}
	}
}

// SetHealth records an active health-check result for addr; an unhealthy
// endpoint is not picked except in panic mode.
func (s *Set) SetHealth(addr string, healthy bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byAddr[addr]
	if !ok {
		return fmt.Errorf("set health of %q: unknown upstream endpoint", addr)
	}
	s.readmit(time.Now())
	if e.healthy != healthy {
		s.log.Info("upstream endpoint health changed", "endpoint", addr, "healthy", healthy)
	}
	e.healthy = healthy
	return nil
}

// Snapshot returns the state of every endpoint, in configuration order.
func (s *Set) Snapshot() []EndpointState {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.readmit(now)
	out := make([]EndpointState, 0, len(s.endpoints))
	for _, e := range s.endpoints {
		st := EndpointState{
			Addr:         e.addr,
			Healthy:      e.healthy,
			Ejected:      e.ejected(),
			EjectedUntil: e.ejectedUntil,
			InFlight:     e.inFlight,
		}
		if total, failed := e.window.sum(now); total > 0 {
			st.ErrorRate = float64(failed) / float64(total)
		}
		for _, t := range e.recent503 {
			if now.Sub(t) < s.opts.Consecutive503Window {
				st.Recent503++
			}
		}
		out = append(out, st)
	}
	return out
}

// Close deletes the set's metric series, for a backend removed by a config
// reload. Leases still out may be Done afterwards; their gauge updates are
// then lost.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.metrics
	for _, e := range s.endpoints {
		m.inFlight.DeleteLabelValues(s.opts.Backend, e.addr)
		m.ejected.DeleteLabelValues(s.opts.Backend, e.addr)
		m.ejections.DeletePartialMatch(prometheus.Labels{"backend": s.opts.Backend, "endpoint": e.addr})
	}
	m.panics.DeleteLabelValues(s.opts.Backend)
}
