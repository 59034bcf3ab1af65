// Package ks is the Kolmogorov–Smirnov test, written once for the release
// tools that compare distributions: diff (a shadow or replay report's two
// sides, exact p-values for small samples) and drift (live windows against
// a reference, Kolmogorov's asymptotic distribution over Kish's effective
// sample size).
//
// It imports only the standard library.
package ks

import (
	"math"
	"slices"
)

// Methods of a Result's p-value.
const (
	// MethodExact is the permutation distribution, for small samples.
	MethodExact = "exact"
	// MethodAsymptotic is Kolmogorov's limit distribution.
	MethodAsymptotic = "asymptotic"
	// MethodNone means a sample was empty: D = 0 and p = 1.
	MethodNone = "none"
)

// Result is the outcome of a two-sample Kolmogorov–Smirnov test.
type Result struct {
	// Statistic is D, the largest distance between the two empirical CDFs
	// (0 ≤ D ≤ 1).
	Statistic float64 `json:"statistic"`
	// PValue is the probability, under the hypothesis that both samples
	// come from one continuous distribution, of a D at least this large.
	PValue float64 `json:"p_value"`
	// NA and NB are the sample sizes.
	NA int `json:"n_a"`
	NB int `json:"n_b"`
	// Method is "exact" (the permutation distribution, for small samples),
	// "asymptotic" (Kolmogorov's limit distribution) or "none" when a
	// sample is empty (then D = 0 and p = 1).
	Method string `json:"method"`
}

// exactMaxCells bounds the work of the exact p-value: the lattice walk
// visits NA·NB cells, so 10⁶ cells is a few milliseconds. Above it the
// asymptotic distribution is within ~1e-3 of the exact tail at the
// p-values the gates care about.
const exactMaxCells = 1_000_000

// TwoSample runs the two-sided two-sample Kolmogorov–Smirnov test on a
// and b. NaN values are left out (NA and NB count the rest); neither slice
// is modified. Ties are handled in the statistic (both CDFs jump at a
// shared value together); the p-value assumes continuous data, as
// scipy.stats.ks_2samp does.
//
// The p-value is exact when NA·NB ≤ 10⁶: the probability that a
// uniformly random interleaving of the two samples (a lattice path from
// (0,0) to (n,m)) reaches a distance of at least D. Larger samples use
// the asymptotic Kolmogorov distribution Q(√(nm/(n+m))·D).
func TwoSample(a, b []float64) Result {
	sa, sb := sortedNumbers(a), sortedNumbers(b)
	n, m := len(sa), len(sb)
	res := Result{NA: n, NB: m, PValue: 1, Method: MethodNone}
	if n == 0 || m == 0 {
		return res
	}
	h := numerator(sa, sb)
	nm := int64(n) * int64(m)
	res.Statistic = float64(h) / float64(nm)
	if nm <= exactMaxCells {
		res.Method = MethodExact
		res.PValue = exactP(n, m, h)
		return res
	}
	res.Method = MethodAsymptotic
	res.PValue = Q(math.Sqrt(EffectiveN(float64(n), float64(m))) * res.Statistic)
	return res
}

// Statistic returns D for a and b, NaN values left out, and the sizes of
// what is left, without the p-value's cost. D is 0 when a sample is empty.
func Statistic(a, b []float64) (d float64, na, nb int) {
	sa, sb := sortedNumbers(a), sortedNumbers(b)
	n, m := len(sa), len(sb)
	if n == 0 || m == 0 {
		return 0, n, m
	}
	return float64(numerator(sa, sb)) / (float64(n) * float64(m)), n, m
}

// sortedNumbers returns a sorted copy of x without its NaN values.
func sortedNumbers(x []float64) []float64 {
	c := make([]float64, 0, len(x))
	for _, v := range x {
		if !math.IsNaN(v) {
			c = append(c, v)
		}
	}
	slices.Sort(c)
	return c
}

