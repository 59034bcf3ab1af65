package drift

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"github.com/sluice-ml/sluice/internal/release/ks"
)

// Conventional thresholds and defaults for the statistics.
const (
	// PSIModerate is the PSI above which a shift is conventionally called
	// moderate: below it the population is considered stable.
	PSIModerate = 0.1
	// PSISignificant is the PSI above which a shift is conventionally called
	// significant; it is the default drift threshold of a Monitor.
	PSISignificant = 0.25
	// DefaultEpsilon is the additive smoothing applied to bin proportions so
	// that an empty bin yields a large but finite PSI term.
	DefaultEpsilon = 1e-4
	// DefaultKSAlpha is the default significance level of the KS test: a
	// p-value below it counts as drift.
	DefaultKSAlpha = 0.01
)

// PSI returns the population stability index of actual against expected:
//
//	PSI = Σ (aᵢ − eᵢ) · ln(aᵢ / eᵢ)
//
// where eᵢ and aᵢ are the bin proportions. Both slices hold one non-negative
// weight per bin (counts or proportions: each is normalised by its sum).
// Every proportion is smoothed as (p + eps) / (1 + k·eps) for k bins, so an
// empty bin on either side contributes a large finite term instead of an
// infinite one; with eps = 0 an empty bin on one side only gives +Inf.
// PSI returns NaN when the slices differ in length, are empty, hold a
// negative or non-finite weight, sum to zero, or eps is negative.
func PSI(expected, actual []float64, eps float64) float64 {
	if len(expected) != len(actual) || len(expected) == 0 || !(eps >= 0) || math.IsInf(eps, 0) {
		return math.NaN()
	}
	se, sa := weightSum(expected), weightSum(actual)
	if !(se > 0) || !(sa > 0) || math.IsInf(se, 0) || math.IsInf(sa, 0) {
		return math.NaN()
	}
	norm := 1 + float64(len(expected))*eps
	var psi float64
	for i := range expected {
		e := (expected[i]/se + eps) / norm
		a := (actual[i]/sa + eps) / norm
		switch {
		case e == a:
			continue
		case e == 0 || a == 0:
			return math.Inf(1)
		}
		psi += (a - e) * math.Log(a/e)
	}
	return psi
}

// weightSum returns the sum of w, or NaN when a weight is negative or NaN.
func weightSum(w []float64) float64 {
	var s float64
	for _, x := range w {
		if !(x >= 0) {
			return math.NaN()
		}
		s += x
	}
	return s
}

// KS returns the two-sample Kolmogorov–Smirnov statistic D of a and b (the
// largest distance between their empirical distribution functions) and its
// asymptotic p-value (see KSPValue), as the monitors read it. NaN values
// are ignored; D and p are NaN when either sample is empty. The inputs are
// not modified. The test itself is package ks's.
func KS(a, b []float64) (d, p float64) {
	d, n, m := ks.Statistic(a, b)
	if n == 0 || m == 0 {
		return math.NaN(), math.NaN()
	}
	return d, ks.PValue(d, ks.EffectiveN(float64(n), float64(m)))
}

// KSPValue returns the asymptotic p-value of a KS statistic d: the
// probability under the null hypothesis (same distribution) of a distance
// at least d, from the Kolmogorov distribution Q(√nₑ · d) with
// nₑ = n·m / (n + m) for two samples of sizes n and m. Pass m ≤ 0 for the
// one-sample test against an exact distribution (nₑ = n). The
// approximation is good for nₑ ≳ 30 and conservative-to-fair below.
// It returns NaN when n ≤ 0 or d is NaN.
func KSPValue(d float64, n, m int) float64 {
	if n <= 0 {
		return math.NaN()
	}
	return ks.PValue(d, ks.EffectiveN(float64(n), float64(m)))
}

// cdf is a cumulative distribution function with its limits from the left,
// and the points where it bends or jumps.
type cdf interface {
	// at returns P(X ≤ x).
	at(x float64) float64
	// before returns P(X < x).
	before(x float64) float64
	// knots returns the sorted points between which the function is linear
	// (for an empirical function: constant).
	knots() []float64
}

// ksStat returns sup |A − B|. Between consecutive knots of the union both
// functions are linear, so their difference is too and the supremum is
// reached at a knot, from the right (at) or from the left (before).
func ksStat(a, b cdf) float64 {
	var d float64
	for _, side := range [2]cdf{a, b} {
		for _, x := range side.knots() {
			d = max(d, math.Abs(a.at(x)-b.at(x)), math.Abs(a.before(x)-b.before(x)))
		}
	}
	return d
}

// point is one stored value with the number of observations it stands for.
type point struct{ v, w float64 }

