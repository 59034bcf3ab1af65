package offline

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

// TestEmptyBatchFolder: a push source's batch folder that exists but holds
// no Parquet file yet (only the temporary file of a push in progress, say)
// has no rows; scanning and historical retrieval succeed.
func TestEmptyBatchFolder(t *testing.T) {
	dir := t.TempDir()
	repo, view := statsRepo(dir, []feature.Field{{Name: "score", Type: tFloat32}})
	repo.Sources["stats_src"].Path = "data/stats/"
	folder := filepath.Join(dir, "data", "stats")
	require.NoError(t, os.MkdirAll(folder, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(folder, ".push-1.tmp"), []byte("partial"), 0o644))

	t.Run("scan", func(t *testing.T) {
		rows, err := scanAll(t, repo, view, time.Unix(0, sec(0)), time.Unix(0, sec(100)))
		require.NoError(t, err)
		require.Empty(t, rows)
	})
	t.Run("historical", func(t *testing.T) {
		ents := filepath.Join(dir, "e.csv")
		require.NoError(t, os.WriteFile(ents, []byte("user_id,event_timestamp\n1,2026-01-01T00:00:05Z\n2,2026-01-01T00:00:06Z\n"), 0o644))
		out := filepath.Join(dir, "out.parquet")
		require.NoError(t, Historical(t.Context(), repo, ents, []feature.FeatureRef{{View: "stats"}}, out, Options{TempDir: t.TempDir()}))
		got := readParquet(t, out, []Column{{"user_id", tInt64}, {"score", tFloat32}})
		require.Len(t, got, 2, "every entity row is kept")
		for _, r := range got {
			require.True(t, r[1].Null, "no source rows: null features")
		}
	})
	t.Run("missing folder is still an error", func(t *testing.T) {
		repo.Sources["stats_src"].Path = "data/nope/"
		_, err := scanAll(t, repo, view, time.Unix(0, sec(0)), time.Unix(0, sec(100)))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}
