package gateway

import (
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/config"
)

// breaker is a service's feature-level circuit breaker. It counts
// stale-feature events (feature reads that found a stale view) in a
// sliding window; at the threshold it opens, and the service answers 503
// feature_service_unavailable without reading features. An open breaker
// lets one request through per probe interval (Envoy's half-open); when
// that read finds the features fresh the breaker closes.
type breaker struct {
	threshold int // < 1 disables
	window    time.Duration
	probe     time.Duration

	mu        sync.Mutex
	events    []time.Time // ascending, within window
	open      bool
	openedAt  time.Time
	lastProbe time.Time
	opened    int // times opened, for the admin API
}

// BreakerState is the admin view of a feature breaker.
type BreakerState struct {
	Service     string    `json:"service"`
	Open        bool      `json:"open"`
	OpenedAt    time.Time `json:"opened_at,omitzero"`
	StaleEvents int       `json:"stale_events"` // in the current window
	Threshold   int       `json:"threshold"`
	Window      string    `json:"window"`
	TimesOpened int       `json:"times_opened"`
}

func newBreaker(c config.FeatureBreaker) *breaker {
	return &breaker{threshold: c.StaleThreshold, window: c.Window.Std(), probe: c.ProbeInterval.Std()}
}

func (b *breaker) sameConfig(c config.FeatureBreaker) bool {
	return b.threshold == c.StaleThreshold && b.window == c.Window.Std() && b.probe == c.ProbeInterval.Std()
}

// allow reports whether a request may read features now. probe is true
// when the breaker is open and this request is its probe.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	if b.threshold < 1 {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true, false
	}
	if now.Sub(b.lastProbe) >= b.probe {
		b.lastProbe = now
		return true, true
	}
	return false, false
}

// stale records a read that found a stale view; it reports whether the
// breaker opened because of it.
func (b *breaker) stale(now time.Time) bool {
	if b.threshold < 1 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trim(now)
	if len(b.events) < b.threshold {
		b.events = append(b.events, now)
	} else {
		// Keep at most threshold events: slide the oldest out.
		copy(b.events, b.events[1:])
		b.events[len(b.events)-1] = now
	}
	if !b.open && len(b.events) >= b.threshold {
		b.open, b.openedAt, b.lastProbe = true, now, now
		b.opened++
		return true
	}
	return false
}

// fresh records a read that found every view fresh; it reports whether
// the breaker closed because of it.
func (b *breaker) fresh() bool {
	if b.threshold < 1 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return false
	}
	b.open, b.openedAt = false, time.Time{}
	b.events = b.events[:0]
	return true
}

// trim drops events older than the window. b.mu must be held.
func (b *breaker) trim(now time.Time) {
	cut := 0
	for cut < len(b.events) && now.Sub(b.events[cut]) > b.window {
		cut++
	}
	if cut > 0 {
		b.events = append(b.events[:0], b.events[cut:]...)
	}
}

func (b *breaker) state(service string, now time.Time) BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trim(now)
	return BreakerState{
		Service: service, Open: b.open, OpenedAt: b.openedAt, StaleEvents: len(b.events),
		Threshold: b.threshold, Window: b.window.String(), TimesOpened: b.opened,
	}
}
