package offline

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

// countingProxy forwards to target and counts the response bytes it
// passes back, and the largest single response.
type countingProxy struct {
	bytes, largest atomic.Int64
}

func (c *countingProxy) start(t *testing.T, target string) string {
	t.Helper()
	return c.startTB(t, target)
}

func (c *countingProxy) startTB(tb testing.TB, target string) string {
	tb.Helper()
	u, err := url.Parse("http://" + target)
	require.NoError(tb, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Body = &countedBody{ReadCloser: r.Body, c: c}
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

type countedBody struct {
	io.ReadCloser
	c *countingProxy
	n int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.bytes.Add(int64(n))
	b.n += int64(n)
	for {
		old := b.c.largest.Load()
		if b.n <= old || b.c.largest.CompareAndSwap(old, b.n) {
			break
		}
	}
	return n, err
}

// wideSource writes data/wide.parquet under dir: 60,000 rows of a
// timestamp, a user id and 24 Float64 features (about 10 MB). It returns
// the file's size and a repository builder whose view "v" reads feature
// f07 from the source at a path.
func wideSource(tb testing.TB, dir string) (int64, func(path string) *registry.Repo) {
	tb.Helper()
	cols := []Column{{"ts", tTS}, {"user_id", tInt64}}
	var schema []feature.Field
	for i := range 24 {
		cols = append(cols, Column{fmt.Sprintf("f%02d", i), feature.Type{Kind: feature.KindFloat64}})
		schema = append(schema, feature.Field{Name: fmt.Sprintf("f%02d", i), Type: feature.Type{Kind: feature.KindFloat64}})
	}
	path := filepath.Join(dir, "data", "wide.parquet")
	require.NoError(tb, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(tb, err)
	w, err := NewWriter(f, cols)
	require.NoError(tb, err)
	r := make([]feature.Value, 2+24)
	for i := range 60_000 {
		r[0], r[1] = feature.Value{I64: sec(i)}, feature.Value{I64: int64(i % 1000)}
		for j := range 24 {
			r[2+j] = feature.Value{F64: float64(i*24+j) * 1.0001}
		}
		require.NoError(tb, w.Write(r))
	}
	require.NoError(tb, w.Close())
	require.NoError(tb, f.Close())
	st, err := os.Stat(path)
	require.NoError(tb, err)
	return st.Size(), func(p string) *registry.Repo {
		return &registry.Repo{
			Dir:      dir,
			Entities: map[string]*feature.Entity{"user": {Name: "user", JoinKey: "user_id", ValueType: tInt64}},
			Sources:  map[string]*feature.Source{"src": {Name: "src", Kind: feature.SourceFile, Path: p, TimestampField: "ts"}},
			Views:    map[string]*feature.View{"v": {Name: "v", Entities: []string{"user"}, Source: "src", Schema: schema[7:8]}},
		}
	}
}

// TestRemoteScanReadsRanges scans one narrow feature of a wide Parquet
// object in a bucket: the rows equal those read from the same file on
// disk, while the bytes fetched are a fraction of the object (only the
// columns read, by ranged reads) and no single response is larger than a
// read buffer: the object is never downloaded whole.
func TestRemoteScanReadsRanges(t *testing.T) {
	srv := objstoretest.StartS3(t)
	dir := t.TempDir()
	size, repo := wideSource(t, dir)
	objstoretest.Upload(t, srv.Open(t, ""), filepath.Join(dir, "data"), "data")

	proxy := &countingProxy{}
	// srv.URI("") is s3://host:port/bucket.
	target, _, _ := strings.Cut(strings.TrimPrefix(srv.URI(""), "s3://"), "/")
	addr := proxy.start(t, target)
	remoteGetenv = srv.Getenv
	t.Cleanup(func() { remoteGetenv = os.Getenv })

	scan := func(r *registry.Repo) []string {
		var out []string
		err := ScanView(t.Context(), r, r.Views["v"], time.Unix(0, sec(100)), time.Unix(0, sec(59_000)), func(row Row) error {
			out = append(out, fmt.Sprintf("%d %d %v", row.EventTS, row.Keys[0].I64, row.Values[0].F64))
			return nil
		})
		require.NoError(t, err)
		return out
	}
	want := scan(repo("data/wide.parquet"))
	require.Len(t, want, 58_901)
	got := scan(repo("s3://" + addr + "/" + srv.Bucket + "/data/wide.parquet"))
	require.Equal(t, want, got)
	t.Logf("object %d bytes; fetched %d bytes, largest response %d bytes", size, proxy.bytes.Load(), proxy.largest.Load())
	require.Less(t, proxy.bytes.Load(), size/4, "a scan of 3 of 26 columns fetched most of the object")
	require.LessOrEqual(t, proxy.largest.Load(), int64(max(remoteBufferSize, remoteBlockSize))) //nolint:unconvert // an untyped constant would be an int, and require compares types
}
