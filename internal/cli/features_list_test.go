package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writeListRepo adds a push source, a second view and a feature service
// to the materialize test repository.
func writeListRepo(t *testing.T) string {
	t.Helper()
	dir := writeMaterializeRepo(t)
	extra := `entities:
  - name: route
    join_keys: [route_id]
    value_type: String
    tags: {team: eta}
sources:
  - name: route_push
    type: push
feature_views:
  - name: route_live
    entities: [route]
    source: route_push
    schema:
      - {name: eta, dtype: Float64}
      - {name: stops, dtype: "Array(Int64)"}
feature_services:
  - name: ranker
    features:
      - user_stats
      - {view: route_live, features: [eta]}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "more.yaml"), []byte(extra), 0o644))
	return dir
}

func runFeaturesCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestFeaturesList(t *testing.T) {
	dir := writeListRepo(t)

	// Before any materialization: the embedded store is not created by
	// listing, and the views read as never updated (no ttl: never stale).
	code, out, errOut := runFeaturesCLI(t, "features", "list", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `ENTITY\s+JOIN KEY\s+TYPE\n(.*\n)*route\s+route_id\s+String\n(.*\n)*user\s+user_id\s+Int64`, out)
	require.Regexp(t, `route_push\s+push\s+-`, out)
	require.Regexp(t, `src\s+file\s+data/users.parquet\s+event_timestamp`, out)
	require.Regexp(t, `route_live\s+route\s+2\s+none\s+route_push\s+-\s+-\s+no ttl`, out)
	require.Regexp(t, `user_stats\s+user\s+1\s+1d\s+src\s+-\s+-\s+never`, out)
	require.Regexp(t, `ranker\s+2\s+user_stats,route_live`, out)
	require.NoFileExists(t, filepath.Join(dir, "data", "online.db"))

	// After materializing the data (event times 2026-03-01), user_stats
	// was just updated: fresh, its newest event the source's newest row.
	code, _, errOut = runFeaturesCLI(t, "features", "materialize", "2026-03-01", "2026-03-02", "--repo", dir, "--no-progress", "--views", "user_stats")
	require.Equal(t, 0, code, errOut)
	code, out, errOut = runFeaturesCLI(t, "features", "list", "views", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `user_stats\s+user\s+1\s+1d\s+src\s+\d+s ago\s+\d+d ago\s+fresh`, out)
	require.NotContains(t, out, "ENTITY", "only views were asked for")

	code, out, errOut = runFeaturesCLI(t, "features", "list", "feature-views", "--repo", dir, "-o", "json")
	require.Equal(t, 0, code, errOut)
	var l struct {
		Views []struct {
			Name      string `json:"name"`
			Freshness struct {
				Fresh       string    `json:"fresh"`
				LastUpdate  time.Time `json:"last_update"`
				NewestEvent time.Time `json:"newest_event_timestamp"`
			} `json:"freshness"`
		} `json:"feature_views"`
		Entities []any `json:"entities"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Empty(t, l.Entities)
	require.Len(t, l.Views, 2)
	require.Equal(t, "user_stats", l.Views[1].Name)
	require.Equal(t, "fresh", l.Views[1].Freshness.Fresh)
	require.WithinDuration(t, time.Now(), l.Views[1].Freshness.LastUpdate, time.Minute)
	require.Equal(t, time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC), l.Views[1].Freshness.NewestEvent)

	// --no-freshness reads no store.
	code, out, errOut = runFeaturesCLI(t, "features", "list", "views", "--repo", dir, "--no-freshness")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `user_stats\s+user\s+1\s+1d\s+src\s+-\s+-\s+unknown`, out)

	code, _, errOut = runFeaturesCLI(t, "features", "list", "widgets", "--repo", dir)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `unknown kind "widgets"`)
}

func TestFeaturesDescribe(t *testing.T) {
	dir := writeListRepo(t)
	code, out, errOut := runFeaturesCLI(t, "features", "describe", "user_stats", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "feature view: user_stats\nentities: user\nsource: src\nttl: 1d\nonline: true\nstale_policy: withhold\nfeatures:\n  clicks: Int64\nfreshness: never\n")

	code, out, errOut = runFeaturesCLI(t, "features", "describe", "ranker", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "feature service: ranker\nfeatures:\n  - user_stats:clicks\n  - route_live:eta\n", out)

	code, out, errOut = runFeaturesCLI(t, "features", "describe", "route", "--repo", dir, "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"name":"route","join_key":"route_id","value_type":"String","tags":{"team":"eta"}}`, out)

	code, out, errOut = runFeaturesCLI(t, "features", "describe", "route_push", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "source: route_push\ntype: push\n", out)

	code, _, errOut = runFeaturesCLI(t, "features", "describe", "nope", "--repo", dir)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `nothing named "nope"`)

	code, _, errOut = runFeaturesCLI(t, "features", "describe", "user_stats", "--kind", "services", "--repo", dir)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no service named "user_stats"`)
}
