package offline

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func sec(n int) int64 { return t0 + int64(n)*int64(time.Second) }

// writeParquet writes rows to path with the given columns.
func writeParquet(t *testing.T, path string, cols []Column, rows [][]feature.Value) {
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

// readParquet reads the named columns of a file back.
func readParquet(t *testing.T, path string, cols []Column) [][]feature.Value {
	t.Helper()
	specs := make([]colSpec, len(cols))
	for i, c := range cols {
		specs[i] = colSpec{name: c.Name, typ: c.Type}
	}
	s, err := openScanner(path, path, specs)
	require.NoError(t, err)
	defer s.close()
	var out [][]feature.Value
	require.NoError(t, s.scan(t.Context(), func(vals []feature.Value) error {
		out = append(out, slices.Clone(vals))
		return nil
	}))
	return out
}

var (
	tInt64   = feature.Type{Kind: feature.KindInt64}
	tString  = feature.Type{Kind: feature.KindString}
	tFloat32 = feature.Type{Kind: feature.KindFloat32}
	tTS      = feature.Type{Kind: feature.KindUnixTimestamp}
	tEmb     = feature.Type{Kind: feature.KindFloat32, List: true, Len: 2}
)

// srcRow is one generated feature row.
type srcRow struct {
	key    feature.Value
	ev, cr int64
	id     int64 // the "f" feature: identifies the row
	x      feature.Value
	emb    feature.Value
}

type pitView struct {
	name, keyCol string
	keyKind      feature.Kind
	ttl          time.Duration
	rows         []srcRow // in scan order (file order, then row order)
}

func randKey(r *rand.Rand, kind feature.Kind, n int) feature.Value {
	k := r.IntN(n) + 1
	if kind == feature.KindString {
		return feature.Value{S: fmt.Sprintf("r%d", k)}
	}
	return feature.Value{I64: int64(k)}
}

// buildRepo writes the views' sources (each split over a few files of a
// folder) and returns a hand-built repository.
func buildRepo(t *testing.T, r *rand.Rand, dir string, views []*pitView) *registry.Repo {
	t.Helper()
	repo := &registry.Repo{Dir: dir, Entities: map[string]*feature.Entity{}, Sources: map[string]*feature.Source{}, Views: map[string]*feature.View{}}
	for _, v := range views {
		ent := "e_" + v.keyCol
		repo.Entities[ent] = &feature.Entity{Name: ent, JoinKey: v.keyCol, ValueType: feature.Type{Kind: v.keyKind}}
		srcName := "src_" + v.name
		repo.Sources[srcName] = &feature.Source{
			Name: srcName, Kind: feature.SourceFile, Path: "data/" + v.name,
			TimestampField: "ts", CreatedTimestampColumn: "created",
			FieldMapping: map[string]string{"raw_key": v.keyCol, "raw_f": "f"},
		}
		repo.Views[v.name] = &feature.View{
			Name: v.name, Entities: []string{ent}, TTL: v.ttl, Source: srcName,
			Schema: []feature.Field{{Name: "f", Type: tInt64}, {Name: v.name + "_x", Type: tFloat32}, {Name: "emb", Type: tEmb}},
		}
		cols := []Column{
			{"raw_key", feature.Type{Kind: v.keyKind}},
			{"ts", tTS},
			{"created", tTS},
			{"raw_f", tInt64},
			{v.name + "_x", tFloat32},
			{"emb", tEmb},
			{"unused", tString},
		}
		nfiles := 1 + r.IntN(3)
		for fi := range nfiles {
			var rows [][]feature.Value
			for i, sr := range v.rows {
				if i*nfiles/max(1, len(v.rows)) != fi {
					continue
				}
				rows = append(rows, []feature.Value{sr.key, {I64: sr.ev}, {I64: sr.cr}, {I64: sr.id}, sr.x, sr.emb, {S: "zzz"}})
			}
			writeParquet(t, filepath.Join(dir, "data", v.name, fmt.Sprintf("part-%d.parquet", fi)), cols, rows)
		}
	}
	return repo
}

// oracle is the brute-force point-in-time lookup: the id of the winning
// row, or -1.
func oracle(v *pitView, key feature.Value, ts int64) int {
	best := -1
	for i, sr := range v.rows {
		if sr.key.Null || key.Null || sr.key.I64 != key.I64 || sr.key.S != key.S {
			continue
		}
		if sr.ev > ts || (v.ttl > 0 && sr.ev < ts-v.ttl.Nanoseconds()) {
			continue
		}
		if best < 0 || sr.ev > v.rows[best].ev || (sr.ev == v.rows[best].ev && sr.cr >= v.rows[best].cr) {
			best = i
		}
	}
	return best
}

func TestHistoricalMatchesOracle(t *testing.T) {
	ttls := []time.Duration{0, 3 * time.Second, 10 * time.Second, time.Nanosecond}
	for c := range 200 {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c), 42))
			dir := t.TempDir()
			views := []*pitView{
				{name: "a", keyCol: "user_id", keyKind: feature.KindInt64, ttl: ttls[r.IntN(len(ttls))]},
				{name: "b", keyCol: "user_id", keyKind: feature.KindInt64, ttl: ttls[r.IntN(len(ttls))]},
				{name: "c", keyCol: "route_id", keyKind: feature.KindString, ttl: ttls[r.IntN(len(ttls))]},
			}
			id := int64(0)
			for _, v := range views {
				n := r.IntN(40)
				for range n {
					id++
					sr := srcRow{
						key: randKey(r, v.keyKind, 3), ev: sec(r.IntN(20)), id: id,
						x: feature.Value{F64: float64(r.IntN(100))}, emb: feature.Value{F32s: []float32{float32(id), 1}},
					}
					sr.cr = sr.ev + int64(r.IntN(4))*int64(time.Second) // late rows: created after the event
					if r.IntN(5) == 0 {
						sr.x = feature.Value{Null: true}
					}
					if r.IntN(8) == 0 {
						sr.emb = feature.Value{Null: true}
					}
					if r.IntN(10) == 0 {
						sr.key = feature.Value{Null: true}
					}
					v.rows = append(v.rows, sr)
					if r.IntN(4) == 0 { // a duplicate of (key, ev), maybe with the same created ts
						d := sr
						id++
						d.id = id
						d.cr = sr.ev + int64(r.IntN(4))*int64(time.Second)
						v.rows = append(v.rows, d)
					}
				}
			}
			repo := buildRepo(t, r, dir, views)

			type entRow struct {
				user, route feature.Value
				ts          int64
				extra       string
			}
			var ents []entRow
			for i := range r.IntN(30) {
				e := entRow{user: randKey(r, feature.KindInt64, 4), route: randKey(r, feature.KindString, 4), ts: sec(r.IntN(26) - 3), extra: fmt.Sprint("row", i)}
				if r.IntN(12) == 0 {
					e.user = feature.Value{Null: true}
				}
				ents = append(ents, e)
				if r.IntN(5) == 0 {
					ents = append(ents, e) // duplicate entity row
				}
			}
			entCols := []Column{{"label", tString}, {"user_id", tInt64}, {"event_timestamp", tTS}, {"route_id", tString}}
			entPath := filepath.Join(dir, "entities.parquet")
			var rows [][]feature.Value
			for _, e := range ents {
				rows = append(rows, []feature.Value{{S: e.extra}, e.user, {I64: e.ts}, e.route})
			}
			useCSV := r.IntN(3) == 0 && !slices.ContainsFunc(ents, func(e entRow) bool { return e.user.Null })
			if useCSV {
				entPath = filepath.Join(dir, "entities.csv")
				var sb strings.Builder
				sb.WriteString("label,user_id,event_timestamp,route_id\n")
				for _, e := range ents {
					fmt.Fprintf(&sb, "%s,%d,%s,%s\n", e.extra, e.user.I64, time.Unix(0, e.ts).UTC().Format(time.RFC3339Nano), e.route.S)
				}
				require.NoError(t, os.WriteFile(entPath, []byte(sb.String()), 0o644))
			} else {
				writeParquet(t, entPath, entCols, rows)
			}

			refs := []feature.FeatureRef{{View: "a", Features: []string{"f", "a_x", "emb"}}, {View: "b", Features: []string{"f"}}, {View: "c"}}
			opts := Options{partitions: []int{0, 1, 3, 7}[r.IntN(4)], TempDir: t.TempDir()}
			out := filepath.Join(dir, "out.parquet")
			require.NoError(t, Historical(t.Context(), repo, entPath, refs, out, opts))

			got := readParquet(t, out, []Column{
				{"label", tString},
				{"event_timestamp", tTS},
				{"a__f", tInt64},
				{"a_x", tFloat32},
				{"a__emb", tEmb},
				{"b__f", tInt64},
				{"c__f", tInt64},
				{"c_x", tFloat32},
				{"c__emb", tEmb},
			})
			require.Len(t, got, len(ents))
			for i, e := range ents {
				require.Equal(t, e.extra, got[i][0].S, "row order")
				require.Equal(t, e.ts, got[i][1].I64)
				check := func(v *pitView, key feature.Value, fcol, xcol, ecol int) {
					best := oracle(v, key, e.ts)
					if best < 0 {
						require.True(t, got[i][fcol].Null, "row %d view %s: want no match, got %+v", i, v.name, got[i][fcol])
						return
					}
					want := v.rows[best]
					require.Equal(t, want.id, got[i][fcol].I64, "row %d view %s (ts %d)", i, v.name, e.ts)
					if xcol >= 0 {
						require.Equal(t, want.x.Null, got[i][xcol].Null)
						require.InDelta(t, want.x.F64, got[i][xcol].F64, 0)
						require.Equal(t, want.emb.Null, got[i][ecol].Null)
						require.Equal(t, want.emb.F32s, got[i][ecol].F32s)
					}
				}
				check(views[0], e.user, 2, 3, 4)
				check(views[1], e.user, 5, -1, -1)
				check(views[2], e.route, 6, 7, 8)
			}
		})
	}
}

