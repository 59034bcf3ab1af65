package materialize

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

// TestReportJSON: the report's JSON keys are snake_case like the rest of
// the API, the duration is in seconds and an error is its message.
func TestReportJSON(t *testing.T) {
	rep := Report{Views: []ViewReport{
		{View: "a", Start: tN(0), End: tN(1), RowsRead: 10, Entities: 4, Written: 3, Skipped: 1, HotWritten: 2, Duration: 2 * time.Second},
		{View: "b", Note: "offline-only view (online: false), skipped"},
		{View: "c", Start: tN(0), End: tN(1), Err: errors.New("materialize view 'c': boom")},
	}}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var got map[string][]map[string]any
	require.NoError(t, json.Unmarshal(b, &got), string(b))
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for _, v := range got["views"] {
		for k := range v {
			require.Regexp(t, snake, k, "key of %s", b)
		}
	}
	require.Len(t, got["views"], 3, string(b))
	a := got["views"][0]
	require.Equal(t, map[string]any{
		"view": "a", "start": "2026-03-01T00:00:00Z", "end": "2026-03-01T01:00:00Z",
		"rows_read": 10.0, "entities": 4.0, "written": 3.0, "skipped": 1.0, "hot_written": 2.0,
		"duration_seconds": 2.0, "rows_per_second": 5.0,
	}, a)
	require.NotContains(t, got["views"][1], "start", "an offline-only view has no window")
	require.Equal(t, "offline-only view (online: false), skipped", got["views"][1]["note"])
	require.Equal(t, "materialize view 'c': boom", got["views"][2]["error"])
}

// TestEmptyBatchFolder: a view whose source folder exists but holds no
// Parquet file yet materializes nothing, successfully, and records its
// state (so its freshness starts counting from this run).
func TestEmptyBatchFolder(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data", "pushed"), 0o755))
	view := userView("user_live")
	view.Source = "push"
	repo := testRepo(view)
	repo.Dir = dir
	repo.Sources["src"].Path = "data/pushed/"
	repo.Sources["push"] = &feature.Source{Name: "push", Kind: feature.SourcePush, BatchSource: "src"}
	store := openStore(t)
	m := New(repo, store, Options{Now: func() time.Time { return tN(1000) }}, nil, nil)

	rep, err := m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.NoError(t, err)
	require.Len(t, rep.Views, 1)
	require.Zero(t, rep.Views[0].RowsRead)
	require.Zero(t, rep.Views[0].Written)
	rep, err = m.RunIncremental(t.Context(), tN(20), nil)
	require.NoError(t, err)
	require.Zero(t, rep.Views[0].RowsRead)
	b, err := store.GetMeta(t.Context(), feature.ViewStateName("user_live"))
	require.NoError(t, err)
	require.NotNil(t, b, "the successful run is recorded")
}
