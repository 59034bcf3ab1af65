// Package rolloutspec is how sluice.yaml writes a service's staged
// rollout (gateway.services[].rollout): stages of traffic groups, gates
// and their defaults, with the checks that need nothing but the values.
// Package rollout runs it; package config embeds it. It imports only
// leaf packages, so that config stays data.
package rolloutspec

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-ml/sluice/internal/config/duration"
	"github.com/sluice-ml/sluice/internal/match"
)

// Defaults for Config.
const (
	// DefaultTrafficPercent is a stage's share of its groups' requests that
	// the candidate serves.
	DefaultTrafficPercent = 100.0
	// DefaultControlPercent is the share of requests that keeps going to the
	// stable version after a complete rollout.
	DefaultControlPercent = 5.0
	// DefaultMinRequests is the number of candidate requests a group needs
	// in the current stage before its gates are judged.
	DefaultMinRequests = 500
	// DefaultMinDuration is a stage's minimum duration when it sets none.
	DefaultMinDuration = 10 * time.Minute
	// DefaultInterval is how often Run evaluates the gates.
	DefaultInterval = 10 * time.Second
	// DefaultMaxErrorRate is the error_rate gate's threshold.
	DefaultMaxErrorRate = 0.01
	// DefaultMaxP95LatencyRatio is the p95_latency_ratio gate's threshold.
	DefaultMaxP95LatencyRatio = 1.1
	// DefaultMaxLowConfidenceShare is the low_confidence_share gate's threshold.
	DefaultMaxLowConfidenceShare = 0.15
	// DefaultConfidenceBelow is the confidence under which a prediction
	// counts as low-confidence.
	DefaultConfidenceBelow = 0.6
	// AllGroup names the group of the final stage: every request that no
	// earlier stage's group takes.
	AllGroup = "all"
)

// Config is one service's staged rollout (gateway.services[].rollout).
// The zero value of an optional field takes its default; Validate checks a
// Config and rollout.New applies the defaults.
type Config struct {
	// Stable is the version serving today; it keeps every request outside
	// the rollout's groups, all of them after a rollback, and the control
	// share after completion. An empty version leaves the pick to the
	// service's routes.
	Stable Target `yaml:"stable"`
	// Candidate is the version being rolled out; its version is required.
	Candidate Target `yaml:"candidate"`
	// Stages are rolled out in order. A stage without groups takes every
	// remaining request and may only be the last; when the last stage has
	// groups, a final stage named "all" (group "all", with the previous
	// stage's min_duration) is appended.
	Stages []Stage `yaml:"stages"`
	// Gates decide promotion and rollback.
	Gates Gates `yaml:"gates"`
	// MinRequests is the number of candidate requests a group needs in the
	// current stage before its gates are judged [500].
	MinRequests int `yaml:"min_requests"`
	// ControlPercent is the share of requests, in percent, that keeps going
	// to the stable version after a complete rollout, as a control [5];
	// 0 sends every request to the candidate.
	ControlPercent *float64 `yaml:"control_percent"`
	// HashKey names the request field or entity join key whose value picks
	// a request's traffic share and control share by hash, so one key
	// always gets the same version (e.g. user_id or order_id). Without it,
	// or when a request lacks the value, the request id is hashed.
	HashKey string `yaml:"hash_key"`
	// StateFile is where the rollout's state is kept across restarts;
	// empty keeps it in memory only.
	StateFile string `yaml:"state_file"`
	// Interval is how often Run evaluates the gates [10s].
	Interval duration.Duration `yaml:"interval"`
}

// Target is a model version, and optionally the backend serving it.
type Target struct {
	// Version is the model version.
	Version string `yaml:"version" json:"version"`
	// Backend names a gateway backend; empty keeps the route's backend.
	Backend string `yaml:"backend,omitempty" json:"backend,omitempty"`
}

// Stage is one step of a rollout.
type Stage struct {
	// Name names the stage in status, history and reasons; unique.
	Name string `yaml:"name"`
	// Groups are the traffic groups the stage adds to the candidate.
	Groups []Group `yaml:"groups"`
	// MinDuration is how long the stage lasts at least; 0 means the
	// default [10m].
	MinDuration duration.Duration `yaml:"min_duration"`
	// TrafficPercent is the share of the stage's groups' requests, in
	// percent, that the candidate serves while the stage is current; 0
	// means the default [100]. Once a later stage is current, the
	// candidate serves all of them.
	TrafficPercent float64 `yaml:"traffic_percent"`
}

