package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFeaturesDescribeOnDemand shows the example's on-demand view and
// its request source, and lists the view with the feature views.
func TestFeaturesDescribeOnDemand(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "examples", "parcel-eta", "features")
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".yaml" {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
		}
	}
	code, out, errOut := runFeaturesCLI(t, "features", "describe", "eta_adjustments", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "on-demand feature view: eta_adjustments\nsources: route_features, dispatch_request\njoin keys: route_id\n"+
		"request fields:\n  route_delay_factor: Float32\n  weather_factor: Float32\n"+
		"features:\n  route_delay_min: Float64 = distance_km * route_delay_factor\n")

	code, out, errOut = runFeaturesCLI(t, "features", "describe", "dispatch_request", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "source: dispatch_request\ntype: request\nschema:\n  route_delay_factor: Float32\n  weather_factor: Float32\n", out)

	code, out, errOut = runFeaturesCLI(t, "features", "list", "views", "--repo", dir, "--no-freshness")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `eta_adjustments\s+route_features,dispatch_request\s+2\s+route_id`, out)

	code, out, errOut = runFeaturesCLI(t, "features", "plan", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "+ on-demand feature view 'eta_adjustments'")
	require.Contains(t, out, "+ source 'dispatch_request'")
}
