package materialize

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// writeParquet writes rows (event ts, created ts, user_id, clicks, emb) to
// dir/data/user_stats.parquet.
func writeParquet(t *testing.T, dir string, rows [][]feature.Value) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	f, err := os.Create(filepath.Join(dir, "data", "user_stats.parquet"))
	require.NoError(t, err)
	defer f.Close()
	w, err := offline.NewWriter(f, []offline.Column{
		{Name: "event_timestamp", Type: feature.Type{Kind: feature.KindUnixTimestamp}},
		{Name: "created", Type: feature.Type{Kind: feature.KindUnixTimestamp}},
		{Name: "user_id", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "n_clicks", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "emb", Type: feature.Type{Kind: feature.KindFloat32, List: true, Len: 2}},
	})
	require.NoError(t, err)
	for _, r := range rows {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
}

func prow(ev, created time.Time, user, clicks int64, emb ...float32) []feature.Value {
	return []feature.Value{{I64: ev.UnixNano()}, {I64: created.UnixNano()}, {I64: user}, {I64: clicks}, {F32s: emb}}
}

// TestParquetSource runs materialization over a real Parquet source read
// by offline.ScanView (field mapping and created timestamps included).
func TestParquetSource(t *testing.T) {
	dir := t.TempDir()
	schema := []feature.Field{
		{Name: "clicks", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "emb", Type: feature.Type{Kind: feature.KindFloat32, List: true, Len: 2}},
	}
	view := &feature.View{Name: "user_stats", Entities: []string{"user"}, Schema: schema, TTL: 24 * time.Hour, Online: true, Source: "src"}
	repo := testRepo(view)
	repo.Dir = dir
	repo.Sources["src"] = &feature.Source{
		Name: "src", Kind: feature.SourceFile, Path: "data/user_stats.parquet",
		TimestampField: "event_timestamp", CreatedTimestampColumn: "created",
		FieldMapping: map[string]string{"n_clicks": "clicks"},
	}
	writeParquet(t, dir, [][]feature.Value{
		prow(tN(1), tN(1), 1, 10, 1, 1),
		prow(tN(2), tN(3), 1, 12, 1, 2), // same event as the next, created later: wins
		prow(tN(2), tN(2), 1, 11, 1, 3),
		prow(tN(1), tN(1), 2, 20, 2, 1),
		prow(tN(15), tN(15), 2, 21, 2, 2), // newer, outside the first window
	})
	store := openStore(t)
	clk := &clock{t: tN(1000)}
	m := New(repo, store, Options{Now: clk.now}, nil, nil)

	rep, err := m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.NoError(t, err)
	require.Equal(t, int64(4), rep.Views[0].RowsRead)
	require.Equal(t, int64(2), rep.Views[0].Written)

	read := func() []feature.Record {
		res, err := store.Read(t.Context(), []online.Key{
			{View: "user_stats", Entity: entityKey(t, 1)},
			{View: "user_stats", Entity: entityKey(t, 2)},
		})
		require.NoError(t, err)
		out := make([]feature.Record, len(res))
		for i, r := range res {
			require.True(t, r.Found)
			out[i] = r.Record
		}
		return out
	}
	recs := read()
	vals, err := feature.DecodeValues(recs[0].Payload, schema, nil)
	require.NoError(t, err)
	require.Equal(t, int64(12), vals[0].I64)
	require.Equal(t, []float32{1, 2}, vals[1].F32s)
	require.Equal(t, tN(3).UnixNano(), recs[0].CreatedTS)

	// Twice: nothing changes.
	rep, err = m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.NoError(t, err)
	require.Equal(t, int64(0), rep.Views[0].Written)
	require.Equal(t, recs, read())

	// The newer window, then the older one again: user 2 keeps 21.
	_, err = m.Run(t.Context(), tN(10), tN(20), nil, false)
	require.NoError(t, err)
	_, err = m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.NoError(t, err)
	vals, err = feature.DecodeValues(read()[1].Payload, schema, nil)
	require.NoError(t, err)
	require.Equal(t, int64(21), vals[0].I64)

	// Overwrite brings the older value back.
	_, err = m.Run(t.Context(), tN(0), tN(10), nil, true)
	require.NoError(t, err)
	vals, err = feature.DecodeValues(read()[1].Payload, schema, nil)
	require.NoError(t, err)
	require.Equal(t, int64(20), vals[0].I64)
}

func TestParquetCorruptSourceFailsView(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data", "user_stats.parquet"), []byte("not parquet at all"), 0o644))
	view := userView("user_stats")
	repo := testRepo(view)
	repo.Dir = dir
	repo.Sources["src"].Path = "data/user_stats.parquet"
	store := openStore(t)
	m := New(repo, store, Options{Now: func() time.Time { return tN(1000) }}, nil, nil)
	_, err := m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.ErrorContains(t, err, "user_stats.parquet")
	b, err := store.GetMeta(t.Context(), feature.ViewStateName("user_stats"))
	require.NoError(t, err)
	require.Nil(t, b)
}
