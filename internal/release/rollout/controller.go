package rollout

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Arm is which side of a rollout served a request.
type Arm string

// The arms.
const (
	// ArmStable: the stable version, for a request the rollout has not
	// reached (or every request after a rollback).
	ArmStable Arm = "stable"
	// ArmCandidate: the candidate version.
	ArmCandidate Arm = "candidate"
	// ArmControl: the stable version, for a request of the control share
	// after a complete rollout.
	ArmControl Arm = "control"
)

var arms = [...]Arm{ArmStable, ArmCandidate, ArmControl}

func (a Arm) index() int {
	switch a {
	case ArmCandidate:
		return 1
	case ArmControl:
		return 2
	default:
		return 0
	}
}

// The gate names, as they appear in reasons and status.
const (
	GateErrorRate          = "error_rate"
	GateP95LatencyRatio    = "p95_latency_ratio"
	GateLowConfidenceShare = "low_confidence_share"
	GateDriftPSI           = "drift_psi"
	GateDriftPValue        = "drift_p_value"
	// GateAccuracy compares online error from joined outcomes.
	GateAccuracy = "accuracy"
	// GateManual is the gate of an operator's rollback.
	GateManual = "manual"
)

// DiagnoseFunc ranks the features whose live distribution in group differs
// most from the stable groups, most different first (for example by PSI or
// KS, as the drift package's ranking does). The controller calls it once per
// automatic rollback, without holding any lock that Decide or Observe take,
// and keeps the first MaxSuspects. It owns nothing it returns afterwards.
type DiagnoseFunc func(group string) []Suspect

// DriftFunc reports the drift of the watched features or outputs in group's
// live traffic. The controller calls it for every group the candidate serves
// on each Tick, and judges the drift gates on the largest PSI and the
// smallest p-value it returns (non-finite values are ignored). Returning
// nothing means there is not enough data yet.
type DriftFunc func(group string) []Suspect

// Options are the controller's injected dependencies.
type Options struct {
	// Now is the clock for manual transitions, start-up and Run
	// (default time.Now). Tick takes its time as an argument.
	Now func() time.Time
	// Diagnose, when set, adds suspects to every automatic rollback's reason.
	Diagnose DiagnoseFunc
	// Drift, when set, feeds the drift gates.
	Drift DriftFunc
	// Accuracy, when set, feeds the accuracy gate.
	Accuracy AccuracyFunc
	// RandN returns a number in [0, n) for a request that carries no hash
	// key and no request id; it must be safe for concurrent use
	// (default math/rand/v2's IntN).
	RandN func(n int) int
	// Fleet, when set, keeps the state in the fleet's shared store instead
	// of StateFile and makes the gates judge the fleet's windows (see
	// Fleet).
	Fleet Fleet
}

// percentScale is the number of hash buckets a share is cut into: shares
// have a resolution of 0.01 %.
const percentScale = 10000

func percentBuckets(p float64) int { return int(math.Round(p * percentScale / 100)) }

// stageSpec is a resolved Stage.
type stageSpec struct {
	name        string
	minDuration time.Duration
	percent     float64
	buckets     int   // of percentScale
	groups      []int // indices into Controller.groups
}

// routing is what Decide needs, swapped atomically on every transition so
// that Decide takes no lock.
type routing struct {
	state      State
	stage      int
	stageSince time.Time
}

// Controller runs one service's staged rollout. Decide, Observe and Status
// are safe for concurrent use with each other and with Tick, Run and the
// manual commands.
type Controller struct {
	service     string
	stable      Target
	candidate   Target
	stages      []stageSpec
	groups      []groupSpec
	groupIdx    map[string]int
	gates       gates
	minRequests uint64
	control     int // control share, of percentScale
	controlPct  float64
	hashKey     string
	stateFile   string
	interval    time.Duration
	now         func() time.Time
	randN       func(int) int
	diagnose    DiagnoseFunc
	drift       DriftFunc
	accuracy    AccuracyFunc
	log         *slog.Logger
	m           *metrics
	reqs        [][len(arms)]prometheus.Counter // [group][arm]

	route atomic.Pointer[routing]

	// ops lets one transition (a Tick's or a command's) run at a time: it
	// is held while the new state is written, mu is not.
	ops        gate
	fleet      Fleet
	mu         sync.Mutex // protects st, gen, rev, pending, driftSeen and accSeen
	st         SavedState
	gen        uint64                     // counts the changes of st
	rev        uint64                     // the fleet state's revision st was read or saved at
	pending    bool                       // a rollback the fleet has not stored yet (it was unreachable)
	driftSeen  map[string][]Suspect       // the last Drift answer per group
	accSeen    map[string][]AccuracySlice // the last Accuracy answer per group
	windowsMu  sync.Mutex                 // protects cand, stab and base
	cand, stab []window                   // per group, current stage: candidate; stable and control
	base       window                     // stable and control since the rollout started
}

