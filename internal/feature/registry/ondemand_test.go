package registry

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnDemandSnapshotDiff: plan shows an on-demand view added, its
// expression or dtype changed and a feature removed, and the request
// source with its schema.
func TestOnDemandSnapshotDiff(t *testing.T) {
	good, err := os.ReadFile("testdata/good/ondemand.good.yaml")
	require.NoError(t, err)
	load1 := func(defs string) *Snapshot {
		t.Helper()
		dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "defs.yaml": defs})
		r, err := Load(t.Context(), dir)
		require.NoError(t, err)
		return r.Snapshot()
	}
	before := load1(string(good))
	require.Len(t, before.OnDemandViews, 1)
	require.Equal(t, "eta_adjust", before.OnDemandViews[0].Name)
	i := slicesIndex(before.Sources, "dispatch")
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, "request", before.Sources[i].Type)
	require.Equal(t, []SnapshotField{{Name: "weather_factor", Dtype: "Float64"}, {Name: "priority", Dtype: "Int64"}}, before.Sources[i].Schema)

	changes := Diff(nil, before)
	require.Contains(t, changes, Change{Op: OpAdd, Kind: onDemandKind, Name: "eta_adjust"})

	edited := strings.Replace(string(good), `expression: "distance_km * weather_factor"`, `expression: "distance_km * weather_factor * 2"`, 1)
	edited = strings.Replace(edited, `{name: long_route, dtype: Bool, expression: "distance_km > 100.0"}`, ``, 1)
	edited = strings.Replace(edited, `{name: stops_left, dtype: Int64,`, `{name: stops_left, dtype: Float64,`, 1)
	after := load1(edited)
	var got *Change
	for _, c := range Diff(before, after) {
		if c.Kind == onDemandKind {
			got = &c
		}
	}
	require.NotNil(t, got)
	require.Equal(t, OpChange, got.Op)
	require.Equal(t, []string{
		"schema: ~ weather_km Float64 = distance_km * weather_factor → Float64 = distance_km * weather_factor * 2",
		"schema: ~ stops_left Int64 = route_stats__stops - priority → Float64 = route_stats__stops - priority",
		"schema: - long_route",
	}, got.Details)
	require.Empty(t, Diff(after, after))
}

func slicesIndex(s []SnapshotSource, name string) int {
	for i := range s {
		if s[i].Name == name {
			return i
		}
	}
	return -1
}
