package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

func retypedDefs(dtype string) string {
	return strings.Replace(strings.Replace(holderDefs, "TTL", "1h", 1), "dtype: Float32", "dtype: "+dtype, 1)
}

// Issue 22 item 3: apply refused a retype ("registry not written"), yet
// the server re-read the definition files and served it. Now what serves
// is the applied registry: files that differ from it are reported (error,
// metric, Pending), never served, at a reload and at a start; an apply
// (here: the registry written, as apply does) makes them serve.
func TestHolderServesWhatApplyAccepted(t *testing.T) {
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "d.yaml": retypedDefs("Float32")})
	r, err := Load(t.Context(), dir)
	require.NoError(t, err)
	regPath := r.Path(r.Config.Registry)
	require.NoError(t, WriteSnapshot(regPath, r.Snapshot())) // apply
	reg := prometheus.NewRegistry()
	h, err := NewHolder(t.Context(), dir, nil, reg)
	require.NoError(t, err)
	kind := func() feature.Kind { return h.Current().Views["v"].Schema[0].Type.Kind }
	require.Equal(t, feature.KindFloat32, kind())

	// The retype apply refused: written to the files, not applied.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(retypedDefs("Int64")), 0o600))
	before := h.Current()
	got, err := h.Reload(t.Context())
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "v:f Float32 → Int64")
	require.ErrorContains(t, err, "--allow-type-change")
	require.Same(t, before, got)
	require.Same(t, before, h.Current())
	require.Equal(t, feature.KindFloat32, kind())
	require.Len(t, h.Pending(), 1)
	require.InDelta(t, 1, testutil.ToFloat64(h.metrics.reloads.WithLabelValues("refused")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(h.metrics.pending), 0)

	// A restart serves the registry too, not the files.
	h2, err := NewHolder(t.Context(), dir, nil, nil)
	require.NoError(t, err)
	require.Equal(t, feature.KindFloat32, h2.Current().Views["v"].Schema[0].Type.Kind)
	require.Len(t, h2.Pending(), 1)
	require.Empty(t, Diff(before.Snapshot(), h2.Current().Snapshot()), "the registry compiles to what was applied")

	// apply --allow-type-change writes the registry: now it serves.
	r, err = Load(t.Context(), dir)
	require.NoError(t, err)
	require.NoError(t, WriteSnapshot(regPath, r.Snapshot()))
	got, err = h.Reload(t.Context())
	require.NoError(t, err)
	require.Equal(t, feature.KindInt64, got.Views["v"].Schema[0].Type.Kind)
	require.Empty(t, h.Pending())
	_, err = h2.Reload(t.Context())
	require.NoError(t, err)
	require.Equal(t, feature.KindInt64, h2.Current().Views["v"].Schema[0].Type.Kind)
}

// Without a registry (apply never ran) the files serve, but a retype is
// refused all the same: it needs apply --allow-type-change.
func TestHolderRefusesARetypeWithoutRegistry(t *testing.T) {
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "d.yaml": retypedDefs("Float32")})
	h, err := NewHolder(t.Context(), dir, nil, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(retypedDefs("String")), 0o600))
	_, err = h.Reload(t.Context())
	require.ErrorIs(t, err, ErrRefused)
	require.Equal(t, feature.KindFloat32, h.Current().Views["v"].Schema[0].Type.Kind)
	// Other changes still serve.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(strings.Replace(retypedDefs("Float32"), "ttl: 1h", "ttl: 2h", 1)), 0o600))
	r, err := h.Reload(t.Context())
	require.NoError(t, err)
	require.Equal(t, "2h0m0s", r.Views["v"].TTL.String())
}
