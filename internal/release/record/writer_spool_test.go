package record

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// flakySink stores records while up and refuses every write while down.
// It is not an entrySink, so the Writer reaches it through recordSink.
type flakySink struct {
	down atomic.Bool

	mu    sync.Mutex // protects count
	count map[string]int
}

func newFlakySink(down bool) *flakySink {
	s := &flakySink{count: map[string]int{}}
	s.down.Store(down)
	return s
}

func (s *flakySink) Write(ctx context.Context, recs []*Record) (int, error) {
	if s.down.Load() {
		return 0, errors.New("sink down")
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.count[r.RequestID]++
	}
	return len(recs), nil
}

func (s *flakySink) Close(context.Context) error { return nil }

// requireExactlyOnce checks the sink holds exactly the ids, once each.
func (s *flakySink) requireExactlyOnce(t *testing.T, want []string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range s.count {
		require.Equal(t, 1, n, "record %s stored %d times", id, n)
	}
	got := slices.Sorted(maps.Keys(s.count))
	want = slices.Clone(want)
	slices.Sort(want)
	require.Equal(t, want, got)
}

// waitFor polls cond every 10ms until it holds or 20s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	harness.WaitFor(t, 20*time.Second, 10*time.Millisecond, what, func() (bool, string) { return cond(), "not yet" })
}

// requireAddsUp checks the writer's accounting identity.
func requireAddsUp(t *testing.T, st WriterStats) {
	t.Helper()
	require.Equal(t, st.Accepted+st.Recovered, st.Written+st.Spooled+st.DroppedByPolicy+st.Failed+st.Damaged, "counts do not add up: %+v", st)
}

func quiescent(w *Writer, accepted uint64) func() bool {
	return func() bool {
		st := w.Stats()
		return st.Accepted == accepted && st.Accepted+st.Recovered == st.Written+st.Spooled+st.DroppedByPolicy+st.Failed+st.Damaged
	}
}

func TestWriterSpoolsWhileTheSinkIsDownAndDrainsWhenItIsBack(t *testing.T) {
	dir := t.TempDir()
	sink := newFlakySink(false)
	spool := openSpool(t, SpoolOptions{Dir: dir})
	reg := prometheus.NewRegistry()
	w := runWriter(t, sink, WriterOptions{SinkLabel: "fake", Spool: spool, RetryMax: 50 * time.Millisecond}, nil, reg)

	for _, r := range records(0, 100) {
		require.True(t, w.Offer(r))
	}
	waitFor(t, "the first records written", func() bool { return w.Stats().Written == 100 })
	sink.down.Store(true)
	for _, r := range records(100, 400) {
		require.True(t, w.Offer(r))
	}
	waitFor(t, "the outage's records spooled", quiescent(w, 500))
	st := w.Stats()
	require.Equal(t, WriterStats{Accepted: 500, Written: 100, Spooled: 400}, st)
	// The spool's gauges are set after the append that counted the
	// records (the writer's counters come first): wait for them too.
	waitFor(t, "the spool gauge", func() bool { return testutil.ToFloat64(w.m.spoolRecords) == 400 })
	require.Positive(t, testutil.ToFloat64(w.m.spoolBytes))

	sink.down.Store(false)
	waitFor(t, "the spool drained", func() bool { return w.Stats().Written == 500 })
	for _, r := range records(500, 100) {
		require.True(t, w.Offer(r))
	}
	require.NoError(t, w.Close(t.Context()))
	st = w.Stats()
	require.Equal(t, WriterStats{Accepted: 600, Written: 600}, st)
	require.InDelta(t, 600, counter(t, reg, "written"), 0)
	require.InDelta(t, 400, testutil.ToFloat64(w.m.spooled), 0)
	require.InDelta(t, 0, testutil.ToFloat64(w.m.spoolRecords), 0)
	sink.requireExactlyOnce(t, ids(0, 600))
	require.Empty(t, segmentFiles(t, dir))
}

func TestWriterCloseLeavesTheRestInTheSpoolForTheNextWriter(t *testing.T) {
	dir := t.TempDir()
	down := newFlakySink(true)
	w := runWriter(t, down, WriterOptions{SinkLabel: "fake", Spool: openSpool(t, SpoolOptions{Dir: dir}), CloseTimeout: 200 * time.Millisecond}, nil, nil)
	for _, r := range records(0, 300) {
		require.True(t, w.Offer(r))
	}
	start := time.Now()
	require.NoError(t, w.Close(t.Context()), "spooled records are not lost")
	require.Less(t, time.Since(start), 5*time.Second, "Close is bounded by CloseTimeout")
	st := w.Stats()
	require.Equal(t, WriterStats{Accepted: 300, Spooled: 300}, st)
	require.False(t, w.Offer(records(300, 1)[0]))

	// The next process finds the spool and drains it.
	up := newFlakySink(false)
	next := runWriter(t, up, WriterOptions{SinkLabel: "fake", Spool: openSpool(t, SpoolOptions{Dir: dir})}, nil, nil)
	require.Equal(t, uint64(300), next.Stats().Recovered)
	for _, r := range records(300, 50) {
		require.True(t, next.Offer(r))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, next.Close(ctx))
	st = next.Stats()
	require.Equal(t, WriterStats{Accepted: 50, Recovered: 300, Written: 350}, st)
	up.requireExactlyOnce(t, ids(0, 350))
}

