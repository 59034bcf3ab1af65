package fallback

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSeededMonitorTriggersAtOnce: a monitor seeded with another's
// completed buckets (a restarted or new replica) has a baseline before its
// first observation and triggers after Duration of drifted traffic, where
// an unseeded one has no baseline for the first hour.
func TestSeededMonitorTriggersAtOnce(t *testing.T) {
	old := newFeed(t, MonitorOptions{}, nil)
	old.run(3*time.Hour+10*time.Minute, 1)
	snap, gen := old.m.Completed(false)
	require.Len(t, snap.Buckets, 3)
	require.EqualValues(t, 3, gen)
	data, err := snap.Marshal()
	require.NoError(t, err)
	back, err := ParseSnapshot(data)
	require.NoError(t, err)

	restarted := newFeed(t, MonitorOptions{}, nil)
	restarted.now = old.now.Add(time.Minute)
	require.True(t, restarted.m.Seed(back), "seeded with a baseline")
	st := restarted.m.State()
	require.Equal(t, 3, st.Baseline.Hours)
	require.InDelta(t, 100, st.Baseline.Mean, 0.1)
	restarted.run(11*time.Minute, 1.5)
	require.True(t, restarted.m.State().Triggered, "drift triggers within the first 11 minutes")

	fresh := newFeed(t, MonitorOptions{}, nil)
	fresh.now = restarted.now
	fresh.run(11*time.Minute, 1.5)
	require.False(t, fresh.m.State().Triggered, "without the seed there is no baseline yet")

	live, _ := restarted.m.Completed(true)
	require.Empty(t, live.Buckets, "the seeded buckets are not the monitor's own")
}

// TestSnapshotMerge: replicas' completed buckets of the same hours merge
// into the fleet's (counts add, means weigh), a replica that started later
// lands in the nearest bucket, and keep bounds the result.
func TestSnapshotMerge(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	a := &Snapshot{Origin: t0, BucketNS: int64(time.Hour), Buckets: []SnapshotBucket{{Index: 0, N: 10, Mean: 100}, {Index: 1, N: 10, Mean: 110}}}
	b := &Snapshot{Origin: t0.Add(61 * time.Minute), BucketNS: int64(time.Hour), Buckets: []SnapshotBucket{{Index: 0, N: 30, Mean: 130}, {Index: 1, N: 5, Mean: 90}}}
	var fleet Snapshot
	require.True(t, fleet.Merge(a, 0))
	require.True(t, fleet.Merge(b, 0))
	require.Len(t, fleet.Buckets, 3)
	require.Equal(t, int64(1), fleet.Buckets[1].Index)
	require.InDelta(t, 40, fleet.Buckets[1].N, 1e-9)
	require.InDelta(t, (10*110+30*130)/40.0, fleet.Buckets[1].Mean, 1e-9)
	require.Equal(t, int64(2), fleet.Buckets[2].Index)
	require.False(t, fleet.Merge(&Snapshot{Origin: t0, BucketNS: int64(time.Minute)}, 0), "another bucket width")
	require.True(t, fleet.Merge(a, 2))
	require.Len(t, fleet.Buckets, 2, "keep bounds the buckets")
	require.Equal(t, int64(1), fleet.Buckets[0].Index)
}

func TestParseSnapshotRejects(t *testing.T) {
	for _, bad := range []string{
		`{"schema":2,"origin":"2026-01-01T00:00:00Z","bucket_ns":1}`,
		`{"schema":1,"origin":"2026-01-01T00:00:00Z","bucket_ns":0}`,
		`{"schema":1,"bucket_ns":1}`,
		`{"schema":1,"origin":"2026-01-01T00:00:00Z","bucket_ns":1,"buckets":[{"i":1,"n":-1}]}`,
		`{"schema":1,"origin":"2026-01-01T00:00:00Z","bucket_ns":1,"buckets":[{"i":2,"n":1},{"i":1,"n":1}]}`,
		`{"schema":1,"origin":"2026-01-01T00:00:00Z","bucket_ns":1} {}`,
	} {
		_, err := ParseSnapshot([]byte(bad))
		require.Error(t, err, bad)
	}
}

// FuzzParseSnapshot: the baseline snapshot parser (a file or the fleet's
// store) rejects or accepts without panicking, and what it accepts seeds
// a monitor without panicking.
func FuzzParseSnapshot(f *testing.F) {
	f.Add([]byte(`{"schema":1,"origin":"2026-01-01T00:00:00Z","bucket_ns":3600000000000,"buckets":[{"i":0,"n":3,"mean":100,"m2":2,"p90_n":1,"p90_mean":104}]}`))
	f.Add([]byte(`{"schema":1,"origin":"2026-01-01T00:00:00Z","bucket_ns":1,"buckets":[{"i":2147483646,"n":1e308}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSnapshot(data)
		if err != nil {
			return
		}
		m := NewMonitor("s", MonitorOptions{
			Bucket: time.Duration(s.BucketNS), History: 24 * time.Duration(s.BucketNS),
			Now: func() time.Time { return s.Origin.Add(time.Hour) },
		}, nil, nil)
		m.Seed(s)
		m.Observe(s.Origin.Add(time.Hour), 1)
		_ = m.State()
		var fleet Snapshot
		fleet.Merge(s, MaxSnapshotBuckets)
	})
}
