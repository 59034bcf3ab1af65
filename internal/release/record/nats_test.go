package record

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
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
	w := NewWriter(sink, WriterOptions{QueueSize: n, SinkLabel: "nats"}, nil, reg)
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

// privateNATS runs a nats-server with JetStream of the test's own, which
// the test may stop and restart.
type privateNATS struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startPrivateNATS(t *testing.T) *privateNATS {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/local/bin/nats-server"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("nats-server binary not found: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	s := &privateNATS{t: t, port: port, dir: t.TempDir()}
	s.start(bin)
	t.Cleanup(s.stop)
	return s
}

func (s *privateNATS) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *privateNATS) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(s.port),
		"-sd", s.dir, "-l", filepath.Join(s.dir, "server.log"))
	require.NoError(s.t, s.cmd.Start())
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("private nats-server on port %d did not start: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server with SIGTERM (a clean shutdown) and waits for it.
func (s *privateNATS) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

func TestNATSSinkRetriesAcrossAServerRestart(t *testing.T) {
	srv := startPrivateNATS(t)
	opts := isolated(t, srv.url())
	opts.AckTimeout = time.Second
	opts.Retries = 10
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	sink, err := NewNATSSink(ctx, opts, nil, nil)
	require.NoError(t, err)
	w := NewWriter(sink, WriterOptions{QueueSize: 4096, SinkLabel: "nats"}, nil, nil)
	offer := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			require.True(t, w.Offer(sample(i, time.Now())), "record %d", i)
		}
	}
	const n = 3000
	offer(0, n/3)
	bin := srv.cmd.Path
	srv.stop() // acks in flight are lost
	offer(n/3, 2*n/3)
	// Let the writer publish these while the server is down: they wait
	// in the reconnect buffer, and the reconnect fails their acks.
	for w.Stats().Written < 2*n/3 {
		require.NoError(t, ctx.Err(), "writer stuck while the server was down: %+v", w.Stats())
		time.Sleep(10 * time.Millisecond)
	}
	srv.start(bin)
	offer(2*n/3, n)
	require.NoError(t, w.Close(ctx))
	st := sink.Stats()
	require.Zero(t, st.Lost)
	require.Zero(t, st.Pending)
	require.Positive(t, st.Retried, "the restart failed some acks: %+v", st)
	t.Logf("sink stats: %+v", st)

	got := readStream(t, opts, StreamOptions{})
	seen := make([]string, 0, len(got))
	for _, r := range got {
		seen = append(seen, r.RequestID)
	}
	slices.Sort(seen)
	want := ids(0, n)
	slices.Sort(want)
	require.Equal(t, want, seen, "every record exactly once (retries deduplicated by Nats-Msg-Id); %+v", st)
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