func TestWriterSpoolFullPolicies(t *testing.T) {
	for _, policy := range []SpoolPolicy{SpoolDropNewest, SpoolBlock} {
		t.Run(string(policy), func(t *testing.T) {
			dir := t.TempDir()
			sink := newFlakySink(true)
			reg := prometheus.NewRegistry()
			spool := openSpool(t, SpoolOptions{Dir: dir, MaxBytes: MinSpoolMaxBytes, Full: policy})
			w := runWriter(t, sink, WriterOptions{QueueSize: 50, BatchSize: 10, SinkLabel: "fake", Spool: spool, CloseTimeout: 300 * time.Millisecond}, nil, reg)
			var accepted []string
			for i, r := range records(0, 400) {
				if w.Offer(r) {
					accepted = append(accepted, r.RequestID)
				}
				if i%10 == 9 && policy == SpoolDropNewest {
					// The writer keeps up: it never waits for the spool.
					waitFor(t, "the writer to settle", quiescent(w, uint64(len(accepted))))
				}
				if i%10 == 9 && policy == SpoolBlock {
					time.Sleep(time.Millisecond)
				}
			}
			if policy == SpoolDropNewest {
				st := w.Stats()
				require.Positive(t, st.DroppedByPolicy, "%+v", st)
				require.Zero(t, st.Dropped, "the writer keeps taking records: %+v", st)
			}
			err := w.Close(t.Context())
			st := w.Stats()
			requireAddsUp(t, st)
			require.Equal(t, uint64(len(accepted)), st.Accepted)
			require.Zero(t, st.Written)
			require.Zero(t, st.Failed)
			require.Positive(t, st.Spooled)
			require.Positive(t, st.DroppedByPolicy, "%+v", st)
			require.ErrorContains(t, err, "dropped by the full spool")
			require.InDelta(t, float64(st.DroppedByPolicy), counter(t, reg, "dropped_by_policy"), 0)
			if policy == SpoolBlock {
				require.Positive(t, st.Dropped, "a blocked writer's queue fills and Offer drops: %+v", st)
			}

			// The spool holds exactly what the counts say: the oldest
			// accepted records, within its bound.
			reopened := openSpool(t, SpoolOptions{Dir: dir, MaxBytes: MinSpoolMaxBytes})
			recs, size := reopened.Pending()
			require.Equal(t, int(st.Spooled), recs)
			require.LessOrEqual(t, size, int64(MinSpoolMaxBytes))
			var got []string
			for {
				es, err := reopened.peek(100, maxPeekBytes)
				require.NoError(t, err)
				if len(es) == 0 {
					break
				}
				for _, e := range es {
					r, err := Decode(e.data)
					require.NoError(t, err)
					got = append(got, r.RequestID)
				}
				require.NoError(t, reopened.ack(len(es)))
			}
			require.Equal(t, accepted[:recs], got)
		})
	}
}

func TestWriterWithoutSpoolCountsSinkOutagesAsFailed(t *testing.T) {
	sink := newFlakySink(true)
	w := runWriter(t, sink, WriterOptions{SinkLabel: "fake"}, nil, nil)
	for _, r := range records(0, 20) {
		require.True(t, w.Offer(r))
	}
	err := w.Close(t.Context())
	require.ErrorContains(t, err, "20 of 20 accepted records lost (20 failed, 0 dropped by the full spool)")
	require.Equal(t, WriterStats{Accepted: 20, Failed: 20}, w.Stats())
}

