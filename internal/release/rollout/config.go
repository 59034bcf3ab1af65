package rollout

import "github.com/sluice-ml/sluice/internal/release/rollout/rolloutspec"

// The rollout a service's configuration describes is written in the leaf
// package rolloutspec, which config embeds; these names keep rollout's
// own API whole.

// Config is one service's staged rollout (see rolloutspec.Config).
type Config = rolloutspec.Config

// Target is a model version, and optionally the backend serving it.
type Target = rolloutspec.Target

// Stage is one step of a rollout.
type Stage = rolloutspec.Stage

// Group is a set of requests defined by their attributes.
type Group = rolloutspec.Group

// Gates are the thresholds the candidate must hold in every group it serves.
type Gates = rolloutspec.Gates

// FieldError is one thing wrong with a Config.
type FieldError = rolloutspec.FieldError

// Defaults for Config (see rolloutspec).
const (
	DefaultTrafficPercent        = rolloutspec.DefaultTrafficPercent
	DefaultControlPercent        = rolloutspec.DefaultControlPercent
	DefaultMinRequests           = rolloutspec.DefaultMinRequests
	DefaultMinDuration           = rolloutspec.DefaultMinDuration
	DefaultInterval              = rolloutspec.DefaultInterval
	DefaultMaxErrorRate          = rolloutspec.DefaultMaxErrorRate
	DefaultMaxP95LatencyRatio    = rolloutspec.DefaultMaxP95LatencyRatio
	DefaultMaxLowConfidenceShare = rolloutspec.DefaultMaxLowConfidenceShare
	DefaultConfidenceBelow       = rolloutspec.DefaultConfidenceBelow
	AllGroup                     = rolloutspec.AllGroup
)

// gates are the resolved thresholds.
type gates struct {
	maxErrorRate     float64
	maxLatencyRatio  float64
	maxLowConfidence float64
	confidenceBelow  float64
	maxDriftPSI      float64 // judged only when psiOn
	minDriftPValue   float64 // judged only when pValueOn
	psiOn            bool
	pValueOn         bool
	accuracy         *accuracyGate // nil: off
}

// accuracyGate is a resolved AccuracyGate.
type accuracyGate struct {
	metric      string
	margin      float64
	minOutcomes uint64
}

func resolveGates(g Gates) gates {
	or := func(v *float64, d float64) float64 {
		if v == nil {
			return d
		}
		return *v
	}
	r := gates{
		maxErrorRate:     or(g.MaxErrorRate, DefaultMaxErrorRate),
		maxLatencyRatio:  or(g.MaxP95LatencyRatio, DefaultMaxP95LatencyRatio),
		maxLowConfidence: or(g.MaxLowConfidenceShare, DefaultMaxLowConfidenceShare),
		confidenceBelow:  or(g.ConfidenceBelow, DefaultConfidenceBelow),
	}
	if g.MaxDriftPSI != nil {
		r.maxDriftPSI, r.psiOn = *g.MaxDriftPSI, true
	}
	if g.MinDriftPValue != nil {
		r.minDriftPValue, r.pValueOn = *g.MinDriftPValue, true
	}
	if a := g.Accuracy; a != nil {
		r.accuracy = &accuracyGate{metric: a.Metric, margin: rolloutspec.DefaultAccuracyMargin, minOutcomes: uint64(a.MinOutcomes)}
		if r.accuracy.metric == "" {
			r.accuracy.metric = rolloutspec.DefaultAccuracyMetric
		}
		if a.Margin != nil {
			r.accuracy.margin = *a.Margin
		}
		if a.MinOutcomes == 0 {
			r.accuracy.minOutcomes = rolloutspec.DefaultAccuracyMinOutcomes
		}
	}
	return r
}
