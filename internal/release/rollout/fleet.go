package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Fleet shares one service's rollout with the other replicas of a fleet
// (a JetStream KV bucket in Sluice; see package cluster). With a Fleet the
// controller keeps its state there instead of in StateFile:
//
//   - every transition is a compare-and-set on the state's revision, so
//     of several replicas deciding the same stage transition exactly one
//     succeeds; the others take the winner's state;
//   - a change another replica made reaches ApplyFleet (the caller
//     watches the state), and Decide follows it at once;
//   - each replica publishes its gate windows (WindowsSnapshot) and the
//     gates judge the sum of its own windows and the other replicas'
//     fresh ones, so a gate sees the fleet's traffic.
type Fleet interface {
	// Load returns the fleet's state and its revision; nil data when
	// there is none yet.
	Load(ctx context.Context) (data []byte, rev uint64, err error)
	// Save stores data if the fleet's revision is still rev (0: there is
	// none yet) and returns the new revision; an error wrapping
	// ErrConflict when another replica saved first.
	Save(ctx context.Context, data []byte, rev uint64) (uint64, error)
	// Windows returns the other replicas' latest window snapshots, those
	// published recently enough to count.
	Windows() [][]byte
}

// ErrConflict is what a Fleet's Save returns, wrapped, when the state's
// revision moved.
var ErrConflict = errors.New("rollout: another replica changed the rollout first")

// loadFleet reads the fleet's state, bounded by ctx and FleetTimeout: nil
// when there is none. Callers do not hold mu.
func (c *Controller) loadFleet(ctx context.Context) (*SavedState, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, FleetTimeout)
	defer cancel()
	data, rev, err := c.fleet.Load(ctx)
	if err != nil || data == nil {
		return nil, rev, err
	}
	s, err := ParseSavedState(data)
	if err != nil {
		return nil, rev, fmt.Errorf("fleet state: %w", err)
	}
	return s, rev, nil
}

// saveFleet writes st if the fleet's revision is still rev, bounded by ctx
// and FleetTimeout, and returns the new revision. Callers do not hold mu.
func (c *Controller) saveFleet(ctx context.Context, st *SavedState, rev uint64) (uint64, error) {
	data, err := st.Marshal()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, FleetTimeout)
	defer cancel()
	return c.fleet.Save(ctx, data, rev)
}

// startFleet resumes the fleet's state or starts one, racing the other
// replicas that start at the same time: the first to create it wins and
// the others resume it.
func (c *Controller) startFleet(now time.Time) error {
	ctx := context.Background() // New has no context; each call is bounded by FleetTimeout
	for range 5 {
		saved, rev, err := c.loadFleet(ctx)
		if err != nil {
			return fmt.Errorf("rollout of %s: load fleet state: %w", c.service, err)
		}
		if saved != nil && saved.Stable == c.stable && saved.Candidate == c.candidate {
			c.mu.Lock()
			c.rev = rev
			c.adoptLocked(saved)
			state, stage := c.st.State, c.st.StageName
			c.mu.Unlock()
			c.log.Info("rollout resumed from the fleet", "state", string(state), "stage", stage, "revision", rev)
			return nil
		}
		var st SavedState
		if saved != nil {
			st = c.fresh(now, saved.History, fmt.Sprintf("new rollout of %s over %s replaces the fleet's one of %s over %s",
				versionName(c.candidate), versionName(c.stable), versionName(saved.Candidate), versionName(saved.Stable)))
		} else {
			st = c.fresh(now, nil, "rollout started")
		}
		newRev, err := c.saveFleet(ctx, &st, rev)
		if err == nil {
			c.mu.Lock()
			c.st, c.rev = st, newRev
			c.gen++
			c.publishLocked()
			c.mu.Unlock()
			c.log.Info("rollout started", "stage", c.stages[0].name, "candidate", c.candidate.Version)
			return nil
		}
		if !errors.Is(err, ErrConflict) {
			return fmt.Errorf("rollout of %s: save fleet state: %w", c.service, err)
		}
	}
	return fmt.Errorf("rollout of %s: the fleet's state kept changing during start-up", c.service)
}

