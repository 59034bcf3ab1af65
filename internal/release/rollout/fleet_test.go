package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// memFleet is a fleet store in memory with the semantics of a JetStream KV
// key: compare-and-set on a revision that grows with every write. The
// cluster package tests the real one against a nats-server; this one lets
// the controller tests race replicas deterministically.
type memFleet struct {
	mu      sync.Mutex
	data    []byte
	rev     uint64
	windows map[string][]byte // by replica
	down    bool
	subs    []*Controller
}

func (f *memFleet) replica(name string) *memReplica { return &memReplica{f: f, name: name} }

type memReplica struct {
	f    *memFleet
	name string
}

var errDown = errors.New("fleet unreachable")

func (r *memReplica) Load(context.Context) ([]byte, uint64, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if r.f.down {
		return nil, 0, errDown
	}
	return r.f.data, r.f.rev, nil
}

func (r *memReplica) Save(_ context.Context, data []byte, rev uint64) (uint64, error) {
	r.f.mu.Lock()
	if r.f.down {
		r.f.mu.Unlock()
		return 0, errDown
	}
	if rev != r.f.rev {
		r.f.mu.Unlock()
		return 0, fmt.Errorf("revision %d is not %d: %w", rev, r.f.rev, ErrConflict)
	}
	r.f.rev++
	r.f.data = append([]byte(nil), data...)
	n, subs := r.f.rev, append([]*Controller(nil), r.f.subs...)
	r.f.mu.Unlock()
	// The watcher: every replica hears of the change (asynchronously, as
	// from a NATS watcher).
	for _, c := range subs {
		go c.ApplyFleet(data, n)
	}
	return n, nil
}

func (r *memReplica) Windows() [][]byte {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out [][]byte
	for name, w := range r.f.windows {
		if name != r.name {
			out = append(out, w)
		}
	}
	return out
}

// publish stores every replica's window snapshot, as the cluster's
// publishers do each publish interval.
func (f *memFleet) publish(cs []*Controller) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.windows == nil {
		f.windows = map[string][]byte{}
	}
	for i, c := range cs {
		f.windows[fmt.Sprint(i)] = c.WindowsSnapshot()
	}
}

// fleetOf starts n controllers on one memFleet.
func fleetOf(t *testing.T, n int, cfg Config) (*memFleet, []*Controller, *fakeClock) {
	t.Helper()
	f := &memFleet{}
	clock := &fakeClock{t: t0}
	var cs []*Controller
	for i := range n {
		c, err := New("parcel-eta", cfg, Options{Now: clock.Now, Fleet: f.replica(fmt.Sprint(i))}, nil, nil)
		require.NoError(t, err)
		cs = append(cs, c)
		f.mu.Lock()
		f.subs = append(f.subs, c)
		f.mu.Unlock()
	}
	return f, cs, clock
}

// TestFleetGateSeesFleetTraffic: three replicas each see a third of the
// failing candidate traffic, fewer than min_requests each, so no replica
// alone would judge the gate; the fleet's sum trips it, and every replica
// rolls back with the one decision in its history.
func TestFleetGateSeesFleetTraffic(t *testing.T) {
	cfg := testConfig(t)
	f, cs, clock := fleetOf(t, 3, cfg)
	failing := worseIn("premium", func(o Outcome, _ int) Outcome { o.Status = 503; return o })
	// 40 premium candidate requests per replica: 120 in the fleet, over
	// min_requests 100.
	for i := range 1200 {
		c := cs[i%3]
		_, g, arm := c.Decide(attrs(i))
		c.Observe(arm, g, failing(arm, g, i))
	}
	for _, c := range cs {
		st := c.Status()
		require.Less(t, st.Groups[0].Candidate.Requests, uint64(100), "each replica alone is below min_requests")
	}
	require.Nil(t, cs[0].Tick(t.Context(), clock.Now()), "before the replicas published, replica 0 sees only its own windows")

	f.publish(cs)
	tr := cs[0].Tick(t.Context(), clock.Now())
	require.NotNil(t, tr, "the fleet's windows trip the gate")
	require.Equal(t, KindRollback, tr.Kind)
	st := cs[0].Status()
	require.Equal(t, GateErrorRate, st.Reason.Gate)
	require.GreaterOrEqual(t, st.Reason.Requests, uint64(100))
	require.Equal(t, 2, st.Fleet.Replicas)

	// The other replicas follow through the fleet's watcher, and a late
	// Tick of theirs decides nothing again.
	for _, c := range cs[1:] {
		require.Eventually(t, func() bool { return c.Status().State == StateRolledBack }, time.Second, time.Millisecond)
		require.Nil(t, c.Tick(t.Context(), clock.Now()))
		v, _, arm := c.Decide(attrs(0))
		require.Equal(t, "1", v)
		require.Equal(t, ArmStable, arm)
	}
	rollbacks := 0
	for _, h := range cs[2].Status().History {
		if h.Kind == KindRollback {
			rollbacks++
		}
	}
	require.Equal(t, 1, rollbacks)
}

