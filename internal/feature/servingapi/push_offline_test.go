package servingapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

// offlineFixture is a fixture whose user_file source is the folder
// data/users/ (with a created column) inside a temporary repository.
func offlineFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	f := newFixture(t, serving.Options{})
	f.Repo.Dir = t.TempDir()
	src := f.Repo.Sources["user_file"]
	src.Path = "data/users/"
	src.CreatedTimestampColumn = "created"
	folder := filepath.Join(f.Repo.Dir, "data", "users")
	require.NoError(t, os.MkdirAll(folder, 0o755))
	return f, folder
}

func folderNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

type scanned struct {
	key       int64
	ev, cr    time.Time
	valueNull bool
	value     feature.Value
}

// scanView reads view's offline rows back through offline.ScanView.
func scanView(t *testing.T, f *fixture, view string) []scanned {
	t.Helper()
	var out []scanned
	err := offline.ScanView(t.Context(), f.Repo, f.Repo.Views[view], time.Unix(0, 0), now.Add(time.Hour), func(r offline.Row) error {
		out = append(out, scanned{key: r.Keys[0].I64, ev: time.Unix(0, r.EventTS).UTC(), cr: time.Unix(0, r.CreatedTS).UTC(), valueNull: r.Values[0].Null, value: r.Values[0]})
		return nil
	})
	require.NoError(t, err)
	slices.SortFunc(out, func(a, b scanned) int { return int(a.key - b.key) })
	return out
}

var pushFileName = regexp.MustCompile(`^push-[0-9]+-[0-9a-f]{16}\.parquet$`)