// New builds the controller of service's rollout. It validates cfg, then
// loads cfg.StateFile: a saved state for the same stable and candidate
// versions is resumed (a rolled-back rollout stays rolled back until Reset);
// otherwise the rollout starts at its first stage and the state is written.
// A state file that cannot be read or parsed is an error, because starting
// over could send traffic to a candidate that was rolled back. A nil logger
// discards; a nil reg registers nothing.
func New(service string, cfg Config, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollout of %s: %w", service, err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Controller{
		service:     service,
		stable:      cfg.Stable,
		candidate:   cfg.Candidate,
		groupIdx:    map[string]int{},
		gates:       resolveGates(cfg.Gates),
		minRequests: uint64(cfg.MinRequests),
		controlPct:  DefaultControlPercent,
		hashKey:     cfg.HashKey,
		stateFile:   cfg.StateFile,
		interval:    cfg.Interval.Std(),
		now:         opts.Now,
		randN:       opts.RandN,
		diagnose:    opts.Diagnose,
		drift:       opts.Drift,
		accuracy:    opts.Accuracy,
		fleet:       opts.Fleet,
		log:         logger.With("component", "rollout", "service", service),
		m:           newMetrics(reg),
		driftSeen:   map[string][]Suspect{},
		accSeen:     map[string][]AccuracySlice{},
		ops:         make(gate, 1),
	}
	if c.minRequests == 0 {
		c.minRequests = DefaultMinRequests
	}
	if cfg.ControlPercent != nil {
		c.controlPct = *cfg.ControlPercent
	}
	c.control = percentBuckets(c.controlPct)
	if c.interval == 0 {
		c.interval = DefaultInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.randN == nil {
		c.randN = rand.IntN
	}
	if err := c.buildStages(cfg.Stages); err != nil {
		return nil, fmt.Errorf("rollout of %s: %w", service, err)
	}
	if (c.gates.psiOn || c.gates.pValueOn) && c.drift == nil {
		c.log.Warn("drift gates are configured but no drift source is attached; they are not judged")
	}
	c.cand = make([]window, len(c.groups))
	c.stab = make([]window, len(c.groups))
	c.reqs = make([][len(arms)]prometheus.Counter, len(c.groups))
	for i := range c.groups {
		for j, a := range arms {
			c.reqs[i][j] = c.m.requests.WithLabelValues(service, string(a), c.groups[i].name)
		}
	}
	if err := c.start(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) buildStages(stages []Stage) error {
	prevMin := DefaultMinDuration
	for i := range stages {
		s := &stages[i]
		spec := stageSpec{name: s.Name, minDuration: s.MinDuration.Std(), percent: s.TrafficPercent}
		if spec.minDuration == 0 {
			spec.minDuration = DefaultMinDuration
		}
		if spec.percent == 0 {
			spec.percent = DefaultTrafficPercent
		}
		spec.buckets = percentBuckets(spec.percent)
		prevMin = spec.minDuration
		if len(s.Groups) == 0 {
			spec.groups = append(spec.groups, c.addGroup(groupSpec{name: AllGroup, stage: i, all: true}))
		}
		for j := range s.Groups {
			g, err := compileGroup(&s.Groups[j], i)
			if err != nil {
				return fmt.Errorf("stages[%d].groups[%d]: %w", i, j, err)
			}
			spec.groups = append(spec.groups, c.addGroup(g))
		}
		c.stages = append(c.stages, spec)
	}
	if n := len(stages); n == 0 || len(stages[n-1].Groups) > 0 {
		// The implicit final stage: everyone the earlier stages leave out.
		c.stages = append(c.stages, stageSpec{
			name: AllGroup, minDuration: prevMin, percent: DefaultTrafficPercent, buckets: percentScale,
			groups: []int{c.addGroup(groupSpec{name: AllGroup, stage: len(c.stages), all: true})},
		})
	}
	return nil
}

func (c *Controller) addGroup(g groupSpec) int {
	c.groups = append(c.groups, g)
	c.groupIdx[g.name] = len(c.groups) - 1
	return len(c.groups) - 1
}

// start loads or creates the saved state.
func (c *Controller) start() error {
	now := c.now().UTC()
	if c.fleet != nil {
		return c.startFleet(now)
	}
	var saved *SavedState
	if c.stateFile != "" {
		if err := os.MkdirAll(filepath.Dir(c.stateFile), 0o750); err != nil {
			return fmt.Errorf("rollout of %s: state folder: %w", c.service, err)
		}
		var err error
		if saved, err = loadState(c.stateFile); err != nil {
			return fmt.Errorf("rollout of %s: load state: %w", c.service, err)
		}
	}
	if saved != nil && saved.Service != "" && saved.Service != c.service {
		// Two services pointed at one file: taking it over would erase the
		// other service's rollout, perhaps a rollback.
		return fmt.Errorf("rollout of %s: state file %s belongs to service %q", c.service, c.stateFile, saved.Service)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case saved == nil:
		c.st = c.fresh(now, nil, "rollout started")
	case saved.Stable != c.stable || saved.Candidate != c.candidate:
		c.st = c.fresh(now, nil, fmt.Sprintf("new rollout of %s over %s replaces the saved one of %s over %s",
			versionName(c.candidate), versionName(c.stable), versionName(saved.Candidate), versionName(saved.Stable)))
	default:
		c.st = *saved
		c.st.Service = c.service
		c.st.Stage = c.resolveStage(saved.StageName, saved.Stage)
		c.st.StageName = c.stages[c.st.Stage].name
		c.publishLocked()
		c.log.Info("rollout resumed", "state", string(c.st.State), "stage", c.st.StageName)
		return nil
	}
	c.log.Info("rollout started", "stage", c.stages[0].name, "candidate", c.candidate.Version)
	c.publishLocked()
	if err := c.persistFile(&c.st); err != nil { // New: nothing else uses the controller yet
		return fmt.Errorf("rollout of %s: %w", c.service, err)
	}
	return nil
}

// resolveStage finds a saved stage by name, or else by index, in the
// configured stages (which may have changed since the state was saved).
func (c *Controller) resolveStage(name string, idx int) int {
	for i := range c.stages {
		if c.stages[i].name == name {
			return i
		}
	}
	return min(max(idx, 0), len(c.stages)-1)
}

func versionName(t Target) string {
	v := t.Version
	if v == "" {
		v = "the default version"
	}
	if t.Backend != "" {
		v += " on " + t.Backend
	}
	return v
}

// fresh is the state of a rollout started over at stage 0 at now, after
// history.
func (c *Controller) fresh(now time.Time, history []Transition, reason string) SavedState {
	return SavedState{
		Schema: StateSchema, Service: c.service, Stable: c.stable, Candidate: c.candidate,
		State: StateProgressing, Stage: 0, StageName: c.stages[0].name,
		StageSince: now, StateSince: now,
		History: withHistory(history, Transition{Time: now, Kind: KindStart, To: c.stages[0].name, State: StateProgressing, Reason: reason}),
	}
}

// Target returns the version and backend that arm stands for.
func (c *Controller) Target(arm Arm) Target {
	if arm == ArmCandidate {
		return c.candidate
	}
	return c.stable
}

// Decide says which version serves req now, the traffic group req belongs
// to, and the arm. A request belongs to the first group, in stage order,
// whose matches hold; the final stage's group "all" takes the rest.
//
//   - progressing or paused: the candidate serves every request of an
//     earlier stage's groups, and TrafficPercent of the current stage's
//     groups' requests (by hash of the hash key or request id); the stable
//     version serves the rest.
//   - complete: the stable version serves the control share (by hash, as
//     ArmControl), the candidate everyone else.
//   - rolled back: the stable version serves every request.
//
// Decide takes no lock and does not allocate.
func (c *Controller) Decide(req Attributes) (version, group string, arm Arm) {
	r := c.route.Load()
	gi := c.classify(&req)
	g := &c.groups[gi]
	arm = ArmStable
	switch r.state {
	case StateProgressing, StatePaused:
		switch {
		case g.stage < r.stage:
			arm = ArmCandidate
		case g.stage == r.stage:
			if b := c.stages[g.stage].buckets; b >= percentScale || (b > 0 && c.bucket(&req, false) < b) {
				arm = ArmCandidate
			}
		}
	case StateComplete:
		arm = ArmCandidate
		if c.control > 0 && c.bucket(&req, true) < c.control {
			arm = ArmControl
		}
	case StateRolledBack:
	}
	c.reqs[gi][arm.index()].Inc()
	return c.Target(arm).Version, g.name, arm
}

func (c *Controller) classify(req *Attributes) int {
	for i := range c.groups {
		if c.groups[i].matches(req) {
			return i
		}
	}
	return len(c.groups) - 1 // unreachable: the last group is "all"
}

// bucket is req's hash bucket in [0, percentScale). The traffic share reads
// the hash's low bits and the control share its high bits, so the two are
// independent of each other.
func (c *Controller) bucket(req *Attributes, control bool) int {
	var key string
	if c.hashKey != "" {
		key = req.Values[c.hashKey]
	}
	if key == "" {
		key = req.RequestID
	}
	if key == "" {
		return c.randN(percentScale)
	}
	h := hash(key)
	if control {
		h >>= 32
	}
	return int(h % percentScale)
}

// Observe records the outcome of one request that Decide sent to arm in
// group. Outcomes of unknown groups are ignored. Windows restart at every
// stage, so gates judge only what the current stage saw.
func (c *Controller) Observe(arm Arm, group string, o Outcome) {
	gi, ok := c.groupIdx[group]
	if !ok {
		return
	}
	c.windowsMu.Lock()
	defer c.windowsMu.Unlock()
	switch arm {
	case ArmCandidate:
		c.cand[gi].add(&o, c.gates.confidenceBelow)
	case ArmStable, ArmControl:
		c.stab[gi].add(&o, c.gates.confidenceBelow)
		c.base.add(&o, c.gates.confidenceBelow)
	}
}

// Tick evaluates the gates at now, for a progressing or paused rollout:
//
//   - It rolls back at once when a gate fails in any group the candidate
//     serves, with a Reason naming the gate, the measured value and
//     threshold, the stage and the group, and the Diagnose suspects.
//   - Otherwise a progressing rollout is promoted when the current stage
//     has lasted its minimum duration and every gate of every one of its
//     groups has been judged and holds.
//
// A group's gates are judged once its candidate traffic in the current stage
// reaches min_requests. It returns the transition made, or nil.
//
// ctx bounds the wait for another transition of this controller in
// progress and the write of the new state (at most FleetTimeout); Status
// and Decide never wait for a Tick.
func (c *Controller) Tick(ctx context.Context, now time.Time) *Transition {
	if !c.ops.acquire(ctx) {
		return nil
	}
	defer c.ops.release()
	now = now.UTC()
	c.retryPending(ctx)

	// Read under the lock; ask the drift and accuracy sources outside it.
	c.mu.Lock()
	st, stage, gen := c.st.State, c.st.Stage, c.gen
	c.mu.Unlock()
	if st != StateProgressing && st != StatePaused {
		return nil
	}
	drift, acc := c.sources(st, stage)

	c.mu.Lock()
	if c.gen != gen {
		// Another replica's state arrived meanwhile: the sources were asked
		// about another stage. The next Tick judges the new one.
		c.mu.Unlock()
		return nil
	}
	maps.Copy(c.driftSeen, drift)
	maps.Copy(c.accSeen, acc)
	ev := c.evaluate(st, stage)
	stageSince := c.st.StageSince
	c.mu.Unlock()

	var p *proposal
	switch s := &c.stages[stage]; {
	case len(ev.failures) > 0:
		r := c.failureReason(stage, ev.failures) // Diagnose runs outside the lock
		p = &proposal{kind: KindRollback, state: StateRolledBack, stage: stage, reason: r.Message, why: r}
	case st == StateProgressing && ev.ready && now.Sub(stageSince) >= s.minDuration:
		p = c.promotion(stage, fmt.Sprintf("gates held in stage %q for %s", s.name, s.minDuration))
	default:
		return nil
	}
	t, err := c.do(ctx, now, func(cur *SavedState) (*proposal, error) {
		if c.gen != gen {
			return nil, nil // judged on a state that is gone
		}
		return p, nil
	})
	if err != nil && t.Kind != "" {
		c.log.Error("rollout state not saved", "err", err)
	}
	if t.Kind == "" {
		return nil
	}
	return &t
}

// sources asks the drift and accuracy sources about every group the
// candidate serves in state at stage. Callers do not hold mu: the sources
// may take their time.
func (c *Controller) sources(state State, stage int) (drift map[string][]Suspect, acc map[string][]AccuracySlice) {
	drift, acc = map[string][]Suspect{}, map[string][]AccuracySlice{}
	for i := range c.groups {
		if !c.serving(i, state, stage) {
			continue
		}
		name := c.groups[i].name
		if c.drift != nil {
			drift[name] = c.drift(name)
		}
		if c.accuracy != nil && c.gates.accuracy != nil {
			acc[name] = c.accuracy(name, c.gates.accuracy.metric)
		}
	}
	return drift, acc
}

// Run calls Tick every interval until ctx is done, and returns nil then.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Tick(ctx, c.now())
		}
	}
}

