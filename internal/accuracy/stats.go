package accuracy

import (
	"math"
	"sort"
)

// calBins is the number of probability bins for calibration and AUC.
const calBins = 100

// Stats sums up the joined pairs of one output: every field is a sum or a
// count, so two Stats merge by addition. The zero value is empty.
type Stats struct {
	// N counts the pairs.
	N uint64
	// Regression: sums of the error (predicted − observed), of its
	// absolute value and square, and of the absolute percentage error over
	// the NPct pairs whose observed value is not 0.
	SumErr, SumAbs, SumSq, SumAPE float64
	NPct                          uint64
	// NInterval pairs had an interval; Covered of them held the observed
	// value within it.
	NInterval, Covered uint64
	// Binary: Correct predictions at the threshold, sums of log loss and
	// squared error (Brier), and per probability bin the positives and
	// negatives (AUC) and the sum of predicted probabilities (calibration).
	Correct    uint64
	SumLogLoss float64
	SumBrier   float64
	Pos, Neg   []uint64
	SumProb    []float64
	binary     bool
	threshold  float64
}

// addRegression adds one regression pair; lo and hi bound the prediction
// interval when hasInterval.
func (s *Stats) addRegression(pred, obs float64, lo, hi float64, hasInterval bool) {
	e := pred - obs
	s.N++
	s.SumErr += e
	s.SumAbs += math.Abs(e)
	s.SumSq += e * e
	if obs != 0 {
		s.NPct++
		s.SumAPE += math.Abs(e / obs)
	}
	if hasInterval {
		s.NInterval++
		if obs >= lo && obs <= hi {
			s.Covered++
		}
	}
}

// addBinary adds one probability and its 0/1 outcome.
func (s *Stats) addBinary(p, obs, threshold float64) {
	s.binary, s.threshold = true, threshold
	if s.Pos == nil {
		s.Pos, s.Neg, s.SumProb = make([]uint64, calBins), make([]uint64, calBins), make([]float64, calBins)
	}
	p = min(max(p, 0), 1)
	positive := obs >= 0.5
	s.N++
	if (p >= threshold) == positive {
		s.Correct++
	}
	const eps = 1e-15
	q := min(max(p, eps), 1-eps)
	y := 0.0
	if positive {
		y = 1
		s.SumLogLoss -= math.Log(q)
	} else {
		s.SumLogLoss -= math.Log(1 - q)
	}
	s.SumBrier += (p - y) * (p - y)
	b := min(int(p*calBins), calBins-1)
	if positive {
		s.Pos[b]++
	} else {
		s.Neg[b]++
	}
	s.SumProb[b] += p
}

// merge adds o to s.
func (s *Stats) merge(o *Stats) {
	s.N += o.N
	s.SumErr += o.SumErr
	s.SumAbs += o.SumAbs
	s.SumSq += o.SumSq
	s.SumAPE += o.SumAPE
	s.NPct += o.NPct
	s.NInterval += o.NInterval
	s.Covered += o.Covered
	s.Correct += o.Correct
	s.SumLogLoss += o.SumLogLoss
	s.SumBrier += o.SumBrier
	if o.binary {
		s.binary, s.threshold = true, o.threshold
		if s.Pos == nil {
			s.Pos, s.Neg, s.SumProb = make([]uint64, calBins), make([]uint64, calBins), make([]float64, calBins)
		}
		for i := range o.Pos {
			s.Pos[i] += o.Pos[i]
			s.Neg[i] += o.Neg[i]
			s.SumProb[i] += o.SumProb[i]
		}
	}
}

// Metric returns the named metric (accuracyspec's names) and whether it
// is defined: NaN-free, with at least one pair behind it.
func (s *Stats) Metric(name string) (float64, bool) {
	if s.N == 0 {
		return 0, false
	}
	n := float64(s.N)
	switch name {
	case "mae":
		return s.SumAbs / n, !s.binary
	case "rmse":
		return math.Sqrt(s.SumSq / n), !s.binary
	case "bias":
		return s.SumErr / n, !s.binary
	case "mape":
		if s.NPct == 0 {
			return 0, false
		}
		return s.SumAPE / float64(s.NPct), !s.binary
	case "coverage":
		if s.NInterval == 0 {
			return 0, false
		}
		return float64(s.Covered) / float64(s.NInterval), true
	case "accuracy":
		return float64(s.Correct) / n, s.binary
	case "log_loss":
		return s.SumLogLoss / n, s.binary
	case "brier":
		return s.SumBrier / n, s.binary
	case "auc":
		return s.auc()
	}
	return 0, false
}

// auc is the area under the ROC curve from the binned probabilities
// (ties within a bin count half), defined with both classes present.
func (s *Stats) auc() (float64, bool) {
	if !s.binary {
		return 0, false
	}
	var pos, neg uint64
	for i := range s.Pos {
		pos += s.Pos[i]
		neg += s.Neg[i]
	}
	if pos == 0 || neg == 0 {
		return 0, false
	}
	// For each positive, the negatives ranked below it (bins lower), plus
	// half of those in its bin.
	var below, area float64
	for i := range s.Pos {
		area += float64(s.Pos[i]) * (below + float64(s.Neg[i])/2)
		below += float64(s.Neg[i])
	}
	return area / (float64(pos) * float64(neg)), true
}

// CalibrationBin is one bin of a calibration curve: the mean predicted
// probability and the observed rate of positives among N predictions.
type CalibrationBin struct {
	Predicted float64 `json:"predicted"`
	Observed  float64 `json:"observed"`
	N         uint64  `json:"n"`
}

// Calibration groups the binary pairs into bins of width 1/bins.
func (s *Stats) Calibration(bins int) []CalibrationBin {
	if !s.binary || bins <= 0 {
		return nil
	}
	out := make([]CalibrationBin, bins)
	for i := range s.Pos {
		b := i * bins / calBins
		out[b].N += s.Pos[i] + s.Neg[i]
		out[b].Observed += float64(s.Pos[i])
		out[b].Predicted += s.SumProb[i]
	}
	kept := out[:0]
	for _, b := range out {
		if b.N > 0 {
			b.Observed /= float64(b.N)
			b.Predicted /= float64(b.N)
			kept = append(kept, b)
		}
	}
	return kept
}

// window is a rolling window of Stats: slots of equal length in a ring,
// the oldest dropped as time moves on.
type window struct {
	slots []Stats
	start []int64 // unix nanos of each slot's start; 0: empty
	width int64
}

func newWindow(d int64, n int) *window {
	return &window{slots: make([]Stats, n), start: make([]int64, n), width: max(d/int64(n), 1)}
}

// slot returns the slot for time t (unix nanos), reset when it held an
// older period.
func (w *window) slot(t int64) *Stats {
	p := t / w.width
	i := int(p % int64(len(w.slots)))
	if w.start[i] != p*w.width {
		w.slots[i] = Stats{}
		w.start[i] = p * w.width
	}
	return &w.slots[i]
}

// sum merges the slots within the window ending at now.
func (w *window) sum(now int64) Stats {
	var out Stats
	oldest := (now/w.width - int64(len(w.slots)) + 1) * w.width
	for i := range w.slots {
		if w.start[i] != 0 && w.start[i] >= oldest {
			out.merge(&w.slots[i])
		}
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