// ecdf is the empirical distribution function of a weighted sample.
type ecdf struct {
	v    []float64 // sorted ascending
	cum  []float64 // cum[i]: weight of v[0..i] over the total; the last is 1
	neff float64   // Kish effective sample size (Σw)² / Σw²
}

// newECDF sorts pts in place and builds its distribution function; nil
// when pts has no positive weight.
func newECDF(pts []point) *ecdf {
	slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.v, b.v) })
	var total, sq float64
	for _, p := range pts {
		total += p.w
		sq += p.w * p.w
	}
	if len(pts) == 0 || !(total > 0) {
		return nil
	}
	e := &ecdf{v: make([]float64, len(pts)), cum: make([]float64, len(pts)), neff: total * total / sq}
	var run float64
	for i, p := range pts {
		run += p.w
		e.v[i], e.cum[i] = p.v, run/total
	}
	e.cum[len(pts)-1] = 1
	return e
}

// unitECDF builds the ECDF of an unweighted sample, ignoring NaN values.
func unitECDF(xs []float64) *ecdf {
	pts := make([]point, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			pts = append(pts, point{v: x, w: 1})
		}
	}
	return newECDF(pts)
}

func (e *ecdf) at(x float64) float64 {
	i := sort.Search(len(e.v), func(i int) bool { return e.v[i] > x })
	if i == 0 {
		return 0
	}
	return e.cum[i-1]
}

func (e *ecdf) before(x float64) float64 {
	i := sort.Search(len(e.v), func(i int) bool { return e.v[i] >= x })
	if i == 0 {
		return 0
	}
	return e.cum[i-1]
}

func (e *ecdf) knots() []float64 { return e.v }

// quantile returns the smallest sample value whose cumulative weight
// reaches p (the inverse ECDF).
func (e *ecdf) quantile(p float64) float64 {
	const tol = 1e-12 // cumulative sums are not exact
	i := sort.Search(len(e.cum), func(i int) bool { return e.cum[i] >= p-tol })
	return e.v[min(i, len(e.v)-1)]
}

// quantileCDF interpolates linearly between quantiles q[j] at probability
// j/(len(q)−1); repeated values are point masses (jumps).
type quantileCDF struct{ q []float64 }

func (c quantileCDF) prob(j int) float64 { return float64(j) / float64(len(c.q)-1) }

func (c quantileCDF) at(x float64) float64 {
	n := len(c.q)
	switch {
	case x < c.q[0]:
		return 0
	case x >= c.q[n-1]:
		return 1
	}
	// Largest j with q[j] ≤ x; j < n−1 and q[j+1] > x ≥ q[j].
	j := sort.Search(n, func(i int) bool { return c.q[i] > x }) - 1
	return c.prob(j) + (x-c.q[j])/(c.q[j+1]-c.q[j])*(c.prob(j+1)-c.prob(j))
}

func (c quantileCDF) before(x float64) float64 {
	n := len(c.q)
	switch {
	case x <= c.q[0]:
		return 0
	case x > c.q[n-1]:
		return 1
	}
	// Smallest j with q[j] ≥ x; j ≥ 1 and q[j−1] < x ≤ q[j].
	j := sort.Search(n, func(i int) bool { return c.q[i] >= x })
	i := j - 1
	return c.prob(i) + (x-c.q[i])/(c.q[j]-c.q[i])*(c.prob(j)-c.prob(i))
}

func (c quantileCDF) knots() []float64 { return c.q }

// value returns the interpolated quantile at probability p.
func (c quantileCDF) value(p float64) float64 {
	pos := p * float64(len(c.q)-1)
	j := min(int(pos), len(c.q)-2)
	return c.q[j] + (pos-float64(j))*(c.q[j+1]-c.q[j])
}

// binProportions fills dst (len(edges)+1) with the mass of c in each bin
// [edges[i−1], edges[i]), the outer bins reaching to ±∞.
func binProportions(c cdf, edges, dst []float64) []float64 {
	dst = dst[:0]
	prev := 0.0
	for _, e := range edges {
		b := c.before(e)
		dst = append(dst, max(b-prev, 0))
		prev = b
	}
	return append(dst, max(1-prev, 0))
}

// equalMassEdges returns up to bins−1 strictly increasing interior edges
// at the quantiles i/bins of c, read by quantile.
func equalMassEdges(bins int, quantile func(p float64) float64) []float64 {
	edges := make([]float64, 0, bins-1)
	for i := 1; i < bins; i++ {
		x := quantile(float64(i) / float64(bins))
		if len(edges) == 0 || x > edges[len(edges)-1] {
			edges = append(edges, x)
		}
	}
	return edges
}