// TestFleetOneDecisionPerTransition races every replica's Tick on the
// same failing windows: exactly one rollback is made and saved; the others
// lose the compare-and-set and take the winner's state.
func TestFleetOneDecisionPerTransition(t *testing.T) {
	cfg := testConfig(t)
	f, cs, clock := fleetOf(t, 5, cfg)
	failing := worseIn("premium", func(o Outcome, _ int) Outcome { o.Status = 503; return o })
	for _, c := range cs {
		for i := range 1500 {
			_, g, arm := c.Decide(attrs(i))
			c.Observe(arm, g, failing(arm, g, i))
		}
	}
	var wg sync.WaitGroup
	made := make([]*Transition, len(cs))
	for i, c := range cs {
		wg.Go(func() { made[i] = c.Tick(t.Context(), clock.Now()) })
	}
	wg.Wait()
	n := 0
	for _, tr := range made {
		if tr != nil {
			n++
		}
	}
	require.Equal(t, 1, n, "exactly one replica decides the rollback")
	saved, err := ParseSavedState(f.data)
	require.NoError(t, err)
	require.Equal(t, StateRolledBack, saved.State)
	require.Len(t, saved.History, 2, "start and one rollback")
	for _, c := range cs {
		require.Eventually(t, func() bool { return c.Status().State == StateRolledBack }, time.Second, time.Millisecond)
	}
}

// TestFleetManualCommandLosesRace: an operator's promote on a replica
// whose view is behind is refused with a conflict and the replica takes
// the fleet's state.
func TestFleetManualCommandLosesRace(t *testing.T) {
	cfg := testConfig(t)
	f, cs, _ := fleetOf(t, 2, cfg)
	f.mu.Lock()
	f.subs = nil // no watcher: replica 1 does not hear of replica 0's change
	f.mu.Unlock()
	require.NoError(t, cs[0].Promote(t.Context(), "go"))
	err := cs[1].Pause(t.Context(), "hold")
	var ie *apierr.Error
	require.ErrorAs(t, err, &ie)
	require.Equal(t, apierr.KindConflict, ie.Kind)
	st := cs[1].Status()
	require.Equal(t, "long-tail", st.StageName, "replica 1 took the fleet's state")
	require.Equal(t, StateProgressing, st.State)
	require.NoError(t, cs[1].Pause(t.Context(), "hold"), "now at the fleet's revision")
}

// TestFleetDown: with the fleet unreachable a failing gate still rolls
// back here (the stable version is always safe) and the rollback is saved
// when the fleet is back; a promotion is refused meanwhile.
func TestFleetDown(t *testing.T) {
	cfg := testConfig(t)
	f, cs, clock := fleetOf(t, 2, cfg)
	f.mu.Lock()
	f.down = true
	f.mu.Unlock()
	var ie *apierr.Error
	require.ErrorAs(t, cs[1].Promote(t.Context(), ""), &ie)
	require.Equal(t, apierr.KindUnavailable, ie.Kind)
	require.Equal(t, 0, cs[1].Status().Stage)

	failing := worseIn("premium", func(o Outcome, _ int) Outcome { o.Status = 503; return o })
	for i := range 1500 {
		_, g, arm := cs[0].Decide(attrs(i))
		cs[0].Observe(arm, g, failing(arm, g, i))
	}
	tr := cs[0].Tick(t.Context(), clock.Now())
	require.NotNil(t, tr)
	require.Equal(t, StateRolledBack, cs[0].Status().State)
	require.True(t, cs[0].Status().Fleet.Pending)
	require.Equal(t, StateProgressing, cs[1].Status().State, "the other replica cannot know yet")

	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	require.Nil(t, cs[0].Tick(t.Context(), clock.Now()))
	require.False(t, cs[0].Status().Fleet.Pending, "saved at the next tick")
	require.Eventually(t, func() bool { return cs[1].Status().State == StateRolledBack }, time.Second, time.Millisecond)
}

// TestFleetStartResumes: a replica started later resumes the fleet's
// state instead of starting over.
func TestFleetStartResumes(t *testing.T) {
	cfg := testConfig(t)
	f, cs, clock := fleetOf(t, 1, cfg)
	require.NoError(t, cs[0].Promote(t.Context(), ""))
	late, err := New("parcel-eta", cfg, Options{Now: clock.Now, Fleet: f.replica("late")}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, "long-tail", late.Status().StageName)
	require.Equal(t, f.rev, late.Status().Fleet.Revision)
}

func TestWindowsSnapshotRoundTrip(t *testing.T) {
	cfg := testConfig(t)
	_, cs, _ := fleetOf(t, 1, cfg)
	for i := range 300 {
		_, g, arm := cs[0].Decide(attrs(i))
		cs[0].Observe(arm, g, healthy(arm, g, i))
	}
	s, err := parseWindowsSnapshot(cs[0].WindowsSnapshot())
	require.NoError(t, err)
	w, err := s.Base.window()
	require.NoError(t, err)
	require.Equal(t, cs[0].base.n, w.n)
	require.Equal(t, cs[0].base.p95(), w.p95())
	for _, bad := range []string{
		`{"schema":2}`,
		`{"schema":1}{}`,
		`{"schema":1,"base":{"n":1,"errors":2}}`,
	} {
		s, err := parseWindowsSnapshot([]byte(bad))
		if err == nil {
			_, err = s.Base.window()
		}
		require.Error(t, err, bad)
	}
	s, err = parseWindowsSnapshot([]byte(`{"schema":1,"base":{"n":1,"lat":[[5000,1]]}}`))
	require.NoError(t, err)
	_, err = s.Base.window()
	require.ErrorContains(t, err, "outside")
}
