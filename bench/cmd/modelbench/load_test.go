package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 0.99, 0},
		{"single", []time.Duration{7}, 0.5, 7},
		{"p50 of 1..100", hundred, 0.5, 50 * time.Millisecond},
		{"p90 of 1..100", hundred, 0.9, 90 * time.Millisecond},
		{"p99 of 1..100", hundred, 0.99, 99 * time.Millisecond},
		{"max of 1..100", hundred, 1, 100 * time.Millisecond},
		{"tiny p is the minimum", hundred, 0.0001, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, percentile(tt.sorted, tt.p))
		})
	}
}

func TestMedian(t *testing.T) {
	require.Equal(t, time.Duration(0), median(nil))
	require.Equal(t, 3*time.Second, median([]time.Duration{5 * time.Second, time.Second, 3 * time.Second}))
	require.Equal(t, 2*time.Second, median([]time.Duration{4 * time.Second, time.Second, 3 * time.Second, time.Second}))
}

func TestClosedLoopStopsAtMaxRequests(t *testing.T) {
	var calls atomic.Int64
	do := func(context.Context) error { calls.Add(1); return nil }
	start := time.Now()
	r := closedLoop(t.Context(), do, loadConfig{Duration: 10 * time.Second, MaxRequests: 50, RequestTimeout: time.Second, Workers: 4})
	require.Less(t, time.Since(start), 5*time.Second, "the request cap, not the duration, must end the cell")
	require.Equal(t, int64(50), calls.Load())
	require.Equal(t, 50, r.Requests)
	require.Len(t, r.Latencies, 50)
	require.Zero(t, r.Errors)
	require.Positive(t, r.Throughput())
}

func TestClosedLoopStopsAtDuration(t *testing.T) {
	do := func(context.Context) error { time.Sleep(time.Millisecond); return nil }
	start := time.Now()
	r := closedLoop(t.Context(), do, loadConfig{Duration: 150 * time.Millisecond, MaxRequests: 1 << 30, RequestTimeout: time.Second, Workers: 2})
	el := time.Since(start)
	require.GreaterOrEqual(t, el, 150*time.Millisecond)
	require.Less(t, el, 2*time.Second)
	require.Positive(t, r.Requests)
	require.True(t, r.Latencies[0] <= r.Latencies[len(r.Latencies)-1], "latencies are sorted")
}

func TestClosedLoopCountsErrorsApart(t *testing.T) {
	var n atomic.Int64
	boom := errors.New("boom")
	do := func(context.Context) error {
		if n.Add(1)%2 == 0 {
			return boom
		}
		return nil
	}
	r := closedLoop(t.Context(), do, loadConfig{Duration: 10 * time.Second, MaxRequests: 40, RequestTimeout: time.Second, Workers: 1})
	require.Equal(t, 20, r.Requests)
	require.Equal(t, 20, r.Errors)
	require.Len(t, r.Latencies, 20, "only successful requests have latencies")
	require.Equal(t, "boom", r.FirstErr)
}

func TestClosedLoopAppliesRequestTimeout(t *testing.T) {
	do := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	r := closedLoop(t.Context(), do, loadConfig{Duration: 10 * time.Second, MaxRequests: 3, RequestTimeout: 20 * time.Millisecond, Workers: 3})
	require.Equal(t, 3, r.Errors)
	require.Contains(t, r.FirstErr, "deadline exceeded")
}

func TestOpenLoopSpreadsArrivals(t *testing.T) {
	var calls atomic.Int64
	do := func(context.Context) error { calls.Add(1); return nil }
	start := time.Now()
	r := openLoop(t.Context(), do, loadConfig{Duration: 250 * time.Millisecond, MaxRequests: 1000, RequestTimeout: time.Second,
		Workers: 8, Rate: 200, Drain: time.Second})
	el := time.Since(start)
	require.Equal(t, int64(50), calls.Load(), "rate × duration arrivals")
	require.Equal(t, 50, r.Requests)
	require.Zero(t, r.Unsent)
	// The last arrival is due at 49/200 s = 245 ms; all at once would end
	// almost immediately.
	require.GreaterOrEqual(t, el, 240*time.Millisecond)
	require.Less(t, el, 3*time.Second)
	require.Len(t, r.Lag, 50)
}

func TestOpenLoopChargesQueueing(t *testing.T) {
	// One slot, 20 ms per answer, an arrival every 5 ms: arrivals pile up,
	// and the last of 20 waits for the 19 before it (~380 ms). A closed
	// loop would report 20 ms for every request.
	do := func(context.Context) error { time.Sleep(20 * time.Millisecond); return nil }
	r := openLoop(t.Context(), do, loadConfig{Duration: 100 * time.Millisecond, MaxRequests: 1000, RequestTimeout: time.Second,
		Workers: 1, Rate: 200, Drain: 5 * time.Second})
	require.Equal(t, 20, r.Requests)
	require.GreaterOrEqual(t, r.Percentile(1), 250*time.Millisecond)
	require.GreaterOrEqual(t, r.Percentile(0.5), 100*time.Millisecond)
}

func TestOpenLoopGivesUpOnBacklog(t *testing.T) {
	do := func(context.Context) error { time.Sleep(50 * time.Millisecond); return nil }
	r := openLoop(t.Context(), do, loadConfig{Duration: 100 * time.Millisecond, MaxRequests: 1000, RequestTimeout: time.Second,
		Workers: 1, Rate: 100, Drain: 0})
	require.Equal(t, 10, r.Requests+r.Unsent+r.Errors)
	require.Positive(t, r.Unsent, "arrivals still queued after the drain deadline are unsent")
	require.Less(t, r.Requests, 10)
}

func TestOpenLoopRejectsZeroRate(t *testing.T) {
	r := openLoop(t.Context(), func(context.Context) error { return nil }, loadConfig{Duration: time.Second, MaxRequests: 10, Workers: 1})
	require.Zero(t, r.Requests)
	require.NotEmpty(t, r.FirstErr)
}