// Group is a set of requests defined by their attributes. A request belongs
// to the first group, in stage order, whose matches all hold.
type Group struct {
	// Name names the group in metrics, status and reasons; unique across
	// stages, and not "all".
	Name string `yaml:"name"`
	// Headers must all match; they follow the gateway routes' rules.
	Headers []match.HeaderMatch `yaml:"headers"`
	// Fields map a request field or entity join key to the values that
	// match; every field listed must hold one of its values.
	Fields map[string][]string `yaml:"fields"`
}

// Gates are the thresholds the candidate must hold in every group it
// serves. A nil field takes its default; the drift gates are off unless set.
type Gates struct {
	// MaxErrorRate is the highest share of candidate requests that may fail
	// (status >= 500) [0.01].
	MaxErrorRate *float64 `yaml:"max_error_rate"`
	// MaxP95LatencyRatio is the highest ratio of the candidate's p95
	// latency to the stable version's [1.1].
	MaxP95LatencyRatio *float64 `yaml:"max_p95_latency_ratio"`
	// MaxLowConfidenceShare is the highest share of candidate predictions
	// whose confidence is below ConfidenceBelow [0.15].
	MaxLowConfidenceShare *float64 `yaml:"max_low_confidence_share"`
	// ConfidenceBelow is the confidence under which a prediction is
	// low-confidence [0.6].
	ConfidenceBelow *float64 `yaml:"confidence_below"`
	// MaxDriftPSI is the highest population stability index a watched
	// feature or output may reach in a group; off when nil.
	MaxDriftPSI *float64 `yaml:"max_drift_psi"`
	// MinDriftPValue is the lowest Kolmogorov–Smirnov p-value a watched
	// feature or output may reach in a group; off when nil.
	MinDriftPValue *float64 `yaml:"min_drift_p_value"`
	// Accuracy compares the candidate's online error with the stable
	// version's, from outcomes joined to logged predictions (the
	// service's accuracy block); off when nil.
	Accuracy *AccuracyGate `yaml:"accuracy"`
}

// AccuracyGate holds when, in every slice of a group with enough joined
// outcomes for both versions, the candidate's error is at most the
// stable version's times 1 + Margin.
type AccuracyGate struct {
	// Output is the output judged [the accuracy block's first output].
	Output string `yaml:"output"`
	// Metric is an error where lower is better: mae, rmse, mape,
	// log_loss or brier [mae].
	Metric string `yaml:"metric"`
	// Margin is how much worse the candidate may be, as a share [0.1].
	Margin *float64 `yaml:"margin"`
	// MinOutcomes is the joined outcomes each version needs in a slice
	// before the slice is judged [100].
	MinOutcomes int `yaml:"min_outcomes"`
}

// Defaults of AccuracyGate.
const (
	DefaultAccuracyMetric      = "mae"
	DefaultAccuracyMargin      = 0.1
	DefaultAccuracyMinOutcomes = 100
)

