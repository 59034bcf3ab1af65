package perf

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func durations(us ...int) []time.Duration {
	out := make([]time.Duration, len(us))
	for i, u := range us {
		out[i] = time.Duration(u) * time.Microsecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"single", durations(7), 0.99, 7 * time.Microsecond},
		{"p50 of 100", hundred, 0.50, 50 * time.Microsecond},
		{"p90 of 100", hundred, 0.90, 90 * time.Microsecond},
		{"p99 of 100", hundred, 0.99, 99 * time.Microsecond},
		{"p100 of 100", hundred, 1, 100 * time.Microsecond},
		{"nearest rank rounds up", durations(1, 2, 3, 4), 0.5, 2 * time.Microsecond},
		{"p99 of 4 is the max", durations(1, 2, 3, 4), 0.99, 4 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, percentile(tt.sorted, tt.p))
		})
	}
	require.Equal(t, 2500*time.Nanosecond, mean(durations(1, 2, 3, 4)))
}

// win makes a one-second window with n requests of the given latency.
func win(n int, lat time.Duration) window {
	w := window{Elapsed: time.Second}
	for range n {
		w.Latencies = append(w.Latencies, lat)
	}
	return w
}

func TestStable(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		ws   []window
		pct  int
		want bool
	}{
		{"fewer than three windows", []window{win(100, ms), win(100, ms)}, 0, false},
		{"three equal windows", []window{win(100, ms), win(100, ms), win(100, ms)}, 0, true},
		{"throughput spread exactly 10%", []window{win(100, ms), win(110, ms), win(105, ms)}, 0, true},
		{"throughput spread above 10%", []window{win(100, ms), win(111, ms), win(105, ms)}, 0, false},
		{"latency spread above 10%", []window{win(100, ms), win(100, 112*ms/100), win(100, ms)}, 0, false},
		{"only the last three count", []window{win(10, 9*ms), win(100, ms), win(100, ms), win(100, ms)}, 0, true},
		{"a window with no completions is never stable", []window{win(0, ms), win(0, ms), win(0, ms)}, 0, false},
		{"percentile mode watches the percentile", []window{
			{Elapsed: time.Second, Latencies: append(durations(1000, 1000, 1000), 5*ms)},
			{Elapsed: time.Second, Latencies: durations(1000, 1000, 1000, 1000)},
			{Elapsed: time.Second, Latencies: durations(1000, 1000, 1000, 1000)},
		}, 99, false},
		{"average mode is steadier than p99 here", []window{
			{Elapsed: time.Second, Latencies: durations(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1400)},
			{Elapsed: time.Second, Latencies: durations(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000)},
			{Elapsed: time.Second, Latencies: durations(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000)},
		}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, stable(tt.ws, 1, 10, tt.pct))
		})
	}
}

func TestWindowThroughputCountsBatch(t *testing.T) {
	w := window{Elapsed: 2 * time.Second, Latencies: durations(1, 2, 3, 4)}
	require.InDelta(t, 16.0, w.throughput(8), 1e-9) // 4 requests × 8 / 2 s
	require.Zero(t, window{}.throughput(1))
}

func TestMergeWindows(t *testing.T) {
	m := mergeWindows([]window{
		{Elapsed: time.Second, Latencies: durations(5, 9), Errors: 1, FirstErr: "boom"},
		{Elapsed: time.Second, Latencies: durations(1, 7), Errors: 2, FirstErr: "later"},
	})
	require.Equal(t, 2*time.Second, m.Elapsed)
	require.Equal(t, durations(1, 5, 7, 9), m.Latencies)
	require.Equal(t, 3, m.Errors)
	require.Equal(t, "boom", m.FirstErr)
}

func TestRecorderTakeResets(t *testing.T) {
	var r recorder
	r.add(3*time.Microsecond, nil)
	r.add(time.Microsecond, nil)
	r.add(0, errStatus)
	require.Equal(t, 3, r.count())
	lat, errs, first := r.take()
	require.Equal(t, durations(1, 3), lat)
	require.Equal(t, 1, errs)
	require.Equal(t, errStatus.Error(), first)
	require.Zero(t, r.count())
}
