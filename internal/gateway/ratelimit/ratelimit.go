package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Backend names reported in Decision.Backend and in the backend metric label.
const (
	BackendLocal = "local"
	BackendRedis = "redis"
)

// ErrInvalidLimit is returned (wrapped) by Allow for a Limit that Validate rejects.
var ErrInvalidLimit = errors.New("invalid rate limit")

// Limit is the budget of one key: Rate requests per second on average, with
// bursts of up to Burst requests.
type Limit struct {
	Rate  float64 // requests per second; must be > 0 and finite
	Burst int     // requests admitted at once from an idle key; must be >= 1
}

// Validate reports whether l can be enforced.
func (l Limit) Validate() error {
	if !(l.Rate > 0) || math.IsInf(l.Rate, 0) {
		return fmt.Errorf("%w: rate %v must be a positive finite number of requests per second", ErrInvalidLimit, l.Rate)
	}
	if l.Burst < 1 {
		return fmt.Errorf("%w: burst %d must be at least 1", ErrInvalidLimit, l.Burst)
	}
	return nil
}

// Decision is the answer for one request.
type Decision struct {
	// Allowed says whether the request may proceed.
	Allowed bool
	// RetryAfter is, for a refused request, how long until one request
	// would be admitted; zero when Allowed.
	RetryAfter time.Duration
	// Remaining is how many more requests the key could send right now
	// (rounded down); zero when refused.
	Remaining int
	// Backend is the limiter that decided: BackendLocal or BackendRedis.
	Backend string
}

// RetryAfterHeader formats d as the value of an HTTP Retry-After header:
// whole seconds, rounded up, and at least 1.
func RetryAfterHeader(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	s = max(s, 1)
	return strconv.FormatInt(s, 10)
}

// Metrics are the rate limiter collectors. One Metrics may be shared by a
// Local, a Redis and the FailOpen wrapping them; each decision is counted
// once, by the backend that made it.
type Metrics struct {
	decisions *prometheus.CounterVec
	fallbacks prometheus.Counter
	redisUp   prometheus.Gauge
}

// NewMetrics builds the collectors and registers them with reg; a nil reg
// leaves them unregistered. It panics if they are already registered there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		decisions: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway_ratelimit", Name: "decisions_total",
			Help: "Rate limit decisions, by the backend that decided (local or redis) and result (allowed or limited).",
		}, []string{"backend", "result"}),
		fallbacks: f.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway_ratelimit", Name: "fallbacks_total",
			Help: "Decisions made by the local token bucket because Redis failed, timed out or was marked down.",
		}),
		redisUp: f.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "gateway_ratelimit", Name: "redis_up",
			Help: "1 while the Redis rate limiter answers, 0 after a failure until a probe succeeds.",
		}),
	}
	for _, b := range []string{BackendLocal, BackendRedis} {
		for _, r := range []string{"allowed", "limited"} {
			m.decisions.WithLabelValues(b, r)
		}
	}
	return m
}

func (m *Metrics) observe(d Decision) {
	r := "limited"
	if d.Allowed {
		r = "allowed"
	}
	m.decisions.WithLabelValues(d.Backend, r).Inc()
}

// durationCeil converts seconds to a Duration, rounding up to the nanosecond.
func durationCeil(sec float64) time.Duration {
	return time.Duration(math.Ceil(sec * float64(time.Second)))
}
