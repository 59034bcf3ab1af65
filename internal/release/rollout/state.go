package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// StateSchema is the version of the state file's format.
const StateSchema = 1

// Limits on a state file, so a damaged or hostile file cannot exhaust memory.
const (
	maxStateFileBytes = 4 << 20
	maxSavedHistory   = 1000
	maxSavedStage     = 10000
	// MaxHistory is how many transitions a rollout keeps (the oldest go first).
	MaxHistory = 100
	// MaxSuspects is how many diagnosis suspects a rollback reason keeps.
	MaxSuspects = 5
)

// State is where a rollout stands.
type State string

// The rollout states.
const (
	// StateProgressing: the candidate serves the current and earlier
	// stages' groups; passing gates promote, a failing gate rolls back.
	StateProgressing State = "progressing"
	// StatePaused: like progressing, but nothing is promoted
	// automatically; a failing gate still rolls back.
	StatePaused State = "paused"
	// StateComplete: the candidate serves every request but the control share.
	StateComplete State = "complete"
	// StateRolledBack: the stable version serves every request until Reset.
	StateRolledBack State = "rolled_back"
)

var states = []State{StateProgressing, StatePaused, StateComplete, StateRolledBack}

func (s State) valid() bool { return slices.Contains(states, s) }

// TransitionKind says what a transition did.
type TransitionKind string

// The transition kinds.
const (
	// KindStart begins a rollout at its first stage.
	KindStart TransitionKind = "start"
	// KindPromote moves to the next stage, or completes after the last.
	KindPromote TransitionKind = "promote"
	// KindRollback sends every request back to the stable version.
	KindRollback TransitionKind = "rollback"
	// KindPause stops automatic promotion.
	KindPause TransitionKind = "pause"
	// KindResume restarts automatic promotion.
	KindResume TransitionKind = "resume"
	// KindReset starts the rollout over from its first stage.
	KindReset TransitionKind = "reset"
)

func (k TransitionKind) valid() bool {
	switch k {
	case KindStart, KindPromote, KindRollback, KindPause, KindResume, KindReset:
		return true
	default:
		return false
	}
}

// Transition is one entry of a rollout's history.
type Transition struct {
	// Time is when it happened.
	Time time.Time `json:"time"`
	// Kind says what happened.
	Kind TransitionKind `json:"kind"`
	// From and To are the stage names before and after.
	From string `json:"from,omitempty"`
	To   string `json:"to"`
	// State is the state after the transition.
	State State `json:"state"`
	// Manual is true for an operator's command, false for the controller's
	// own decision.
	Manual bool `json:"manual"`
	// Reason says why, in words.
	Reason string `json:"reason"`
}

// Suspect is an input feature (or output) whose live distribution in one
// group differs from a reference, as a drift ranker reports it.
type Suspect struct {
	// Feature names the feature or output.
	Feature string `json:"feature"`
	// PSI is the population stability index.
	PSI float64 `json:"psi"`
	// KS is the two-sample Kolmogorov–Smirnov statistic.
	KS float64 `json:"ks"`
	// PValue is the KS test's p-value.
	PValue float64 `json:"p_value"`
}

// Reason records why a rollout was rolled back.
type Reason struct {
	// Gate names the failed gate (error_rate, p95_latency_ratio,
	// low_confidence_share, drift_psi, drift_p_value), or "manual".
	Gate string `json:"gate"`
	// Value is the measured value and Threshold the gate's limit.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Stage and StageIndex are the stage that was current.
	Stage      string `json:"stage"`
	StageIndex int    `json:"stage_index"`
	// Group is the group whose candidate traffic failed the gate.
	Group string `json:"group,omitempty"`
	// Slice is the slice of the group where the accuracy gate failed
	// (e.g. "x-region=sa"); empty for the other gates.
	Slice string `json:"slice,omitempty"`
	// Requests is the sample size behind Value.
	Requests uint64 `json:"requests"`
	// Failed lists every gate that failed in that evaluation, in every group.
	Failed []GateFailure `json:"failed,omitempty"`
	// Suspects are the features whose live distribution in Group differs
	// most from the stable groups, from the Diagnose function.
	Suspects []Suspect `json:"suspects,omitempty"`
	// Message is the reason in one sentence.
	Message string `json:"message"`
}

