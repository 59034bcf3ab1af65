package offline

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// statsRepo is a one-view repository reading data/stats.parquet.
func statsRepo(dir string, schema []feature.Field) (*registry.Repo, *feature.View) {
	view := &feature.View{Name: "stats", Entities: []string{"user"}, Source: "stats_src", Schema: schema}
	return &registry.Repo{
		Dir:      dir,
		Entities: map[string]*feature.Entity{"user": {Name: "user", JoinKey: "user_id", ValueType: tInt64}},
		Sources: map[string]*feature.Source{
			"stats_src": {Name: "stats_src", Kind: feature.SourceFile, Path: "data/stats.parquet", TimestampField: "event_timestamp", CreatedTimestampColumn: "created"},
			"push":      {Name: "push", Kind: feature.SourcePush, BatchSource: "stats_src"},
		},
		Views: map[string]*feature.View{"stats": view},
	}, view
}

func scanAll(t *testing.T, repo *registry.Repo, view *feature.View, start, end time.Time) ([]Row, error) {
	t.Helper()
	var rows []Row
	err := ScanView(t.Context(), repo, view, start, end, func(r Row) error {
		r.Keys, r.Values = append([]feature.Value(nil), r.Keys...), append([]feature.Value(nil), r.Values...)
		rows = append(rows, r)
		return nil
	})
	return rows, err
}

func TestScanViewWindowInclusive(t *testing.T) {
	dir := t.TempDir()
	cols := []Column{{"user_id", tInt64}, {"event_timestamp", tTS}, {"created", tTS}, {"score", tFloat32}, {"other", tString}}
	var rows [][]feature.Value
	for i := range 10 {
		rows = append(rows, []feature.Value{{I64: int64(i)}, {I64: sec(i)}, {I64: sec(i) + 5}, {F64: float64(i) / 2}, {S: "x"}})
	}
	rows = append(rows, []feature.Value{{I64: 99}, {Null: true}, {Null: true}, {Null: true}, {S: "y"}}) // no event ts: skipped
	writeParquet(t, filepath.Join(dir, "data", "stats.parquet"), cols, rows)
	repo, view := statsRepo(dir, []feature.Field{{Name: "score", Type: tFloat32}})

	got, err := scanAll(t, repo, view, time.Unix(0, sec(3)), time.Unix(0, sec(6)))
	require.NoError(t, err)
	require.Len(t, got, 4, "both ends are inclusive")
	for i, r := range got {
		require.Equal(t, int64(3+i), r.Keys[0].I64)
		require.Equal(t, sec(3+i), r.EventTS)
		require.Equal(t, sec(3+i)+5, r.CreatedTS)
		require.InDelta(t, float64(3+i)/2, r.Values[0].F64, 0)
	}

	// A push view reads its batch source.
	pushView := &feature.View{Name: "stats", Entities: []string{"user"}, Source: "push", Schema: view.Schema}
	got, err = scanAll(t, repo, pushView, time.Unix(0, sec(9)), time.Unix(0, sec(100)))
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, int64(9), got[0].Keys[0].I64)
}

type badTypes struct {
	UserID    int64     `parquet:"user_id"`
	EventTS   time.Time `parquet:"event_timestamp,timestamp(millisecond)"`
	Created   int64     `parquet:"created"`
	UF07      []byte    `parquet:"u_f07"`
	Score     float64   `parquet:"score"`
	Name      string    `parquet:"name"`
	Emb       []float32 `parquet:"emb,list"`
	MicrosTS  time.Time `parquet:"micros,timestamp(microsecond)"`
	NotTSTime string    `parquet:"not_ts"`
}

func TestConversionAndTypeErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "stats.parquet")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := []badTypes{
		{UserID: 1, EventTS: base, Created: base.UnixNano() + 7, UF07: []byte("a"), Score: 1.5, Name: "n1", Emb: []float32{1, 2}, MicrosTS: base.Add(time.Microsecond)},
		{UserID: 2, EventTS: base.Add(time.Millisecond), Created: 0, UF07: []byte("b"), Score: 2.5, Name: "n2", Emb: []float32{3}, MicrosTS: base},
	}
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, parquet.Write(f, in))
	require.NoError(t, f.Close())

	t.Run("conversions", func(t *testing.T) {
		repo, view := statsRepo(dir, []feature.Field{
			{Name: "score", Type: feature.Type{Kind: feature.KindFloat32}},
			{Name: "name", Type: tString},
			{Name: "emb", Type: feature.Type{Kind: feature.KindFloat64, List: true}},
			{Name: "u_f07", Type: feature.Type{Kind: feature.KindBytes}},
		})
		got, err := scanAll(t, repo, view, base, base.Add(time.Hour))
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, base.UnixNano(), got[0].EventTS, "millisecond timestamps convert to ns")
		require.Equal(t, base.Add(time.Millisecond).UnixNano(), got[1].EventTS)
		require.Equal(t, base.UnixNano()+7, got[0].CreatedTS, "plain int64 created is ns")
		require.InDelta(t, 1.5, got[0].Values[0].F64, 0)
		require.Equal(t, "n2", got[1].Values[1].S)
		require.Equal(t, []float64{1, 2}, got[0].Values[2].F64s)
		require.Equal(t, []byte("a"), got[0].Values[3].B)
	})

	cases := []struct {
		name   string
		schema []feature.Field
		tsCol  string
		want   string
	}{
		{"bytes as float", []feature.Field{{Name: "u_f07", Type: tFloat32}}, "", "data/stats.parquet: column 'u_f07': type BYTE_ARRAY cannot hold Float32"},
		{"missing column", []feature.Field{{Name: "nope", Type: tFloat32}}, "", "data/stats.parquet: column 'nope': no such column"},
		{"list as scalar", []feature.Field{{Name: "emb", Type: tFloat32}}, "", "data/stats.parquet: column 'emb': a list column cannot hold Float32"},
		{"scalar as list", []feature.Field{{Name: "score", Type: feature.Type{Kind: feature.KindFloat32, List: true}}}, "", "column 'score': a scalar column cannot hold Array(Float32)"},
		{"fixed length", []feature.Field{{Name: "emb", Type: feature.Type{Kind: feature.KindFloat32, List: true, Len: 2}}}, "", "data/stats.parquet: column 'emb': a row has 1 elements, Array(Float32, 2) needs 2"},
		{"string timestamp", []feature.Field{{Name: "score", Type: tFloat32}}, "not_ts", "data/stats.parquet: column 'not_ts': type BYTE_ARRAY (STRING) cannot hold a timestamp"},
		{"float as bool", []feature.Field{{Name: "score", Type: feature.Type{Kind: feature.KindBool}}}, "", "column 'score': type DOUBLE cannot hold Bool"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			repo, view := statsRepo(dir, c.schema)
			if c.tsCol != "" {
				repo.Sources["stats_src"].TimestampField = c.tsCol
			}
			_, err := scanAll(t, repo, view, base.Add(-time.Hour), base.Add(time.Hour))
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestFieldMappingAndMicros(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, err := os.Create(filepath.Join(dir, "m.parquet"))
	require.NoError(t, err)
	require.NoError(t, parquet.Write(f, []badTypes{{UserID: 4, MicrosTS: base.Add(3 * time.Microsecond), Score: 9, Emb: []float32{}}}))
	require.NoError(t, f.Close())
	repo, view := statsRepo(dir, []feature.Field{{Name: "s", Type: tFloat32}, {Name: "e", Type: feature.Type{Kind: feature.KindFloat32, List: true}}})
	src := repo.Sources["stats_src"]
	src.Path, src.TimestampField, src.CreatedTimestampColumn = "m.parquet", "micros", ""
	src.FieldMapping = map[string]string{"score": "s", "user_id": "user_id", "emb": "e"}
	got, err := scanAll(t, repo, view, base, base.Add(time.Second))
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, base.Add(3*time.Microsecond).UnixNano(), got[0].EventTS)
	require.Equal(t, int64(0), got[0].CreatedTS)
	require.InDelta(t, 9, got[0].Values[0].F64, 0)
	require.True(t, got[0].Values[1].Null, "an empty list reads as null")
}

func TestCorruptFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeParquet(t, good, []Column{{"user_id", tInt64}, {"event_timestamp", tTS}, {"score", tFloat32}},
		[][]feature.Value{{{I64: 1}, {I64: sec(1)}, {F64: 1}}, {{I64: 2}, {I64: sec(2)}, {F64: 2}}})
	b, err := os.ReadFile(good)
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"garbage.parquet":   []byte("this is not parquet at all"),
		"truncated.parquet": b[:len(b)/2],
		"flipped.parquet":   append(append([]byte(nil), b[:20]...), append(bytes.Repeat([]byte{0xff}, 40), b[60:]...)...),
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "data", "stats.parquet"), data, 0o644))
			repo, view := statsRepo(dir, []feature.Field{{Name: "score", Type: tFloat32}})
			repo.Sources["stats_src"].CreatedTimestampColumn = ""
			_, err := scanAll(t, repo, view, time.Unix(0, 0), time.Unix(0, sec(100)))
			require.ErrorContains(t, err, "data/stats.parquet")
		})
	}
}

