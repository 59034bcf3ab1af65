package ratelimit

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys is the default bound on the number of buckets a Local keeps.
const DefaultMaxKeys = 100_000

// LocalOptions configure a Local.
type LocalOptions struct {
	// MaxKeys bounds the number of buckets kept; the least recently used
	// bucket is dropped to make room. 0 means DefaultMaxKeys.
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Metrics receives the decisions; nil means unregistered collectors.
	Metrics *Metrics
}

// Local is an in-process rate limiter with one token bucket per key and a
// bounded number of keys. It is safe for concurrent use.
type Local struct {
	maxKeys int
	now     func() time.Time
	metrics *Metrics

	mu   sync.Mutex               // protects lru and keys
	lru  *list.List               // of *bucket, most recently used first
	keys map[string]*list.Element // key → element in lru
}

type bucket struct {
	key   string
	limit Limit
	lim   *rate.Limiter
}

// NewLocal returns an empty Local.
func NewLocal(opts LocalOptions) *Local {
	l := &Local{
		maxKeys: opts.MaxKeys,
		now:     opts.Now,
		metrics: opts.Metrics,
		lru:     list.New(),
		keys:    make(map[string]*list.Element),
	}
	if l.maxKeys <= 0 {
		l.maxKeys = DefaultMaxKeys
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.metrics == nil {
		l.metrics = NewMetrics(nil)
	}
	return l
}

// Allow takes one token from key's bucket if there is one. A new key starts
// with a full bucket; a key whose limit changed keeps its tokens and gets the
// new rate and burst. The only error is an invalid limit.
func (l *Local) Allow(_ context.Context, key string, limit Limit) (Decision, error) {
	if err := limit.Validate(); err != nil {
		return Decision{}, err
	}
	d := l.decide(l.now(), key, limit)
	l.metrics.observe(d)
	return d, nil
}

// decide is Allow without validation and metrics, for FailOpen.
func (l *Local) decide(now time.Time, key string, limit Limit) Decision {
	lim := l.bucket(now, key, limit)
	d := Decision{Backend: BackendLocal}
	if lim.AllowN(now, 1) {
		d.Allowed = true
		d.Remaining = int(math.Floor(lim.TokensAt(now)))
		return d
	}
	missing := 1 - lim.TokensAt(now)
	d.RetryAfter = max(durationCeil(missing/limit.Rate), time.Nanosecond)
	return d
}

// bucket finds or creates key's limiter, marks it most recently used and
// evicts the least recently used buckets beyond maxKeys.
func (l *Local) bucket(now time.Time, key string, limit Limit) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.keys[key]; ok {
		l.lru.MoveToFront(e)
		b := e.Value.(*bucket)
		if b.limit != limit {
			b.lim.SetLimitAt(now, rate.Limit(limit.Rate))
			b.lim.SetBurstAt(now, limit.Burst)
			b.limit = limit
		}
		return b.lim
	}
	b := &bucket{key: key, limit: limit, lim: rate.NewLimiter(rate.Limit(limit.Rate), limit.Burst)}
	l.keys[key] = l.lru.PushFront(b)
	for l.lru.Len() > l.maxKeys {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.keys, old.Value.(*bucket).key)
	}
	return b.lim
}

// Len reports how many keys currently have a bucket.
func (l *Local) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}
