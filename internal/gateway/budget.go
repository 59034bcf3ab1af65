package gateway

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// budget is Envoy's retry budget for one backend: retries in flight may
// not exceed percent of the requests in flight, with a floor of
// minConcurrency, so retries cannot multiply the load of an upstream that
// is already failing.
type budget struct {
	active  atomic.Int64 // requests in flight on the backend
	retries atomic.Int64 // retries in flight on the backend
}

// tryRetry reserves a retry if the budget allows one; release it with
// doneRetry.
func (b *budget) tryRetry(percent float64, minConcurrency int) bool {
	limit := max(int64(float64(b.active.Load())*percent/100), int64(minConcurrency))
	for {
		n := b.retries.Load()
		if n >= limit {
			return false
		}
		if b.retries.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (b *budget) doneRetry() { b.retries.Add(-1) }

// Back-off between tries, as Envoy's defaults: 25 ms base, ten times that
// at most, full jitter.
const (
	backoffBase = 25 * time.Millisecond
	backoffMax  = 250 * time.Millisecond
)

// backoff returns the wait before retry n (1-based): a uniform draw in
// [0, min(base·2^(n-1), max)).
func backoff(n int) time.Duration {
	ceil := backoffBase << min(n-1, 8)
	ceil = min(ceil, backoffMax)
	return time.Duration(rand.Int64N(int64(ceil))) //nolint:gosec // jitter, not security
}
