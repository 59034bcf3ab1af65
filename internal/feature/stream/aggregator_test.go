package stream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

const testDefs = `
entities:
  - {name: route, join_keys: [route_id], value_type: String}
sources:
  - {name: deliveries, type: stream, stream: DELIVERIES, subject: deliveries.events, timestamp_field: ts}
stream_feature_views:
  - name: route_live
    entities: [route]
    source: deliveries
    tile: 1m
    allowed_lateness: 2m
    aggregations:
      - {name: n_10m, function: count, time_window: 10m}
      - {name: delay_sum_10m, column: delay, function: sum, time_window: 10m}
      - {name: delay_mean_1h, column: delay, function: mean, time_window: 1h}
      - {name: delay_max_1h, column: delay, function: max, time_window: 1h}
      - {name: delay_last_1h, column: delay, function: last, time_window: 1h}
      - {name: delay_sd_1h, column: delay, function: stddev, time_window: 1h}
`

func testRepo(t *testing.T) *registry.Repo {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, registry.ConfigFile), []byte("project: p\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(testDefs), 0o600))
	r, err := registry.Load(t.Context(), dir)
	require.NoError(t, err)
	return r
}

// memSource hands out a fixed list of messages in batches; redelivering
// some of them, as a broker does after a crash.
type memSource struct {
	mu   sync.Mutex
	msgs []Message
}

func (m *memSource) Fetch(_ context.Context, n int, _ time.Duration) ([]Message, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n = min(n, len(m.msgs))
	out := m.msgs[:n]
	m.msgs = m.msgs[n:]
	return out, nil
}
func (m *memSource) Ack(context.Context, []Message) error { return nil }
func (m *memSource) Close() error                         { return nil }

// genMessages generates events for routes r0..r9 over 40 minutes of
// arrivals, out of order, some late, then appends redeliveries.
func genMessages(base time.Time, n int) []Message {
	r := mrand.New(mrand.NewPCG(1, 2))
	var out []Message
	for i := range n {
		arrival := base.Add(time.Duration(i) * 40 * time.Minute / time.Duration(n))
		et := arrival.Add(-time.Duration(r.Int64N(int64(100 * time.Second))))
		if i%13 == 0 {
			et = arrival.Add(-4 * time.Minute) // late
		}
		body := fmt.Sprintf(`{"ts":%q,"route_id":"r%d","delay":%g}`, et.Format(time.RFC3339Nano), r.IntN(10), math.Round(r.NormFloat64()*1000)/7)
		out = append(out, Message{Data: []byte(body), Seq: uint64(i + 1), Arrival: arrival.UnixNano()})
	}
	out = append(out, out[n/3:n/2]...) // redelivered
	out = append(out, Message{Data: []byte(`{"ts":"nope"}`), Seq: uint64(n + 1), Arrival: base.UnixNano()})
	return out
}

// direct computes every route's values at t from the unique messages.
func direct(t *testing.T, repo *registry.Repo, msgs []Message, at time.Time) map[string][]feature.Value {
	t.Helper()
	spec := repo.StreamSpec("route_live")
	keys, kinds := repo.JoinKeys("route_live")
	dec := aggregate.NewDecoder(spec, "ts", keys, kinds, nil)
	states := map[string]*aggregate.State{}
	seen := map[uint64]bool{}
	for _, m := range msgs {
		if seen[m.Seq] {
			continue
		}
		seen[m.Seq] = true
		ev := aggregate.Event{Seq: m.Seq, Arrival: m.Arrival}
		key, err := dec.Decode(m.Data, &ev, nil)
		if err != nil {
			continue
		}
		if states[string(key)] == nil {
			states[string(key)] = aggregate.NewState()
		}
		states[string(key)].Apply(spec, &ev)
	}
	out := map[string][]feature.Value{}
	for k, st := range states {
		if st.Empty() {
			continue
		}
		vals := make([]feature.Value, spec.Features())
		st.Values(spec, at.UnixNano(), vals)
		out[k] = vals
	}
	return out
}

func stored(t *testing.T, repo *registry.Repo, store online.Store, at time.Time) map[string][]feature.Value {
	t.Helper()
	spec := repo.StreamSpec("route_live")
	out := map[string][]feature.Value{}
	for i := range 10 {
		key, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindString}, []feature.Value{{S: fmt.Sprintf("r%d", i)}})
		require.NoError(t, err)
		res, err := store.Read(t.Context(), []online.Key{{View: "route_live", Entity: key}})
		require.NoError(t, err)
		if !res[0].Found {
			continue
		}
		st, err := aggregate.Decode(res[0].Record.Payload, spec)
		require.NoError(t, err)
		vals := make([]feature.Value, spec.Features())
		st.Values(spec, at.UnixNano(), vals)
		out[string(key)] = vals
	}
	return out
}

func runAggregators(t *testing.T, repo *registry.Repo, store online.Store, msgs []Message, replicas int, now time.Time) {
	t.Helper()
	src := &memSource{msgs: msgs}
	var wg sync.WaitGroup
	for range replicas {
		a, err := New(repo, "deliveries", src, store, Options{Batch: 37, Now: func() time.Time { return now }},
			slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		require.NoError(t, err)
		wg.Go(func() {
			for {
				ms, _ := src.Fetch(t.Context(), 37, 0)
				if len(ms) == 0 {
					return
				}
				if err := a.Apply(t.Context(), ms); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestReplicasAndRedeliveryMatchDirect: two aggregators sharing one
// source, with redelivered events, store tiles whose values equal a
// direct computation over the unique events — on the embedded store and
// on Redis.
func TestReplicasAndRedeliveryMatchDirect(t *testing.T) {
	repo := testRepo(t)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	msgs := genMessages(base, 4000)
	now := base.Add(41 * time.Minute)
	want := direct(t, repo, msgs, now)
	require.Len(t, want, 10)

	emb, err := embedded.Open(filepath.Join(t.TempDir(), "online.db"), embedded.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emb.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	rds, err := redis.Open(t.Context(), "", redis.Options{Addrs: []string{"127.0.0.1:6379"}, KeyPrefix: "sluicetest:stream:" + hex.EncodeToString(b[:]) + ":"})
	require.NoError(t, err, "Redis must listen on 127.0.0.1:6379")
	t.Cleanup(func() {
		_ = rds.DeleteView(context.Background(), "route_live")
		_ = rds.Close()
	})
	for _, tc := range []struct {
		name     string
		store    online.Store
		replicas int
	}{{"embedded/1", emb, 1}, {"redis/2", rds, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			runAggregators(t, repo, tc.store, msgs, tc.replicas, now)
			got := stored(t, repo, tc.store, now)
			require.Len(t, got, len(want))
			for k, w := range want {
				for i := range w {
					require.Equal(t, w[i].Null, got[k][i].Null, "feature %d", i)
					require.Equal(t, w[i].I64, got[k][i].I64, "feature %d", i)
					require.Equal(t, math.Float64bits(w[i].F64), math.Float64bits(got[k][i].F64), "feature %d: %v vs %v", i, got[k][i].F64, w[i].F64)
				}
			}
		})
	}
}
