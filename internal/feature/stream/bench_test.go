package stream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// benchSetup starts a private JetStream, loads the test repository
// pointed at it and opens the named store.
func benchSetup(b *testing.B, storeKind string) (*registry.Repo, jetstream.JetStream, online.Store) {
	b.Helper()
	ns := natstest.Start(b)
	dir := b.TempDir()
	defs := strings.Replace(testDefs, "{name: deliveries, type: stream,", fmt.Sprintf("{name: deliveries, type: stream, url: %q,", ns.URL()), 1)
	require.NoError(b, os.WriteFile(filepath.Join(dir, registry.ConfigFile), []byte("project: p\n"), 0o600))
	require.NoError(b, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(defs), 0o600))
	repo, err := registry.Load(b.Context(), dir)
	require.NoError(b, err)
	nc, err := nats.Connect(ns.URL())
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	_, err = js.CreateStream(b.Context(), jetstream.StreamConfig{Name: "DELIVERIES", Subjects: []string{"deliveries.events"}, Storage: jetstream.FileStorage})
	require.NoError(b, err)
	var store online.Store
	switch storeKind {
	case "embedded":
		store, err = embedded.Open(filepath.Join(dir, "online.db"), embedded.Options{})
	default:
		var id [6]byte
		_, _ = rand.Read(id[:])
		store, err = redis.Open(b.Context(), "", redis.Options{Addrs: []string{"127.0.0.1:6379"}, KeyPrefix: "sluicebench:stream:" + hex.EncodeToString(id[:]) + ":"})
		b.Cleanup(func() { _ = store.DeleteView(context.Background(), "route_live") })
	}
	require.NoError(b, err)
	b.Cleanup(func() { _ = store.Close() })
	return repo, js, store
}

func benchEvent(i int, at time.Time) []byte {
	return fmt.Appendf(nil, `{"ts":%q,"route_id":"r%d","delay":%d.5}`, at.Add(-time.Duration(i%50)*time.Millisecond).UTC().Format(time.RFC3339Nano), i%1000, i%60)
}

// lagSource records, for every acknowledged event, the time from its
// arrival in the stream to its acknowledgement (its tiles are written by
// then): how stale served aggregations are.
type lagSource struct {
	Source
	mu   sync.Mutex
	lags []time.Duration
	n    int
}

func (l *lagSource) Ack(ctx context.Context, msgs []Message) error {
	now := time.Now().UnixNano()
	l.mu.Lock()
	for _, m := range msgs {
		l.lags = append(l.lags, time.Duration(now-m.Arrival))
	}
	l.n += len(msgs)
	l.mu.Unlock()
	return l.Source.Ack(ctx, msgs)
}

func (l *lagSource) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func runAggregator(b *testing.B, repo *registry.Repo, store online.Store, batch int) (*lagSource, context.CancelFunc, chan struct{}) {
	b.Helper()
	js, err := OpenJetStream(b.Context(), repo.Sources["deliveries"], JetStreamOptions{}, slog.New(slog.DiscardHandler))
	require.NoError(b, err)
	src := &lagSource{Source: js}
	a, err := New(repo, "deliveries", src, store, Options{Batch: batch, Wait: 100 * time.Millisecond}, slog.New(slog.NewTextHandler(os.Stderr, nil)), prometheus.NewRegistry())
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); _ = js.Close(); close(done) }()
	return src, cancel, done
}

// BenchmarkAggregateThroughput: events per second one aggregator process
// applies from a backlog of 20,000 JetStream events over 1,000 routes
// (six aggregations, 1 m tiles), into the embedded store and into Redis.
// Run with -benchtime 1x: each iteration drains the whole backlog.
func BenchmarkAggregateThroughput(b *testing.B) {
	const n = 20000
	for _, kind := range []string{"embedded", "redis"} {
		b.Run(kind, func(b *testing.B) {
			repo, js, store := benchSetup(b, kind)
			now := time.Now()
			for i := range n {
				_, err := js.PublishAsync("deliveries.events", benchEvent(i, now))
				require.NoError(b, err)
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publish did not complete")
			}
			b.ResetTimer()
			begin := time.Now()
			src, cancel, done := runAggregator(b, repo, store, 500)
			waitApplied(b, src, n, 5*time.Minute)
			elapsed := time.Since(begin)
			cancel()
			<-done
			require.GreaterOrEqual(b, src.count(), n)
			b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
		})
	}
}

// waitApplied waits until the aggregator has applied n events.
func waitApplied(b *testing.B, src *lagSource, n int, timeout time.Duration) {
	b.Helper()
	harness.WaitFor(b, timeout, 5*time.Millisecond, "events applied", func() (bool, string) {
		c := src.count()
		return c >= n, fmt.Sprintf("%d of %d", c, n)
	})
}

// BenchmarkAggregateLag: freshness lag — from an event's arrival in the
// stream to its tiles being written — at a fixed 1,000 events/s for 10 s,
// p50 and p99, with the embedded store and with Redis.
func BenchmarkAggregateLag(b *testing.B) {
	const rate, seconds = 1000, 10
	for _, kind := range []string{"embedded", "redis"} {
		b.Run(kind, func(b *testing.B) {
			repo, js, store := benchSetup(b, kind)
			src, cancel, done := runAggregator(b, repo, store, 500)
			// Warm up: the consumer is bound and has applied an event.
			_, err := js.Publish(b.Context(), "deliveries.events", benchEvent(0, time.Now()))
			require.NoError(b, err)
			waitApplied(b, src, 1, time.Minute)
			src.mu.Lock()
			src.lags, src.n = nil, 0
			src.mu.Unlock()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			i := 0
			for range seconds * 100 {
				<-tick.C
				now := time.Now()
				for range rate / 100 {
					_, err := js.PublishAsync("deliveries.events", benchEvent(i, now))
					require.NoError(b, err)
					i++
				}
			}
			waitApplied(b, src, i, time.Minute)
			cancel()
			<-done
			src.mu.Lock()
			lags := slices.Clone(src.lags)
			src.mu.Unlock()
			require.GreaterOrEqual(b, len(lags), i)
			if os.Getenv("LAGDEBUG") != "" {
				for j, l := range lags {
					if l > 300*time.Millisecond {
						fmt.Fprintln(os.Stderr, j, l)
					}
				}
			}
			slices.Sort(lags)
			b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
