package serving

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// BenchmarkStreamRead compares the read of 50 aggregation features of a
// stream feature view (tiles combined at read time: 1 m tiles, windows of
// 10 m and 1 h over 5 columns, 120 events per entity in the last hour)
// with the read of 50 stored Float32 features, for 1 and 100 entity rows,
// from the embedded store through the Go API.
func BenchmarkStreamRead(b *testing.B) {
	srv := streamBenchServer(b)
	for _, rows := range []int{1, 100} {
		ids := make([]feature.Value, rows)
		for r := range rows {
			ids[r] = feature.Value{I64: int64(r * 7 % 1000)}
		}
		for _, view := range []string{"wide", "live"} {
			feats := make([]string, 50)
			for i := range feats {
				feats[i] = fmt.Sprintf("%s:f%02d", view, i)
			}
			name := "stored"
			if view == "live" {
				name = "aggregation"
			}
			b.Run(fmt.Sprintf("%dx50/%s", rows, name), func(b *testing.B) {
				req := &Request{Features: feats, Entities: map[string][]feature.Value{"user_id": ids}}
				resp, err := srv.GetOnlineFeatures(b.Context(), req)
				require.NoError(b, err)
				for _, c := range resp.Results[resp.EntityColumns:] {
					require.Equal(b, StatusPresent, c.Statuses[0])
				}
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					if _, err := srv.GetOnlineFeatures(b.Context(), req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

func streamBenchServer(tb testing.TB) *Server {
	tb.Helper()
	dir := tb.TempDir()
	var defs strings.Builder
	defs.WriteString(`entities:
  - {name: user, join_keys: [user_id], value_type: Int64}
sources:
  - {name: user_file, path: data/users.parquet, timestamp_field: event_timestamp}
  - {name: events, type: stream, stream: E, subject: e.events, timestamp_field: ts}
feature_views:
  - name: wide
    entities: [user]
    source: user_file
    schema:
`)
	for i := range 50 {
		fmt.Fprintf(&defs, "      - {name: f%02d, dtype: Float32}\n", i)
	}
	defs.WriteString(`stream_feature_views:
  - name: live
    entities: [user]
    source: events
    tile: 1m
    aggregations:
`)
	fns := []string{"sum", "mean", "min", "max", "last", "stddev", "count"}
	for i := range 50 {
		w := "10m"
		if i%2 == 1 {
			w = "1h"
		}
		fmt.Fprintf(&defs, "      - {name: f%02d, function: %s, column: c%d, time_window: %s}\n", i, fns[i%len(fns)], i%5, w)
	}
	require.NoError(tb, os.WriteFile(filepath.Join(dir, registry.ConfigFile), []byte("project: bench\n"), 0o644))
	require.NoError(tb, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(defs.String()), 0o644))
	repo, err := registry.Load(tb.Context(), dir)
	require.NoError(tb, err)
	h := &servingtest.Holder{}
	h.P.Store(repo)
	store, err := embedded.Open(filepath.Join(dir, "online.db"), embedded.Options{NoSync: true})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = store.Close() })

	wide := repo.Views["wide"]
	vals := make([]feature.Value, 50)
	for i := range vals {
		vals[i] = feature.Value{F64: float64(float32(float64(i) / 4))}
	}
	payload, err := feature.AppendValues(nil, wide.Schema, vals)
	require.NoError(tb, err)
	spec := repo.StreamSpec("live")
	var entries []online.Entry
	for u := range int64(1000) {
		ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: u}})
		require.NoError(tb, err)
		entries = append(entries, online.Entry{Key: online.Key{View: "wide", Entity: ek}, Record: feature.Record{EventTS: now.Add(-time.Minute).UnixNano(), Schema: feature.Fingerprint(wide.Schema), Payload: payload}})
		st := aggregate.NewState()
		for e := range 120 {
			t := now.Add(-time.Duration(e) * 30 * time.Second).UnixNano()
			ev := aggregate.Event{Seq: uint64(u*1000 + int64(e) + 1), Time: t, Arrival: t, Values: []float64{float64(e), 1.5, float64(u), 2, 3}}
			st.Apply(spec, &ev)
		}
		st.Version = 1
		entries = append(entries, online.Entry{Key: online.Key{View: "live", Entity: ek}, Record: feature.Record{EventTS: 1, Schema: streamTileSchema, Payload: st.Append(nil, spec)}})
	}
	_, err = store.Write(tb.Context(), entries, online.WriteOptions{})
	require.NoError(tb, err)
	return New(h, store, Options{Now: func() time.Time { return now }}, nil, nil)
}

// streamTileSchema is the schema id the aggregator stores tiles under
// (stream.TileSchema; serving does not import the aggregator).
var streamTileSchema = feature.Fingerprint([]feature.Field{{Name: "__stream_tiles__", Type: feature.Type{Kind: feature.KindBytes}}})