// String returns the message.
func (r *Reason) String() string { return r.Message }

// GateFailure is one failed gate in one group.
type GateFailure struct {
	// Group is the group and Gate the gate.
	Group string `json:"group"`
	Gate  string `json:"gate"`
	// Slice is where the accuracy gate failed.
	Slice string `json:"slice,omitempty"`
	// Value is the measured value and Threshold the gate's limit.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Requests is the sample size behind Value.
	Requests uint64 `json:"requests"`
}

// SavedState is the content of a rollout's state file.
type SavedState struct {
	// Schema is StateSchema.
	Schema int `json:"schema"`
	// Service is the inference service.
	Service string `json:"service"`
	// Stable and Candidate are the versions the state belongs to; a state
	// for other versions is a different rollout and is not resumed.
	Stable    Target `json:"stable"`
	Candidate Target `json:"candidate"`
	// State is where the rollout stands.
	State State `json:"state"`
	// Stage is the current stage's index and StageName its name.
	Stage     int    `json:"stage"`
	StageName string `json:"stage_name"`
	// StageSince is when the current stage began; StateSince when the state
	// last changed.
	StageSince time.Time `json:"stage_since"`
	StateSince time.Time `json:"state_since"`
	// Reason is why the rollout was rolled back; nil unless rolled back.
	Reason *Reason `json:"reason,omitempty"`
	// History is the latest transitions, oldest first.
	History []Transition `json:"history"`
}

// ParseSavedState decodes and checks a state file. Times come back in UTC.
func ParseSavedState(data []byte) (*SavedState, error) {
	if len(data) > maxStateFileBytes {
		return nil, fmt.Errorf("state file is %d bytes, more than %d", len(data), maxStateFileBytes)
	}
	var s SavedState
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode state: trailing data after the state object")
	}
	switch {
	case s.Schema != StateSchema:
		return nil, fmt.Errorf("unsupported state schema %d (want %d)", s.Schema, StateSchema)
	case !s.State.valid():
		return nil, fmt.Errorf("unknown state %q", s.State)
	case s.Stage < 0 || s.Stage > maxSavedStage:
		return nil, fmt.Errorf("stage %d outside [0,%d]", s.Stage, maxSavedStage)
	case s.StageSince.IsZero():
		return nil, errors.New("stage_since is missing")
	case len(s.History) > maxSavedHistory:
		return nil, fmt.Errorf("history has %d entries, more than %d", len(s.History), maxSavedHistory)
	}
	var err error
	if s.StageSince, err = utc("stage_since", s.StageSince); err != nil {
		return nil, err
	}
	if s.StateSince, err = utc("state_since", s.StateSince); err != nil {
		return nil, err
	}
	for i := range s.History {
		t := &s.History[i]
		if !t.Kind.valid() {
			return nil, fmt.Errorf("history[%d]: unknown kind %q", i, t.Kind)
		}
		if !t.State.valid() {
			return nil, fmt.Errorf("history[%d]: unknown state %q", i, t.State)
		}
		if t.Time, err = utc(fmt.Sprintf("history[%d].time", i), t.Time); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// utc returns t in UTC, which must fall in the years 1 to 9999 (what JSON
// can encode again).
func utc(name string, t time.Time) (time.Time, error) {
	t = t.UTC()
	if y := t.Year(); y < 1 || y > 9999 {
		return time.Time{}, fmt.Errorf("%s: year %d outside [1,9999]", name, y)
	}
	return t, nil
}

// Marshal encodes s as a state file.
func (s *SavedState) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return append(b, '\n'), nil
}

// loadState reads path; a missing file is (nil, nil).
func loadState(path string) (*SavedState, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	s, err := ParseSavedState(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// writeFileAtomic replaces path with data: it writes a temporary file in the
// same folder, syncs it and renames it over path, then syncs the folder, so
// a crash leaves either the old or the new file, never a torn one.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// finite makes v encodable as JSON: NaN becomes 0 and ±Inf the largest
// finite value of that sign.
func finite(v float64) float64 {
	switch {
	case math.IsNaN(v):
		return 0
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	default:
		return v
	}
}
