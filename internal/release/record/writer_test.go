package record

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// fakeSink records what it is given. While gate is open (nil or closed)
// Write returns at once; otherwise it blocks until gate closes or ctx ends.
type fakeSink struct {
	gate chan struct{}
	fail func(batch []*Record) (int, error) // optional: decides the result

	mu      sync.Mutex // protects the fields below
	ids     []string
	batches []int
	closed  int
}

func (s *fakeSink) Write(ctx context.Context, recs []*Record) (int, error) {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	n, err := len(recs), error(nil)
	if s.fail != nil {
		n, err = s.fail(recs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, len(recs))
	for _, r := range recs[:n] {
		s.ids = append(s.ids, r.RequestID)
	}
	return n, err
}

func (s *fakeSink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

func (s *fakeSink) stored() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

func ids(first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "req-" + itoa(first+i)
	}
	return out
}

func counter(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	c, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range c {
		if mf.GetName() != "sluice_release_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var sink, res string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "sink":
					sink = l.GetValue()
				case "result":
					res = l.GetValue()
				}
			}
			if sink == "fake" && res == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no sluice_release_records_total{sink=fake,result=%s}", result)
	return 0
}

func TestWriterDropsAndCountsWhenTheSinkIsSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &fakeSink{gate: make(chan struct{})}
		reg := prometheus.NewRegistry()
		w := runWriter(t, sink, WriterOptions{QueueSize: 10, BatchSize: 4, SinkLabel: "fake"}, nil, reg)
		recs := records(0, 100)

		require.True(t, w.Offer(recs[0]))
		synctest.Wait() // the writer took recs[0] and is stuck in Write
		accepted := 1
		for _, r := range recs[1:] {
			if w.Offer(r) {
				accepted++
			}
		}
		require.Equal(t, 11, accepted) // one in the sink, ten queued
		require.Equal(t, WriterStats{Accepted: 11, Dropped: 89}, w.Stats())
		require.InDelta(t, 89, counter(t, reg, "dropped"), 0)
		require.InDelta(t, 10, testutil.ToFloat64(w.m.queueLen), 0)

		close(sink.gate)
		require.NoError(t, w.Close(context.Background()))
		require.Equal(t, ids(0, 11), sink.stored())
		require.Equal(t, WriterStats{Accepted: 11, Dropped: 89, Written: 11}, w.Stats())
		require.InDelta(t, 11, counter(t, reg, "written"), 0)
		require.InDelta(t, 0, counter(t, reg, "failed"), 0)
		require.InDelta(t, 0, testutil.ToFloat64(w.m.queueLen), 0)
		require.Equal(t, 1, sink.closed)
		for _, b := range sink.batches {
			require.LessOrEqual(t, b, 4, "batches are bounded")
		}

		require.False(t, w.Offer(recs[0]), "a closed writer accepts nothing")
		require.False(t, w.Offer(nil))
		require.Equal(t, uint64(91), w.Stats().Dropped)
		require.NoError(t, w.Close(context.Background()), "Close is idempotent")
		require.Equal(t, 1, sink.closed)
	})
}