func TestHistoricalErrorsWriteNothing(t *testing.T) {
	dir := t.TempDir()
	writeParquet(t, filepath.Join(dir, "data", "stats.parquet"), []Column{{"user_id", tInt64}, {"event_timestamp", tTS}, {"created", tTS}, {"score", tString}},
		[][]feature.Value{{{I64: 1}, {I64: sec(1)}, {I64: sec(1)}, {S: "x"}}})
	repo, _ := statsRepo(dir, []feature.Field{{Name: "score", Type: tFloat32}})
	out := filepath.Join(dir, "out.parquet")
	cases := []struct{ name, csv, want string }{
		{"no key column", "event_timestamp\n2026-01-01T00:00:00Z\n", "no column 'user_id'"},
		{"bad timestamp", "user_id,event_timestamp\n1,yesterday\n", "line 2: column 'event_timestamp': \"yesterday\" is not a timestamp"},
		{"bad key", "user_id,event_timestamp\nabc,2026-01-01T00:00:00Z\n", "column 'user_id': \"abc\" is not an integer"},
		{"source type", "user_id,event_timestamp\n1,2026-01-01T00:00:00Z\n", "data/stats.parquet: column 'score': type BYTE_ARRAY (STRING) cannot hold Float32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ents := filepath.Join(dir, "e.csv")
			require.NoError(t, os.WriteFile(ents, []byte(c.csv), 0o644))
			err := Historical(t.Context(), repo, ents, []feature.FeatureRef{{View: "stats"}}, out, Options{TempDir: t.TempDir()})
			require.ErrorContains(t, err, c.want)
			_, statErr := os.Stat(out)
			require.ErrorIs(t, statErr, os.ErrNotExist, "nothing written on failure")
			left, _ := filepath.Glob(filepath.Join(dir, ".out.parquet.tmp-*"))
			require.Empty(t, left)
		})
	}
}