// numerator returns D·n·m as an integer for sorted a and b: at every
// distinct value the CDF gap is |i/n − j/m| = |i·m − j·n|/(n·m), with i
// and j the counts of a and b at or below it. Working in integers keeps D
// exact, so the lattice walk in exactP compares against precisely the
// observed D.
func numerator(a, b []float64) int64 {
	n, m := int64(len(a)), int64(len(b))
	var i, j int
	var best int64
	for i < len(a) && j < len(b) {
		v := min(a[i], b[j])
		for i < len(a) && a[i] == v {
			i++
		}
		for j < len(b) && b[j] == v {
			j++
		}
		gap := int64(i)*m - int64(j)*n
		if gap < 0 {
			gap = -gap
		}
		best = max(best, gap)
	}
	// Once one sample is exhausted its CDF is 1 and the other's only
	// rises toward 1, so the gap cannot grow further.
	return best
}

// exactP is P(D ≥ h/(n·m)) over uniformly random interleavings of n
// values of a and m values of b. It walks the lattice from (0,0) to
// (n,m), step right (an a) with probability (n−i)/(n−i+m−j), which makes
// every path equally likely, and absorbs the probability mass of each
// path the first time it reaches a cell with |i·m − j·n| ≥ h. The result
// is a sum of positive terms, so small p-values keep their precision.
func exactP(n, m int, h int64) float64 {
	if h <= 0 {
		return 1
	}
	nn, mm := int64(n), int64(m)
	outside := func(i, j int) bool {
		g := int64(i)*mm - int64(j)*nn
		return g >= h || -g >= h
	}
	// prob[j] holds the live mass at (i, j) for the current row i.
	prob := make([]float64, m+1)
	prob[0] = 1
	var p float64
	for i := 0; i <= n; i++ {
		for j := 0; j <= m; j++ {
			if i == 0 && j == 0 {
				continue
			}
			var in float64
			if i > 0 { // from (i−1, j): a step right, still in prob[j]
				ri, rj := float64(n-(i-1)), float64(m-j)
				in += prob[j] * ri / (ri + rj)
			}
			if j > 0 { // from (i, j−1): a step up, prob[j−1] already row i
				ri, rj := float64(n-i), float64(m-(j-1))
				in += prob[j-1] * rj / (ri + rj)
			}
			if outside(i, j) {
				p += in
				in = 0
			}
			prob[j] = in
		}
	}
	return min(max(p, 0), 1)
}

// EffectiveN combines two sample sizes into nₑ = n·m/(n+m), the size the
// asymptotic distribution is read at. m ≤ 0 or +Inf (a one-sample test
// against an exact distribution) gives n.
func EffectiveN(n, m float64) float64 {
	if m <= 0 || math.IsInf(m, 1) {
		return n
	}
	return n * m / (n + m)
}

// PValue is the asymptotic p-value of a statistic d over an effective
// sample size ne (see EffectiveN): Q(√nₑ·d), the probability under the
// null hypothesis of a distance at least d. The approximation is good for
// nₑ ≳ 30 and conservative-to-fair below. It is NaN when d is NaN or ne is
// not positive.
func PValue(d, ne float64) float64 {
	if math.IsNaN(d) || !(ne > 0) {
		return math.NaN()
	}
	return Q(math.Sqrt(ne) * d)
}

// Q is the survival function of the Kolmogorov distribution,
// Q(λ) = P(K > λ) = 2 Σ_{k≥1} (−1)^{k−1} exp(−2k²λ²): the limit of
// P(√(nm/(n+m))·D > λ) for two samples from one continuous distribution.
// For λ < 1 it uses the equivalent Jacobi-theta form
// 1 − (√(2π)/λ) Σ_{k≥1} exp(−(2k−1)²π²/(8λ²)), where the alternating
// series would need many terms and lose precision.
func Q(lambda float64) float64 {
	switch {
	case math.IsNaN(lambda):
		return math.NaN()
	case lambda <= 0:
		return 1
	case lambda < 1:
		var s float64
		c := math.Pi * math.Pi / (8 * lambda * lambda)
		for k := 1; k <= 20; k++ {
			t := math.Exp(-float64((2*k-1)*(2*k-1)) * c)
			s += t
			if t < 1e-17*s {
				break
			}
		}
		return min(max(1-math.Sqrt(2*math.Pi)/lambda*s, 0), 1)
	default:
		var s float64
		sign := 1.0
		for k := 1; k <= 100; k++ {
			t := math.Exp(-2 * float64(k*k) * lambda * lambda)
			s += sign * t
			if t < 1e-17*math.Abs(s) || t == 0 {
				break
			}
			sign = -sign
		}
		return min(max(2*s, 0), 1)
	}
}
