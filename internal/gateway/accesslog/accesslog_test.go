package accesslog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

func pct(v float64) *float64 { return new(v) }

// newLogger is a Logger with its writer running, as the gateway runs it;
// the test's cleanup closes it and waits for the writer.
func newLogger(t *testing.T, w io.Writer, opts Options, reg prometheus.Registerer) *Logger {
	t.Helper()
	l, err := New(w, opts, nil, reg)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); l.Run() }()
	t.Cleanup(func() {
		_ = l.Close(context.Background())
		<-done
	})
	return l
}

func TestSampledDeterministic(t *testing.T) {
	for i := range 1000 {
		id := fmt.Sprintf("req-%d", i)
		first := Sampled(id, 0.3)
		for range 3 {
			require.Equal(t, first, Sampled(id, 0.3), id)
		}
	}
	require.False(t, Sampled("x", 0))
	require.True(t, Sampled("x", 1))
	// Monotone in the rate: chosen at 1 % implies chosen at 10 %.
	for i := range 10000 {
		id := fmt.Sprintf("id-%d", i)
		if Sampled(id, 0.01) {
			require.True(t, Sampled(id, 0.1), id)
		}
	}
}

func TestSameChoiceAcrossInstances(t *testing.T) {
	var a, b syncBuffer
	la := newLogger(t, &a, Options{}, nil)
	lb := newLogger(t, &b, Options{}, nil)
	for i := range 5000 {
		e := Entry{RequestID: fmt.Sprintf("r%d", i), Status: 200}
		require.Equal(t, la.Log(e), lb.Log(e))
	}
	require.NoError(t, la.Close(t.Context()))
	require.NoError(t, lb.Close(t.Context()))
	ids := func(ls []map[string]any) []any {
		var out []any
		for _, l := range ls {
			out = append(out, l["request_id"])
		}
		return out
	}
	got := ids(a.lines(t))
	require.NotEmpty(t, got)
	require.Equal(t, got, ids(b.lines(t)))
}

func TestSampledRate(t *testing.T) {
	const n = 100_000
	// Id shapes that differ only in their tails, as request counters do.
	for _, format := range []string{"%d", "r%d", "req-%08d", "6f1c2a9e-%d"} {
		t.Run(format, func(t *testing.T) {
			chosen := 0
			for i := range n {
				if Sampled(fmt.Sprintf(format, i), 0.01) {
					chosen++
				}
			}
			// Expected 1000, standard deviation about 31.5.
			require.InDelta(t, 1000, chosen, 150)
		})
	}
}

func TestPolicy(t *testing.T) {
	var buf syncBuffer
	reg := prometheus.NewRegistry()
	l := newLogger(t, &buf, Options{QueueSize: 10_000}, reg)
	const n = 2000
	successes, errs := 0, 0
	for i := range n {
		if l.Log(Entry{RequestID: fmt.Sprintf("ok-%d", i), Status: 200}) {
			successes++
		}
		require.True(t, l.Log(Entry{RequestID: fmt.Sprintf("bad-%d", i), Status: 503, Reason: "upstream_unavailable"}))
		require.True(t, l.Log(Entry{RequestID: fmt.Sprintf("err-%d", i), Status: 200, Error: "stream reset"}))
		errs += 2
	}
	require.NoError(t, l.Close(t.Context()))
	require.Less(t, successes, n/20, "about 1 %% of successes")
	require.Len(t, buf.lines(t), successes+errs)
	require.InDelta(t, float64(errs), testutil.ToFloat64(l.metrics.entries.WithLabelValues("error")), 0)
	require.InDelta(t, float64(successes), testutil.ToFloat64(l.metrics.entries.WithLabelValues("sampled")), 0)

	// Configured percentages override the defaults.
	var none syncBuffer
	l = newLogger(t, &none, Options{Sampling: config.LogSampling{SuccessPercent: pct(100), ErrorsPercent: pct(0)}}, nil)
	require.True(t, l.Log(Entry{RequestID: "a", Status: 200}))
	require.False(t, l.Log(Entry{RequestID: "b", Status: 500}))
	require.NoError(t, l.Close(t.Context()))
	require.Len(t, none.lines(t), 1)
}

