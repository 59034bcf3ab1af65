package record

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/testutil/tier"
)

// natsURL is the shared NATS server: SLUICE_NATS_URL or the local default.
func natsURL() string {
	if u := os.Getenv("SLUICE_NATS_URL"); u != "" {
		return u
	}
	return DefaultNATSURL
}

// needNATS skips (or, under CI=true, fails) when the shared NATS server
// with JetStream is not reachable.
func needNATS(t *testing.T) string {
	t.Helper()
	url := natsURL()
	err := func() error {
		nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err
	}()
	if err != nil {
		t.Fatalf("nats with jetstream at %s not available: %v", url, err)
	}
	return url
}

// isolated returns options for a stream and subject prefix of this test's
// own on url, deleting the stream at cleanup.
func isolated(t *testing.T, url string) NATSOptions {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	opts := NATSOptions{
		URL:           url,
		Stream:        "SLUICETEST_" + strings.ToUpper(suffix),
		SubjectPrefix: "sluicetest." + suffix + ".recordings",
	}
	t.Cleanup(func() {
		nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
		if err != nil {
			return // a private server that is already gone
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, opts.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", opts.Stream, err)
		}
	})
	return opts
}

func readStream(t *testing.T, nopts NATSOptions, opts StreamOptions) []*Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	src, err := OpenStream(ctx, nopts, opts)
	require.NoError(t, err)
	got, err := ReadAll(ctx, src)
	require.NoError(t, err)
	return got
}

func TestNATSWriterRoundTrip(t *testing.T) {
	opts := isolated(t, needNATS(t))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	reg := prometheus.NewRegistry()
	sink, err := NewNATSSink(ctx, opts, nil, reg)
	require.NoError(t, err)
	const n = 5000
	w := runWriter(t, sink, WriterOptions{QueueSize: n, SinkLabel: "nats"}, nil, reg)
	start := time.Now().UTC().Truncate(time.Millisecond)
	for i := range n {
		r := sample(i, start.Add(time.Duration(i)*time.Millisecond))
		if i%2 == 1 {
			r.Service = "eta.v2" // not a valid subject token as it is
		}
		require.True(t, w.Offer(r), "record %d", i)
	}
	t.Logf("offered in %s", time.Since(start))
	require.NoError(t, w.Close(ctx))
	t.Logf("closed at %s", time.Since(start))
	require.Equal(t, WriterStats{Accepted: n, Written: n}, w.Stats())
	st := sink.Stats()
	require.Equal(t, NATSStats{Published: n, Acked: n}, st)

	t0 := time.Now()
	got := readStream(t, opts, StreamOptions{})
	t.Logf("read %d in %s", len(got), time.Since(t0))
	requireIDs(t, got, 0, n)
	require.Equal(t, "eta.v2", got[1].Service)
	require.Equal(t, []float64{66.13}, got[n-1].Arms[ArmShadow].Outputs["eta_prediction"])

	// [From, To) on Record.Time.
	got = readStream(t, opts, StreamOptions{ReadOptions: ReadOptions{
		From: start.Add(1000 * time.Millisecond), To: start.Add(2000 * time.Millisecond),
	}})
	requireIDs(t, got, 1000, 1000)
	got = readStream(t, opts, StreamOptions{ReadOptions: ReadOptions{From: start.Add((n - 3) * time.Millisecond)}})
	requireIDs(t, got, n-3, 3)

	// One service: its own subject, in order.
	got = readStream(t, opts, StreamOptions{ReadOptions: ReadOptions{Service: "eta.v2"}})
	require.Len(t, got, n/2)
	for i, r := range got {
		require.Equal(t, "req-"+itoa(2*i+1), r.RequestID)
	}

	nc, err := nats.Connect(opts.URL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.Stream(ctx, opts.Stream)
	require.NoError(t, err)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(opts.SubjectPrefix+".>"))
	require.NoError(t, err)
	require.Equal(t, uint64(n), info.State.Msgs)
	require.Equal(t, []string{opts.SubjectPrefix + ".>"}, info.Config.Subjects)
	require.Equal(t, map[string]uint64{
		opts.Subject("parcel-eta"):     n / 2,
		opts.SubjectPrefix + ".eta_v2": n / 2,
	}, info.State.Subjects)
}

