package console

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestQuantileMatchesHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name      string
		q         float64
		prev, cur buckets
		want      float64
		wantNaN   bool
	}{
		{
			name: "interpolates within the bucket", q: 0.5,
			cur: buckets{0.1: 50, 0.2: 100, inf: 100}, want: 0.1,
		},
		{
			name: "p99 in the second bucket", q: 0.99,
			cur: buckets{0.1: 50, 0.2: 100, inf: 100}, want: 0.1 + 0.1*(99-50)/50.0,
		},
		{
			name: "uses the difference of the snapshots", q: 0.5,
			prev: buckets{0.1: 1000, 0.2: 1000, inf: 1000}, cur: buckets{0.1: 1000, 0.2: 1010, inf: 1010}, want: 0.15,
		},
		{
			name: "rank in +Inf gives the highest finite bound", q: 0.99,
			cur: buckets{0.1: 1, 0.2: 2, inf: 100}, want: 0.2,
		},
		{name: "no observations", q: 0.5, prev: buckets{0.1: 5, inf: 5}, cur: buckets{0.1: 5, inf: 5}, wantNaN: true},
		{name: "reset", q: 0.5, prev: buckets{0.1: 5, inf: 5}, cur: buckets{0.1: 1, inf: 1}, wantNaN: true},
		{name: "no histogram", q: 0.5, wantNaN: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := quantile(tt.q, tt.prev, tt.cur)
			if tt.wantNaN {
				require.True(t, math.IsNaN(got), "got %v", got)
				return
			}
			require.InDelta(t, tt.want, got, 1e-9)
		})
	}
}

func TestSamplerRates(t *testing.T) {
	reg := prometheus.NewRegistry()
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricModelRequests, Help: "h"}, []string{"model", "version"})
	fails := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricModelFailures, Help: "h"}, []string{"model", "version", "reason"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricModelDuration, Help: "h", Buckets: []float64{0.01, 0.1, 1}}, []string{"model", "version"})
	gw := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricGWRequests, Help: "h"}, []string{"service", "route", "code", "source"})
	reg.MustRegister(reqs, fails, dur, gw)

	s := newSampler(reg, 0, 3)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reqs.WithLabelValues("m", "1").Add(0) // the series exists at the first sample
	gw.WithLabelValues("svc", "default", "200", "model").Add(0)
	s.sample(t0)
	// Over 2 s: 10 successes on v1, 6 on v2, 4 failures; latencies all in
	// the (0.01, 0.1] bucket.
	reqs.WithLabelValues("m", "1").Add(10)
	reqs.WithLabelValues("m", "2").Add(6)
	fails.WithLabelValues("m", "2", "timeout").Add(4)
	for range 20 {
		dur.WithLabelValues("m", "1").Observe(0.05)
	}
	gw.WithLabelValues("svc", "default", "200", "model").Add(8)
	gw.WithLabelValues("svc", "default", "503", "none").Add(2)
	gw.WithLabelValues("svc", "default", "404", "").Add(6)
	gw.WithLabelValues("svc", "default", "401", "").Add(2)
	s.sample(t0.Add(2 * time.Second))

	out := s.series("")
	require.Equal(t, []int64{t0.Unix() + 2}, out.T)
	m := out.Series["model/m"]
	require.InDelta(t, 10, *m["rps"][0], 1e-9, "20 requests in 2 s")
	require.InDelta(t, 2, *m["errors_per_second"][0], 1e-9)
	require.InDelta(t, 55, *m["p50_ms"][0], 1e-6, "half way through (10ms, 100ms]")
	require.Nil(t, m["queue_p99_ms"][0], "no queue histogram")
	svc := out.Series["service/svc"]
	require.InDelta(t, 9, *svc["rps"][0], 1e-9)
	require.InDelta(t, 1, *svc["errors_per_second"][0], 1e-9, "5xx only")
	require.InDelta(t, 4, *svc["client_errors_per_second"][0], 1e-9, "4xx: 404s and 401s")
	require.InDelta(t, 4, *svc["ok_per_second"][0], 1e-9, "2xx")

	for i := range 5 {
		s.sample(t0.Add(time.Duration(3+i) * time.Second))
	}
	require.Len(t, s.series("model").T, 3, "History bounds the frames")
}