// The manual commands. Each reads the state under the lock, writes the
// new one outside it (bounded by ctx and FleetTimeout), then commits it.

// Promote moves a progressing or paused rollout to its next stage now,
// whatever the gates say (after the last stage it completes). A paused
// rollout stays paused.
func (c *Controller) Promote(ctx context.Context, reason string) error {
	return c.command(ctx, func(cur *SavedState) (*proposal, error) {
		if err := c.mustBeActive(cur, "promote"); err != nil {
			return nil, err
		}
		return c.promotion(cur.Stage, orDefault(reason, "promoted by an operator")), nil
	})
}

// Rollback sends every request to the stable version now, recording reason.
// It fails only for a rollout already rolled back.
func (c *Controller) Rollback(ctx context.Context, reason string) error {
	return c.command(ctx, func(cur *SavedState) (*proposal, error) {
		if cur.State == StateRolledBack {
			return nil, apierr.Errorf(apierr.KindConflict, ReasonRolloutRolledBack, "rollout of %s is already rolled back", c.service)
		}
		msg := "manual rollback"
		if reason != "" {
			msg += ": " + reason
		}
		r := &Reason{Gate: GateManual, Stage: cur.StageName, StageIndex: cur.Stage, Message: msg}
		return &proposal{kind: KindRollback, state: StateRolledBack, stage: cur.Stage, reason: msg, why: r}, nil
	})
}

