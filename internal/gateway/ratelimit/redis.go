package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisTimeout bounds one decision of a warm limiter: one round
// trip on a pooled connection with the script cached in Redis.
const DefaultRedisTimeout = 50 * time.Millisecond

// DefaultRedisConnectTimeout bounds a decision of a cold limiter (the
// first one, and the first after a failure): it may dial, run the
// connection handshake (HELLO, CLIENT SETINFO) and load the script after
// NOSCRIPT, five round trips and a TCP connect where a warm decision
// makes one. Under ordinary load (the gateway busy on a small machine)
// that does not fit in DefaultRedisTimeout, and failing it would mark a
// healthy Redis down for a whole probe interval.
const DefaultRedisConnectTimeout = 500 * time.Millisecond

// gcraScript implements GCRA with the theoretical arrival time (TAT) stored
// in microseconds of Redis server time, so replicas with skewed clocks agree.
//
//	KEYS[1]  the client's key
//	ARGV[1]  emission interval T in microseconds (1 / rate)
//	ARGV[2]  burst
//
// It returns {allowed (0|1), retry_after_us, remaining}.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tolerance = interval * burst
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then
  tat = now
end
local new_tat = tat + interval
local allow_at = new_tat - tolerance
if now < allow_at then
  return {0, math.ceil(allow_at - now), 0}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.max(1, math.ceil(tolerance / 1000)))
return {1, 0, math.floor((tolerance - (new_tat - now)) / interval)}
`)

// RedisOptions configure a Redis limiter.
type RedisOptions struct {
	// Prefix is prepended to every Redis key: "<Prefix>rl:<key>".
	Prefix string
	// Timeout bounds one decision's Redis round trip once the limiter is
	// warm (its last decision succeeded); 0 means DefaultRedisTimeout.
	// The client should be built with ContextTimeoutEnabled so that the
	// deadline reaches the socket.
	Timeout time.Duration
	// ConnectTimeout bounds a decision while the limiter is cold (its
	// first, and the first after a failure: behind FailOpen, one probe
	// per probe interval), which may dial and load the script; 0 means
	// DefaultRedisConnectTimeout. It is never shorter than Timeout.
	ConnectTimeout time.Duration
	// Metrics receives the decisions; nil means unregistered collectors.
	Metrics *Metrics
}

// Redis is a rate limiter whose budgets live in Redis, shared by every
// gateway replica that uses the same Redis and prefix. It is safe for
// concurrent use.
type Redis struct {
	client         redis.Scripter
	prefix         string
	timeout        time.Duration
	connectTimeout time.Duration
	metrics        *Metrics
	warm           atomic.Bool // the last decision succeeded
}

// NewRedis returns a Redis limiter using client, which the caller owns.
func NewRedis(client redis.Scripter, opts RedisOptions) *Redis {
	r := &Redis{client: client, prefix: opts.Prefix, timeout: opts.Timeout, connectTimeout: opts.ConnectTimeout, metrics: opts.Metrics}
	if r.timeout <= 0 {
		r.timeout = DefaultRedisTimeout
	}
	if r.connectTimeout <= 0 {
		r.connectTimeout = DefaultRedisConnectTimeout
	}
	r.connectTimeout = max(r.connectTimeout, r.timeout)
	if r.metrics == nil {
		r.metrics = NewMetrics(nil)
	}
	return r
}

// Key returns the Redis key holding key's theoretical arrival time.
func (r *Redis) Key(key string) string {
	return r.prefix + "rl:" + key
}

// Allow runs one GCRA step for key in Redis (EVALSHA, falling back to EVAL
// when the script is not cached). It returns an error when Redis fails or
// does not answer within the timeout (Timeout when warm, ConnectTimeout
// when cold), or when limit is invalid.
func (r *Redis) Allow(ctx context.Context, key string, limit Limit) (Decision, error) {
	if err := limit.Validate(); err != nil {
		return Decision{}, err
	}
	timeout := r.timeout
	if !r.warm.Load() {
		timeout = r.connectTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	intervalUS := math.Max(1, math.Round(1e6/limit.Rate))
	res, err := gcraScript.Run(ctx, r.client, []string{r.Key(key)}, int64(intervalUS), limit.Burst).Int64Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("got %d values, want 3", len(res))
	}
	if err != nil {
		r.warm.Store(false)
		return Decision{}, fmt.Errorf("run rate limit script: %w", err)
	}
	r.warm.Store(true)
	d := Decision{
		Allowed:    res[0] == 1,
		RetryAfter: time.Duration(res[1]) * time.Microsecond,
		Remaining:  int(res[2]),
		Backend:    BackendRedis,
	}
	r.metrics.observe(d)
	return d, nil
}
