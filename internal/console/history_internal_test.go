package console

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The charts' history survives a restart through the history file:
// what was kept comes back, frames older than the history's span do not.
func TestHistoryKeptAcrossRestarts(t *testing.T) {
	reg := prometheus.NewRegistry()
	gw := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricGWRequests, Help: "h"}, []string{"service", "route", "code", "source"})
	reg.MustRegister(gw)
	path := filepath.Join(t.TempDir(), "history.json")

	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := newSampler(reg, 2*time.Second, 100)
	gw.WithLabelValues("svc", "default", "200", "model").Add(0)
	s.sample(t0)
	for i := 1; i <= 60; i++ { // two minutes of traffic: 5/s, one 404 a second
		gw.WithLabelValues("svc", "default", "200", "model").Add(8)
		gw.WithLabelValues("svc", "default", "404", "").Add(2)
		s.sample(t0.Add(time.Duration(2*i) * time.Second))
	}
	require.NoError(t, s.save(path))
	before := s.series("service")

	// A restart two minutes later: a new sampler, the same file.
	s2 := newSampler(reg, 2*time.Second, 100)
	require.NoError(t, s2.load(path, t0.Add(4*time.Minute)))
	after := s2.series("service")
	// 100 frames span 200 s: of the 60 frames (t0+2s … t0+120s), those
	// from t0+40s on are kept.
	require.Len(t, after.T, 41)
	require.Equal(t, before.T[19:], after.T)
	require.Equal(t, before.Series["service/svc"]["client_errors_per_second"][19:], after.Series["service/svc"]["client_errors_per_second"])
	require.InDelta(t, 1, *after.Series["service/svc"]["client_errors_per_second"][0], 1e-9)
	require.InDelta(t, 4, *after.Series["service/svc"]["ok_per_second"][40], 1e-9)

	// New samples go after the restored ones, and the bound holds.
	for i := 1; i <= 80; i++ {
		gw.WithLabelValues("svc", "default", "200", "model").Add(2)
		s2.sample(t0.Add(4*time.Minute + time.Duration(2*i)*time.Second))
	}
	require.Len(t, s2.series("service").T, 100)

	// No file, or a broken one: nothing restored, the broken one said.
	s3 := newSampler(reg, 2*time.Second, 100)
	require.NoError(t, s3.load(filepath.Join(t.TempDir(), "none.json"), t0))
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o600))
	require.Error(t, s3.load(path, t0))
	require.Empty(t, s3.series("").T)
}

// Run writes the history when it stops and restores it when it starts.
func TestRunSavesAndRestoresHistory(t *testing.T) {
	reg := prometheus.NewRegistry()
	gw := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricGWRequests, Help: "h"}, []string{"service", "route", "code", "source"})
	reg.MustRegister(gw)
	path := filepath.Join(t.TempDir(), "history.json")
	run := func(c *Console) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		for i := range 5 {
			gw.WithLabelValues("svc", "default", "200", "model").Add(float64(i + 1))
			time.Sleep(15 * time.Millisecond)
		}
		cancel()
		require.NoError(t, <-done)
	}
	c := New(Sources{Metrics: reg, SampleEvery: 10 * time.Millisecond, HistoryFile: path}, nil)
	run(c)
	n := len(c.sampler.series("service").T)
	require.Positive(t, n)
	_, err := os.Stat(path)
	require.NoError(t, err, "Run writes the history when it stops")

	c2 := New(Sources{Metrics: reg, SampleEvery: 10 * time.Millisecond, HistoryFile: path}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // load, one sample at most, save
	require.NoError(t, c2.Run(ctx))
	require.GreaterOrEqual(t, len(c2.sampler.series("service").T), n, "the restored frames")
}
