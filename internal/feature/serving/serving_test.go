package serving

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOneStoreReadPerRequest(t *testing.T) {
	f := newFixture(t, Options{})
	f.Seed(t)
	_, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		FeatureService: "eta_svc",
		Entities:       map[string][]feature.Value{"user_id": {i64(1), i64(2), i64(3)}, "route_id": {str("r1"), str("r2"), str("r3")}},
	})
	require.NoError(t, err)
	require.Equal(t, 1, f.Store.Reads)
	require.Equal(t, 6, f.Store.Keys, "3 rows × 2 views")
}

func TestGoAPI(t *testing.T) {
	f := newFixture(t, Options{})
	f.Seed(t)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_stats:emb", "user_stats:clicks"},
		Entities: map[string][]feature.Value{"user_id": {i64(1), i64(4)}},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"user_id", "emb", "clicks"}, resp.FeatureNames)
	require.Equal(t, 1, resp.EntityColumns)
	require.Equal(t, []float32{1, 2.5, -3}, resp.Results[1].Values[0].F32s)
	require.Equal(t, StatusPresent, resp.Results[2].Statuses[0])
	require.Equal(t, int64(7), resp.Results[2].Values[0].I64)
	require.Equal(t, now.Add(-10*time.Minute), resp.Results[2].EventTimestamps[0])
	require.Equal(t, StatusOutsideMaxAge, resp.Results[2].Statuses[1])
	require.True(t, resp.Results[2].Values[1].Null, "withheld")
	require.Equal(t, "OUTSIDE_MAX_AGE", StatusOutsideMaxAge.String())
}

func TestRegistrySwap(t *testing.T) {
	f := newFixture(t, Options{})
	f.Seed(t)
	req := &Request{Features: []string{"user_stats:clicks"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}}
	_, err := f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)

	// A new snapshot without user_stats: the cached plan of the old one
	// must not answer.
	next := servingtest.Repo(t)
	delete(next.Views, "user_stats")
	f.Hold.P.Store(next)
	_, err = f.srv.GetOnlineFeatures(t.Context(), req)
	servingtest.RequireReason(t, err, ReasonUnknownView, "user_stats")

	f.Hold.P.Store(nil)
	_, err = f.srv.GetOnlineFeatures(t.Context(), req)
	servingtest.RequireReason(t, err, ReasonRegistryNotLoaded, "registry")
}

// A released answer's memory serves the next read: that read answers
// exactly what a server that never reused memory answers, whatever the
// released one held (strings, lists, other rows' statuses).
func TestReleaseReusesMemory(t *testing.T) {
	f, ref := newFixture(t, Options{}), newFixture(t, Options{})
	f.Seed(t)
	ref.Seed(t)
	all := []string{"user_stats:clicks", "user_stats:score", "user_stats:name", "user_stats:emb"}
	first, err := f.srv.GetOnlineFeatures(t.Context(), &Request{Features: all, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2), i64(3), i64(4)}}})
	require.NoError(t, err)
	f.srv.Release(first)
	for _, ids := range [][]feature.Value{{i64(4), i64(3), i64(1)}, {i64(2)}, {i64(3), i64(3), i64(1), i64(2), i64(4)}} {
		req := &Request{Features: []string{"user_stats:name", "user_stats:emb", "user_stats:score"}, Entities: map[string][]feature.Value{"user_id": ids}}
		got, err := f.srv.GetOnlineFeatures(t.Context(), req)
		require.NoError(t, err)
		want, err := ref.srv.GetOnlineFeatures(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, want.FeatureNames, got.FeatureNames)
		require.Equal(t, want.Results, got.Results)
		f.srv.Release(got)
	}
	f.srv.Release(&Response{}) // not built by a read: nothing happens
}