// Pause stops automatic promotion; gates keep rolling back. Pausing a paused
// rollout does nothing.
func (c *Controller) Pause(ctx context.Context, reason string) error {
	return c.command(ctx, func(cur *SavedState) (*proposal, error) {
		if err := c.mustBeActive(cur, "pause"); err != nil || cur.State == StatePaused {
			return nil, err
		}
		return &proposal{kind: KindPause, state: StatePaused, stage: cur.Stage, reason: orDefault(reason, "paused by an operator")}, nil
	})
}

// Resume restarts automatic promotion of a paused rollout. Resuming a
// progressing rollout does nothing.
func (c *Controller) Resume(ctx context.Context, reason string) error {
	return c.command(ctx, func(cur *SavedState) (*proposal, error) {
		if err := c.mustBeActive(cur, "resume"); err != nil || cur.State == StateProgressing {
			return nil, err
		}
		return &proposal{kind: KindResume, state: StateProgressing, stage: cur.Stage, reason: orDefault(reason, "resumed by an operator")}, nil
	})
}

// Reset starts the rollout over at its first stage, whatever its state
// (the only way out of rolled back), and clears every window.
func (c *Controller) Reset(ctx context.Context, reason string) error {
	return c.command(ctx, func(*SavedState) (*proposal, error) {
		return &proposal{kind: KindReset, state: StateProgressing, stage: 0, reason: orDefault(reason, "reset by an operator")}, nil
	})
}