func TestPushOffline(t *testing.T) {
	f, folder := offlineFixture(t)
	stateBefore := string(f.Store.Meta[feature.ViewStateName("user_live")])
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"offline","df":{
		"user_id":[1,2],"level":[10,null],
		"event_timestamp":["2026-01-02T11:50:00Z","2026-01-02 11:55:00"],
		"created":[null,"2026-01-02T11:58:00Z"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	var rep serving.PushReport
	require.NoError(t, json.Unmarshal(out, &rep))
	require.Equal(t, 2, rep.Rows)
	require.Empty(t, rep.Views, "nothing written online")
	require.NotNil(t, rep.Offline)
	require.Equal(t, "user_file", rep.Offline.Source)
	require.Equal(t, 2, rep.Offline.Rows)
	require.True(t, strings.HasPrefix(rep.Offline.File, "data/users/"), rep.Offline.File)
	names := folderNames(t, folder)
	require.Len(t, names, 1, "one file and no temporary file")
	require.Regexp(t, pushFileName, names[0])
	require.Equal(t, "data/users/"+names[0], rep.Offline.File)

	// Offline only: the online store and the view's state are untouched.
	require.Empty(t, f.Store.Rows)
	require.Equal(t, stateBefore, string(f.Store.Meta[feature.ViewStateName("user_live")]))

	// The rows read back with their values and timestamps; a row without
	// a created timestamp gets the push time.
	require.Equal(t, []scanned{
		{key: 1, ev: time.Date(2026, 1, 2, 11, 50, 0, 0, time.UTC), cr: now, value: feature.Value{I64: 10}},
		{key: 2, ev: time.Date(2026, 1, 2, 11, 55, 0, 0, time.UTC), cr: time.Date(2026, 1, 2, 11, 58, 0, 0, time.UTC), valueNull: true, value: feature.Value{Null: true}},
	}, scanView(t, f, "user_live"))

	// The other views of the batch source still read the folder: their
	// columns are there, as nulls.
	stats := scanView(t, f, "user_stats")
	require.Len(t, stats, 2)
	require.True(t, stats[0].valueNull)
}

func TestPushOfflineOtherViewsColumns(t *testing.T) {
	// Columns of other views reading the batch source are written when
	// the rows carry them, and checked like the rest.
	f, _ := offlineFixture(t)
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"offline","df":{
		"user_id":[3],"level":[1],"clicks":[42],"event_timestamp":["2026-01-02T11:50:00Z"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	stats := scanView(t, f, "user_stats")
	require.Len(t, stats, 1)
	require.Equal(t, feature.Value{I64: 42}, stats[0].value)

	code, out = f.post(t, "/push", `{"push_source_name":"user_push","to":"offline","df":{
		"user_id":[3],"level":[1],"clicks":["many"],"event_timestamp":["2026-01-02T11:50:00Z"]}}`)
	require.Equal(t, http.StatusBadRequest, code, string(out))
	require.Contains(t, string(out), "clicks")
}

func TestPushOfflineFieldMapping(t *testing.T) {
	// The batch source stores level as column lvl: the file uses the
	// source column name, and the view reads it back as level.
	f, _ := offlineFixture(t)
	f.Repo.Sources["user_file"].FieldMapping = map[string]string{"lvl": "level"}
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"offline","df":{
		"user_id":[4],"level":[9],"event_timestamp":["2026-01-02T11:50:00Z"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	got := scanView(t, f, "user_live")
	require.Len(t, got, 1)
	require.Equal(t, feature.Value{I64: 9}, got[0].value)
}

func TestPushOnlineAndOffline(t *testing.T) {
	f, folder := offlineFixture(t)
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"online_and_offline","df":{
		"user_id":[1,2],"level":[10,20],"event_timestamp":["2026-01-02T11:50:00Z","2026-01-02T11:55:00Z"]}}`)
	require.Equal(t, http.StatusOK, code, string(out))
	var rep serving.PushReport
	require.NoError(t, json.Unmarshal(out, &rep))
	require.Equal(t, []serving.PushViewReport{{View: "user_live", Written: 2}}, rep.Views)
	require.NotNil(t, rep.Offline)
	require.Len(t, folderNames(t, folder), 1)

	resp, err := f.srv.GetOnlineFeatures(t.Context(), &serving.Request{
		Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2)}},
	})
	require.NoError(t, err)
	require.Equal(t, []serving.Status{serving.StatusPresent, serving.StatusPresent}, resp.Results[1].Statuses)
	require.Equal(t, int64(20), resp.Results[1].Values[1].I64)

	got := scanView(t, f, "user_live")
	require.Len(t, got, 2)
	require.Equal(t, feature.Value{I64: 20}, got[1].value)
	require.Equal(t, time.Date(2026, 1, 2, 11, 55, 0, 0, time.UTC), got[1].ev)
}

func TestPushOnlineFailsAfterOffline(t *testing.T) {
	f, folder := offlineFixture(t)
	f.Store.SetErr(fmt.Errorf("redis: %w: dial timeout", online.ErrUnavailable))
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"online_and_offline","df":{
		"user_id":[1],"level":[10],"event_timestamp":["2026-01-02T11:50:00Z"]}}`)
	require.Equal(t, http.StatusServiceUnavailable, code, string(out))
	var e map[string]string
	require.NoError(t, json.Unmarshal(out, &e))
	require.Equal(t, serving.ReasonStoreUnavailable, e["reason"])
	require.Contains(t, e["error"], "appended to the offline store (data/users/push-")
	require.Contains(t, e["error"], "stay there")
	// The offline rows stay.
	names := folderNames(t, folder)
	require.Len(t, names, 1)
	require.Regexp(t, pushFileName, names[0])
	f.Store.SetErr(nil)
	require.Len(t, scanView(t, f, "user_live"), 1)
}

func TestPushOfflineNeedsFolderSource(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Repo.Dir = t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(f.Repo.Dir, "data"), 0o755))
	file := filepath.Join(f.Repo.Dir, "data", "users.parquet")
	require.NoError(t, os.WriteFile(file, []byte("PAR1"), 0o644))
	for _, to := range []string{"offline", "online_and_offline"} {
		t.Run(to, func(t *testing.T) {
			code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"`+to+`","df":{
				"user_id":[1],"level":[10],"event_timestamp":["2026-01-02T11:50:00Z"]}}`)
			require.Equal(t, http.StatusBadRequest, code, string(out))
			var e map[string]string
			require.NoError(t, json.Unmarshal(out, &e))
			require.Equal(t, serving.ReasonPushOfflineNeedsFolder, e["reason"])
			require.Contains(t, e["error"], "batch source 'user_file'")
			require.Contains(t, e["error"], "data/users.parquet")
			require.Empty(t, f.Store.Rows, "nothing written online")
			require.Equal(t, []string{"users.parquet"}, folderNames(t, filepath.Join(f.Repo.Dir, "data")))
		})
	}
}

// An offline push to a batch source on object storage is refused: it
// would otherwise append to a local folder named after the URI.
func TestPushOfflineRefusesBucketSource(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Repo.Dir = t.TempDir()
	f.Repo.Sources["user_file"].Path = "s3://features/users/"
	code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"offline","df":{
		"user_id":[1],"level":[10],"event_timestamp":["2026-01-02T11:50:00Z"]}}`)
	require.Equal(t, http.StatusBadRequest, code, string(out))
	var e map[string]string
	require.NoError(t, json.Unmarshal(out, &e))
	require.Equal(t, serving.ReasonPushOfflineNeedsFolder, e["reason"])
	require.Contains(t, e["error"], "is on object storage (s3://features/users/)")
	require.Empty(t, folderNames(t, f.Repo.Dir), "nothing created locally")
}

func TestPushOfflineCreatesMissingFolder(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Repo.Dir = t.TempDir()
	f.Repo.Sources["user_file"].Path = "data/users"
	_, err := f.srv.Push(t.Context(), "user_push", map[string][]any{"user_id": {1}, "level": {2}, "event_timestamp": {"2026-01-02T11:50:00Z"}}, serving.PushOffline)
	require.NoError(t, err)
	require.Len(t, folderNames(t, filepath.Join(f.Repo.Dir, "data", "users")), 1)
}

func TestPushOfflineNoBatchSource(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Repo.Sources["user_push"].BatchSource = ""
	_, err := f.srv.Push(t.Context(), "user_push", map[string][]any{}, serving.PushOffline)
	e, ok := errors.AsType[*apierr.Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, serving.ReasonPushOfflineNoBatchSource, e.Reason)
	require.Equal(t, apierr.KindInvalid, e.Kind)
}

func TestPushOfflineBadRowWritesNothing(t *testing.T) {
	cases := []struct{ name, df, mention string }{
		{"bad feature value", `"user_id":[1,2],"level":[1,"x"],"event_timestamp":["2026-01-02T11:00:00Z","2026-01-02T11:00:00Z"]`, "level"},
		{"bad key", `"user_id":[1,"x"],"level":[1,2],"event_timestamp":["2026-01-02T11:00:00Z","2026-01-02T11:00:00Z"]`, "user_id"},
		{"null key", `"user_id":[1,null],"level":[1,2],"event_timestamp":["2026-01-02T11:00:00Z","2026-01-02T11:00:00Z"]`, "user_id"},
		{"bad created", `"user_id":[1],"level":[1],"event_timestamp":["2026-01-02T11:00:00Z"],"created":["later"]`, "created"},
		{"missing column", `"user_id":[1],"event_timestamp":["2026-01-02T11:00:00Z"]`, "level"},
	}
	for _, tc := range cases {
		for _, to := range []string{"offline", "online_and_offline"} {
			t.Run(tc.name+"/"+to, func(t *testing.T) {
				f, folder := offlineFixture(t)
				code, out := f.post(t, "/push", `{"push_source_name":"user_push","to":"`+to+`","df":{`+tc.df+`}}`)
				require.Equal(t, http.StatusBadRequest, code, string(out))
				require.Contains(t, string(out), tc.mention)
				require.Empty(t, folderNames(t, folder), "no file, temporary or not")
				require.Empty(t, f.Store.Rows)
			})
		}
	}
}

func TestPushOfflineConcurrent(t *testing.T) {
	// The clock is fixed, so every push has the same timestamp: the names
	// still differ.
	f, folder := offlineFixture(t)
	const pushes = 8
	var wg sync.WaitGroup
	errs := make([]error, pushes)
	for i := range pushes {
		wg.Go(func() {
			_, errs[i] = f.srv.Push(t.Context(), "user_push", map[string][]any{
				"user_id": {json.Number(fmt.Sprint(100 + i))}, "level": {json.Number(fmt.Sprint(i))},
				"event_timestamp": {"2026-01-02T11:00:00Z"},
			}, serving.PushOffline)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	names := folderNames(t, folder)
	require.Len(t, names, pushes)
	for _, n := range names {
		require.Regexp(t, pushFileName, n)
	}
	got := scanView(t, f, "user_live")
	require.Len(t, got, pushes)
	for i, r := range got {
		require.Equal(t, int64(100+i), r.key)
		require.Equal(t, int64(i), r.value.I64)
	}
}