func TestEntryJSON(t *testing.T) {
	var buf syncBuffer
	l := newLogger(t, &buf, Options{Sampling: config.LogSampling{SuccessPercent: pct(100)}}, nil)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.True(t, l.Log(Entry{
		Time: at, RequestID: "r1", ClientID: "alice", Service: "fraud", Route: "canary",
		Backend: "b1", Endpoint: "127.0.0.1:8000", Model: "m", Version: "2", Source: "backend",
		Status: 429, Reason: "rate_limited", LatencyMS: 12.5, Retries: 2, RequestBytes: 100, ResponseBytes: 7,
	}))
	require.True(t, l.Log(Entry{RequestID: "r2\n\"quoted\"", Status: 200}))
	require.NoError(t, l.Close(t.Context()))
	lines := buf.lines(t)
	require.Len(t, lines, 2)
	require.Equal(t, map[string]any{
		"time": "2026-01-02T03:04:05Z", "request_id": "r1", "client_id": "alice", "service": "fraud",
		"route": "canary", "backend": "b1", "endpoint": "127.0.0.1:8000", "model": "m", "version": "2",
		"source": "backend", "status": 429.0, "reason": "rate_limited", "latency_ms": 12.5, "retries": 2.0,
		"request_bytes": 100.0, "response_bytes": 7.0,
	}, lines[0])
	require.Equal(t, "r2\n\"quoted\"", lines[1]["request_id"])
	require.NotEmpty(t, lines[1]["time"], "zero time is set to now")
}

func TestCloseDrains(t *testing.T) {
	var buf syncBuffer
	l := newLogger(t, &buf, Options{Sampling: config.LogSampling{SuccessPercent: pct(100)}, QueueSize: 500}, nil)
	for i := range 500 {
		require.True(t, l.Log(Entry{RequestID: fmt.Sprint(i), Status: 200}))
	}
	require.NoError(t, l.Close(t.Context()))
	lines := buf.lines(t)
	require.Len(t, lines, 500)
	for i, line := range lines {
		require.Equal(t, fmt.Sprint(i), line["request_id"], "order kept")
	}
	// After Close: dropped, counted, no panic; Close is idempotent.
	require.False(t, l.Log(Entry{RequestID: "late", Status: 200}))
	require.InDelta(t, 1, testutil.ToFloat64(l.metrics.dropped), 0)
	require.NoError(t, l.Close(t.Context()))
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	buf     syncBuffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return w.buf.Write(p)
}

func TestDropsWhenWriterBlocks(t *testing.T) {
	w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	l := newLogger(t, w, Options{Sampling: config.LogSampling{SuccessPercent: pct(100)}, QueueSize: 2}, reg)
	require.True(t, l.Log(Entry{RequestID: "first", Status: 200}))
	<-w.entered // the writer goroutine holds "first" and is stuck in Write

	start := time.Now()
	accepted := 0
	for i := range 10 {
		if l.Log(Entry{RequestID: fmt.Sprint(i), Status: 200}) {
			accepted++
		}
	}
	require.Less(t, time.Since(start), 5*time.Second, "Log must not block")
	require.Equal(t, 2, accepted, "queue size")
	require.InDelta(t, 8, testutil.ToFloat64(l.metrics.dropped), 0)

	// Close cannot finish while the writer is stuck.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, l.Close(ctx), context.DeadlineExceeded)

	close(w.release)
	require.NoError(t, l.Close(t.Context()))
	require.Len(t, w.buf.lines(t), 3)
	n, err := testutil.GatherAndCount(reg, "sluice_gateway_access_log_dropped_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteErrorReported(t *testing.T) {
	l := newLogger(t, failingWriter{}, Options{Sampling: config.LogSampling{SuccessPercent: pct(100)}}, nil)
	require.True(t, l.Log(Entry{RequestID: "a", Status: 200}))
	err := l.Close(t.Context())
	require.ErrorContains(t, err, "disk full")
	require.GreaterOrEqual(t, testutil.ToFloat64(l.metrics.writeErrors), 1.0)
}

func TestConcurrentLog(t *testing.T) {
	var buf syncBuffer
	l := newLogger(t, &buf, Options{Sampling: config.LogSampling{SuccessPercent: pct(100)}, QueueSize: 64}, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				if l.Log(Entry{RequestID: fmt.Sprintf("%d-%d", g, i), Status: 200}) {
					mu.Lock()
					accepted++
					mu.Unlock()
				}
			}
		})
	}
	// Close races with the loggers: nothing may panic or be lost once accepted.
	wg.Go(func() { require.NoError(t, l.Close(t.Context())) })
	wg.Wait()
	require.NoError(t, l.Close(t.Context()))
	require.Len(t, buf.lines(t), accepted)
	require.InDelta(t, float64(8*500-accepted), testutil.ToFloat64(l.metrics.dropped), 0)
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, opts := range []Options{
		{Sampling: config.LogSampling{SuccessPercent: pct(-1)}},
		{Sampling: config.LogSampling{ErrorsPercent: pct(101)}},
		{QueueSize: -1},
	} {
		_, err := New(io.Discard, opts, nil, nil)
		require.Error(t, err)
	}
}