// command runs an operator's transition, waiting (bounded by ctx) for one
// in progress.
func (c *Controller) command(ctx context.Context, plan func(cur *SavedState) (*proposal, error)) error {
	if !c.ops.acquire(ctx) {
		return &apierr.Error{
			Kind: apierr.KindUnavailable, Reason: ReasonRolloutBusy,
			Msg: fmt.Sprintf("the rollout of %s is busy with another transition", c.service), Err: context.Cause(ctx),
		}
	}
	defer c.ops.release()
	_, err := c.do(ctx, c.now().UTC(), func(cur *SavedState) (*proposal, error) {
		p, err := plan(cur)
		if p != nil {
			p.manual = true
		}
		return p, err
	})
	return err
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *Controller) mustBeActive(cur *SavedState, verb string) error {
	switch cur.State {
	case StateRolledBack:
		return apierr.Errorf(apierr.KindConflict, ReasonRolloutRolledBack, "cannot %s the rollout of %s: it is rolled back (reset it to start over)", verb, c.service)
	case StateComplete:
		return apierr.Errorf(apierr.KindConflict, ReasonRolloutComplete, "cannot %s the rollout of %s: it is complete", verb, c.service)
	case StateProgressing, StatePaused:
	}
	return nil
}

// promotion proposes the move from stage to the next one, or to complete
// after the last (a paused rollout stays paused).
func (c *Controller) promotion(stage int, reason string) *proposal {
	if stage+1 < len(c.stages) {
		return &proposal{kind: KindPromote, keepState: true, stage: stage + 1, reason: reason}
	}
	return &proposal{kind: KindPromote, state: StateComplete, stage: stage, reason: reason + "; rollout complete"}
}

// Forget deletes the controller's metric series, for a service whose
// rollout is removed from the configuration.
func (c *Controller) Forget() { c.m.forget(c.service) }

// serving says whether the candidate serves (some of) group gi's requests
// in state at stage.
func (c *Controller) serving(gi int, state State, stage int) bool {
	switch state {
	case StateProgressing, StatePaused:
		return c.groups[gi].stage <= stage
	case StateComplete:
		return true
	case StateRolledBack:
	}
	return false
}

// GateStatus is the outcome of one gate in one group.
type GateStatus string

