package rollout

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// hungReplica is a replica of a memFleet whose Save hangs, as a write to
// a SIGSTOPped NATS does, once hang is set: it waits until the test
// releases it or its context ends, and says it is waiting on entered.
type hungReplica struct {
	*memReplica
	hang    atomic.Bool
	entered chan struct{}
	release chan struct{}
	saving  atomic.Bool // a hung Save is waiting now
}

func (r *hungReplica) Save(ctx context.Context, data []byte, rev uint64) (uint64, error) {
	if r.hang.Load() {
		r.saving.Store(true)
		r.entered <- struct{}{}
		select {
		case <-r.release:
		case <-ctx.Done():
			r.saving.Store(false)
			return 0, fmt.Errorf("save: %w", context.Cause(ctx))
		}
		r.saving.Store(false)
	}
	return r.memReplica.Save(ctx, data, rev)
}

// hungFleet starts two replicas on one memFleet; replica 0's Saves hang
// on demand.
func hungFleet(t *testing.T) (*memFleet, *hungReplica, []*Controller, *fakeClock) {
	t.Helper()
	f := &memFleet{}
	clock := &fakeClock{t: t0}
	h := &hungReplica{memReplica: f.replica("0"), entered: make(chan struct{}, 1), release: make(chan struct{})}
	var cs []*Controller
	for i, fl := range []Fleet{h, f.replica("1")} {
		c, err := New("parcel-eta", testConfig(t), Options{Now: clock.Now, Fleet: fl}, nil, nil)
		require.NoError(t, err, "replica %d", i)
		cs = append(cs, c)
	}
	f.mu.Lock()
	f.subs = cs
	f.mu.Unlock()
	return f, h, cs, clock
}

// failPremium sends c enough failing premium traffic to trip its gate.
func failPremium(c *Controller) {
	failing := worseIn("premium", func(o Outcome, _ int) Outcome { o.Status = 503; return o })
	for i := range 1500 {
		_, g, arm := c.Decide(attrs(i))
		c.Observe(arm, g, failing(arm, g, i))
	}
}

// TestHungFleetDoesNotHoldTheLock: while replica 0's rollback is being
// written to a fleet that does not answer, its status answers at once, an operator's command gives up when its context ends, and once
// the write goes through the rollback is committed here and adopted by
// the other replica.
func TestHungFleetDoesNotHoldTheLock(t *testing.T) {
	_, h, cs, clock := hungFleet(t)
	failPremium(cs[0])
	h.hang.Store(true)
	ticked := make(chan *Transition, 1)
	go func() { ticked <- cs[0].Tick(t.Context(), clock.Now()) }()
	<-h.entered

	st := cs[0].Status()
	require.True(t, h.saving.Load(), "Status waited for the fleet's write")
	require.Equal(t, StateProgressing, st.State, "nothing is committed before the fleet stored it")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var ie *apierr.Error
	require.ErrorAs(t, cs[0].Pause(ctx, "hold"), &ie, "a command whose context ended does not wait for the write in progress")
	require.Equal(t, apierr.KindUnavailable, ie.Kind)
	require.Equal(t, "rollout_busy", ie.Reason)
	require.True(t, h.saving.Load())

	close(h.release)
	tr := <-ticked
	require.NotNil(t, tr)
	require.Equal(t, KindRollback, tr.Kind)
	require.Equal(t, StateRolledBack, cs[0].Status().State)
	require.False(t, cs[0].Status().Fleet.Pending)
	require.Eventually(t, func() bool { return cs[1].Status().State == StateRolledBack }, 5*time.Second, time.Millisecond)
	require.Equal(t, cs[0].Status().Fleet.Revision, cs[1].Status().Fleet.Revision)
}

// TestHungWriteTimesOut: a rollback whose write never comes back is made
// here when the caller's context ends (the fleet counts as unreachable)
// and stored by the next Tick.
func TestHungWriteTimesOut(t *testing.T) {
	_, h, cs, clock := hungFleet(t)
	failPremium(cs[0])
	h.hang.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	ticked := make(chan *Transition, 1)
	go func() { ticked <- cs[0].Tick(ctx, clock.Now()) }()
	<-h.entered
	cancel()
	tr := <-ticked
	require.NotNil(t, tr)
	require.Equal(t, KindRollback, tr.Kind)
	st := cs[0].Status()
	require.Equal(t, StateRolledBack, st.State)
	require.True(t, st.Fleet.Pending)
	require.Equal(t, StateProgressing, cs[1].Status().State, "the other replica cannot know yet")

	h.hang.Store(false)
	require.Nil(t, cs[0].Tick(t.Context(), clock.Now()))
	require.False(t, cs[0].Status().Fleet.Pending, "stored at the next Tick")
	require.Eventually(t, func() bool { return cs[1].Status().State == StateRolledBack }, 5*time.Second, time.Millisecond)
}

// TestAdoptWhileWriting: another replica's transition that arrives while
// this replica's write hangs is adopted at once; the hung write then loses
// the compare-and-set and this replica keeps the other's state.
func TestAdoptWhileWriting(t *testing.T) {
	_, h, cs, _ := hungFleet(t)
	h.hang.Store(true)
	var wg sync.WaitGroup
	var pauseErr error
	wg.Go(func() { pauseErr = cs[0].Pause(t.Context(), "hold") })
	<-h.entered
	require.NoError(t, cs[1].Promote(t.Context(), "go"))
	require.Eventually(t, func() bool { return cs[0].Status().StageName == "long-tail" }, 5*time.Second, time.Millisecond,
		"the watcher's state is adopted while the write hangs")
	close(h.release)
	wg.Wait()
	var ie *apierr.Error
	require.ErrorAs(t, pauseErr, &ie)
	require.Equal(t, apierr.KindConflict, ie.Kind)
	for i, c := range cs {
		st := c.Status()
		require.Equal(t, StateProgressing, st.State, "replica %d", i)
		require.Equal(t, "long-tail", st.StageName, "replica %d", i)
	}
}

// echoReplica is a replica whose watcher delivers its own writes before
// Save returns, as NATS may.
type echoReplica struct {
	*memReplica
	self *Controller
}

func (r *echoReplica) Save(ctx context.Context, data []byte, rev uint64) (uint64, error) {
	n, err := r.memReplica.Save(ctx, data, rev)
	if err == nil && r.self != nil {
		r.self.ApplyFleet(data, n)
	}
	return n, err
}

// TestOwnWriteFromTheWatcherFirst: a transition whose write comes back
// through the watcher before Save returns is made once: one transition
// counted, the state the one written.
func TestOwnWriteFromTheWatcherFirst(t *testing.T) {
	f := &memFleet{}
	clock := &fakeClock{t: t0}
	r := &echoReplica{memReplica: f.replica("0")}
	c, err := New("parcel-eta", testConfig(t), Options{Now: clock.Now, Fleet: r}, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	r.self = c
	require.NoError(t, c.Rollback(t.Context(), "echo"))
	require.Equal(t, StateRolledBack, c.Status().State)
	require.InDelta(t, 1.0, promtestutil.ToFloat64(c.m.transitions.WithLabelValues("parcel-eta", string(KindRollback))), 0)
	require.NoError(t, c.Reset(t.Context(), "again"))
	require.Equal(t, StateProgressing, c.Status().State)
	require.InDelta(t, 1.0, promtestutil.ToFloat64(c.m.transitions.WithLabelValues("parcel-eta", string(KindReset))), 0)
	require.Equal(t, f.rev, c.Status().Fleet.Revision)
}
