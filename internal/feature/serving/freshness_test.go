package serving

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

func TestOutsideMaxAgeWithheld(t *testing.T) {
	f := newFixture(t, Options{})
	// Exactly at the ttl is still fresh; a nanosecond past it is not.
	f.Put(t, "user_stats", i64(1), now.Add(-time.Hour), i64(1), f64(1), str("a"), feature.Value{F32s: []float32{1, 1, 1}})
	f.Put(t, "user_stats", i64(2), now.Add(-time.Hour-time.Nanosecond), i64(2), f64(2), str("b"), feature.Value{F32s: []float32{2, 2, 2}})
	f.Put(t, "user_flags", i64(2), now.Add(-3*time.Hour), feature.Value{Bool: true}, feature.Value{Ss: []string{"x"}})
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_stats:clicks", "user_flags:active"},
		Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2)}},
	})
	require.NoError(t, err)
	clicks, active := resp.Results[1], resp.Results[2]
	require.Equal(t, []Status{StatusPresent, StatusOutsideMaxAge}, clicks.Statuses)
	require.Equal(t, int64(1), clicks.Values[0].I64)
	require.True(t, clicks.Values[1].Null, "withhold: the stale value is not returned")
	require.Equal(t, now.Add(-time.Hour-time.Nanosecond), clicks.EventTimestamps[1])
	// user_flags has the flag policy: the value comes back, marked.
	require.Equal(t, []Status{StatusNotFound, StatusOutsideMaxAge}, active.Statuses)
	require.False(t, active.Values[1].Null)
	require.True(t, active.Values[1].Bool)
}

func TestStaleAlertAgainAfterInterval(t *testing.T) {
	clock := now
	f := newFixture(t, Options{Now: func() time.Time { return clock }, AlertInterval: time.Minute, StateCacheTTL: -1})
	f.SetState(t, "user_stats", now.Add(-2*time.Hour))
	req := &Request{Features: []string{"user_stats:clicks"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}}
	for _, step := range []time.Duration{0, 30 * time.Second, 31 * time.Second} {
		clock = clock.Add(step)
		_, err := f.srv.GetOnlineFeatures(t.Context(), req)
		servingtest.RequireReason(t, err, ReasonViewStale, "user_stats")
	}
	require.Equal(t, 2, strings.Count(f.Logs.String(), "stale_feature_alert"))
}

func TestEventTimestampIgnoresWithheldValues(t *testing.T) {
	f := newFixture(t, Options{})
	// A row from the request's future, but expired and withheld: the
	// request does not use it, so it is not refused.
	f.Put(t, "user_stats", i64(1), now.Add(-2*time.Hour), i64(1), f64(1), str("a"), feature.Value{F32s: []float32{1, 1, 1}})
	ts := now.Add(-5 * time.Hour)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_stats:clicks"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}, EventTimestamp: &ts,
	})
	require.NoError(t, err)
	require.Equal(t, StatusOutsideMaxAge, resp.Results[1].Statuses[0])
}

func TestHotCold(t *testing.T) {
	f := newFixture(t, Options{})
	// User 1: hot row 1 minute old (hit). User 5: hot row 10 minutes old,
	// past the hot ttl of 5m (miss, cold row). User 7: not in the hot
	// subset, not looked up there. User 1's hot row must win over its cold one.
	f.Put(t, "user_recent", i64(1), now.Add(-20*time.Minute), i64(100))
	f.Put(t, "user_recent__hot", i64(1), now.Add(-time.Minute), i64(101))
	f.Put(t, "user_recent", i64(5), now.Add(-20*time.Minute), i64(500))
	f.Put(t, "user_recent__hot", i64(5), now.Add(-10*time.Minute), i64(501))
	f.Put(t, "user_recent", i64(7), now.Add(-20*time.Minute), i64(700))
	f.Put(t, "user_recent__hot", i64(7), now.Add(-time.Minute), i64(701))

	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_recent:recent"},
		Entities: map[string][]feature.Value{"user_id": {i64(1), i64(5), i64(7), i64(9)}},
	})
	require.NoError(t, err)
	col := resp.Results[1]
	require.Equal(t, int64(101), col.Values[0].I64, "hot hit")
	require.Equal(t, now.Add(-time.Minute), col.EventTimestamps[0])
	require.Equal(t, int64(500), col.Values[1].I64, "hot expired: cold")
	require.Equal(t, int64(700), col.Values[2].I64, "not a hot entity: cold")
	require.Equal(t, StatusNotFound, col.Statuses[3])
	require.Equal(t, 1, f.Store.Reads)
	require.Equal(t, 4+2, f.Store.Keys, "4 cold keys and the 2 hot members")
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_hot_reads_total", map[string]string{"view": "user_recent", "outcome": "hit"}))
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_hot_reads_total", map[string]string{"view": "user_recent", "outcome": "miss"}))

	// Hot row missing for a hot member: cold.
	delete(f.Store.Rows, servingtest.RowKey(hotKey(t, 1)))
	resp, err = f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_recent:recent"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}},
	})
	require.NoError(t, err)
	require.Equal(t, int64(100), resp.Results[1].Values[0].I64, "hot missing: cold")
}

func hotKey(t *testing.T, user int64) online.Key {
	t.Helper()
	ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{i64(user)})
	require.NoError(t, err)
	return online.Key{View: "user_recent__hot", Entity: ek}
}

func TestRunUpdatesGauges(t *testing.T) {
	f := newFixture(t, Options{GaugeInterval: time.Millisecond})
	f.SetState(t, "user_stats", now.Add(-30*time.Minute)) // NewestEventTS 31m ago
	f.SetState(t, "user_flags", now.Add(-3*time.Hour))    // stale
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.srv.Run(ctx) }()
	require.Eventually(t, func() bool {
		return f.Counter(t, "sluice_feature_view_seconds_since_materialization", map[string]string{"view": "user_stats"}) == 1800
	}, 5*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1860.0, f.Counter(t, "sluice_feature_view_data_age_seconds", map[string]string{"view": "user_stats"}))
	// A stale view raises the alert without anyone reading it.
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_stale_alerts_total", map[string]string{"view": "user_flags"}))
}

func TestHotOlderThanColdLoses(t *testing.T) {
	f := newFixture(t, Options{})
	// The hot row is within the hot ttl but older than the cold row (a
	// push reached the cold view after the hot materialization): the
	// newer cold row answers.
	f.Put(t, "user_recent", i64(1), now.Add(-time.Minute), i64(100))
	f.Put(t, "user_recent__hot", i64(1), now.Add(-2*time.Minute), i64(101))
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_recent:recent"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}},
	})
	require.NoError(t, err)
	require.Equal(t, int64(100), resp.Results[1].Values[0].I64)
}