// The gate outcomes.
const (
	// GateOK: judged and holding.
	GateOK GateStatus = "ok"
	// GateFailed: judged and failing.
	GateFailed GateStatus = "failed"
	// GatePending: not judged yet (too few requests, or no drift data).
	GatePending GateStatus = "pending"
	// GateOff: not applicable (e.g. the model reports no confidence).
	GateOff GateStatus = "off"
)

// GateValue is one gate's value in one group.
type GateValue struct {
	// Gate names the gate.
	Gate string `json:"gate"`
	// Status is the outcome.
	Status GateStatus `json:"status"`
	// Value is the measured value so far and Threshold the gate's limit.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Requests is the sample size behind Value.
	Requests uint64 `json:"requests"`
	// Slice is the slice the accuracy gate's value comes from.
	Slice string `json:"slice,omitempty"`
}

// ArmStats sums up one arm's outcomes in a window.
type ArmStats struct {
	// Requests is the number of outcomes observed.
	Requests uint64 `json:"requests"`
	// ErrorRate is the share of requests with status >= 500.
	ErrorRate float64 `json:"error_rate"`
	// P95Ms is the 95th percentile latency in milliseconds.
	P95Ms float64 `json:"p95_ms"`
	// WithConfidence is the number of answers with a confidence score, and
	// LowConfidenceShare the share of those below the threshold.
	WithConfidence     uint64  `json:"with_confidence"`
	LowConfidenceShare float64 `json:"low_confidence_share"`
}

func statsOf(w *window) ArmStats {
	return ArmStats{
		Requests: w.n, ErrorRate: w.errorRate(), P95Ms: float64(w.p95()) / float64(time.Millisecond),
		WithConfidence: w.confN, LowConfidenceShare: w.lowConfShare(),
	}
}

// GroupStatus is one traffic group in the current stage's windows.
type GroupStatus struct {
	// Name is the group and Stage the stage that adds it.
	Name       string `json:"name"`
	Stage      string `json:"stage"`
	StageIndex int    `json:"stage_index"`
	// Serving says whether the candidate serves the group now, and
	// TrafficPercent which share of its requests.
	Serving        bool    `json:"serving"`
	TrafficPercent float64 `json:"traffic_percent"`
	// Candidate and Stable sum up each arm's outcomes (Stable includes the
	// control share).
	Candidate ArmStats `json:"candidate"`
	Stable    ArmStats `json:"stable"`
	// Gates are the gate values, for a group the candidate serves.
	Gates []GateValue `json:"gates,omitempty"`
	// Drift is the last drift report for the group.
	Drift []Suspect `json:"drift,omitempty"`
}

// StageInfo describes one configured stage.
type StageInfo struct {
	Name           string   `json:"name"`
	Groups         []string `json:"groups"`
	MinDuration    string   `json:"min_duration"`
	TrafficPercent float64  `json:"traffic_percent"`
}

// Status is a rollout's state for the admin API; it encodes as JSON.
type Status struct {
	// Service is the inference service.
	Service string `json:"service"`
	// State is where the rollout stands.
	State State `json:"state"`
	// Stage is the current stage's index and StageName its name.
	Stage     int    `json:"stage"`
	StageName string `json:"stage_name"`
	// StageSince is when the current stage began; StateSince when the state
	// last changed.
	StageSince time.Time `json:"stage_since"`
	StateSince time.Time `json:"state_since"`
	// Stable and Candidate are the versions.
	Stable    Target `json:"stable"`
	Candidate Target `json:"candidate"`
	// Stages are the configured stages, the implicit final one included.
	Stages []StageInfo `json:"stages"`
	// MinRequests is the per-group sample size gates wait for, and
	// ControlPercent the control share after completion.
	MinRequests    uint64  `json:"min_requests"`
	ControlPercent float64 `json:"control_percent"`
	// Baseline is the stable version's outcomes the latency gate compares
	// against.
	Baseline ArmStats `json:"baseline"`
	// Groups are the traffic groups with their windows and gates.
	Groups []GroupStatus `json:"groups"`
	// Reason is why the rollout was rolled back; nil unless rolled back.
	Reason *Reason `json:"reason,omitempty"`
	// History is the latest transitions, oldest first.
	History []Transition `json:"history"`
	// Fleet is the rollout's place in the fleet's shared state; nil in
	// single-process mode.
	Fleet *FleetStatus `json:"fleet,omitempty"`
}

// FleetStatus is a rollout's place in the fleet's shared state.
type FleetStatus struct {
	// Revision is the shared state's revision this replica follows.
	Revision uint64 `json:"revision"`
	// Pending says a rollback made here is not stored in the fleet yet
	// (the shared state could not be reached).
	Pending bool `json:"pending"`
	// Replicas is the number of other replicas whose windows count.
	Replicas int `json:"replicas"`
}