// metricValue returns the value of the counter or gauge name whose labels
// are the given name/value pairs.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if !maps.Equal(got, want) {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// Issue 22 item 7: 8 bytes flipped in the middle of a segment of 4,097
// records lost every record after them as a "corrupt tail", counted only
// in bytes. Now the next writer recovers every intact record, counts the
// damaged ones as records (stats, metric, final log line), and the
// accounting identity balances.
func TestWriterRecoversEveryIntactRecordAroundDamage(t *testing.T) {
	const n = 4097
	dir := t.TempDir()
	opts := SpoolOptions{Dir: dir, MaxBytes: 256 << 20, SegmentBytes: 64 << 20}
	first := runWriter(t, newFlakySink(true), WriterOptions{SinkLabel: "fake", QueueSize: 2 * n, Spool: openSpool(t, opts), CloseTimeout: 100 * time.Millisecond}, nil, nil)
	for _, r := range records(0, n) {
		require.True(t, first.Offer(r))
	}
	require.NoError(t, first.Close(t.Context()))
	require.Equal(t, WriterStats{Accepted: n, Spooled: n}, first.Stats())
	segs := segmentFiles(t, dir)
	require.Len(t, segs, 1)

	// Which records the damage hits: the frames overlapping it.
	data, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	sc := scanFrames(data, int64(len(spoolMagic)))
	require.Len(t, sc.ends, n+1)
	mid := int64(len(data) / 2)
	var hit []string
	var intact []string
	for i := range n {
		e, _, ok := parseFrame(data[sc.ends[i]:])
		require.True(t, ok)
		var rec Record
		require.NoError(t, json.Unmarshal(e.data, &rec))
		if sc.ends[i] < mid+8 && sc.ends[i+1] > mid {
			hit = append(hit, rec.RequestID)
		} else {
			intact = append(intact, rec.RequestID)
		}
	}
	for i := range int64(8) {
		data[mid+i] ^= 0x5a
	}
	require.NoError(t, os.WriteFile(segs[0], data, 0o600))
	t.Logf("segment of %d bytes, 8 bytes flipped at %d: records %v damaged", len(data), mid, hit)

	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	sink := newFlakySink(false)
	w := runWriter(t, sink, WriterOptions{SinkLabel: "fake", Spool: openSpool(t, opts)}, logger, reg)
	waitFor(t, "the spool drained", func() bool { st := w.Stats(); return st.Written+st.Damaged == n })
	err = w.Close(t.Context())
	require.ErrorContains(t, err, fmt.Sprintf("%d damaged on disk", len(hit)))
	st := w.Stats()
	require.Equal(t, WriterStats{Recovered: n, Written: uint64(len(intact)), Damaged: uint64(len(hit))}, st)
	requireAddsUp(t, st)
	require.InDelta(t, float64(len(hit)), counter(t, reg, "damaged"), 0)
	sink.requireExactlyOnce(t, intact)
	require.Contains(t, logs.String(), fmt.Sprintf(`"damaged":%d`, len(hit)), "the final log line counts them")
	require.Empty(t, segmentFiles(t, dir))
}

// failingFile is a segment file whose writes fail with err.
type failingFile struct {
	*os.File
	err error
}

func (f failingFile) Write([]byte) (int, error) {
	return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: f.err}
}

// Issue 22 item 8: a full spool disk said only "spool cursor not saved".
// Every spool write error is now counted by its cause, and the first of
// each cause is logged with it: ENOSPC from the kernel (/dev/full), EIO
// injected.
func TestWriterNamesTheCauseOfSpoolWriteErrors(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	spool, err := OpenSpool(SpoolOptions{Dir: t.TempDir()}, logger)
	require.NoError(t, err)
	var cause atomic.Value
	cause.Store("enospc")
	spool.openAppend = func(path string) (appendFile, error) {
		if cause.Load() == "enospc" {
			return os.OpenFile("/dev/full", os.O_WRONLY, 0) // every write: ENOSPC
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		return failingFile{File: f, err: syscall.EIO}, nil
	}
	reg := prometheus.NewRegistry()
	w := runWriter(t, newFlakySink(true), WriterOptions{SinkLabel: "fake", Spool: spool, BatchSize: 10}, logger, reg)
	errorsBy := func(c string) float64 {
		return testutil.ToFloat64(w.m.spoolWriteErrors.WithLabelValues(c))
	}
	for i, r := range records(0, 40) {
		require.True(t, w.Offer(r))
		if i%10 == 9 {
			waitFor(t, "the batch lost", quiescent(w, uint64(i+1)))
		}
	}
	require.Equal(t, uint64(40), w.Stats().Failed, "records the spool cannot write are lost, and counted")
	require.GreaterOrEqual(t, errorsBy("enospc"), 4.0, "each failed write is counted")
	cause.Store("eio")
	for _, r := range records(40, 20) {
		require.True(t, w.Offer(r))
	}
	waitFor(t, "the EIO batch lost", quiescent(w, 60))
	require.Positive(t, errorsBy("eio"))
	_ = w.Close(t.Context())

	lines := logs.lines(`"msg":"recording spool write failed"`)
	require.Len(t, lines, 2, "one line per cause, not one per record:\n%s", strings.Join(lines, "\n"))
	require.Contains(t, lines[0], `"cause":"enospc"`)
	require.Contains(t, lines[0], "no space left on device")
	require.Contains(t, lines[1], `"cause":"eio"`)
	require.Contains(t, lines[1], "input/output error")
}

// syncBuffer is a log sink safe for the writer's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// lines returns the logged lines containing sub.
func (b *syncBuffer) lines(sub string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for l := range strings.Lines(b.b.String()) {
		if strings.Contains(l, sub) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}
