package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
)

func TestParseMaterializeTime(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 30, 0, 0, time.FixedZone("x", 3600))
	tests := []struct {
		in   string
		want time.Time
		err  bool
	}{
		{in: "now", want: now.UTC()},
		{in: "now-24h", want: now.UTC().Add(-24 * time.Hour)},
		{in: "2026-03-01T12:00:00Z", want: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{in: "2026-03-01T12:00:00+02:00", want: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)},
		{in: "2026-03-01T12:00:00.5Z", want: time.Date(2026, 3, 1, 12, 0, 0, 5e8, time.UTC)},
		{in: "2026-03-01T12:00:00", want: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{in: "2026-03-01", want: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		{in: "now-10d", want: now.UTC().Add(-240 * time.Hour)},
		{in: "now-1w", want: now.UTC().Add(-7 * 24 * time.Hour)},
		{in: "now-1w2d12h30m", want: now.UTC().Add(-(9*24*time.Hour + 12*time.Hour + 30*time.Minute))},
		{in: "now-1.5d", want: now.UTC().Add(-36 * time.Hour)},
		{in: "now+1h", want: now.UTC().Add(time.Hour)},
		{in: "now-90m", want: now.UTC().Add(-90 * time.Minute)},
		// Feast's CLI takes ISO 8601 through dateutil; these are the forms
		// its docs and `date` write.
		{in: "2026-03-01 12:00:00", want: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{in: "2026-03-01 12:00:00+02:00", want: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)},
		{in: "2026-03-01T12:00:00.123456", want: time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)},
		{in: "2026-03-01T12:00", want: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{in: "2026-03-01 12:00", want: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{in: "now-", err: true},
		{in: "now-10", err: true},
		{in: "now-d", err: true},
		{in: "now-10x", err: true},
		{in: "now-1000000w", err: true},
		{in: "now10d", err: true},
		{in: "now--1h", err: true},
		{in: "yesterday", err: true},
		{in: "2026-13-01", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseMaterializeTime(tc.in, now)
			if tc.err {
				require.ErrorContains(t, err, tc.in)
				return
			}
			require.NoError(t, err)
			require.True(t, got.Equal(tc.want), "got %v, want %v", got, tc.want)
			require.Equal(t, time.UTC, got.Location())
		})
	}
}

// writeMaterializeRepo writes a one-view feature repository with a small
// Parquet source.
func writeMaterializeRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"feature_store.yaml": "project: mat_test\nonline_store:\n  type: embedded\n  path: data/online.db\n",
		"defs.yaml": `entities:
  - name: user
    join_keys: [user_id]
    value_type: Int64
sources:
  - name: src
    type: file
    path: data/users.parquet
    timestamp_field: event_timestamp
feature_views:
  - name: user_stats
    entities: [user]
    source: src
    ttl: 1d
    schema:
      - {name: clicks, dtype: Int64}
`,
	}
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	f, err := os.Create(filepath.Join(dir, "data", "users.parquet"))
	require.NoError(t, err)
	w, err := offline.NewWriter(f, []offline.Column{
		{Name: "event_timestamp", Type: feature.Type{Kind: feature.KindUnixTimestamp}},
		{Name: "user_id", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "clicks", Type: feature.Type{Kind: feature.KindInt64}},
	})
	require.NoError(t, err)
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range int64(3) {
		require.NoError(t, w.Write([]feature.Value{{I64: day.Add(time.Duration(i) * time.Hour).UnixNano()}, {I64: i}, {I64: 10 * i}}))
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	return dir
}

func TestFeaturesMaterializeCommand(t *testing.T) {
	dir := writeMaterializeRepo(t)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(t.Context(), append(args, "--repo", dir), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := run("features", "materialize", "2026-03-01", "2026-03-02")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `user_stats\s+2026-03-01T00:00:00Z\s+2026-03-02T00:00:00Z\s+3\s+3\s+0`, out)
	require.Contains(t, errOut, "user_stats  3 rows", "progress line on stderr")

	// The same window again writes nothing.
	code, out, errOut = run("features", "materialize", "2026-03-01", "2026-03-02", "--no-progress")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `user_stats\s+\S+\s+\S+\s+3\s+0\s+3`, out)
	require.Empty(t, errOut)

	// Incremental from the watermark: nothing new in the source.
	code, out, errOut = run("features", "materialize-incremental", "2026-03-03", "--views", "user_stats")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `user_stats\s+2026-03-02T00:00:00Z\s+2026-03-03T00:00:00Z\s+0\s+0\s+0`, out)

	// Feast's -v names a view, repeated for several.
	code, out, errOut = run("features", "materialize", "-v", "user_stats", "-v", "user_stats", "2026-03-01T00:00:00", "2026-03-02 00:00", "--no-progress")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `user_stats\s+2026-03-01T00:00:00Z\s+2026-03-02T00:00:00Z\s+3\s+0\s+3`, out)

	code, _, errOut = run("features", "materialize", "2026-03-01", "2026-03-02", "--views", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown feature view 'nope'")

	code, _, errOut = run("features", "materialize", "yesterday", "now")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "invalid time 'yesterday'")
}
