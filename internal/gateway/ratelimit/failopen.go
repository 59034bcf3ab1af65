package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// DefaultProbeInterval is how often FailOpen tries Redis again while it is down.
const DefaultProbeInterval = time.Second

// FailOpenOptions configure a FailOpen.
type FailOpenOptions struct {
	// ProbeInterval is the least time between two Redis attempts while Redis
	// is down; 0 means DefaultProbeInterval.
	ProbeInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives up/down transitions; nil discards.
	Logger *slog.Logger
	// Metrics receives fallbacks and the Redis up gauge; nil means
	// unregistered collectors. Decisions are counted by Redis and Local.
	Metrics *Metrics
}

// FailOpen decides with Redis and falls back to a Local bucket while Redis
// fails. It is safe for concurrent use.
type FailOpen struct {
	redis    *Redis
	local    *Local
	interval time.Duration
	now      func() time.Time
	logger   *slog.Logger
	metrics  *Metrics

	mu        sync.Mutex // protects down, nextProbe, timeouts and timeoutSeq
	down      bool
	nextProbe time.Time // while down, when the next caller may try Redis
	// timeouts is the run of timed-out calls while up, and timeoutSeq
	// counts the timeouts counted, ever: a call's ticket. A call in flight
	// when another's timeout was counted is the same stall.
	timeouts   int
	timeoutSeq uint64
}

// DownAfterTimeouts is how many calls in a row must time out before
// FailOpen takes Redis for down. One slow answer (a stall of a loaded
// machine, a slow command on the server) falls back for that call only; an
// error that is no timeout (refused, reset) takes it down at once.
const DownAfterTimeouts = 3

// NewFailOpen wraps r and l. Redis is assumed up until a call fails.
func NewFailOpen(r *Redis, l *Local, opts FailOpenOptions) *FailOpen {
	f := &FailOpen{
		redis: r, local: l,
		interval: opts.ProbeInterval,
		now:      opts.Now,
		logger:   opts.Logger,
		metrics:  opts.Metrics,
	}
	if f.interval <= 0 {
		f.interval = DefaultProbeInterval
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.logger == nil {
		f.logger = slog.New(slog.DiscardHandler)
	}
	if f.metrics == nil {
		f.metrics = NewMetrics(nil)
	}
	f.metrics.redisUp.Set(1)
	return f
}

// Allow asks Redis when it is up (or when a probe is due) and otherwise, or
// when Redis fails, asks the local bucket. It returns an error only for an
// invalid limit or when ctx itself is done.
func (f *FailOpen) Allow(ctx context.Context, key string, limit Limit) (Decision, error) {
	if err := limit.Validate(); err != nil {
		return Decision{}, err
	}
	if ticket, ok := f.tryRedis(); ok {
		d, err := f.redis.Allow(ctx, key, limit)
		if err == nil {
			f.markUp()
			return d, nil
		}
		if ctx.Err() != nil {
			// The caller gave up; that says nothing about Redis.
			return Decision{}, context.Cause(ctx)
		}
		f.failed(ticket, err)
	}
	f.metrics.fallbacks.Inc()
	return f.local.Allow(ctx, key, limit)
}

// RedisUp reports whether the last Redis attempt succeeded.
func (f *FailOpen) RedisUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down
}

// tryRedis reports whether this call should use Redis, with its ticket
// for failed; while Redis is down it lets one caller through per probe
// interval.
func (f *FailOpen) tryRedis() (ticket uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.down {
		return f.timeoutSeq, true
	}
	now := f.now()
	if now.Before(f.nextProbe) {
		return 0, false
	}
	f.nextProbe = now.Add(f.interval)
	return f.timeoutSeq, true
}

// failed records a failed Redis call that started with ticket: Redis is
// down after an error that is no timeout, or after DownAfterTimeouts
// timeouts of calls made one after another.
func (f *FailOpen) failed(ticket uint64, err error) {
	if isTimeout(err) {
		f.mu.Lock()
		if !f.down && ticket == f.timeoutSeq {
			f.timeouts++
			f.timeoutSeq++
		}
		n, down := f.timeouts, f.down
		f.mu.Unlock()
		if !down && n < DownAfterTimeouts {
			return
		}
	}
	f.markDown(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func (f *FailOpen) markUp() {
	f.mu.Lock()
	was := f.down
	f.down, f.timeouts = false, 0
	if was {
		f.metrics.redisUp.Set(1)
	}
	f.mu.Unlock()
	if was {
		f.logger.Info("redis rate limiter is back; using shared budgets again")
	}
}

func (f *FailOpen) markDown(err error) {
	f.mu.Lock()
	was := f.down
	if !was {
		f.down = true
		f.nextProbe = f.now().Add(f.interval)
		f.metrics.redisUp.Set(0)
	}
	f.mu.Unlock()
	if !was {
		f.logger.Warn("redis rate limiter failed; falling back to local buckets", "err", err, "probe_interval", f.interval)
	}
}
