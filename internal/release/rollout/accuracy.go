package rollout

import "math"

// AccuracySlice is one slice of a traffic group: the candidate's and the
// stable version's online error (lower is better) over the outcomes
// joined so far, and how many each is based on.
type AccuracySlice struct {
	// Slice names it, e.g. "all" or "x-region=sa".
	Slice string `json:"slice"`
	// Candidate and Stable are the errors; CandidateN and StableN the
	// joined outcomes behind them.
	Candidate  float64 `json:"candidate"`
	Stable     float64 `json:"stable"`
	CandidateN uint64  `json:"candidate_n"`
	StableN    uint64  `json:"stable_n"`
}

// AccuracyFunc reports the online error named metric per slice of group's
// traffic. The controller calls it for every group the candidate serves on
// each Tick, without holding windowsMu.
type AccuracyFunc func(group, metric string) []AccuracySlice

// judgeAccuracy judges the accuracy gate over a group's slices: it fails
// when a slice where both versions have min_outcomes outcomes has the
// candidate's error above the stable version's times 1 + margin, naming
// the slice with the largest ratio; it holds once the slice "all" is
// judged without a failure. ok is false when the gate is off.
func (c *Controller) judgeAccuracy(slices []AccuracySlice) (GateValue, bool) {
	a := c.gates.accuracy
	if a == nil || c.accuracy == nil {
		return GateValue{}, false
	}
	v := GateValue{Gate: GateAccuracy, Threshold: 1 + a.margin, Status: GatePending}
	worst := math.Inf(-1)
	allJudged := false
	for _, s := range slices {
		if s.CandidateN < a.minOutcomes || s.StableN < a.minOutcomes {
			continue
		}
		ratio := 1.0
		switch {
		case s.Stable > 0:
			ratio = s.Candidate / s.Stable
		case s.Candidate > 0:
			ratio = math.MaxFloat64 // the stable version is exact, the candidate not
		}
		if s.Slice == "all" {
			allJudged = true
		}
		if ratio > worst {
			worst, v.Slice, v.Requests, v.Value = ratio, s.Slice, s.CandidateN, ratio
		}
	}
	switch {
	case worst > v.Threshold:
		v.Status = GateFailed
	case allJudged:
		v.Status = GateOK
	}
	v.Value, v.Threshold = finite(v.Value), finite(v.Threshold)
	return v, true
}