// Status returns the rollout's state, windows, gate values and history.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := c.evaluate(c.st.State, c.st.Stage)
	s := Status{
		Service: c.service, State: c.st.State, Stage: c.st.Stage, StageName: c.st.StageName,
		StageSince: c.st.StageSince, StateSince: c.st.StateSince, Stable: c.stable, Candidate: c.candidate,
		MinRequests: c.minRequests, ControlPercent: c.controlPct, Baseline: ev.baseline, Groups: ev.groups,
		History: append([]Transition(nil), c.st.History...),
	}
	if c.st.Reason != nil {
		r := *c.st.Reason
		s.Reason = &r
	}
	if c.fleet != nil {
		s.Fleet = &FleetStatus{Revision: c.rev, Pending: c.pending, Replicas: ev.replicas}
	}
	for _, st := range c.stages {
		info := StageInfo{Name: st.name, MinDuration: st.minDuration.String(), TrafficPercent: st.percent}
		for _, gi := range st.groups {
			info.Groups = append(info.Groups, c.groups[gi].name)
		}
		s.Stages = append(s.Stages, info)
	}
	return s
}

// evaluation is one judgement of every group's gates.
type evaluation struct {
	groups   []GroupStatus
	baseline ArmStats
	failures []GateFailure // in group order, then gate order
	replicas int           // other replicas whose windows count
	ready    bool          // every gate of every current-stage group is judged and holds
}

// evaluate judges the gates of every group the candidate serves, from the
// current stage's windows. The latency baseline is the stable version's
// outcomes in the current stage, or since the rollout started when the
// stage has fewer than min_requests of them (a stage that sends everyone to
// the candidate). Callers hold mu.
func (c *Controller) evaluate(state State, stage int) evaluation {
	c.windowsMu.Lock()
	candW, stabW, allBase := c.cand, c.stab, &c.base
	var fleetBase window
	replicas := 0
	if c.fleet != nil {
		// The fleet's windows: this replica's plus the other replicas'.
		candW, stabW = make([]window, len(c.groups)), make([]window, len(c.groups))
		for i := range c.groups {
			candW[i].merge(&c.cand[i])
			stabW[i].merge(&c.stab[i])
		}
		fleetBase.merge(&c.base)
		replicas = c.fleetWindows(candW, stabW, &fleetBase)
		allBase = &fleetBase
	}
	var stageBase window
	for i := range stabW {
		stageBase.merge(&stabW[i])
	}
	base := &stageBase
	if base.n < c.minRequests {
		base = allBase
	}
	ev := evaluation{baseline: statsOf(base), ready: true, replicas: replicas}
	baseP95 := base.p95()
	for i := range c.groups {
		g := &c.groups[i]
		cand := &candW[i]
		gs := GroupStatus{
			Name: g.name, Stage: c.stages[g.stage].name, StageIndex: g.stage,
			Serving: c.serving(i, state, stage), Candidate: statsOf(cand), Stable: statsOf(&stabW[i]),
		}
		if gs.Serving {
			gs.TrafficPercent = 100
			if (state == StateProgressing || state == StatePaused) && g.stage == stage {
				gs.TrafficPercent = c.stages[stage].percent
			} else if state == StateComplete {
				gs.TrafficPercent = 100 - c.controlPct
			}
			drift := c.driftSeen[g.name]
			gs.Gates = c.judge(cand, base, baseP95, drift)
			if v, ok := c.judgeAccuracy(c.accSeen[g.name]); ok {
				gs.Gates = append(gs.Gates, v)
			}
			gs.Drift = finiteSuspects(drift, len(drift))
			for _, v := range gs.Gates {
				switch v.Status {
				case GateFailed:
					ev.failures = append(ev.failures, GateFailure{
						Group: g.name, Gate: v.Gate, Value: v.Value, Threshold: v.Threshold, Requests: v.Requests, Slice: v.Slice,
					})
					ev.ready = false
				case GatePending:
					if g.stage == stage {
						ev.ready = false
					}
				case GateOK, GateOff:
				}
			}
		}
		ev.groups = append(ev.groups, gs)
	}
	c.windowsMu.Unlock()
	return ev
}

