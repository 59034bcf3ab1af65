package offline

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

func TestAppendFile(t *testing.T) {
	cols := []Column{{Name: "event_timestamp", Type: feature.Type{Kind: feature.KindUnixTimestamp}}, {Name: "user_id", Type: feature.Type{Kind: feature.KindInt64}}}
	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	t.Run("writes a new named file", func(t *testing.T) {
		dir := t.TempDir()
		p, err := AppendFile(t.Context(), dir, "push", at, cols, [][]feature.Value{{{I64: at.UnixNano()}, {I64: 7}}})
		require.NoError(t, err)
		require.Equal(t, dir, filepath.Dir(p))
		require.Regexp(t, regexp.MustCompile(`^push-1767355200000000000-[0-9a-f]{16}\.parquet$`), filepath.Base(p))
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, ents, 1, "no temporary file is left")
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Positive(t, st.Size())
	})
	t.Run("a failed write leaves nothing", func(t *testing.T) {
		dir := t.TempDir()
		_, err := AppendFile(t.Context(), dir, "push", at, cols, [][]feature.Value{{{I64: 1}, {I64: 2}}, {{I64: 1}}})
		require.ErrorContains(t, err, "row 1")
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, ents)
	})
	t.Run("an unwritable column type leaves nothing", func(t *testing.T) {
		dir := t.TempDir()
		bad := []Column{{Name: "ts", Type: feature.Type{Kind: feature.KindUnixTimestamp, List: true}}}
		_, err := AppendFile(t.Context(), dir, "push", at, bad, [][]feature.Value{{{Null: true}}})
		require.ErrorContains(t, err, "column 'ts'")
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, ents)
	})
}
