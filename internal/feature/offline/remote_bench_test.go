package offline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

// BenchmarkScanBucket scans one feature (with its key and timestamp) of a
// 24-feature, 60,000-row Parquet file (about 10 MB) from disk and from each
// store, reporting the bytes fetched per scan (the S3 run goes through a
// counting proxy). Results: bench/results/objstore.md.
func BenchmarkScanBucket(b *testing.B) {
	dir := b.TempDir()
	cols := []Column{{"ts", tTS}, {"user_id", tInt64}}
	var schema []feature.Field
	for i := range 24 {
		cols = append(cols, Column{fmt.Sprintf("f%02d", i), feature.Type{Kind: feature.KindFloat64}})
		schema = append(schema, feature.Field{Name: fmt.Sprintf("f%02d", i), Type: feature.Type{Kind: feature.KindFloat64}})
	}
	path := filepath.Join(dir, "data", "wide.parquet")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWriter(f, cols)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 60_000 {
		r := []feature.Value{{I64: sec(i)}, {I64: int64(i % 1000)}}
		for j := range 24 {
			r = append(r, feature.Value{F64: float64(i*24+j) * 1.0001})
		}
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
	repo := func(p string) *registry.Repo {
		return &registry.Repo{Dir: dir,
			Entities: map[string]*feature.Entity{"user": {Name: "user", JoinKey: "user_id", ValueType: tInt64}},
			Sources:  map[string]*feature.Source{"src": {Name: "src", Kind: feature.SourceFile, Path: p, TimestampField: "ts"}},
			Views:    map[string]*feature.View{"v": {Name: "v", Entities: []string{"user"}, Source: "src", Schema: schema[7:8]}},
		}
	}
	scan := func(b *testing.B, r *registry.Repo) {
		b.Helper()
		for b.Loop() {
			n := 0
			err := ScanView(b.Context(), r, r.Views["v"], time.Unix(0, sec(0)), time.Unix(0, sec(60_000)), func(Row) error { n++; return nil })
			if err != nil || n != 60_000 {
				b.Fatalf("scan: %d rows, %v", n, err)
			}
		}
	}
	b.Run("disk", func(b *testing.B) { scan(b, repo("data/wide.parquet")) })
	for _, st := range objstoretest.Stores {
		b.Run(st.Name, func(b *testing.B) {
			srv := st.Start(b)
			objstoretest.Upload(b, srv.Open(b, ""), filepath.Join(dir, "data"), "data")
			remoteGetenv = srv.Getenv
			b.Cleanup(func() { remoteGetenv = os.Getenv })
			uri := srv.URI("data/wide.parquet")
			var proxy *countingProxy
			if st.Name == "s3" {
				proxy = &countingProxy{}
				target, _, _ := strings.Cut(strings.TrimPrefix(srv.URI(""), "s3://"), "/")
				addr := proxy.startTB(b, target)
				uri = "s3://" + addr + "/" + srv.Bucket + "/data/wide.parquet"
			}
			scan(b, repo(uri))
			if proxy != nil {
				b.ReportMetric(float64(proxy.bytes.Load())/float64(b.N), "fetched-B/op")
			}
		})
	}
}
