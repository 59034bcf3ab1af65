package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// TestGenerateAndJoin generates a small data set for the example
// repository, checks it is deterministic and has late and duplicate rows,
// and runs a point-in-time join over it with the parcel_eta service.
func TestGenerateAndJoin(t *testing.T) {
	repoDir := t.TempDir()
	copyDefinitions(t, repoDir)
	args := []string{"-out", filepath.Join(repoDir, "data"), "-users", "50", "-packages", "40", "-routes", "30", "-days", "20", "-seed", "7", "-end", "2026-02-01T00:00:00Z"}
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), args, &out))
	require.Contains(t, out.String(), "user_stats.parquet")
	first, err := os.ReadFile(filepath.Join(repoDir, "data", "route_features", "part-00000.parquet"))
	require.NoError(t, err)
	require.NoError(t, run(t.Context(), args, &out))
	second, err := os.ReadFile(filepath.Join(repoDir, "data", "route_features", "part-00000.parquet"))
	require.NoError(t, err)
	require.Equal(t, first, second, "same seed, same data")

	repo, err := registry.Load(t.Context(), repoDir)
	require.NoError(t, err)
	end := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	late, dups, rows := 0, 0, 0
	seen := map[string]bool{}
	for _, name := range []string{"user_stats", "package_features", "route_features"} {
		err := offline.ScanView(t.Context(), repo, repo.Views[name], end.AddDate(0, 0, -30), end, func(r offline.Row) error {
			rows++
			if r.CreatedTS-r.EventTS >= int64(time.Hour) {
				late++
			}
			k := fmt.Sprint(name, r.Keys[0].I64, r.EventTS)
			if seen[k] {
				dups++
			}
			seen[k] = true
			return nil
		})
		require.NoError(t, err)
	}
	require.Positive(t, rows)
	require.Positive(t, late, "some late rows")
	require.Positive(t, dups, "some duplicate rows")

	var csv strings.Builder
	// route_delay_factor is request data for the on-demand feature
	// eta_adjustments:route_delay_min (empty: not given).
	csv.WriteString("user_id,package_id,route_id,event_timestamp,label,route_delay_factor\n")
	for i := range 20 {
		factor := ""
		if i%5 != 4 {
			factor = fmt.Sprint(0.25 * float64(1+i%4))
		}
		fmt.Fprintf(&csv, "%d,%d,%d,%s,%d,%s\n", 1+i%50, 1+i%40, 1+i%30, end.Add(-time.Duration(i)*time.Hour).Format(time.RFC3339), i, factor)
	}
	ents := filepath.Join(repoDir, "entities.csv")
	require.NoError(t, os.WriteFile(ents, []byte(csv.String()), 0o644))
	refs, err := repo.ResolveFeatures(nil, "parcel_eta")
	require.NoError(t, err)
	dst := filepath.Join(repoDir, "train.parquet")
	require.NoError(t, offline.Historical(t.Context(), repo, ents, refs, dst, offline.Options{TempDir: t.TempDir()}))
	st, err := os.Stat(dst)
	require.NoError(t, err)
	require.Positive(t, st.Size())

	// The on-demand feature is computed from each row's joined distance
	// and its request data: null where either is missing.
	type trainRow struct {
		Distance *float32 `parquet:"distance_km,optional"`
		Factor   *string  `parquet:"route_delay_factor,optional"`
		Delay    *float64 `parquet:"route_delay_min,optional"`
	}
	rows2, err := parquet.ReadFile[trainRow](dst)
	require.NoError(t, err)
	require.Len(t, rows2, 20)
	computed := 0
	for i, r := range rows2 {
		if r.Distance == nil || r.Factor == nil || *r.Factor == "" {
			require.Nil(t, r.Delay, "row %d", i)
			continue
		}
		f, err := strconv.ParseFloat(*r.Factor, 64)
		require.NoError(t, err)
		require.NotNil(t, r.Delay, "row %d", i)
		require.InDelta(t, float64(*r.Distance)*float64(float32(f)), *r.Delay, 1e-12, "row %d", i)
		computed++
	}
	require.Positive(t, computed)

	// The stream view's feature comes from the generated delivery log:
	// null where the window holds no delivery (always before the log's
	// first hours), a value where deliveries arrived in it.
	type streamRow struct {
		Mean *float64 `parquet:"delay_mean_10m,optional"`
	}
	srows, err := parquet.ReadFile[streamRow](dst)
	require.NoError(t, err)
	require.Len(t, srows, 20)
	recent := 0
	for i, r := range srows {
		if time.Duration(i)*time.Hour > deliveryHistory {
			require.Nil(t, r.Mean, "row %d lies before the delivery log", i)
		} else if r.Mean != nil {
			require.Positive(t, *r.Mean, "row %d", i)
			recent++
		}
	}
	require.Positive(t, recent, "some training rows see deliveries of their last 10 minutes")
}

// TestEveryEntityFresh checks what the demo relies on: every entity's
// newest row is within its view's ttl (well within: the bound the
// generator promises) of -end, so every id in range gets a value.
func TestEveryEntityFresh(t *testing.T) {
	repoDir := t.TempDir()
	copyDefinitions(t, repoDir)
	const users, packages, routes = 300, 400, 200
	end := time.Date(2026, 3, 1, 12, 34, 56, 0, time.UTC)
	args := []string{
		"-out", filepath.Join(repoDir, "data"), "-users", fmt.Sprint(users), "-packages", fmt.Sprint(packages),
		"-routes", fmt.Sprint(routes), "-days", "90", "-end", end.Format(time.RFC3339),
	}
	require.NoError(t, run(t.Context(), args, new(bytes.Buffer)))
	repo, err := registry.Load(t.Context(), repoDir)
	require.NoError(t, err)
	for _, v := range []struct {
		view   string
		n      int
		recent time.Duration
	}{
		{"user_stats", users, 24 * time.Hour},
		{"user_embedding", users, 3 * 24 * time.Hour},
		{"package_features", packages, packageRecent},
		{"route_features", routes, 10 * time.Minute},
	} {
		newest := map[int64]int64{}
		err := offline.ScanView(t.Context(), repo, repo.Views[v.view], end.AddDate(0, 0, -91), end.Add(time.Second), func(r offline.Row) error {
			newest[r.Keys[0].I64] = max(newest[r.Keys[0].I64], r.EventTS)
			if r.CreatedTS > end.UnixNano() {
				// Materialized up to -end, such a row would not be there yet.
				t.Errorf("%s %d: a row created %s after -end", v.view, r.Keys[0].I64, time.Duration(r.CreatedTS-end.UnixNano()))
			}
			return nil
		})
		require.NoError(t, err)
		require.Len(t, newest, v.n, v.view)
		ttl := repo.Views[v.view].TTL
		for k, ts := range newest {
			age := end.Sub(time.Unix(0, ts))
			require.GreaterOrEqual(t, age, time.Duration(0), "%s %d: event after -end", v.view, k)
			require.LessOrEqual(t, age, v.recent, "%s %d: newest row %s old", v.view, k, age)
			require.Less(t, v.recent, ttl, v.view)
		}
	}
}

// copyDefinitions copies the example repository's definition files (every
// *.yaml beside gen/) into dir, so the generated data is joined with the
// definitions the demo serves.
func copyDefinitions(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644))
	}
}
