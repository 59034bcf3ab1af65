package offline

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

const streamDefs = `
entities:
  - {name: route, join_keys: [route_id], value_type: String}
sources:
  - {name: delivery_log, path: data/deliveries.parquet, timestamp_field: event_ts, created_timestamp_column: arrived_ts}
  - {name: deliveries, type: stream, stream: D, subject: d.events, timestamp_field: event_ts, batch_source: delivery_log, sequence_field: seq}
stream_feature_views:
  - name: route_live
    entities: [route]
    source: deliveries
    tile: 1m
    allowed_lateness: 2m
    aggregations:
      - {name: n_10m, function: count, time_window: 10m}
      - {name: delay_sum_10m, column: delay, function: sum, time_window: 10m}
      - {name: delay_max_1h, column: delay, function: max, time_window: 1h}
`

func writeStreamParquet(t *testing.T, path string, cols []Column, rows [][]feature.Value) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := NewWriter(f, cols)
	require.NoError(t, err)
	for _, r := range rows {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
}

// TestHistoricalStreamCountsArrivedEvents: a training row at ts counts
// the events of the window at ts that had arrived by ts, not late ones,
// and a replayed event (the same sequence number twice in the log) once;
// a route with no event by ts gets nulls. Expected counts and sums are
// computed here directly from the log, without the tile code.
func TestHistoricalStreamCountsArrivedEvents(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, registry.ConfigFile), []byte("project: p\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(streamDefs), 0o600))
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(4, 4))
	type ev struct {
		route       string
		et, arrived time.Time
		seq         int64
		delay       float64
	}
	var evs []ev
	for i := range 600 {
		arrived := base.Add(time.Duration(i) * 3 * time.Second)
		et := arrived.Add(-time.Duration(r.Int64N(int64(150 * time.Second)))) // some beyond the 2m lateness
		evs = append(evs, ev{fmt.Sprintf("r%d", r.IntN(3)), et, arrived, int64(i + 1), float64(r.IntN(40))})
	}
	evs = append(evs, evs[100:120]...) // replayed into the log
	ts := feature.Type{Kind: feature.KindUnixTimestamp}
	var rows [][]feature.Value
	for _, e := range evs {
		rows = append(rows, []feature.Value{{S: e.route}, {I64: e.et.UnixNano()}, {I64: e.arrived.UnixNano()}, {I64: e.seq}, {F64: e.delay}})
	}
	writeStreamParquet(t, filepath.Join(dir, "data/deliveries.parquet"), []Column{
		{"route_id", feature.Type{Kind: feature.KindString}},
		{"event_ts", ts},
		{"arrived_ts", ts},
		{"seq", feature.Type{Kind: feature.KindInt64}},
		{"delay", feature.Type{Kind: feature.KindFloat64}},
	}, rows)
	var ents [][]feature.Value
	var at []time.Time
	for i := range 20 {
		tm := base.Add(time.Duration(i)*97*time.Second + 13*time.Second)
		at = append(at, tm)
		ents = append(ents, []feature.Value{{S: "r1"}, {I64: tm.UnixNano()}})
	}
	ents = append(ents, []feature.Value{{S: "r9"}, {I64: base.Add(time.Hour).UnixNano()}})
	entFile := filepath.Join(dir, "entities.parquet")
	writeStreamParquet(t, entFile, []Column{{"route_id", feature.Type{Kind: feature.KindString}}, {EntityTimestampColumn, ts}}, ents)

	repo, err := registry.Load(t.Context(), dir)
	require.NoError(t, err)
	out := filepath.Join(dir, "out.parquet")
	require.NoError(t, Historical(t.Context(), repo, entFile, []feature.FeatureRef{{View: "route_live"}}, out, Options{TempDir: dir}))
	got := readParquet(t, out, []Column{
		{"route_id", feature.Type{Kind: feature.KindString}},
		{EntityTimestampColumn, ts},
		{"n_10m", feature.Type{Kind: feature.KindInt64}},
		{"delay_sum_10m", feature.Type{Kind: feature.KindFloat64}},
		{"delay_max_1h", feature.Type{Kind: feature.KindFloat64}},
	})
	require.Len(t, got, 21)
	var total int64
	for i, tm := range at {
		end := tm.Truncate(time.Minute).Add(time.Minute)
		var n int64
		var sum float64
		seen := map[int64]bool{}
		for _, e := range evs {
			if e.route != "r1" || seen[e.seq] || e.arrived.After(tm) || e.et.Before(e.arrived.Add(-2*time.Minute)) {
				continue
			}
			seen[e.seq] = true
			if !e.et.Before(end.Add(-10*time.Minute)) && e.et.Before(end) {
				n++
				sum += e.delay
			}
		}
		total += n
		require.Equal(t, n, got[i][2].I64, "row %d count", i)
		require.Equal(t, sum, got[i][3].F64, "row %d sum", i) // whole numbers: exact in any order
	}
	require.Greater(t, total, int64(200))
	require.True(t, got[20][2].Null && got[20][3].Null && got[20][4].Null, "a route with no events: nulls, got %+v", got[20])
}
