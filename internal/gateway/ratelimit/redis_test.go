package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
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
	r := NewRedis(c, RedisOptions{Prefix: prefix, Timeout: time.Nanosecond})
	start := time.Now()
	_, err := r.Allow(t.Context(), "k", Limit{Rate: 1, Burst: 1})
	require.Error(t, err)
	require.Less(t, time.Since(start), time.Second)
}

// A dead Redis costs at most about the timeout, even with the client's
// default dial retries.
func TestRedisDeadServerIsBounded(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	r := NewRedis(c, RedisOptions{})
	for range 3 {
		start := time.Now()
		_, err := r.Allow(t.Context(), "k", Limit{Rate: 1, Burst: 1})
		require.Error(t, err)
		require.Less(t, time.Since(start), 250*time.Millisecond)
	}
}
