package offline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

// BenchmarkScanBucket scans one feature (with its key and timestamp) of a
// 24-feature, 60,000-row Parquet file (about 10 MB) from disk and from each
// store, reporting the bytes fetched per scan (the S3 run goes through a
// counting proxy). Results: bench/results/objstore.md.
func BenchmarkScanBucket(b *testing.B) {
	dir := b.TempDir()
	_, repo := wideSource(b, dir)
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