func TestNATSSinkKeepsAnExistingStream(t *testing.T) {
	opts := isolated(t, needNATS(t))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	first, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	n, err := first.Write(ctx, records(0, 3))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, first.Close(ctx))

	// A second sink (a restart, another replica) appends to the stream.
	second, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	_, err = second.Write(ctx, records(3, 2))
	require.NoError(t, err)
	require.NoError(t, second.Close(ctx))
	_, err = second.Write(ctx, records(5, 1))
	require.ErrorContains(t, err, "closed")

	requireIDs(t, readStream(t, opts, StreamOptions{}), 0, 5)
}

func TestNATSSinkRejectsAStreamWithOtherSubjects(t *testing.T) {
	opts := isolated(t, needNATS(t))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	nc, err := nats.Connect(opts.URL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: opts.Stream, Subjects: []string{opts.SubjectPrefix + "x.>"}})
	require.NoError(t, err)

	_, err = NewNATSSink(ctx, opts, nil, nil)
	require.ErrorContains(t, err, "takes subjects")
}

func TestStreamReaderEdges(t *testing.T) {
	opts := isolated(t, needNATS(t))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	_, err := OpenStream(ctx, opts, StreamOptions{})
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)

	sink, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	require.NoError(t, sink.Close(ctx))

	// An empty stream ends at once rather than waiting for messages.
	start := time.Now()
	require.Empty(t, readStream(t, opts, StreamOptions{}))
	require.Less(t, time.Since(start), 5*time.Second)

	// A malformed message is reported by sequence, or skipped and counted.
	nc, err := nats.Connect(opts.URL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for i, data := range encoded(t, 0, 2) {
		if i == 1 {
			_, err = js.Publish(ctx, opts.Subject("parcel-eta"), []byte(`{"schema":1,"request_id":`))
			require.NoError(t, err)
		}
		_, err = js.Publish(ctx, opts.Subject("parcel-eta"), []byte(data))
		require.NoError(t, err)
	}
	src, err := OpenStream(ctx, opts, StreamOptions{})
	require.NoError(t, err)
	got, err := ReadAll(ctx, src)
	var me *MessageError
	require.ErrorAs(t, err, &me)
	require.Equal(t, uint64(2), me.Sequence)
	require.ErrorContains(t, err, fmt.Sprintf("stream %s message 2: decode record", opts.Stream))
	requireIDs(t, got, 0, 1)

	src, err = OpenStream(ctx, opts, StreamOptions{ReadOptions: ReadOptions{SkipBad: true}})
	require.NoError(t, err)
	got, err = ReadAll(ctx, src)
	require.NoError(t, err)
	requireIDs(t, got, 0, 2)
	require.Equal(t, 1, src.Skipped())

	// A range after every record ends without waiting.
	src, err = OpenStream(ctx, opts, StreamOptions{ReadOptions: ReadOptions{From: time.Now().Add(time.Hour)}})
	require.NoError(t, err)
	_, err = src.Next(ctx)
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, src.Close())
}

// requireStreamExactlyOnce reads the stream back and checks that it holds
// each of want exactly once (by request id) and nothing else.
func requireStreamExactlyOnce(t *testing.T, opts NATSOptions, want []string) {
	t.Helper()
	got := readStream(t, opts, StreamOptions{})
	count := make(map[string]int, len(got))
	for _, r := range got {
		count[r.RequestID]++
	}
	var dup []string
	for id, n := range count {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("%s×%d", id, n))
		}
	}
	slices.Sort(dup)
	require.Empty(t, dup, "records stored more than once")
	var missing []string
	for _, id := range want {
		if count[id] == 0 {
			missing = append(missing, id)
		}
		delete(count, id)
	}
	require.Empty(t, missing, "accepted records missing from the stream")
	require.Empty(t, count, "records in the stream that were never accepted")
	require.Len(t, got, len(want))
}

// steadyLoad offers records first, first+1, … at rate per second until
// n were offered or ctx ends, and returns the ids the writer accepted.
func steadyLoad(ctx context.Context, w *Writer, first, n, rate int) []string {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var accepted []string
	for i := first; i < first+n; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return accepted
		}
		if w.Offer(sample(i, time.Now())) {
			accepted = append(accepted, "req-"+itoa(i))
		}
	}
	return accepted
}

