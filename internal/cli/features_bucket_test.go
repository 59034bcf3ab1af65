package cli

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

// bucketFeatureDefs is a repository whose sources are written as
// USERS (a file) and ROUTES (a folder, the batch source of a push source),
// replaced with local paths or bucket locations. S3OVERRIDE is an optional
// s3_endpoint_override line.
const bucketFeatureDefs = `entities:
  - name: user
    join_keys: [user_id]
    value_type: Int64
  - name: route
    join_keys: [route_id]
    value_type: String
sources:
  - name: users_src
    type: file
    path: USERS
    timestamp_field: event_timestamp
    created_timestamp_column: created
S3OVERRIDE
  - name: routes_src
    type: file
    path: ROUTES
    timestamp_field: event_timestamp
  - name: routes_push
    type: push
    batch_source: routes_src
feature_views:
  - name: user_stats
    entities: [user]
    source: users_src
    ttl: 2d
    schema:
      - {name: clicks, dtype: Int64}
      - {name: score, dtype: Float64}
      - {name: embedding, dtype: Array(Float32)}
      - {name: tier, dtype: String}
  - name: route_stats
    entities: [route]
    source: routes_push
    ttl: 0s
    schema:
      - {name: delay, dtype: Float32}
`

var bucketDay = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// writeBucketFeatureData writes the sources' Parquet files under dir:
// users.parquet (several row groups, so that a scan crosses ranged reads)
// and routes/ (three files), plus entities.parquet for historical
// retrieval.
func writeBucketFeatureData(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "routes"), 0o755))
	write := func(name string, cols []offline.Column, n int, row func(i int) []feature.Value) {
		f, err := os.Create(filepath.Join(dir, name))
		require.NoError(t, err)
		w, err := offline.NewWriter(f, cols)
		require.NoError(t, err)
		for i := range n {
			require.NoError(t, w.Write(row(i)))
		}
		require.NoError(t, w.Close())
		require.NoError(t, f.Close())
	}
	ts := feature.Type{Kind: feature.KindUnixTimestamp}
	write("users.parquet", []offline.Column{
		{Name: "event_timestamp", Type: ts},
		{Name: "created", Type: ts},
		{Name: "user_id", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "clicks", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "score", Type: feature.Type{Kind: feature.KindFloat64}},
		{Name: "embedding", Type: feature.Type{Kind: feature.KindFloat32, List: true}},
		{Name: "tier", Type: feature.Type{Kind: feature.KindString}},
	}, 70_000, func(i int) []feature.Value {
		// 4 days of rows for 700 users; some ties on the event time broken
		// by the created time, some nulls.
		ev := bucketDay.Add(time.Duration(i/2) * 5 * time.Second)
		emb := make([]float32, 8)
		for j := range emb {
			emb[j] = float32(i*8+j) / 7
		}
		score := feature.Value{F64: float64(i) / 3}
		if i%97 == 0 {
			score = feature.Value{Null: true}
		}
		return []feature.Value{
			{I64: ev.UnixNano()},
			{I64: ev.Add(time.Duration(i%2) * time.Second).UnixNano()},
			{I64: int64(i % 700)},
			{I64: int64(i)},
			score,
			{F32s: emb},
			{S: fmt.Sprintf("tier-%d", i%5)},
		}
	})
	for f := range 3 {
		write(fmt.Sprintf("routes/part-%d.parquet", f), []offline.Column{
			{Name: "event_timestamp", Type: ts},
			{Name: "route_id", Type: feature.Type{Kind: feature.KindString}},
			{Name: "delay", Type: feature.Type{Kind: feature.KindFloat32}},
		}, 500, func(i int) []feature.Value {
			return []feature.Value{
				{I64: bucketDay.Add(time.Duration(f*500+i) * 7 * time.Minute).UnixNano()},
				{S: fmt.Sprintf("r%d", i%40)},
				{F64: float64(f*1000+i) / 4},
			}
		})
	}
	write("entities.parquet", []offline.Column{
		{Name: "user_id", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "route_id", Type: feature.Type{Kind: feature.KindString}},
		{Name: "event_timestamp", Type: ts},
	}, 3000, func(i int) []feature.Value {
		return []feature.Value{
			{I64: int64(i*7) % 750},
			{S: fmt.Sprintf("r%d", i%45)},
			{I64: bucketDay.Add(time.Duration(i) * 113 * time.Second).UnixNano()},
		}
	})
}

// writeBucketFeatureRepo writes a repository reading its sources at users
// and routes.
func writeBucketFeatureRepo(t *testing.T, users, routes, override string) string {
	t.Helper()
	dir := t.TempDir()
	defs := strings.NewReplacer("USERS", users, "ROUTES", routes).Replace(bucketFeatureDefs)
	line := ""
	if override != "" {
		line = "    s3_endpoint_override: " + override
	}
	defs = strings.Replace(defs, "S3OVERRIDE\n", line+"\n", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(defs), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "feature_store.yaml"),
		[]byte("project: bucket_test\nonline_store:\n  type: embedded\n  path: data/online.db\n"), 0o644))
	return dir
}