func TestWriterCloseFlushesEverythingAccepted(t *testing.T) {
	dir := t.TempDir()
	fs, err := NewFileSink(FileOptions{Dir: dir, MaxBytes: 256 << 10}, nil)
	require.NoError(t, err)
	w := runWriter(t, fs, WriterOptions{QueueSize: 256, BatchSize: 32, SinkLabel: "jsonl"}, nil, prometheus.NewRegistry())

	const producers, each = 8, 500
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := map[string]bool{}
	for p := range producers {
		wg.Go(func() {
			for i, r := range records(p*each, each) {
				if w.Offer(r) {
					mu.Lock()
					accepted[r.RequestID] = true
					mu.Unlock()
				}
				if i%50 == 0 {
					time.Sleep(time.Millisecond) // let the writer catch up now and then
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close(t.Context()))

	st := w.Stats()
	require.Equal(t, uint64(producers*each), st.Accepted+st.Dropped)
	require.Equal(t, st.Accepted, st.Written)
	require.Zero(t, st.Failed)
	require.Len(t, accepted, int(st.Accepted))

	got := readDir(t, dir, ReadOptions{})
	require.Len(t, got, int(st.Accepted))
	for _, r := range got {
		require.True(t, accepted[r.RequestID], r.RequestID)
		delete(accepted, r.RequestID)
	}
	require.Empty(t, accepted, "every accepted record is on disk exactly once")
}

func TestWriterCloseGivesUpWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &fakeSink{gate: make(chan struct{})} // never opens
		reg := prometheus.NewRegistry()
		w := runWriter(t, sink, WriterOptions{QueueSize: 10, SinkLabel: "fake"}, nil, reg)
		require.True(t, w.Offer(records(0, 1)[0]))
		synctest.Wait()
		for _, r := range records(1, 10) {
			require.True(t, w.Offer(r))
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := w.Close(ctx)
		require.ErrorContains(t, err, "11 of 11 accepted records lost (11 failed, 0 dropped by the full spool)")
		require.Equal(t, time.Second, time.Since(start))
		require.Equal(t, WriterStats{Accepted: 11, Failed: 11}, w.Stats())
		require.InDelta(t, 11, counter(t, reg, "failed"), 0)
		require.Equal(t, 1, sink.closed, "the sink is closed even so")
		require.Empty(t, sink.stored())
	})
}

func TestWriterCountsSinkFailures(t *testing.T) {
	sink := &fakeSink{fail: func(batch []*Record) (int, error) {
		// Store all but the last record of each batch.
		return len(batch) - 1, errors.New("disk full")
	}}
	reg := prometheus.NewRegistry()
	w := runWriter(t, sink, WriterOptions{SinkLabel: "fake"}, nil, reg)
	for _, r := range records(0, 40) {
		require.True(t, w.Offer(r))
	}
	err := w.Close(t.Context())
	st := w.Stats()
	require.Equal(t, uint64(40), st.Accepted)
	require.Equal(t, uint64(len(sink.batches)), st.Failed)
	require.Equal(t, st.Accepted, st.Written+st.Failed)
	require.ErrorContains(t, err, itoa(int(st.Failed))+" of 40 accepted records lost")
	require.Len(t, sink.stored(), int(st.Written))
	require.InDelta(t, float64(st.Written), counter(t, reg, "written"), 0)
	require.InDelta(t, float64(st.Failed), counter(t, reg, "failed"), 0)
}

func TestWritersShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewWriter(&fakeSink{}, WriterOptions{SinkLabel: "fake"}, nil, reg)
	b := NewWriter(&fakeSink{}, WriterOptions{SinkLabel: "fake"}, nil, reg)
	require.True(t, a.Offer(records(0, 1)[0]))
	require.True(t, b.Offer(records(1, 1)[0]))
	require.NoError(t, a.Close(t.Context()))
	require.NoError(t, b.Close(t.Context()))
	require.InDelta(t, 2, counter(t, reg, "written"), 0)
}

// runWriter returns a running Writer (NewWriter starts nothing): Run goes
// on its own goroutine, which the test's clean-up waits for after a Close.
func runWriter(tb testing.TB, sink Sink, opts WriterOptions, logger *slog.Logger, reg prometheus.Registerer) *Writer {
	tb.Helper()
	w := NewWriter(sink, opts, logger, reg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run()
	}()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Close(ctx)
		<-done
	})
	return w
}

func TestWriterNeverRunCloseWritesWhatItAccepted(t *testing.T) {
	sink := &fakeSink{}
	w := NewWriter(sink, WriterOptions{QueueSize: 10, SinkLabel: "fake"}, nil, nil)
	for _, r := range records(0, 7) {
		require.True(t, w.Offer(r))
	}
	require.Zero(t, w.Stats().Written, "nothing is written before Run or Close")
	require.NoError(t, w.Close(t.Context()))
	st := w.Stats()
	require.Equal(t, uint64(7), st.Written)
	require.Equal(t, 1, sink.closed)
	w.Run() // after Close: returns at once
}