// TestNATSWriterSurvivesABrokerKill: 200 records/s for 25 s while the
// broker is killed (SIGKILL) for 15 s and restarted on the same port and
// store. Every accepted record ends up in the stream exactly once.
func TestNATSWriterSurvivesABrokerKill(t *testing.T) {
	tier.Skip(t, "drill") // 25 s of load by design
	t.Parallel()
	srv := natstest.Start(t)
	opts := isolated(t, srv.URL())
	opts.AckTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	sink, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	spool := openSpool(t, SpoolOptions{Dir: t.TempDir()})
	w := runWriter(t, sink, WriterOptions{SinkLabel: "nats", Spool: spool, RetryMax: time.Second}, nil, reg)

	const rate, seconds = 200, 25
	loaded := make(chan []string, 1)
	go func() { loaded <- steadyLoad(ctx, w, 0, rate*seconds, rate) }()

	time.Sleep(5 * time.Second)
	before := w.Stats()
	srv.Kill()
	maxSpooled := uint64(0)
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		maxSpooled = max(maxSpooled, w.Stats().Spooled)
	}
	srv.Restart()
	accepted := <-loaded
	require.Len(t, accepted, rate*seconds, "the writer accepted every offer")
	t.Logf("before the kill: %+v; most spooled during the outage: %d", before, maxSpooled)
	require.Positive(t, before.Written, "records were published before the kill")
	require.Greater(t, maxSpooled, uint64(rate*5), "the outage's records went to the spool")

	closeCtx, cancelClose := context.WithTimeout(ctx, 60*time.Second)
	defer cancelClose()
	require.NoError(t, w.Close(closeCtx))
	st := w.Stats()
	t.Logf("writer: %+v; sink: %+v", st, sink.Stats())
	require.Equal(t, WriterStats{Accepted: uint64(len(accepted)), Written: uint64(len(accepted))}, st)
	requireStreamExactlyOnce(t, opts, accepted)
}

// TestNATSWriterCloseWhileBrokerHungThenNextStartDrains: the broker hangs
// (SIGSTOP) under load; Close with a 3 s deadline returns in time, leaving
// exactly the unpublished records in the spool; after SIGCONT a new writer
// on the same spool (the next start) publishes them, each exactly once
// (records the hung broker got before Close are deduplicated).
func TestNATSWriterCloseWhileBrokerHungThenNextStartDrains(t *testing.T) {
	tier.Skip(t, "drill") // a hung broker across a close and a restart: about 7 s
	t.Parallel()
	srv := natstest.Start(t)
	opts := isolated(t, srv.URL())
	opts.AckTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()

	sink, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	const deadline = 3 * time.Second
	w := runWriter(t, sink, WriterOptions{SinkLabel: "nats", Spool: openSpool(t, SpoolOptions{Dir: dir}), CloseTimeout: deadline}, nil, nil)

	const rate = 200
	accepted := steadyLoad(ctx, w, 0, 2*rate, rate)
	srv.Pause()
	accepted = append(accepted, steadyLoad(ctx, w, 2*rate, 2*rate, rate)...)
	require.Len(t, accepted, 4*rate)

	start := time.Now()
	err = w.Close(ctx)
	took := time.Since(start)
	st := w.Stats()
	t.Logf("Close took %s: %+v, err %v; sink: %+v", took, st, err, sink.Stats())
	require.NoError(t, err, "nothing was lost: the rest is in the spool")
	require.Less(t, took, deadline+2*time.Second, "Close keeps to its deadline")
	require.Equal(t, uint64(len(accepted)), st.Accepted)
	require.Zero(t, st.Lost())
	require.Positive(t, st.Spooled)
	require.Equal(t, st.Accepted, st.Written+st.Spooled)

	// What Close reported is exactly what the spool holds.
	spool := openSpool(t, SpoolOptions{Dir: dir})
	recovered, damaged, cut := spool.Recovered()
	require.Equal(t, int(st.Spooled), recovered)
	require.Zero(t, damaged)
	require.Zero(t, cut)

	srv.Resume()
	sink2, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	next := runWriter(t, sink2, WriterOptions{SinkLabel: "nats", Spool: spool, CloseTimeout: 30 * time.Second}, nil, nil)
	require.NoError(t, next.Close(ctx))
	st2 := next.Stats()
	t.Logf("next writer: %+v; sink: %+v", st2, sink2.Stats())
	require.Equal(t, WriterStats{Recovered: st.Spooled, Written: st.Spooled}, st2)
	requireStreamExactlyOnce(t, opts, accepted)
}

