package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func newTestClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           200 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sharedRedis returns a client for the Redis at 127.0.0.1:6379 and a unique
// key prefix whose keys are deleted when the test ends.
func sharedRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	c := newTestClient(t, "127.0.0.1:6379")
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at 127.0.0.1:6379: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "sluice-test-ratelimit-" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := c.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return c, prefix
}

func TestRedisBurstLimitRetryAfter(t *testing.T) {
	c, prefix := sharedRedis(t)
	m := NewMetrics(nil)
	r := NewRedis(c, RedisOptions{Prefix: prefix, Metrics: m})
	limit := Limit{Rate: 5, Burst: 3} // emission interval 200 ms

	for i, wantRemaining := range []int{2, 1, 0} {
		d, err := r.Allow(t.Context(), "client-a", limit)
		require.NoError(t, err)
		require.Equal(t, Decision{Allowed: true, Remaining: wantRemaining, Backend: BackendRedis}, d, "request %d of the burst", i)
	}
	d, err := r.Allow(t.Context(), "client-a", limit)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, BackendRedis, d.Backend)
	require.Zero(t, d.Remaining)
	// The burst took some real time, so the wait is a little under 200 ms.
	require.Greater(t, d.RetryAfter, 50*time.Millisecond)
	require.LessOrEqual(t, d.RetryAfter, 200*time.Millisecond)

	// The key holds the TAT and expires after interval × burst at most.
	pttl, err := c.PTTL(t.Context(), r.Key("client-a")).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, time.Duration(0))
	require.LessOrEqual(t, pttl, 600*time.Millisecond)

	// Another key has its own budget.
	d, err = r.Allow(t.Context(), "ip:192.0.2.1", limit)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	time.Sleep(d.RetryAfter + 220*time.Millisecond)
	d, err = r.Allow(t.Context(), "client-a", limit)
	require.NoError(t, err)
	require.True(t, d.Allowed, "admitted after RetryAfter")

	require.InDelta(t, 5.0, testutil.ToFloat64(m.decisions.WithLabelValues(BackendRedis, "allowed")), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(m.decisions.WithLabelValues(BackendRedis, "limited")), 0)
}

// Two gateway replicas, each with its own client and limiter, share one
// budget per key: that is the point of the Redis backend.
func TestRedisReplicasShareBudget(t *testing.T) {
	c1, prefix := sharedRedis(t)
	c2 := newTestClient(t, "127.0.0.1:6379")
	replicas := []*Redis{
		NewRedis(c1, RedisOptions{Prefix: prefix}),
		NewRedis(c2, RedisOptions{Prefix: prefix}),
	}
	limit := Limit{Rate: 0.1, Burst: 4}
	allowed := []int{0, 0}
	for i := range 10 {
		d, err := replicas[i%2].Allow(t.Context(), "client-shared", limit)
		require.NoError(t, err)
		if d.Allowed {
			allowed[i%2]++
		} else {
			require.Greater(t, d.RetryAfter, 9*time.Second)
		}
	}
	require.Equal(t, []int{2, 2}, allowed, "4 requests in total across both replicas")
}

func TestRedisTimeout(t *testing.T) {
	c, prefix := sharedRedis(t)
	r := NewRedis(c, RedisOptions{Prefix: prefix, Timeout: time.Nanosecond, ConnectTimeout: time.Nanosecond})
	start := time.Now()
	_, err := r.Allow(t.Context(), "k", Limit{Rate: 1, Burst: 1})
	require.Error(t, err)
	require.Less(t, time.Since(start), time.Second)
}

// A dead Redis costs at most about the connect timeout (every call after
// a failure is cold), even with the client's default dial retries.
func TestRedisDeadServerIsBounded(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	r := NewRedis(c, RedisOptions{})
	for range 3 {
		start := time.Now()
		_, err := r.Allow(t.Context(), "k", Limit{Rate: 1, Burst: 1})
		require.Error(t, err)
		require.Less(t, time.Since(start), DefaultRedisConnectTimeout+250*time.Millisecond)
	}
}

// slowDialHook delays every dial: a connect on a loaded machine.
type slowDialHook struct{ delay time.Duration }

func (h slowDialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		select {
		case <-time.After(h.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return next(ctx, network, addr)
	}
}

func (h slowDialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h slowDialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// slowCallHook delays every command while on is set.
type slowCallHook struct {
	on    atomic.Bool
	delay time.Duration
}

func (h *slowCallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowCallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() {
			select {
			case <-time.After(h.delay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *slowCallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The first decision of a new client dials, shakes hands and loads the
// script: slower than the 50 ms steady-state budget under load (issue
// 22 item 10: TestFailOpenFallsBackAndRecovers failed so). It gets the
// connect budget and succeeds; once warm, a round trip slower than 50 ms
// still fails fast, and the failure makes the next call cold again.
func TestRedisColdCallGetsConnectBudget(t *testing.T) {
	_, prefix := sharedRedis(t)                  // the prefix's keys are deleted at the end
	client := newTestClient(t, "127.0.0.1:6379") // no connection yet
	client.AddHook(slowDialHook{delay: 2 * DefaultRedisTimeout})
	slow := &slowCallHook{delay: 2 * DefaultRedisTimeout}
	client.AddHook(slow)
	r := NewRedis(client, RedisOptions{Prefix: prefix})
	limit := Limit{Rate: 1000, Burst: 1000}

	d, err := r.Allow(t.Context(), "cold", limit)
	require.NoError(t, err, "a cold call that dials for 100 ms must get the connect budget")
	require.Equal(t, BackendRedis, d.Backend)

	slow.on.Store(true)
	_, err = r.Allow(t.Context(), "warm", limit)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a warm call keeps the 50 ms budget")

	// Cold again after the failure: the next call may take longer.
	d, err = r.Allow(t.Context(), "warm", limit)
	require.NoError(t, err)
	require.True(t, d.Allowed)
}
