package ratelimit

import (
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// manualClock is an injected clock for Options.Now.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestLocalBurstLimitRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		l := NewLocal(LocalOptions{Metrics: m})
		limit := Limit{Rate: 2, Burst: 3}
		ctx := t.Context()

		for i, wantRemaining := range []int{2, 1, 0} {
			d, err := l.Allow(ctx, "client-a", limit)
			require.NoError(t, err)
			require.Equal(t, Decision{Allowed: true, Remaining: wantRemaining, Backend: BackendLocal}, d, "request %d of the burst", i)
		}
		d, err := l.Allow(ctx, "client-a", limit)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, 500*time.Millisecond, d.RetryAfter)
		require.Equal(t, "1", RetryAfterHeader(d.RetryAfter))

		// Another key has its own budget.
		d, err = l.Allow(ctx, "ip:10.0.0.1", limit)
		require.NoError(t, err)
		require.True(t, d.Allowed)

		time.Sleep(200 * time.Millisecond)
		d, err = l.Allow(ctx, "client-a", limit)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, 300*time.Millisecond, d.RetryAfter)

		time.Sleep(300 * time.Millisecond)
		d, err = l.Allow(ctx, "client-a", limit)
		require.NoError(t, err)
		require.True(t, d.Allowed, "one token refilled after 1/rate")
		require.Equal(t, 0, d.Remaining)

		// Idle for long: the bucket refills up to the burst, not beyond.
		time.Sleep(time.Hour)
		allowed := 0
		for range 10 {
			d, err := l.Allow(ctx, "client-a", limit)
			require.NoError(t, err)
			if d.Allowed {
				allowed++
			}
		}
		require.Equal(t, 3, allowed)

		require.InDelta(t, 8.0, testutil.ToFloat64(m.decisions.WithLabelValues(BackendLocal, "allowed")), 0)
		require.InDelta(t, 9.0, testutil.ToFloat64(m.decisions.WithLabelValues(BackendLocal, "limited")), 0)
		n, err := testutil.GatherAndCount(reg, "sluice_gateway_ratelimit_decisions_total")
		require.NoError(t, err)
		require.Equal(t, 4, n, "only backend × result series, no per-client labels")
	})
}

func TestLocalInjectedClock(t *testing.T) {
	tests := []struct {
		name      string
		limit     Limit
		wantRetry time.Duration // after the burst is spent
	}{
		{name: "one per second", limit: Limit{Rate: 1, Burst: 1}, wantRetry: time.Second},
		{name: "ten per second", limit: Limit{Rate: 10, Burst: 5}, wantRetry: 100 * time.Millisecond},
		{name: "one per minute", limit: Limit{Rate: 1.0 / 60, Burst: 2}, wantRetry: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newManualClock()
			l := NewLocal(LocalOptions{Now: clock.Now})
			for range tt.limit.Burst {
				d, err := l.Allow(t.Context(), "k", tt.limit)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			d, err := l.Allow(t.Context(), "k", tt.limit)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.InDelta(t, tt.wantRetry, d.RetryAfter, float64(time.Microsecond))
			require.Zero(t, d.Remaining)

			clock.Advance(d.RetryAfter - time.Millisecond)
			d, err = l.Allow(t.Context(), "k", tt.limit)
			require.NoError(t, err)
			require.False(t, d.Allowed, "still limited just before RetryAfter")

			clock.Advance(time.Millisecond)
			d, err = l.Allow(t.Context(), "k", tt.limit)
			require.NoError(t, err)
			require.True(t, d.Allowed, "admitted at RetryAfter")
		})
	}
}

func TestLocalEvictsLeastRecentlyUsed(t *testing.T) {
	clock := newManualClock()
	l := NewLocal(LocalOptions{MaxKeys: 3, Now: clock.Now})
	limit := Limit{Rate: 0.001, Burst: 1}
	allow := func(key string) bool {
		t.Helper()
		d, err := l.Allow(t.Context(), key, limit)
		require.NoError(t, err)
		return d.Allowed
	}
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, allow(k))
	}
	require.False(t, allow("a"), "a is spent and now most recently used")
	require.True(t, allow("d"), "d evicts b, the least recently used")
	require.Equal(t, 3, l.Len())
	require.False(t, allow("a"), "a kept its bucket")
	require.False(t, allow("c"), "c kept its bucket")
	require.True(t, allow("b"), "b was evicted and starts with a full bucket")

	for i := range 1000 {
		allow(string(rune('A' + i%50)))
	}
	require.Equal(t, 3, l.Len(), "never more than MaxKeys buckets")
}

func TestLocalLimitChangeKeepsTokens(t *testing.T) {
	clock := newManualClock()
	l := NewLocal(LocalOptions{Now: clock.Now})
	d, err := l.Allow(t.Context(), "k", Limit{Rate: 1, Burst: 2})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = l.Allow(t.Context(), "k", Limit{Rate: 1, Burst: 2})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// A higher rate applies from now on, without refilling the spent bucket.
	d, err = l.Allow(t.Context(), "k", Limit{Rate: 4, Burst: 2})
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, 250*time.Millisecond, d.RetryAfter)
}

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit Limit
		ok    bool
	}{
		{name: "ok", limit: Limit{Rate: 5, Burst: 1}, ok: true},
		{name: "fractional rate", limit: Limit{Rate: 0.5, Burst: 3}, ok: true},
		{name: "zero rate", limit: Limit{Rate: 0, Burst: 1}},
		{name: "negative rate", limit: Limit{Rate: -1, Burst: 1}},
		{name: "NaN rate", limit: Limit{Rate: math.NaN(), Burst: 1}},
		{name: "infinite rate", limit: Limit{Rate: math.Inf(1), Burst: 1}},
		{name: "zero burst", limit: Limit{Rate: 1, Burst: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidLimit)
			_, err = NewLocal(LocalOptions{}).Allow(t.Context(), "k", tt.limit)
			require.ErrorIs(t, err, ErrInvalidLimit)
		})
	}
}

func TestRetryAfterHeader(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "1"},
		{time.Nanosecond, "1"},
		{500 * time.Millisecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Millisecond, "2"},
		{59500 * time.Millisecond, "60"},
		{-time.Second, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			require.Equal(t, tt.want, RetryAfterHeader(tt.d))
		})
	}
}