// TestNATSWriterSpoolFull: the broker is down and the spool tiny; the
// drop_newest policy applies and the counts say so exactly.
func TestNATSWriterSpoolFull(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	opts := isolated(t, srv.URL())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sink, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	srv.Kill()

	dir := t.TempDir()
	const maxBytes = 64 << 10
	reg := prometheus.NewRegistry()
	w := runWriter(t, sink, WriterOptions{SinkLabel: "nats", Spool: openSpool(t, SpoolOptions{Dir: dir, MaxBytes: maxBytes}), CloseTimeout: time.Second}, nil, reg)
	var accepted []string
	for i, r := range records(0, 400) {
		if w.Offer(r) {
			accepted = append(accepted, r.RequestID)
		}
		if i%20 == 19 {
			waitFor(t, "the writer to settle", quiescent(w, uint64(len(accepted))))
		}
	}
	require.Len(t, accepted, 400)
	err = w.Close(ctx)
	st := w.Stats()
	t.Logf("%+v, err %v", st, err)
	require.ErrorContains(t, err, fmt.Sprintf("%d of 400 accepted records lost (0 failed, %d dropped by the full spool)", st.DroppedByPolicy, st.DroppedByPolicy))
	requireAddsUp(t, st)
	require.Zero(t, st.Written)
	require.Zero(t, st.Failed)
	require.Positive(t, st.Spooled)
	require.Positive(t, st.DroppedByPolicy)
	require.Equal(t, uint64(400), st.Spooled+st.DroppedByPolicy)

	require.InDelta(t, float64(st.DroppedByPolicy), metricValue(t, reg, "sluice_release_records_total", "sink", "nats", "result", "dropped_by_policy"), 0)
	require.InDelta(t, float64(st.Spooled), metricValue(t, reg, "sluice_release_record_spool_records", "sink", "nats"), 0)
	require.LessOrEqual(t, metricValue(t, reg, "sluice_release_record_spool_bytes", "sink", "nats"), float64(maxBytes))

	// The spool holds the oldest records, exactly as many as reported,
	// and the next start publishes them once the broker is back.
	srv.Restart()
	sink2, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	next := runWriter(t, sink2, WriterOptions{SinkLabel: "nats", Spool: openSpool(t, SpoolOptions{Dir: dir, MaxBytes: maxBytes})}, nil, nil)
	require.NoError(t, next.Close(ctx))
	require.Equal(t, WriterStats{Recovered: st.Spooled, Written: st.Spooled}, next.Stats())
	requireStreamExactlyOnce(t, opts, accepted[:st.Spooled])
}

func TestStreamReaderStartsAndStopsByStreamTime(t *testing.T) {
	opts := isolated(t, needNATS(t))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sink, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	publish := func(first, n int) {
		t.Helper()
		recs := make([]*Record, n)
		for i := range recs {
			recs[i] = sample(first+i, time.Now())
		}
		_, err := sink.Write(ctx, recs)
		require.NoError(t, err)
		select {
		case <-sink.js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	publish(0, 3)
	time.Sleep(400 * time.Millisecond)
	mid := time.Now()
	_, err = sink.js.Publish(ctx, opts.Subject("parcel-eta"), []byte("not a record"))
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond)
	after := time.Now()
	publish(3, 2)
	require.NoError(t, sink.Close(ctx))

	slack := 200 * time.Millisecond
	// To: the reader stops at the first message stored at or after
	// To+Slack, so it never reaches the malformed one.
	got := readStream(t, opts, StreamOptions{ReadOptions: ReadOptions{To: mid.Add(-slack)}, Slack: slack})
	requireIDs(t, got, 0, 3)
	// From: it starts at From-Slack, past the malformed one.
	got = readStream(t, opts, StreamOptions{ReadOptions: ReadOptions{From: after}, Slack: slack})
	requireIDs(t, got, 3, 2)
	// The whole stream does contain it.
	src, err := OpenStream(ctx, opts, StreamOptions{})
	require.NoError(t, err)
	_, err = ReadAll(ctx, src)
	var me *MessageError
	require.ErrorAs(t, err, &me)
	require.Equal(t, uint64(4), me.Sequence)
}
