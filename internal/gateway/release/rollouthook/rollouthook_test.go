package rollouthook_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/releasetest"
	"github.com/sluice-ml/sluice/internal/gateway/release/rollouthook"
	"github.com/sluice-ml/sluice/internal/match"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// service is the test's service: one number feature.
func service(cfg config.Service) releasetest.Service {
	return releasetest.Service{Cfg: cfg, Feats: []release.Feature{
		{Ref: "user_stats:rating", Column: 0, Type: feature.Type{Kind: feature.KindFloat64}},
	}}
}

// call is the part of a release.Call that Steer uses; the rest panics.
type call struct {
	release.Call
	header         http.Header
	version        string
	group, arm     string
	backendChanged bool
}

func (c *call) Header() http.Header        { return c.header }
func (c *call) Values() map[string]string  { return nil }
func (c *call) RequestID() string          { return "req-1" }
func (c *call) SetVersion(v string)        { c.version = v }
func (c *call) SetGroup(group, arm string) { c.group, c.arm = group, arm }
func (c *call) SetBackend(string)          { c.backendChanged = true }

// rolledOut is a service whose premium users get the candidate first.
func rolledOut(minRequests int) config.Service {
	premium := "premium"
	return config.Service{Name: "eta", Rollout: &rollout.Config{
		Stable: rollout.Target{Version: "1"}, Candidate: rollout.Target{Version: "2"},
		Stages: []rollout.Stage{{
			Name:        "premium",
			Groups:      []rollout.Group{{Name: "premium", Headers: []match.HeaderMatch{{Name: "x-user-type", Exact: &premium}}}},
			MinDuration: config.Duration(time.Hour),
		}},
		MinRequests: minRequests,
	}}
}

// TestFactoryCarriesTheRolloutOver: no rollout block, no hook; the same
// block gets the previous rollout back; another block a new one.
func TestFactoryCarriesTheRolloutOver(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := rollouthook.Factory(rollouthook.Options{Base: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})

	h, err := f(service(config.Service{Name: "eta"}), nil)
	require.NoError(t, err)
	require.Nil(t, h)

	first, err := f(service(rolledOut(100)), nil)
	require.NoError(t, err)
	require.Equal(t, rollouthook.Kind, first.Kind())
	require.Equal(t, "eta", first.Status().(rollout.Status).Service)

	same, err := f(service(rolledOut(100)), first)
	require.NoError(t, err)
	require.Same(t, first, same)

	other, err := f(service(rolledOut(200)), first)
	require.NoError(t, err)
	require.NotSame(t, first, other)
	first.Close()
}

// TestSteerPicksTheVersion: the first stage's group goes to the
// candidate, everyone else to the stable version.
func TestSteerPicksTheVersion(t *testing.T) {
	f := rollouthook.Factory(rollouthook.Options{Base: slog.New(slog.DiscardHandler), Now: time.Now})
	h, err := f(service(rolledOut(100)), nil)
	require.NoError(t, err)
	defer h.Close()

	c := &call{header: http.Header{"X-User-Type": {"premium"}}}
	h.Steer(c)
	require.Equal(t, "2", c.version)
	require.Equal(t, "premium", c.group)
	require.Equal(t, string(rollout.ArmCandidate), c.arm)
	require.False(t, c.backendChanged, "no arm names a backend")

	c = &call{header: http.Header{}}
	h.Steer(c)
	require.Equal(t, "1", c.version)
	require.Equal(t, rollout.AllGroup, c.group)
	require.Equal(t, string(rollout.ArmStable), c.arm)
}