func FuzzReadParquet(f *testing.F) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []Column{{"user_id", tInt64}, {"event_timestamp", tTS}, {"score", tFloat32}, {"emb", tEmb}})
	require.NoError(f, err)
	require.NoError(f, w.Write([]feature.Value{{I64: 1}, {I64: 5}, {F64: 1}, {F32s: []float32{1, 2}}}))
	require.NoError(f, w.Write([]feature.Value{{I64: 2}, {I64: 6}, {Null: true}, {Null: true}}))
	require.NoError(f, w.Close())
	f.Add(buf.Bytes())
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	dir := f.TempDir()
	specs := []colSpec{{name: "event_timestamp", typ: tTS}, {name: "user_id", typ: tInt64}, {name: "score", typ: tFloat32}, {name: "emb", typ: tEmb, optional: true}}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "f.parquet")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		s, err := openScanner(path, "f.parquet", specs)
		if err != nil {
			return
		}
		defer s.close()
		n := 0
		_ = s.scan(t.Context(), func([]feature.Value) error {
			n++
			if n > 1<<16 {
				return os.ErrInvalid
			}
			return nil
		})
	})
}

func TestOpenScannerRejectsCorruptMetadata(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []Column{{"user_id", tInt64}})
	require.NoError(t, err)
	require.NoError(t, w.Write([]feature.Value{{I64: 1}}))
	require.NoError(t, w.Close())
	valid := buf.Bytes()
	// withFooter replaces the file metadata of the valid file.
	withFooter := func(md []byte) []byte {
		n := binary.LittleEndian.Uint32(valid[len(valid)-8:])
		out := append([]byte(nil), valid[:len(valid)-8-int(n)]...)
		out = append(out, md...)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(md)))
		return append(out, "PAR1"...)
	}
	hugeFooter := append([]byte(nil), valid...)
	binary.LittleEndian.PutUint32(hugeFooter[len(hugeFooter)-8:], 0xfffffff0)
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"footer length past the file", "footer length", hugeFooter},
		// Field 2 (schema), a list of structs declaring 2^31-1 elements.
		{"list longer than the metadata", "exceeds the data", withFooter([]byte{0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00})},
		// Field 1 (version) then a byte string declaring 2^31-1 bytes.
		{"string longer than the metadata", "exceeds the data", withFooter([]byte{0x15, 0x02, 0x18, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00})},
		{"encrypted", "not supported", append(valid[:len(valid)-4:len(valid)-4], "PARE"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.parquet")
			require.NoError(t, os.WriteFile(path, tc.data, 0o644))
			start := time.Now()
			_, err := openScanner(path, "data/bad.parquet", []colSpec{{name: "user_id", typ: tInt64}})
			require.ErrorContains(t, err, "data/bad.parquet: corrupt Parquet file")
			require.ErrorContains(t, err, tc.want)
			require.Less(t, time.Since(start), time.Second)
		})
	}
}
