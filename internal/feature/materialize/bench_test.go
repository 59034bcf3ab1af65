package materialize

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// BenchmarkMaterialize measures materialization throughput into the
// embedded store without Parquet decoding: 200k source rows over 50k
// entities, 50 Float32 features each. Reports source rows/s.
func BenchmarkMaterialize(b *testing.B) {
	const rows, entities, nfeat = 200_000, 50_000, 50
	schema := make([]feature.Field, nfeat)
	for i := range schema {
		schema[i] = feature.Field{Name: "f" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Type: feature.Type{Kind: feature.KindFloat32}}
	}
	view := &feature.View{Name: "v", Entities: []string{"user"}, Schema: schema, Online: true, Source: "src"}
	repo := testRepo(view)
	vals := make([]feature.Value, nfeat)
	for i := range vals {
		vals[i] = feature.Value{F64: float64(i) / 3}
	}
	scan := func(ctx context.Context, _ *registry.Repo, _ *feature.View, _, _ time.Time, fn func(offline.Row) error) error {
		r := offline.Row{Keys: make([]feature.Value, 1), Values: vals}
		for i := range rows {
			r.Keys[0] = feature.Value{I64: int64(i % entities)}
			r.EventTS = tN(i / entities).UnixNano()
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		st, err := embedded.Open(filepath.Join(b.TempDir(), "online.db"), embedded.Options{})
		require.NoError(b, err)
		m := New(repo, st, Options{Now: func() time.Time { return tN(1000) }}, nil, nil)
		m.scan = scan
		b.StartTimer()
		began := time.Now()
		rep, err := m.Run(b.Context(), tN(0), tN(100), nil, false)
		total += time.Since(began)
		require.NoError(b, err)
		require.Equal(b, int64(entities), rep.Views[0].Written)
		b.StopTimer()
		require.NoError(b, st.Close())
		b.StartTimer()
	}
	b.ReportMetric(float64(rows)*float64(b.N)/total.Seconds(), "rows/s")
}
