package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
)

// TestFeaturesDescribeStreamLag: describe shows a stream feature view's
// aggregations and its stream's lag (now minus the newest applied event
// time the aggregators recorded), and the stream source's subject.
func TestFeaturesDescribeStreamLag(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "feature_store.yaml"), []byte("project: p\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(`
entities: [{name: route, join_keys: [route_id], value_type: String}]
sources:
  - {name: deliveries, type: stream, stream: D, subject: deliveries.events, timestamp_field: ts}
stream_feature_views:
  - name: route_live
    entities: [route]
    source: deliveries
    allowed_lateness: 2m
    aggregations:
      - {name: deliveries_10m, function: count, time_window: 10m}
`), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	st, err := embedded.Open(filepath.Join(dir, "data", "online.db"), embedded.Options{})
	require.NoError(t, err)
	b, _ := json.Marshal(feature.ViewState{NewestEventTS: time.Now().Add(-90 * time.Second), LastSuccess: time.Now()})
	require.NoError(t, st.PutMeta(t.Context(), feature.ViewStateName("route_live"), b))
	require.NoError(t, st.Close())

	code, out, errOut := runFeaturesCLI(t, "features", "describe", "route_live", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "stream: tile 1m0s, allowed lateness 2m0s, late events: drop (counted)\naggregations:\n  deliveries_10m = count() over 10m0s\n")
	require.Regexp(t, `stream lag: 1m3\d\.\d+s`, out)

	code, out, errOut = runFeaturesCLI(t, "features", "describe", "deliveries", "--repo", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "type: stream\n")
	require.Contains(t, out, "subject: deliveries.events\n")
}