// adoptLocked makes saved (the fleet's, for this rollout's versions) the
// current state: windows restart when the stage did. Callers hold mu.
func (c *Controller) adoptLocked(saved *SavedState) {
	restart := saved.Stage != c.st.Stage || !saved.StageSince.Equal(c.st.StageSince) ||
		(saved.State == StateComplete && c.st.State != StateComplete)
	c.st = *saved
	c.gen++
	c.st.Service = c.service
	c.st.Stage = c.resolveStage(saved.StageName, saved.Stage)
	c.st.StageName = c.stages[c.st.Stage].name
	if restart {
		c.windowsMu.Lock()
		c.cand = make([]window, len(c.groups))
		c.stab = make([]window, len(c.groups))
		c.windowsMu.Unlock()
		clear(c.driftSeen)
	}
	c.publishLocked()
}

// reloadFleet takes the fleet's current state after a lost
// compare-and-set: read without mu, adopted under it unless the watcher
// brought it (or a newer one) first.
func (c *Controller) reloadFleet(ctx context.Context) {
	saved, rev, err := c.loadFleet(ctx)
	if err != nil {
		c.log.Warn("rollout: fleet state not read", "err", err)
		return
	}
	if saved == nil || saved.Stable != c.stable || saved.Candidate != c.candidate {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev <= c.rev {
		return
	}
	c.rev = rev
	c.pending = false
	c.adoptLocked(saved)
}

// ApplyFleet applies a state another replica saved (data at revision
// rev), as the fleet's watcher delivers it: Decide follows it at once.
// Older revisions, states of other versions (another configuration's
// rollout) and states that do not parse are ignored. It never waits for
// a transition in progress: that one commits only if its revision is
// newer.
func (c *Controller) ApplyFleet(data []byte, rev uint64) {
	if c.fleet == nil {
		return
	}
	saved, err := ParseSavedState(data)
	if err != nil {
		c.log.Warn("rollout: fleet state ignored", "err", err, "revision", rev)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev <= c.rev {
		return
	}
	if saved.Stable != c.stable || saved.Candidate != c.candidate {
		c.log.Warn("rollout: the fleet's state is another rollout's; replicas disagree on the configuration",
			"fleet_candidate", saved.Candidate.Version, "candidate", c.candidate.Version)
		return
	}
	from, state := c.st.StageName, c.st.State
	c.rev = rev
	c.pending = false
	c.adoptLocked(saved)
	if from != c.st.StageName || state != c.st.State {
		c.log.Info("rollout state from the fleet", "state", string(c.st.State), "stage", c.st.StageName, "revision", rev)
	}
}

// windowsSchema is the version of a window snapshot.
const windowsSchema = 1

// Limits on a window snapshot from another replica.
const (
	maxSnapshotBytes  = 1 << 20
	maxSnapshotGroups = 1000
)

// windowsSnapshot is what a replica publishes of its windows.
type windowsSnapshot struct {
	Schema    int    `json:"schema"`
	Stable    Target `json:"stable"`
	Candidate Target `json:"candidate"`
	// Stage and StageSince say which stage's windows these are.
	Stage      int          `json:"stage"`
	StageSince time.Time    `json:"stage_since"`
	Groups     []groupSnap  `json:"groups"`
	Base       windowRecord `json:"base"`
}

type groupSnap struct {
	Name string       `json:"name"`
	Cand windowRecord `json:"cand"`
	Stab windowRecord `json:"stab"`
}

// windowRecord is a window with its latency histogram sparse: pairs of
// bucket index and count.
type windowRecord struct {
	N       uint64      `json:"n,omitempty"`
	Errors  uint64      `json:"errors,omitempty"`
	ConfN   uint64      `json:"conf_n,omitempty"`
	LowConf uint64      `json:"low_conf,omitempty"`
	Lat     [][2]uint64 `json:"lat,omitempty"`
}

func recordOf(w *window) windowRecord {
	r := windowRecord{N: w.n, Errors: w.errors, ConfN: w.confN, LowConf: w.lowConf}
	for i, n := range w.lat {
		if n > 0 {
			r.Lat = append(r.Lat, [2]uint64{uint64(i), n})
		}
	}
	return r
}

func (r *windowRecord) window() (window, error) {
	w := window{n: r.N, errors: r.Errors, confN: r.ConfN, lowConf: r.LowConf}
	if r.Errors > r.N || r.ConfN > r.N || r.LowConf > r.ConfN {
		return window{}, errors.New("counts do not add up")
	}
	var sum uint64
	for _, p := range r.Lat {
		if p[0] >= latBuckets {
			return window{}, fmt.Errorf("latency bucket %d outside [0,%d)", p[0], latBuckets)
		}
		if w.lat == nil {
			w.lat = make([]uint64, latBuckets)
		}
		w.lat[p[0]] += p[1]
		sum += p[1]
		if sum < p[1] || sum > r.N {
			return window{}, errors.New("latency counts exceed the request count")
		}
	}
	return w, nil
}

// WindowsSnapshot encodes this replica's own windows for the other
// replicas (nil when the controller has no Fleet).
func (c *Controller) WindowsSnapshot() []byte {
	if c.fleet == nil {
		return nil
	}
	r := c.route.Load()
	s := windowsSnapshot{Schema: windowsSchema, Stable: c.stable, Candidate: c.candidate, Stage: r.stage, StageSince: r.stageSince}
	c.windowsMu.Lock()
	for i := range c.groups {
		s.Groups = append(s.Groups, groupSnap{Name: c.groups[i].name, Cand: recordOf(&c.cand[i]), Stab: recordOf(&c.stab[i])})
	}
	s.Base = recordOf(&c.base)
	c.windowsMu.Unlock()
	b, err := json.Marshal(&s)
	if err != nil {
		return nil
	}
	return b
}

// parseWindowsSnapshot decodes and checks another replica's snapshot.
func parseWindowsSnapshot(data []byte) (*windowsSnapshot, error) {
	if len(data) > maxSnapshotBytes {
		return nil, fmt.Errorf("window snapshot is %d bytes, more than %d", len(data), maxSnapshotBytes)
	}
	var s windowsSnapshot
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode window snapshot: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode window snapshot: trailing data")
	}
	if s.Schema != windowsSchema {
		return nil, fmt.Errorf("unsupported window snapshot schema %d", s.Schema)
	}
	if len(s.Groups) > maxSnapshotGroups {
		return nil, fmt.Errorf("window snapshot has %d groups, more than %d", len(s.Groups), maxSnapshotGroups)
	}
	return &s, nil
}

// fleetWindows adds to cand, stab and base (indexed like c.groups) the
// windows of the other replicas that belong to the same rollout and the
// current stage. Snapshots that do not parse are skipped. Callers hold
// windowsMu.
func (c *Controller) fleetWindows(cand, stab []window, base *window) (replicas int) {
	if c.fleet == nil {
		return 0
	}
	r := c.route.Load()
	for _, data := range c.fleet.Windows() {
		s, err := parseWindowsSnapshot(data)
		if err != nil || s.Stable != c.stable || s.Candidate != c.candidate {
			continue
		}
		sameStage := s.Stage == r.stage && s.StageSince.Equal(r.stageSince)
		ok := true
		var cs, ss []window
		var gi []int
		for _, g := range s.Groups {
			i, known := c.groupIdx[g.Name]
			if !known {
				continue
			}
			cw, err1 := g.Cand.window()
			sw, err2 := g.Stab.window()
			if err1 != nil || err2 != nil {
				ok = false
				break
			}
			cs, ss, gi = append(cs, cw), append(ss, sw), append(gi, i)
		}
		bw, err := s.Base.window()
		if !ok || err != nil {
			continue
		}
		base.merge(&bw)
		if sameStage {
			for k, i := range gi {
				cand[i].merge(&cs[k])
				stab[i].merge(&ss[k])
			}
		}
		replicas++
	}
	return replicas
}