// dumpOnline returns every bucket, key and value of an embedded online
// store file.
func dumpOnline(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer db.Close()
	out := map[string]map[string]string{}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			m := map[string]string{}
			out[string(name)] = m
			return b.ForEach(func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			})
		})
	}))
	return out
}

// lastSuccess is the wall-clock time of a view's last run in its state.
var lastSuccess = regexp.MustCompile(`"last_success":"[^"]*"`)

// sameOnline fails unless two online store dumps hold the same bytes,
// the time of each view's last run aside.
func sameOnline(t *testing.T, want, got map[string]map[string]string) {
	t.Helper()
	require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "online store buckets")
	for name, w := range want {
		g := got[name]
		require.Equal(t, len(w), len(g), "rows in %s", name)
		for k, v := range w {
			gv, ok := g[k]
			require.True(t, ok, "%s: key %q missing", name, k)
			if name == "_meta" {
				v, gv = lastSuccess.ReplaceAllString(v, ""), lastSuccess.ReplaceAllString(gv, "")
			}
			require.True(t, v == gv, "%s: key %q: the row from the bucket differs from the row from disk", name, k)
		}
	}
}

// TestFeaturesFromBuckets materializes (windowed, then incremental) and
// runs a point-in-time retrieval from Parquet sources in a bucket of each
// store, and from the same files on disk: the online store files hold the
// same bytes, and the retrieval writes the same Parquet file. No
// credential value appears in any output, nor in the errors of a missing
// source and a wrong key.
func TestFeaturesFromBuckets(t *testing.T) {
	data := t.TempDir()
	writeBucketFeatureData(t, data)
	run := func(repo string, args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Run(t.Context(), append(args, "--repo", repo), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	steps := func(t *testing.T, repo string) (string, []string) {
		t.Helper()
		var outputs []string
		for _, args := range [][]string{
			{"features", "materialize", "2026-03-01", "2026-03-02T12:00:00"},
			{"features", "materialize-incremental", "2026-03-04"},
			{"features", "materialize-incremental", "2026-03-06"},
		} {
			code, out := run(repo, args...)
			require.Equal(t, 0, code, "%v: %s", args, out)
			outputs = append(outputs, out)
		}
		pit := filepath.Join(t.TempDir(), "pit.parquet")
		code, out := run(repo, "features", "historical", "--entities", filepath.Join(data, "entities.parquet"),
			"--features", "user_stats:clicks,user_stats:score,user_stats:embedding,user_stats:tier,route_stats:delay",
			"-o", pit, "--log-level", "debug")
		require.Equal(t, 0, code, out)
		return pit, append(outputs, out)
	}

	local := writeBucketFeatureRepo(t, filepath.Join(data, "users.parquet"), filepath.Join(data, "routes"), "")
	localPIT, _ := steps(t, local)
	localOnline := dumpOnline(t, filepath.Join(local, "data", "online.db"))
	require.Len(t, localOnline["view/user_stats"], 700)
	require.Len(t, localOnline["view/route_stats"], 40)
	localPITBytes, err := os.ReadFile(localPIT)
	require.NoError(t, err)

	for _, tt := range objstoretest.Stores {
		t.Run(tt.Name, func(t *testing.T) {
			srv := tt.Start(t)
			srv.Setenv(t)
			objstoretest.Upload(t, srv.Open(t, ""), data, "offline")
			users, routes, override := srv.URI("offline/users.parquet"), srv.URI("offline/routes")+"/", ""
			if tt.Name == "s3" {
				// Feast's form: the endpoint beside an AWS-style path.
				endpoint, _, _ := strings.Cut(strings.TrimPrefix(users, "s3://"), "/")
				users, override = "s3://"+srv.Bucket+"/offline/users.parquet", "http://"+endpoint
			}
			repo := writeBucketFeatureRepo(t, users, routes, override)
			pit, outputs := steps(t, repo)

			sameOnline(t, localOnline, dumpOnline(t, filepath.Join(repo, "data", "online.db")))
			got, err := os.ReadFile(pit)
			require.NoError(t, err)
			require.True(t, bytes.Equal(localPITBytes, got), "the point-in-time result from the bucket differs from the one from disk")

			// A source that does not exist, and (for the stores that check)
			// a wrong key: refused, without a credential value.
			missing := writeBucketFeatureRepo(t, srv.URI("offline/nope.parquet"), routes, "")
			code, out := run(missing, "features", "materialize", "2026-03-01", "2026-03-02")
			require.Equal(t, 1, code, out)
			require.Contains(t, out, "nope.parquet")
			outputs = append(outputs, out)
			if tt.Name == "azure" {
				t.Setenv("AZURE_STORAGE_KEY", "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk=")
				code, out := run(repo, "features", "materialize", "2026-03-01", "2026-03-02", "--overwrite")
				require.Equal(t, 1, code, out)
				outputs = append(outputs, out)
			}
			for _, out := range outputs {
				for _, s := range srv.Secrets {
					require.NotContains(t, out, s, "a credential value appears in the output")
				}
			}
		})
	}
}
