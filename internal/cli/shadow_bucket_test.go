package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/config"

	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
	"github.com/sluice-ml/sluice/internal/release/diff"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// TestShadowFromBucket archives a gateway recording (rotated files) to a
// bucket of each store with the archiver the gateway runs, then replays
// and diffs it straight from the bucket: the same records as from the
// local files, and the same diff verdict. The local files are gone once
// archived; nothing reads a copy.
func TestShadowFromBucket(t *testing.T) {
	addr := startShadowModel(t)
	orig := shadowRecords(120)
	for _, tt := range objstoretest.Stores {
		t.Run(tt.Name, func(t *testing.T) {
			srv := tt.Start(t)
			srv.Setenv(t)
			uri := srv.URI("recordings/gw-1")
			dir := t.TempDir()
			line, err := record.Encode(orig[0])
			require.NoError(t, err)
			sink, err := record.NewArchivedFileSink(t.Context(), record.FileOptions{Dir: dir, MaxBytes: int64(len(line)+1) * 25},
				record.ArchiveOptions{Location: uri, Interval: time.Hour, Label: "recordings"}, nil, nil)
			require.NoError(t, err)
			_, err = sink.Write(t.Context(), orig)
			require.NoError(t, err)
			require.NoError(t, sink.Close(t.Context()))
			files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
			require.NoError(t, err)
			require.Empty(t, files, "archived files are removed locally")
			st := sink.Archiver().Stats()
			require.GreaterOrEqual(t, st.Uploaded, int64(4))
			require.Zero(t, st.Pending)

			out := filepath.Join(t.TempDir(), "replay")
			_, stderr, code := runShadow(t.Context(), t, false, "replay", "--from", uri, "--to-grpc", addr, "--rate", "0", "--out", out)
			require.Zero(t, code, stderr)
			require.Contains(t, stderr, "replayed 120 records")

			report := filepath.Join(t.TempDir(), "report")
			stdout, stderr, code := runShadow(t.Context(), t, false, "diff", "--recording", uri, "--against", out,
				"--labels", "recorded,replay", "--max-p95-regression", "-1", "--out", report)
			require.Zero(t, code, stderr)
			require.Contains(t, stdout, "PASSED: recorded (primary) vs replay (primary), 120 pairs compared")
			f, err := os.Open(filepath.Join(report, diff.JSONFile))
			require.NoError(t, err)
			defer f.Close()
			res, err := diff.ReadJSON(f)
			require.NoError(t, err)
			require.True(t, res.Passed)

			// A bucket folder without recordings is an error naming it,
			// without credentials.
			_, stderr, code = runShadow(t.Context(), t, false, "replay", "--from", srv.URI("nothing-here"), "--to-grpc", addr, "--out", out)
			require.NotZero(t, code)
			require.Contains(t, stderr, "nothing-here")
			for _, s := range srv.Secrets {
				require.NotContains(t, stderr+stdout, s)
			}
		})
	}
}

// TestRecorderArchivesToBucket checks the gateway's wiring: with
// recording.archive (and accuracy.log.archive) set, the recorder's and
// the prediction log's files end up in the bucket, none left locally, and
// read back whole.
func TestRecorderArchivesToBucket(t *testing.T) {
	srv := objstoretest.StartS3(t)
	srv.Setenv(t)
	dir := t.TempDir()
	gc := &config.Gateway{
		Services: []config.Service{{Name: "parcel-eta", Shadow: &config.Shadow{}}},
		Recording: config.Recording{
			Sink: "jsonl", Dir: filepath.Join(dir, "rec"), MaxBytes: 4 << 10, MaxAge: config.Duration(time.Hour),
			QueueSize: 1024, Archive: accuracyspec.Archive{Location: srv.URI("recordings"), Interval: config.Duration(time.Hour)},
		},
		Accuracy: &accuracyspec.Gateway{QueueSize: 1024, Log: accuracyspec.Log{
			Sink: "jsonl", Dir: filepath.Join(dir, "pred"),
			Archive: accuracyspec.Archive{Location: srv.URI("predictions"), Interval: config.Duration(time.Hour)},
		}},
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.DiscardHandler)
	rec, err := openRecorder(t.Context(), gc, logger, reg)
	require.NoError(t, err)
	pred, err := openPredictionLog(t.Context(), gc, logger, reg)
	require.NoError(t, err)
	recs := shadowRecords(60)
	for _, w := range []*record.Writer{rec, pred} {
		go w.Run()
		for _, r := range recs {
			require.True(t, w.Offer(r))
		}
		require.NoError(t, w.Close(t.Context()))
	}
	for _, sub := range []string{"rec", "pred"} {
		left, err := filepath.Glob(filepath.Join(dir, sub, "*.jsonl"))
		require.NoError(t, err)
		require.Empty(t, left, "%s: archived files are removed locally", sub)
	}
	for _, loc := range []string{"recordings", "predictions"} {
		src, err := record.Open(t.Context(), srv.URI(loc), record.ReadOptions{})
		require.NoError(t, err)
		got, err := record.ReadAll(t.Context(), src)
		require.NoError(t, err)
		require.Len(t, got, 60, loc)
		require.Equal(t, recs[59].RequestID, got[59].RequestID)
	}
	files, err := testutil.GatherAndCount(reg, "sluice_release_archive_files_total")
	require.NoError(t, err)
	require.Equal(t, 4, files, "uploaded and failed series for recordings and predictions")
}
