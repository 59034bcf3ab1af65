package registry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

// exampleDir is the parcel_eta example repository.
const exampleDir = "../../../examples/parcel-eta/features"

func TestLoadExample(t *testing.T) {
	r, err := Load(t.Context(), exampleDir)
	require.NoError(t, err)
	require.Equal(t, "parcel_eta", r.Project)
	require.Equal(t, "data/registry.json", r.Config.Registry)
	require.Equal(t, "embedded", r.Config.Online.Type)
	require.Equal(t, "data/online.db", r.Config.Online.Path)
	require.Equal(t, "file", r.Config.Offline.Type)

	// The model's three inputs: 128, 64 and 32 floats.
	floats := func(views ...string) int {
		n := 0
		for _, v := range views {
			for _, f := range r.Views[v].Schema {
				require.Equal(t, feature.KindFloat32, f.Type.Kind, "%s:%s", v, f.Name)
				if f.Type.List {
					n += f.Type.Len
				} else {
					n++
				}
			}
		}
		return n
	}
	require.Equal(t, 128, floats("user_stats", "user_embedding"))
	require.Equal(t, 64, floats("package_features"))
	require.Equal(t, 32, floats("route_features"))

	require.Equal(t, 7*24*time.Hour, r.Views["user_stats"].TTL)
	require.Equal(t, 30*24*time.Hour, r.Views["user_embedding"].TTL)
	require.Equal(t, 48*time.Hour, r.Views["package_features"].TTL)
	rf := r.Views["route_features"]
	require.Equal(t, 6*time.Hour, rf.TTL)
	require.Equal(t, "route_push", rf.Source)
	require.Equal(t, feature.SourcePush, r.Sources["route_push"].Kind)
	require.Equal(t, "route_source", r.Sources["route_push"].BatchSource)
	require.NotNil(t, rf.Hot)
	require.Equal(t, "route_features__hot", rf.Hot.View)
	require.Equal(t, time.Hour, rf.Hot.TTL)
	require.Equal(t, int64(1), rf.Hot.Keys[0].I64)

	for name, path := range map[string]string{
		"user_stats_source": "data/user_stats.parquet", "user_embedding_source": "data/user_embedding.parquet",
		"package_source": "data/package_features.parquet", "route_source": "data/route_features/",
	} {
		s := r.Sources[name]
		require.NotNil(t, s, name)
		require.Equal(t, path, s.Path)
		require.Equal(t, "event_timestamp", s.TimestampField)
		require.Equal(t, "created", s.CreatedTimestampColumn)
	}

	names, kinds := r.JoinKeys("package_features")
	require.Equal(t, []string{"package_id"}, names)
	require.Equal(t, []feature.Kind{feature.KindInt64}, kinds)

	refs, err := r.ResolveFeatures(nil, "parcel_eta")
	require.NoError(t, err)
	total := 0
	for _, ref := range refs {
		total += len(ref.Features)
	}
	require.Equal(t, 50+1+7+9+1+1, total)
	require.Equal(t, []string{"user_stats", "user_embedding", "package_features", "route_features", "eta_adjustments", "route_live"},
		[]string{refs[0].View, refs[1].View, refs[2].View, refs[3].View, refs[4].View, refs[5].View})
	require.Equal(t, []string{"route_delay_min"}, refs[4].Features)
	require.Equal(t, []string{"delay_mean_10m"}, refs[5].Features, "the fallback rule reads the stream feature")
	require.NotNil(t, r.OnDemand("eta_adjustments"), "compiled once, with the snapshot")
}
