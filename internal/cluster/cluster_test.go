package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/release/record/natstest"
)

// replica connects a Cluster to srv as replica name and runs it until the
// test ends.
func replica(t *testing.T, srv *natstest.Server, name string, reg prometheus.Registerer) (*Cluster, *Bucket) {
	t.Helper()
	c := New(Options{URL: srv.URL(), Name: "test", Replica: name, PublishInterval: 50 * time.Millisecond, ReplicaTTL: time.Second}, nil, reg)
	require.NoError(t, c.Connect(t.Context()))
	b, err := c.Bucket(t.Context(), "state", BucketOptions{Description: "test"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; c.Close() })
	return c, b
}

// TestCompareAndSetOneWinner races replicas writing the same revision:
// exactly one write wins, the others get ErrConflict and count it.
func TestCompareAndSetOneWinner(t *testing.T) {
	srv := natstest.Start(t)
	reg := prometheus.NewRegistry()
	_, b0 := replica(t, srv, "r0", reg)
	rev, err := b0.Update(t.Context(), "svc", []byte("v0"), 0)
	require.NoError(t, err)
	_, err = b0.Update(t.Context(), "svc", []byte("again"), 0)
	require.ErrorIs(t, err, ErrConflict, "create of an existing key")

	var buckets []*Bucket
	for i := range 5 {
		_, b := replica(t, srv, fmt.Sprintf("w%d", i), nil)
		buckets = append(buckets, b)
	}
	var wg sync.WaitGroup
	results := make([]error, len(buckets))
	for i, b := range buckets {
		wg.Go(func() { _, results[i] = b.Update(t.Context(), "svc", fmt.Appendf(nil, "from %d", i), rev) })
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		if err == nil {
			wins++
		} else {
			require.ErrorIs(t, err, ErrConflict)
		}
	}
	require.Equal(t, 1, wins, "exactly one compare-and-set on one revision wins")
	e, err := b0.Get(t.Context(), "svc")
	require.NoError(t, err)
	require.Equal(t, rev+1, e.Revision)
	_, err = b0.Get(t.Context(), "nope")
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, 1, testutil.CollectAndCount(reg, "sluice_cluster_cas_conflicts_total"))
	require.Equal(t, 1.0, testutil.ToFloat64(b0.c.m.conflicts.WithLabelValues(b0.Name())), "r0's one lost create")
	require.Equal(t, 1.0, testutil.ToFloat64(b0.c.m.connected))
	require.Zero(t, testutil.ToFloat64(New(Options{}, nil, nil).m.connected), "a cluster not connected says so")
}

// TestWatchAppliesChangesAndPublishersExpire: a change written by one
// replica reaches another's cache and handlers within a second, and
// published entries of a replica that stops publishing drop out of Fresh
// after the TTL.
func TestWatchAppliesChangesAndPublishersExpire(t *testing.T) {
	srv := natstest.Start(t)
	a, ba := replica(t, srv, "a", nil)
	_, bb := replica(t, srv, "b", nil)
	got := make(chan Entry, 16)
	bb.OnChange(func(e Entry, deleted bool) {
		if !deleted && e.Key == "svc" {
			got <- e
		}
	})
	begin := time.Now()
	rev, err := ba.Update(t.Context(), "svc", []byte("rolled_back"), 0)
	require.NoError(t, err)
	select {
	case e := <-got:
		require.Equal(t, "rolled_back", string(e.Value))
		require.Equal(t, rev, e.Revision)
		require.Less(t, time.Since(begin), time.Second)
	case <-time.After(2 * time.Second):
		t.Fatal("the change did not reach the other replica")
	}
	n := 0
	a.Publish(ba, "win.a", func() []byte { n++; return fmt.Appendf(nil, "%d", n) })
	require.Eventually(t, func() bool { return len(bb.Fresh("win.", "win.b", time.Second)) == 1 }, 2*time.Second, 20*time.Millisecond)
	require.Empty(t, ba.Fresh("win.", "win.a", time.Second), "a replica's own entry is skipped")
	a.Publish(ba, "win.a", nil)
	require.Eventually(t, func() bool { return len(bb.Fresh("win.", "win.b", time.Second)) == 0 }, 3*time.Second, 50*time.Millisecond,
		"a replica that stopped publishing drops out after the TTL")
}

// TestNATSDownKeepsLastStateThenConverges kills the server: the cache
// keeps the last entries, Status says the state is stale, writes fail;
// after a restart on the same store, a change made by another replica
// arrives.
func TestNATSDownKeepsLastStateThenConverges(t *testing.T) {
	srv := natstest.Start(t)
	a, ba := replica(t, srv, "a", nil)
	_, bb := replica(t, srv, "b", nil)
	rev, err := ba.Update(t.Context(), "svc", []byte("stage-1"), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { e, ok := bb.Cached("svc"); return ok && e.Revision == rev }, 2*time.Second, 10*time.Millisecond)

	srv.Kill()
	require.Eventually(t, func() bool { return a.Status().Stale }, 5*time.Second, 50*time.Millisecond, "status says so")
	e, ok := bb.Cached("svc")
	require.True(t, ok, "the last state is kept")
	require.Equal(t, "stage-1", string(e.Value))
	_, err = ba.Update(t.Context(), "svc", []byte("x"), rev)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrConflict), "an outage is not a conflict")

	srv.Restart()
	require.Eventually(t, func() bool {
		_, err := ba.Update(t.Context(), "svc", []byte("stage-2"), rev)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { e, _ := bb.Cached("svc"); return string(e.Value) == "stage-2" }, 5*time.Second, 20*time.Millisecond,
		"the other replica converges after the outage")
	require.Eventually(t, func() bool { return !a.Status().Stale }, 5*time.Second, 50*time.Millisecond)
}

func TestKey(t *testing.T) {
	require.Equal(t, "parcel-eta", Key("parcel-eta"))
	require.Equal(t, "a=2Eb=20c=2A", Key("a.b c*"))
	require.Equal(t, "=", Key(""))
}
