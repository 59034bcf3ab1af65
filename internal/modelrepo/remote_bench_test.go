package modelrepo

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

// benchStores are the object-storage servers the benchmarks compare.
var benchStores = []struct {
	name  string
	start func(testing.TB) *objstoretest.Server
}{
	{"s3", objstoretest.StartS3},
	{"gcs", objstoretest.StartGCS},
	{"azure", objstoretest.StartAzurite},
}

// BenchmarkServe100MB measures the time from Start to a serving model
// whose version holds 100 MB (a weights file covered by SHA256SUMS, so
// the load verifies every byte), from a folder and from each store with
// an empty local cache (download, MD5 check, SHA256SUMS check, load).
//
//	go test -run '^$' -bench BenchmarkServe100MB -benchtime 3x ./internal/modelrepo/
func BenchmarkServe100MB(b *testing.B) {
	weights := make([]byte, 100<<20)
	_, _ = rand.Read(weights)
	files := map[string]string{
		"m/config.pbtxt":        fakeConfig(""),
		"m/1/model.fake":        fakeFile(1000),
		"m/1/weights.bin":       string(weights),
		"m/1/SHA256SUMS":        "",
		"m/1/model_config.json": `{"version": "1.0"}`,
	}
	files["m/1/SHA256SUMS"] = manifest(map[string]string{"model.fake": files["m/1/model.fake"], "weights.bin": files["m/1/weights.bin"], "model_config.json": files["m/1/model_config.json"]})

	serve := func(b *testing.B, opts Options) {
		b.Helper()
		h := newBenchManager(b, opts)
		start := time.Now()
		if err := h.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		if _, err := h.Metadata(context.Background(), "m", "1"); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/serve")
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Close(closeCtx)
	}
	b.Run("disk", func(b *testing.B) {
		dir := b.TempDir()
		for k, v := range files {
			p := filepath.Join(dir, filepath.FromSlash(k))
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			serve(b, Options{Repositories: []string{dir}})
		}
	})
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			srv := st.start(b)
			bk := srv.Open(b, "repo")
			for k, v := range files {
				if err := bk.WriteAll(context.Background(), k, []byte(v)); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				serve(b, Options{Repositories: []string{srv.URI("repo")}, RemoteCacheDir: b.TempDir(), Getenv: srv.Getenv})
			}
		})
	}
}

// BenchmarkPollUnchanged1000 measures one poll of a repository of 1,000
// unchanged objects (10 models of 100 files) in each store: HTTP requests
// and response bytes per poll, and its time.
//
//	go test -run '^$' -bench BenchmarkPollUnchanged1000 -benchtime 20x ./internal/modelrepo/
func BenchmarkPollUnchanged1000(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			srv := st.start(b)
			bk := srv.Open(b, "repo")
			for m := range 10 {
				name := fmt.Sprintf("m%d", m)
				_ = bk.WriteAll(context.Background(), name+"/config.pbtxt", []byte(fakeConfig("")))
				_ = bk.WriteAll(context.Background(), name+"/1/model.fake", []byte(fakeFile(int32(m))))
				for i := range 98 {
					if err := bk.WriteAll(context.Background(), fmt.Sprintf("%s/1/extra/f%03d.txt", name, i), []byte("x")); err != nil {
						b.Fatal(err)
					}
				}
			}
			h := newBenchManager(b, Options{Repositories: []string{srv.URI("repo")}, ControlMode: ControlPoll, RemoteCacheDir: b.TempDir(), Getenv: srv.Getenv})
			if err := h.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer func() {
				closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = h.Close(closeCtx)
			}()
			mr := h.remotes[h.opts.Repositories[0]]
			before := mr.bucket.Stats()
			for b.Loop() {
				_ = h.Poll(context.Background())
			}
			after := mr.bucket.Stats()
			b.ReportMetric(float64(after.Requests-before.Requests)/float64(b.N), "requests/poll")
			b.ReportMetric(float64(after.BytesRead-before.BytesRead)/float64(b.N), "bytes/poll")
		})
	}
}

// newBenchManager builds a Manager over the fake backend.
func newBenchManager(b *testing.B, opts Options) *Manager {
	b.Helper()
	var reg backend.Registry
	reg.Register(&fakeBackend{}, "fake_platform")
	m, err := New(opts, &reg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return m
}