// FieldError is one thing wrong with a Config. Path is relative to the
// rollout block, e.g. "stages[1].groups[0].headers[0]".
type FieldError struct {
	// Path is the field path.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as "path: msg".
func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

// Validate checks c and reports every problem at once: the error joins one
// *FieldError per problem. It does no I/O and does not change c.
func (c *Config) Validate() error {
	var fe fieldErrors
	if c.Candidate.Version == "" {
		fe.add("candidate.version", "is required")
	}
	if c.Candidate == c.Stable {
		fe.add("candidate", "must differ from stable")
	}
	stageNames := map[string]bool{}
	groupNames := map[string]bool{}
	for i := range c.Stages {
		fe.stage(&c.Stages[i], i, i == len(c.Stages)-1, stageNames, groupNames)
	}
	if c.MinRequests < 0 {
		fe.add("min_requests", "must not be negative")
	}
	if p := c.ControlPercent; p != nil && !(*p >= 0 && *p <= 100) {
		fe.add("control_percent", "%g outside [0,100]", *p)
	}
	if c.Interval < 0 {
		fe.add("interval", "must not be negative")
	}
	fe.gates(&c.Gates)
	return errors.Join(fe...)
}

// fieldErrors collects the FieldErrors of one Validate.
type fieldErrors []error

func (fe *fieldErrors) add(path, format string, args ...any) {
	*fe = append(*fe, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// stage checks stage i (last says whether it is the final one); names
// seen so far are in stageNames and groupNames.
func (fe *fieldErrors) stage(s *Stage, i int, last bool, stageNames, groupNames map[string]bool) {
	p := fmt.Sprintf("stages[%d]", i)
	switch {
	case s.Name == "":
		fe.add(p+".name", "is required")
	case stageNames[s.Name]:
		fe.add(p+".name", "duplicate stage %q", s.Name)
	}
	stageNames[s.Name] = true
	if s.Name == AllGroup && (len(s.Groups) > 0 || !last) {
		fe.add(p+".name", "%q is reserved for the final stage without groups", AllGroup)
	}
	if len(s.Groups) == 0 && !last {
		fe.add(p+".groups", "only the last stage may have no groups")
	}
	if s.MinDuration < 0 {
		fe.add(p+".min_duration", "must not be negative")
	}
	if !(s.TrafficPercent >= 0 && s.TrafficPercent <= 100) {
		fe.add(p+".traffic_percent", "%g outside [0,100]", s.TrafficPercent)
	}
	for j := range s.Groups {
		fe.group(&s.Groups[j], fmt.Sprintf("%s.groups[%d]", p, j), groupNames)
	}
}

// group checks one stage's group at path gp.
func (fe *fieldErrors) group(g *Group, gp string, groupNames map[string]bool) {
	switch {
	case g.Name == "":
		fe.add(gp+".name", "is required")
	case g.Name == AllGroup:
		fe.add(gp+".name", "%q is reserved for the final stage's group", AllGroup)
	case groupNames[g.Name]:
		fe.add(gp+".name", "duplicate group %q", g.Name)
	}
	groupNames[g.Name] = true
	if len(g.Headers) == 0 && len(g.Fields) == 0 {
		fe.add(gp, "needs at least one header or field match")
	}
	for k, h := range g.Headers {
		if _, err := h.Compile(); err != nil {
			fe.add(fmt.Sprintf("%s.headers[%d]", gp, k), "%v", err)
		}
	}
	for f, vs := range g.Fields {
		switch {
		case f == "":
			fe.add(gp+".fields", "field name is empty")
		case len(vs) == 0:
			fe.add(gp+".fields."+f, "needs at least one value")
		}
	}
}

// gates checks the promotion gates.
func (fe *fieldErrors) gates(g *Gates) {
	share := func(path string, v *float64) {
		if v != nil && !(*v >= 0 && *v <= 1) {
			fe.add(path, "%g outside [0,1]", *v)
		}
	}
	share("gates.max_error_rate", g.MaxErrorRate)
	share("gates.max_low_confidence_share", g.MaxLowConfidenceShare)
	share("gates.confidence_below", g.ConfidenceBelow)
	share("gates.min_drift_p_value", g.MinDriftPValue)
	if v := g.MaxP95LatencyRatio; v != nil && !(*v > 0 && !math.IsInf(*v, 0)) {
		fe.add("gates.max_p95_latency_ratio", "must be a positive number")
	}
	if v := g.MaxDriftPSI; v != nil && !(*v >= 0 && !math.IsInf(*v, 0)) {
		fe.add("gates.max_drift_psi", "must be a non-negative number")
	}
	if a := g.Accuracy; a != nil {
		switch a.Metric {
		case "", "mae", "rmse", "mape", "log_loss", "brier":
		default:
			fe.add("gates.accuracy.metric", "%q: want mae, rmse, mape, log_loss or brier (lower is better)", a.Metric)
		}
		if v := a.Margin; v != nil && !(*v >= 0 && !math.IsInf(*v, 0)) {
			fe.add("gates.accuracy.margin", "must be a non-negative number")
		}
		if a.MinOutcomes < 0 {
			fe.add("gates.accuracy.min_outcomes", "must not be negative")
		}
	}
}
