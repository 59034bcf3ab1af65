package materialize

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// abRow is a source row of a view whose features are named a and b.
type abRow struct {
	user  int64
	event time.Time
	a, b  int64
}

// abScan serves rows to any schema made of a and b, in the schema's order
// (a source's columns are found by name).
func abScan(rows ...abRow) scanFunc {
	return func(ctx context.Context, _ *registry.Repo, v *feature.View, start, end time.Time, fn func(offline.Row) error) error {
		for _, r := range rows {
			if r.event.Before(start) || r.event.After(end) {
				continue
			}
			var vals []feature.Value
			for _, f := range v.Schema {
				switch f.Name {
				case "a":
					vals = append(vals, feature.Value{I64: r.a})
				case "b":
					vals = append(vals, feature.Value{I64: r.b})
				default:
					vals = append(vals, feature.Value{Null: true})
				}
			}
			if err := fn(offline.Row{Keys: []feature.Value{{I64: r.user}}, EventTS: r.event.UnixNano(), Values: vals}); err != nil {
				return err
			}
		}
		return ctx.Err()
	}
}

func abView(fields ...string) *feature.View {
	v := userView("v")
	v.Schema = nil
	for _, f := range fields {
		v.Schema = append(v.Schema, feature.Field{Name: f, Type: feature.Type{Kind: feature.KindInt64}})
	}
	return v
}

// openRedis opens the Redis online store (SLUICE_REDIS_ADDR, default
// 127.0.0.1:6379) under a fresh key prefix, deleted afterwards.
func openRedis(t *testing.T) online.Store {
	t.Helper()
	addr := os.Getenv("SLUICE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s, err := redis.Open(t.Context(), "", redis.Options{Addrs: []string{addr}, KeyPrefix: "sluicetest:mat:" + hex.EncodeToString(b[:]) + ":"})
	require.NoError(t, err, "this test needs Redis at %s", addr)
	t.Cleanup(func() {
		require.NoError(t, s.DeletePrefix(context.Background()))
		require.NoError(t, s.Close())
	})
	return s
}

// TestSchemaChangeRewritesRows: materializing the same window after a
// schema change rewrites the rows written under the old schema even though
// their event times did not change, and then skips them again.
func TestSchemaChangeRewritesRows(t *testing.T) {
	for name, open := range map[string]func(*testing.T) online.Store{"embedded": openStore, "redis": openRedis} {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			src := abScan(abRow{user: 1, event: tN(1), a: 1, b: 2}, abRow{user: 2, event: tN(2), a: 3, b: 4})
			run := func(v *feature.View) ViewReport {
				t.Helper()
				m := New(testRepo(v), store, Options{Now: func() time.Time { return tN(1000) }}, nil, nil)
				m.scan = src
				rep, err := m.Run(t.Context(), tN(0), tN(10), nil, false)
				require.NoError(t, err)
				return rep.Views[0]
			}
			before, after := abView("a", "b"), abView("b", "a")
			require.Equal(t, int64(2), run(before).Written)
			require.Equal(t, int64(2), run(before).Skipped)

			vr := run(after)
			require.Equal(t, [2]int64{2, 0}, [2]int64{vr.Written, vr.Skipped}, "rows of the old schema are rewritten")
			res, err := store.Read(t.Context(), []online.Key{{View: "v", Entity: entityKey(t, 1)}})
			require.NoError(t, err)
			require.Equal(t, feature.Fingerprint(after.Schema), res[0].Record.Schema)
			vals, err := feature.DecodeValues(res[0].Record.Payload, after.Schema, nil)
			require.NoError(t, err)
			require.Equal(t, []feature.Value{{I64: 2}, {I64: 1}}, vals, "b, a")
			vr = run(after)
			require.Equal(t, [2]int64{0, 2}, [2]int64{vr.Written, vr.Skipped})

			// Both schemas are recorded, so readers can decode either.
			for _, v := range []*feature.View{before, after} {
				got, found, err := online.LoadSchema(t.Context(), store, "v", feature.Fingerprint(v.Schema))
				require.NoError(t, err)
				require.True(t, found)
				require.Equal(t, v.Schema, got)
			}
		})
	}
}