// judge evaluates the gates of one group's candidate window. Callers hold
// windowsMu.
func (c *Controller) judge(cand, base *window, baseP95 time.Duration, drift []Suspect) []GateValue {
	g := &c.gates
	enough := cand.n >= c.minRequests
	verdict := func(v GateValue, judged, fail bool) GateValue {
		switch {
		case !judged:
			v.Status = GatePending
		case fail:
			v.Status = GateFailed
		default:
			v.Status = GateOK
		}
		v.Value, v.Threshold = finite(v.Value), finite(v.Threshold)
		return v
	}
	er := cand.errorRate()
	out := []GateValue{verdict(GateValue{Gate: GateErrorRate, Value: er, Threshold: g.maxErrorRate, Requests: cand.n},
		enough, er > g.maxErrorRate)}

	ratio := 0.0
	candP95 := cand.p95()
	if baseP95 > 0 {
		ratio = float64(candP95) / float64(baseP95)
	}
	out = append(out, verdict(GateValue{Gate: GateP95LatencyRatio, Value: ratio, Threshold: g.maxLatencyRatio, Requests: cand.n},
		enough && base.n >= c.minRequests && baseP95 > 0, ratio > g.maxLatencyRatio))

	lc := GateValue{Gate: GateLowConfidenceShare, Value: cand.lowConfShare(), Threshold: g.maxLowConfidence, Requests: cand.confN}
	if enough && cand.confN < c.minRequests {
		// Too few answers carry a confidence score to judge: the model
		// probably reports none.
		lc.Status = GateOff
		out = append(out, lc)
	} else {
		out = append(out, verdict(lc, enough, lc.Value > g.maxLowConfidence))
	}

	if c.drift == nil {
		return out
	}
	maxPSI, minP := math.Inf(-1), math.Inf(1)
	for _, s := range drift {
		if !math.IsNaN(s.PSI) && !math.IsInf(s.PSI, 0) {
			maxPSI = max(maxPSI, s.PSI)
		}
		if !math.IsNaN(s.PValue) && !math.IsInf(s.PValue, 0) {
			minP = min(minP, s.PValue)
		}
	}
	if g.psiOn {
		has := !math.IsInf(maxPSI, -1)
		out = append(out, verdict(GateValue{Gate: GateDriftPSI, Value: max(maxPSI, 0), Threshold: g.maxDriftPSI, Requests: cand.n},
			has, has && maxPSI > g.maxDriftPSI))
	}
	if g.pValueOn {
		has := !math.IsInf(minP, 1)
		v := 1.0
		if has {
			v = minP
		}
		out = append(out, verdict(GateValue{Gate: GateDriftPValue, Value: v, Threshold: g.minDriftPValue, Requests: cand.n},
			has, has && minP < g.minDriftPValue))
	}
	return out
}

// failureReason builds the rollback reason from the first failure at
// stage, asking Diagnose for suspects in its group. Callers hold neither
// mu nor windowsMu: Diagnose may take its time.
func (c *Controller) failureReason(stage int, failures []GateFailure) *Reason {
	f := failures[0]
	r := &Reason{
		Gate: f.Gate, Value: f.Value, Threshold: f.Threshold, Stage: c.stages[stage].name, StageIndex: stage,
		Group: f.Group, Slice: f.Slice, Requests: f.Requests, Failed: failures,
	}
	if c.diagnose != nil {
		r.Suspects = finiteSuspects(c.diagnose(f.Group), MaxSuspects)
	}
	var b strings.Builder
	op := ">"
	if f.Gate == GateDriftPValue {
		op = "<"
	}
	fmt.Fprintf(&b, "gate %s failed in stage %q (%d of %d), group %q: %.4g %s %.4g", f.Gate, r.Stage, stage+1, len(c.stages),
		f.Group, f.Value, op, f.Threshold)
	switch f.Gate {
	case GateLowConfidenceShare:
		fmt.Fprintf(&b, " (share of confidence < %g, over %d scored answers)", c.gates.confidenceBelow, f.Requests)
	case GateP95LatencyRatio:
		fmt.Fprintf(&b, " (candidate p95 over stable p95, %d candidate requests)", f.Requests)
	case GateAccuracy:
		fmt.Fprintf(&b, " in slice %q (candidate %s over stable %s, %d candidate outcomes)", f.Slice, c.gates.accuracy.metric, c.gates.accuracy.metric, f.Requests)
	default:
		fmt.Fprintf(&b, " (%d candidate requests)", f.Requests)
	}
	if n := len(failures) - 1; n > 0 {
		fmt.Fprintf(&b, "; %d more gate failure(s)", n)
	}
	if len(r.Suspects) > 0 {
		b.WriteString("; top suspects: ")
		for i, s := range r.Suspects {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (PSI %.3g, KS p %.3g)", s.Feature, s.PSI, s.PValue)
		}
	}
	r.Message = b.String()
	return r
}

// finiteSuspects copies the first n of ss with their values made encodable
// as JSON.
func finiteSuspects(ss []Suspect, n int) []Suspect {
	if len(ss) == 0 {
		return nil
	}
	out := make([]Suspect, 0, min(n, len(ss)))
	for _, s := range ss[:min(n, len(ss))] {
		s.PSI, s.KS, s.PValue = finite(s.PSI), finite(s.KS), finite(s.PValue)
		out = append(out, s)
	}
	return out
}
