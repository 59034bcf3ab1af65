package driftwatch_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/driftwatch"
	"github.com/sluice-ml/sluice/internal/gateway/release/releasetest"
)

// service is the test's service: a number and a string feature, one
// output.
func service(cfg config.Service) releasetest.Service {
	return releasetest.Service{Cfg: cfg, Outs: []string{"eta_prediction"}, Feats: []release.Feature{
		{Ref: "user_stats:rating", Column: 0, Type: feature.Type{Kind: feature.KindFloat64}},
		{Ref: "user_stats:name", Column: 1, Type: feature.Type{Kind: feature.KindString}},
	}}
}

func drifted(interval time.Duration) config.Service {
	return config.Service{Name: "eta", Drift: &config.Drift{
		RecordFor: config.Duration(time.Hour), Window: config.Duration(time.Hour), Interval: config.Duration(interval),
		PSIThreshold: 0.25, KSAlpha: 0.01,
	}}
}

// TestFactoryCarriesTheWatchOver: no drift block, no hook; the same block
// gets the previous watch back; another block a new one.
func TestFactoryCarriesTheWatchOver(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := driftwatch.Factory(driftwatch.Options{Logger: slog.New(slog.DiscardHandler), Base: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})

	h, err := f(service(config.Service{Name: "eta"}), nil)
	require.NoError(t, err)
	require.Nil(t, h)

	first, err := f(service(drifted(30*time.Second)), nil)
	require.NoError(t, err)
	require.Equal(t, driftwatch.Kind, first.Kind())
	v := first.Status().(driftwatch.View)
	require.Equal(t, "recording", v.ReferenceFrom, "no reference file: live traffic is recorded")
	require.Equal(t, now.Add(time.Hour), v.RecordingUntil)

	same, err := f(service(drifted(30*time.Second)), first)
	require.NoError(t, err)
	require.Same(t, first, same)

	other, err := f(service(drifted(time.Minute)), first)
	require.NoError(t, err)
	require.NotSame(t, first, other)
	require.False(t, other.(*driftwatch.Watch).FeedsFallback("eta_prediction"), "feed_fallback is off")
}
