package diff

import (
	"math"
	"slices"
	"sort"
)

// Summary describes one sample.
type Summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	Max  float64 `json:"max"`
}

// summarize describes sorted; it must be sorted ascending.
func summarize(sorted []float64) Summary {
	s := Summary{N: len(sorted)}
	if len(sorted) == 0 {
		return s
	}
	var sum float64
	for _, v := range sorted {
		sum += v
	}
	s.Mean = sum / float64(len(sorted))
	var ss float64
	for _, v := range sorted {
		d := v - s.Mean
		ss += d * d
	}
	if len(sorted) > 1 {
		s.Std = math.Sqrt(ss / float64(len(sorted)-1))
	}
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.P50 = quantile(sorted, 0.5)
	return s
}

// quantile is the q-quantile of sorted by linear interpolation between
// closest ranks (numpy's default, Hyndman–Fan type 7). sorted must be
// ascending; an empty sample yields 0.
func quantile(sorted []float64, q float64) float64 {
	switch len(sorted) {
	case 0:
		return 0
	case 1:
		return sorted[0]
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := pos - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Histogram counts two samples in shared bins.
type Histogram struct {
	// Edges are the len(A)+1 bin boundaries; bin i is [Edges[i],
	// Edges[i+1]), the last bin also holds its upper edge.
	Edges []float64 `json:"edges"`
	A     []int     `json:"a"`
	B     []int     `json:"b"`
}

// newHistogram bins a and b into n equal-width bins spanning both.
func newHistogram(a, b []float64, n int) *Histogram {
	if len(a)+len(b) == 0 || n <= 0 {
		return nil
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range [][]float64{a, b} {
		for _, v := range s {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if hi == lo {
		// One value: a single bin of width 1 around it keeps the plot
		// readable instead of dividing by zero.
		lo, hi, n = lo-0.5, hi+0.5, 1
	}
	h := &Histogram{Edges: make([]float64, n+1), A: make([]int, n), B: make([]int, n)}
	w := (hi - lo) / float64(n)
	for i := range h.Edges {
		h.Edges[i] = lo + float64(i)*w
	}
	h.Edges[n] = hi
	bin := func(v float64) int {
		i := int((v - lo) / w)
		return min(max(i, 0), n-1)
	}
	for _, v := range a {
		h.A[bin(v)]++
	}
	for _, v := range b {
		h.B[bin(v)]++
	}
	return h
}

// CDF is the empirical CDF of two samples on a shared grid of values.
type CDF struct {
	// X are ascending values; A[i] and B[i] are the shares of each sample
	// at or below X[i].
	X []float64 `json:"x"`
	A []float64 `json:"a"`
	B []float64 `json:"b"`
}

// cdfGridPoints bounds the CDF grid so report.json stays small and the
// plots stay light, whatever the sample size.
const cdfGridPoints = 201

// newCDF evaluates both empirical CDFs at the pooled sample's quantiles;
// a and b must be sorted ascending.
func newCDF(a, b []float64) *CDF {
	pooled := make([]float64, 0, len(a)+len(b))
	pooled = append(pooled, a...)
	pooled = append(pooled, b...)
	if len(pooled) == 0 {
		return nil
	}
	slices.Sort(pooled)
	var xs []float64
	if distinct := slices.Compact(slices.Clone(pooled)); len(distinct) <= cdfGridPoints {
		xs = distinct
	} else {
		for i := range cdfGridPoints {
			xs = append(xs, quantile(pooled, float64(i)/(cdfGridPoints-1)))
		}
		xs = slices.Compact(xs)
	}
	c := &CDF{X: xs, A: make([]float64, len(xs)), B: make([]float64, len(xs))}
	for i, x := range xs {
		c.A[i] = ecdf(a, x)
		c.B[i] = ecdf(b, x)
	}
	return c
}

// ecdf is the share of sorted at or below x.
func ecdf(sorted []float64, x float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := sort.Search(len(sorted), func(i int) bool { return sorted[i] > x })
	return float64(k) / float64(len(sorted))
}

// finite replaces NaN and ±Inf by 0: report.json must stay valid JSON.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// percentileDistance is the mean absolute difference of the 1st to 99th
// percentiles of two sorted samples (nearest rank): an estimate of the
// Wasserstein distance between their distributions, in their units. With
// relative, each difference is divided by max(|A's percentile|, floor).
func percentileDistance(a, b []float64, relative bool, floor float64) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	at := func(s []float64, q int) float64 {
		i := (q*len(s)+99)/100 - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	sum := 0.0
	for q := 1; q <= 99; q++ {
		x, y := at(a, q), at(b, q)
		d := math.Abs(y - x)
		if relative {
			d /= max(math.Abs(x), floor)
		}
		sum += d
	}
	return sum / 99
}
