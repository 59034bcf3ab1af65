package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// The controller is a state machine and a driver. The state machine is
// next: from the current SavedState and a proposal it computes the new
// state and the transition, and touches nothing. The driver (do) runs one
// transition in three steps:
//
//  1. under mu: plan reads the current state and proposes a transition
//     (or none, or an error);
//  2. without mu: the new state is written (to the fleet by
//     compare-and-set on the revision read in step 1, or to the state
//     file), bounded by the caller's context and FleetTimeout;
//  3. under mu: the new state is committed, or, when another replica
//     wrote first, the fleet's state is adopted instead.
//
// So Status, Decide, Observe and the fleet's watcher (ApplyFleet) never
// wait for the network or the disk; transitions run one at a time (ops),
// and a command waits for one in progress only as long as its context
// allows.

// FleetTimeout bounds one read or write of the fleet's state.
const FleetTimeout = 2 * time.Second

// gate is a semaphore of one whose acquire honours cancellation.
type gate chan struct{}

func (g gate) acquire(ctx context.Context) bool {
	select {
	case g <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (g gate) release() { <-g }

// proposal is a transition to make: to state (the current one when
// keepState) at stage.
type proposal struct {
	kind      TransitionKind
	manual    bool
	state     State
	keepState bool
	stage     int
	reason    string
	why       *Reason
}

// next is the state machine: the state after p is applied to cur at now,
// the transition recorded, and whether the stage windows restart (a new
// stage, completion, reset). cur is not modified.
func (c *Controller) next(cur *SavedState, now time.Time, p *proposal) (st SavedState, t Transition, restart bool) {
	st = *cur
	state := p.state
	if p.keepState {
		state = cur.State
	}
	restart = p.stage != cur.Stage || p.kind == KindReset || (state == StateComplete && cur.State != StateComplete)
	if p.stage != cur.Stage || p.kind == KindReset {
		st.StageSince = now
	}
	if state != cur.State {
		st.StateSince = now
	}
	st.State, st.Stage, st.StageName = state, p.stage, c.stages[p.stage].name
	st.Reason = nil
	if state == StateRolledBack {
		st.Reason = p.why
	}
	t = Transition{Time: now, Kind: p.kind, From: cur.StageName, To: st.StageName, State: state, Manual: p.manual, Reason: p.reason}
	st.History = withHistory(cur.History, t)
	return st, t, restart
}

// withHistory returns h (not modified) with t appended, keeping the last
// MaxHistory transitions.
func withHistory(h []Transition, t Transition) []Transition {
	h = append(slices.Clip(h), t)
	if n := len(h); n > MaxHistory {
		h = append(h[:0:0], h[n-MaxHistory:]...)
	}
	return h
}

// do runs one transition (see the top of this file). plan is called with
// mu held; a nil proposal means nothing to do. Callers hold ops.
//
// With a Fleet the new state is saved there first: when another replica
// changed the state first, its state is taken instead and the transition
// does not happen (zero Transition, an error of kind conflict). When the
// fleet cannot be reached, a rollback still happens here (serving the
// stable version is always safe) and is saved by a later Tick; any other
// transition does not happen (an error of kind unavailable). Without a
// Fleet the transition happens even when the state file cannot be
// written; the error says so.
func (c *Controller) do(ctx context.Context, now time.Time, plan func(cur *SavedState) (*proposal, error)) (Transition, error) {
	c.mu.Lock()
	p, err := plan(&c.st)
	if err != nil || p == nil {
		c.mu.Unlock()
		return Transition{}, err
	}
	next, t, restart := c.next(&c.st, now, p)
	rev, gen := c.rev, c.gen
	c.mu.Unlock()

	if c.fleet == nil {
		c.mu.Lock()
		c.commitLocked(&next, restart, p.kind)
		c.mu.Unlock()
		c.made(&t)
		return t, c.persistFile(&next)
	}
	newRev, err := c.saveFleet(ctx, &next, rev)
	switch {
	case err == nil:
		c.mu.Lock()
		if newRev > c.rev {
			// Not yet here through the watcher (which adopts it otherwise).
			c.rev = newRev
			c.commitLocked(&next, restart, p.kind)
		} else if p.kind == KindReset {
			c.windowsMu.Lock()
			c.base = window{}
			c.windowsMu.Unlock()
		}
		c.pending = false
		c.mu.Unlock()
		c.made(&t)
		return t, nil
	case errors.Is(err, ErrConflict):
		c.reloadFleet(ctx)
		c.mu.Lock()
		state, stage := c.st.State, c.st.StageName
		c.mu.Unlock()
		c.log.Info("rollout transition not made: another replica changed the rollout first",
			"kind", string(p.kind), "state", string(state), "stage", stage)
		return Transition{}, &apierr.Error{
			Kind: apierr.KindConflict, Reason: ReasonRolloutChanged,
			Msg: fmt.Sprintf("the rollout of %s changed on another replica first; it is now %s at stage %q", c.service, state, stage), Err: err,
		}
	case p.kind != KindRollback:
		return Transition{}, &apierr.Error{
			Kind: apierr.KindUnavailable, Reason: ReasonRolloutFleetUnavailable,
			Msg: fmt.Sprintf("the fleet's rollout state of %s cannot be written", c.service), Err: err,
		}
	}
	c.mu.Lock()
	if c.gen != gen {
		// The fleet's watcher delivered another state meanwhile: plan the
		// rollback again on it.
		again, perr := plan(&c.st)
		if perr != nil || again == nil {
			c.mu.Unlock()
			return Transition{}, perr
		}
		next, t, restart = c.next(&c.st, now, again)
	}
	c.commitLocked(&next, restart, p.kind)
	c.pending = true
	c.mu.Unlock()
	c.log.Warn("rollback made here but not yet stored in the fleet's state; retried every tick", "err", err)
	c.made(&t)
	return t, nil
}

// commitLocked makes st the current state: Decide and the metrics follow
// it, and the stage windows restart when restart says so (the rollout-wide
// stable window too, for a reset). Callers hold mu.
func (c *Controller) commitLocked(st *SavedState, restart bool, kind TransitionKind) {
	c.st = *st
	c.gen++
	if restart {
		c.windowsMu.Lock()
		c.cand = make([]window, len(c.groups))
		c.stab = make([]window, len(c.groups))
		if kind == KindReset {
			c.base = window{}
		}
		c.windowsMu.Unlock()
		clear(c.driftSeen)
		clear(c.accSeen)
	}
	c.publishLocked()
}

// made counts and logs a transition made here (committed here, or
// adopted from the fleet's watcher, which delivered this replica's own
// write first).
func (c *Controller) made(t *Transition) {
	c.m.transitions.WithLabelValues(c.service, string(t.Kind)).Inc()
	level := slog.LevelInfo
	if t.Kind == KindRollback {
		level = slog.LevelWarn
	}
	c.log.Log(context.Background(), level, "rollout transition", "kind", string(t.Kind), "from", t.From, "to", t.To,
		"state", string(t.State), "manual", t.Manual, "reason", t.Reason)
}

// publishLocked makes the current state visible to Decide and the metrics.
// Callers hold mu.
func (c *Controller) publishLocked() {
	c.route.Store(&routing{state: c.st.State, stage: c.st.Stage, stageSince: c.st.StageSince})
	c.m.stage.WithLabelValues(c.service).Set(float64(c.st.Stage))
	for _, s := range states {
		v := 0.0
		if s == c.st.State {
			v = 1
		}
		c.m.state.WithLabelValues(c.service, string(s)).Set(v)
	}
}

// persistFile writes st to the state file (single-process mode). Callers
// hold ops, so the file is written in the order of the transitions.
func (c *Controller) persistFile(st *SavedState) error {
	if c.stateFile == "" || c.fleet != nil {
		return nil
	}
	data, err := st.Marshal()
	if err == nil {
		err = writeFileAtomic(c.stateFile, data)
	}
	if err != nil {
		return &apierr.Error{
			Kind: apierr.KindInternal, Reason: ReasonRolloutStateNotSaved,
			Msg: fmt.Sprintf("save rollout state of %s to %s", c.service, c.stateFile), Err: err,
		}
	}
	return nil
}

// retryPending saves a rollback the fleet could not store when it was
// made; if another replica changed the state meanwhile, that state is
// taken (and the gates judge again). Callers hold ops.
func (c *Controller) retryPending(ctx context.Context) {
	c.mu.Lock()
	if !c.pending {
		c.mu.Unlock()
		return
	}
	st, rev := c.st, c.rev
	c.mu.Unlock()
	newRev, err := c.saveFleet(ctx, &st, rev)
	switch {
	case err == nil:
		c.mu.Lock()
		c.rev = max(c.rev, newRev)
		c.pending = false
		c.mu.Unlock()
		c.log.Info("rollback stored in the fleet's state", "revision", newRev)
	case errors.Is(err, ErrConflict):
		c.reloadFleet(ctx)
	}
}
