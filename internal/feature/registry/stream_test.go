package registry

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

// TestStreamViewCompilesAndDiffs: a stream feature view compiles into a
// view whose schema is its aggregations (count Int64, the others
// Float64) with its tile arithmetic, and plan shows an aggregation
// added, changed and removed.
func TestStreamViewCompilesAndDiffs(t *testing.T) {
	good, err := os.ReadFile("testdata/good/stream.good.yaml")
	require.NoError(t, err)
	load1 := func(defs string) *Repo {
		t.Helper()
		dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "defs.yaml": defs})
		r, err := Load(t.Context(), dir)
		require.NoError(t, err)
		return r
	}
	r := load1(string(good))
	v := r.Views["route_live"]
	require.NotNil(t, v)
	require.NotNil(t, v.Stream)
	require.Equal(t, 2*time.Minute, v.Stream.AllowedLateness)
	require.Equal(t, []feature.Field{
		{Name: "deliveries_10m", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "delay_mean_10m", Type: feature.Type{Kind: feature.KindFloat64}},
		{Name: "delay_max_1h", Type: feature.Type{Kind: feature.KindFloat64}},
		{Name: "delay_sd_1h", Type: feature.Type{Kind: feature.KindFloat64}},
	}, v.Schema)
	require.NotNil(t, r.StreamSpec("route_live"))
	require.Equal(t, []string{"delay_min"}, r.StreamSpec("route_live").Columns)
	src := r.Sources["deliveries"]
	require.Equal(t, feature.SourceStream, src.Kind)
	require.Equal(t, &feature.StreamSource{
		URL: DefaultNATSURL, Stream: "DELIVERIES", Subject: "deliveries.events", Format: "json",
		Consumer: "sluice-deliveries", SequenceField: "seq",
	}, src.Stream)

	before := r.Snapshot()
	require.Contains(t, Diff(nil, before), Change{Op: OpAdd, Kind: streamKind, Name: "route_live"})
	edited := strings.Replace(string(good), "{name: delay_max_1h, column: delay_min, function: max, time_window: 1h}",
		"{name: delay_max_1h, column: delay_min, function: max, time_window: 2h}", 1)
	edited = strings.Replace(edited, "      - {name: delay_sd_1h, column: delay_min, function: stddev, time_window: 1h}\n",
		"      - {name: delay_sum_1h, column: delay_min, function: sum, time_window: 1h}\n", 1)
	edited = strings.Replace(edited, "allowed_lateness: 2m", "allowed_lateness: 5m", 1)
	after := load1(edited).Snapshot()
	var got *Change
	for _, c := range Diff(before, after) {
		if c.Name == "route_live" {
			got = &c
		}
	}
	require.NotNil(t, got)
	require.Equal(t, OpChange, got.Op)
	require.Equal(t, []string{
		"aggregations: ~ delay_max_1h = max(delay_min) over 1h0m0s → max(delay_min) over 2h0m0s",
		"aggregations: + delay_sum_1h = sum(delay_min) over 1h0m0s",
		"aggregations: - delay_sd_1h",
		"allowed_lateness: \"2m0s\" → \"5m0s\"",
	}, got.Details)
	require.Empty(t, Diff(after, after))
}

// TestStreamViewFromSnapshot: the applied registry compiles back into
// the same stream source and view.
func TestStreamViewFromSnapshot(t *testing.T) {
	good, err := os.ReadFile("testdata/good/stream.good.yaml")
	require.NoError(t, err)
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "defs.yaml": string(good)})
	r, err := Load(t.Context(), dir)
	require.NoError(t, err)
	back, err := FromSnapshot(t.Context(), dir, []byte("project: p\n"), r.Snapshot())
	require.NoError(t, err)
	require.Empty(t, Diff(r.Snapshot(), back.Snapshot()))
	require.Equal(t, r.Views["route_live"], back.Views["route_live"])
}