// TestIncrementalAfterSchemaChange: an incremental run under a new schema
// re-reads the view's whole window (its watermark would skip the rows of
// the old schema), and the next one is incremental again.
func TestIncrementalAfterSchemaChange(t *testing.T) {
	store := openStore(t)
	clk := &clock{t: tN(10)}
	src := abScan(abRow{user: 1, event: tN(1), a: 1, b: 2}, abRow{user: 2, event: tN(12), a: 3, b: 4})
	run := func(v *feature.View) ViewReport {
		t.Helper()
		m := New(testRepo(v), store, Options{Now: clk.now}, nil, nil)
		m.scan = src
		rep, err := m.RunIncremental(t.Context(), clk.t, nil)
		require.NoError(t, err)
		return rep.Views[0]
	}
	vr := run(abView("a", "b"))
	require.Equal(t, int64(1), vr.Written)
	require.False(t, vr.SchemaChanged)

	clk.t = tN(20)
	vr = run(abView("b", "a"))
	require.True(t, vr.SchemaChanged)
	require.True(t, vr.Start.Equal(tN(20).Add(-24*time.Hour)), "the whole ttl window: %v", vr.Start)
	require.Equal(t, int64(2), vr.Written, "user 1's row (before the watermark) is rewritten too")

	clk.t = tN(21)
	vr = run(abView("b", "a"))
	require.False(t, vr.SchemaChanged)
	require.True(t, vr.Start.Equal(tN(20)), "incremental again: %v", vr.Start)
	st, _ := (&harness{t: t, store: store}).state("v")
	require.Equal(t, feature.Fingerprint(abView("b", "a").Schema).String(), st.Schema)
}

// TestFutureRowsSkipped: source rows dated more than the tolerance past
// the time of the run are skipped and counted, never stored; the entity's
// latest legitimate row is written.
func TestFutureRowsSkipped(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h := newHarness(t, nil, Options{}, userView("v"))
	h.m = New(h.repo, h.store, Options{Now: h.clk.now}, nil, reg)
	h.m.scan = h.src.scan
	now := h.clk.t
	h.src.add("v",
		row{user: 1, event: now.Add(-time.Hour), clicks: 1},
		row{user: 1, event: now.Add(99 * 365 * 24 * time.Hour), clicks: 2}, // a bad clock: 2125
		row{user: 2, event: now.Add(-time.Hour), clicks: 3},
		row{user: 2, event: now.Add(2 * time.Minute), clicks: 4}, // after the window, within the tolerance: next run
		row{user: 3, event: now.Add(-time.Hour), created: now.Add(time.Hour), clicks: 5},
	)
	rep, err := h.m.Run(t.Context(), now.Add(-48*time.Hour), now.Add(time.Hour), nil, false)
	require.NoError(t, err)
	vr := rep.Views[0]
	require.Equal(t, int64(2), vr.Future)
	require.Equal(t, int64(2), vr.RowsRead)
	require.Equal(t, int64(2), vr.Written)
	require.Equal(t, []int64{1, 3, -1}, h.clicks("v", 1, 2, 3))
	require.InDelta(t, 2, testutil.ToFloat64(h.m.met.rows.WithLabelValues("v", "future")), 0)

	// A window that ends in the past does not read past its end.
	rep, err = h.m.Run(t.Context(), now.Add(-48*time.Hour), now.Add(-time.Minute), nil, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Views[0].Future, "user 3's created timestamp only: the 2125 row is not read")
	require.True(t, h.src.scanned["v"][1].Equal(now.Add(-time.Minute)))

	// The tolerance comes from the options, else the repository.
	h.repo.Config.FutureTimestampTolerance = 2 * time.Hour
	rep, err = h.m.Run(t.Context(), now.Add(-48*time.Hour), now, nil, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Views[0].Future, "user 3's created timestamp is within 2h")
	require.Equal(t, []int64{1, 3, 5}, h.clicks("v", 1, 2, 3))
	h.m.opts.FutureTolerance = -1
	rep, err = h.m.Run(t.Context(), now.Add(-48*time.Hour), now, nil, false)
	require.NoError(t, err)
	require.Zero(t, rep.Views[0].Future, "no limit")
}
