package record

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
	"github.com/sluice-ml/sluice/internal/testutil/tier"
)

// TestArchiverToBuckets rotates a JSONL sink into a bucket of each store
// through the background archiver, then stops the store while files keep
// rotating: the files wait on disk (counted as pending, failures counted,
// one warning logged), and once the store is back every one is uploaded,
// verified and removed locally. Reading the bucket back (Open on the
// location) yields every record written, in order, none lost; no
// credential value appears in the log.
func TestArchiverToBuckets(t *testing.T) {
	tier.Skip(t, "integration") // S3, GCS and Azurite emulators (Azurite a Node process): about 18 s
	for _, tt := range objstoretest.Stores {
		t.Run(tt.Name, func(t *testing.T) {
			srv := tt.Start(t)
			dir := t.TempDir()
			uri := srv.URI("recordings/gw-1")
			var logBuf bytes.Buffer
			sw := &syncWriter{w: &logBuf}
			logger := slog.New(slog.NewTextHandler(sw, &slog.HandlerOptions{Level: slog.LevelDebug}))
			reg := prometheus.NewRegistry()
			arch, err := NewArchiver(t.Context(), ArchiveOptions{
				Dir: dir, Base: "records", Location: uri, Interval: 50 * time.Millisecond,
				Label: "recordings", Getenv: srv.Getenv,
			}, logger, reg)
			require.NoError(t, err)
			line, err := Encode(sample(100, t0))
			require.NoError(t, err)
			sink, err := NewFileSink(FileOptions{Dir: dir, MaxBytes: int64(len(line)+1) * 10, OnRotate: arch.Kick}, logger)
			require.NoError(t, err)
			arch.Start(sink.Current)

			local := func() []string {
				files, err := filepath.Glob(filepath.Join(dir, "records-*.jsonl"))
				require.NoError(t, err)
				return files
			}
			next := 0
			write := func(n int) {
				got, err := sink.Write(t.Context(), records(next, n))
				require.NoError(t, err)
				require.Equal(t, n, got)
				next += n
			}

			// About ten records a file: the finished files go up, the one
			// still being written stays.
			for range 19 {
				write(5)
			}
			before := int64(len(sink.Files()) - 1)
			require.GreaterOrEqual(t, before, int64(5))
			waitFor(t, "the finished files archived", func() bool { return arch.Stats().Uploaded == before })
			require.Equal(t, []string{sink.Current()}, local())

			// The store goes away while files keep rotating.
			srv.Stop()
			for range 20 {
				write(5)
			}
			waiting := len(sink.Files()) - 1 - int(before)
			require.GreaterOrEqual(t, waiting, 5)
			waitFor(t, "failed uploads counted", func() bool { return arch.Stats().Failures >= 2 && arch.Stats().Pending == waiting })
			require.Equal(t, before, arch.Stats().Uploaded)
			require.Len(t, local(), waiting+1, "the finished files wait on disk")
			require.Equal(t, float64(waiting), testutil.ToFloat64(arch.metrics.pending))

			// Back: every waiting file goes up, none lost.
			srv.Start(t)
			arch.Kick()
			waitFor(t, "the waiting files archived", func() bool { return arch.Stats().Uploaded == before+int64(waiting) })
			require.Equal(t, []string{sink.Current()}, local())
			require.Equal(t, 0, arch.Stats().Pending)

			// Shutdown: the sink's last file is finished and archived.
			require.NoError(t, sink.Close(t.Context()))
			require.NoError(t, arch.Close(t.Context()))
			require.Empty(t, local())
			st := arch.Stats()
			total := len(sink.Files())
			require.Equal(t, int64(total), st.Uploaded)
			require.Equal(t, float64(total), testutil.ToFloat64(arch.metrics.uploaded))
			require.Equal(t, float64(st.Failures), testutil.ToFloat64(arch.metrics.failed))

			// Read the recording straight from the bucket.
			src, err := openBucket(t.Context(), uri, ReadOptions{}, objstore.Options{Getenv: srv.Getenv})
			require.NoError(t, err)
			require.Len(t, src.Files(), total)
			got, err := ReadAll(t.Context(), src)
			require.NoError(t, err)
			requireIDs(t, got, 0, next)
			// A pattern on the last segment picks files by name.
			src, err = openBucket(t.Context(), uri+"/records-*-000003.jsonl", ReadOptions{}, objstore.Options{Getenv: srv.Getenv})
			require.NoError(t, err)
			require.Len(t, src.Files(), 1)
			require.NoError(t, src.Close())

			sw.mu.Lock()
			logs := logBuf.String()
			sw.mu.Unlock()
			require.Equal(t, 1, strings.Count(logs, "level=WARN msg=\"archive upload failed;"), "one warning per outage:\n%s", logs)
			require.Contains(t, logs, "archive reachable again")
			for _, s := range srv.Secrets {
				require.NotContains(t, logs, s, "a credential value appears in the log")
			}
		})
	}
}

// syncWriter serializes writes from the sink's and archiver's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
