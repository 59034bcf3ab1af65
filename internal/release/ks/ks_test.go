package ks

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat"
)

// Reference values of the Kolmogorov survival function Q(λ), computed
// with mpmath at 40 digits from both series forms (they agree to every
// digit shown). λ = 1.358 and 1.6276 are the classical 5 % and 1 %
// critical values.
func TestKolmogorovQ(t *testing.T) {
	tests := []struct {
		lambda, want float64
	}{
		{0, 1},
		{0.3, 0.99999069419866543337},
		{0.5, 0.96394524366487509439},
		{0.8, 0.544142411574198149},
		{1.0, 0.2699996716773545212},
		{1.2, 0.11224966667072496091},
		{1.358, 0.050026797334447014226},
		{1.36, 0.049485876755377909939},
		{1.6276, 0.010001537333060768178},
		{2.0, 0.00067092525577969534654},
		{3.0, 3.0459959489425256872e-8},
	}
	for _, tt := range tests {
		got := Q(tt.lambda)
		if math.Abs(got-tt.want) > 1e-14*max(1, tt.want) && math.Abs(got-tt.want)/tt.want > 1e-12 {
			t.Errorf("Q(%g) = %.17g, want %.17g", tt.lambda, got, tt.want)
		}
	}
	// Monotone and continuous across the switch between the two series.
	prev := 1.0
	for l := 0.01; l < 4; l += 0.01 {
		q := Q(l)
		if q > prev+1e-15 {
			t.Fatalf("Q not decreasing at %g: %g > %g", l, q, prev)
		}
		prev = q
	}
	if d := math.Abs(Q(math.Nextafter(1, 0)) - Q(1)); d > 1e-12 {
		t.Fatalf("Q jumps by %g at λ = 1", d)
	}
}

// kolmogorovSeries is the defining alternating series, summed far enough
// to be exact for z ≥ 0.3.
func kolmogorovSeries(z float64) float64 {
	var s float64
	for k := 1; k <= 200; k++ {
		s += math.Pow(-1, float64(k-1)) * math.Exp(-2*float64(k*k)*z*z)
	}
	return 2 * s
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// The drift monitors read Q at the classical critical values and far into
// both tails.
func TestKolmogorovQCriticalValues(t *testing.T) {
	// Critical values of the Kolmogorov distribution (tables): Q(1.2238) =
	// 0.10, Q(1.3581) = 0.05, Q(1.6276) = 0.01.
	for _, c := range []struct{ z, want float64 }{{1.2238, 0.10}, {1.3581, 0.05}, {1.6276, 0.01}} {
		if got := Q(c.z); !near(got, c.want, 5e-5) {
			t.Errorf("Q(%v) = %v, want %v", c.z, got, c.want)
		}
	}
	// Both branches agree with the defining series, on either side of the
	// switch between them.
	for z := 0.3; z < 4; z += 0.01 {
		if got, want := Q(z), kolmogorovSeries(z); !near(got, want, 1e-10) {
			t.Fatalf("Q(%v) = %.15g, series %.15g", z, got, want)
		}
	}
	if got := Q(0); got != 1 {
		t.Fatalf("Q(0) = %v, want 1", got)
	}
	if got := Q(0.01); got != 1 {
		t.Fatalf("Q(0.01) = %v, want 1", got)
	}
	if got := Q(40); got != 0 {
		t.Fatalf("Q(40) = %v, want 0", got)
	}
}

// scipy.stats.ks_2samp reference cases (method="exact"): complete
// separation leaves exactly 2 of the C(n+m, n) interleavings at D = 1.
func TestTwoSampleKSKnownValues(t *testing.T) {
	tests := []struct {
		name    string
		a, b    []float64
		d, p    float64
		wantTol float64
	}{
		{"separated 3 vs 3", []float64{1, 2, 3}, []float64{4, 5, 6}, 1, 0.1, 1e-15}, // ks_2samp → (1.0, 0.1)
		{"separated 5 vs 6", []float64{0, 1, 2, 3, 4}, []float64{5, 6, 7, 8, 9, 10}, 1, 2.0 / 462, 1e-15},
		{"identical", []float64{1, 2, 3, 4}, []float64{1, 2, 3, 4}, 0, 1, 0},
		{"interleaved", []float64{1, 3, 5, 7}, []float64{2, 4, 6, 8}, 0.25, 1, 1e-12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TwoSample(tt.a, tt.b)
			if got.Statistic != tt.d {
				t.Errorf("D = %v, want %v", got.Statistic, tt.d)
			}
			if math.Abs(got.PValue-tt.p) > tt.wantTol {
				t.Errorf("p = %.17g, want %.17g", got.PValue, tt.p)
			}
			if got.Method != "exact" || got.NA != len(tt.a) || got.NB != len(tt.b) {
				t.Errorf("got %+v, want exact with n = %d/%d", got, len(tt.a), len(tt.b))
			}
			// Symmetric in its arguments.
			if rev := TwoSample(tt.b, tt.a); rev.Statistic != got.Statistic || math.Abs(rev.PValue-got.PValue) > 1e-15 {
				t.Errorf("swapped samples give %+v, want %+v", rev, got)
			}
		})
	}
	if got := TwoSample(nil, []float64{1}); got.PValue != 1 || got.Statistic != 0 || got.Method != "none" {
		t.Errorf("empty sample: got %+v", got)
	}
}

// For equal sample sizes the exact distribution has a closed form
// (Gnedenko–Korolyuk): P(D ≥ k/n) = 2 Σ_{j≥1} (−1)^{j+1} C(2n, n−jk) / C(2n, n),
// independent of the lattice walk in exactP.
func TestKSExactMatchesGnedenkoKorolyuk(t *testing.T) {
	for _, n := range []int{1, 2, 5, 10, 37, 100, 400} {
		for k := 1; k <= n; k += max(1, n/7) {
			want := gnedenkoKorolyuk(n, k)
			got := exactP(n, n, int64(k)*int64(n)) // D = k/n → D·n·n = k·n
			if math.Abs(got-want) > 1e-12*max(want, 1e-300) && math.Abs(got-want) > 1e-15 {
				t.Errorf("n = %d, k = %d: exact p = %.17g, closed form %.17g", n, k, got, want)
			}
		}
	}
}

func gnedenkoKorolyuk(n, k int) float64 {
	num := new(big.Int)
	for j := 1; n-j*k >= 0; j++ {
		c := new(big.Int).Binomial(int64(2*n), int64(n-j*k))
		if j%2 == 1 {
			num.Add(num, c)
		} else {
			num.Sub(num, c)
		}
	}
	num.Mul(num, big.NewInt(2))
	r := new(big.Rat).SetFrac(num, new(big.Int).Binomial(int64(2*n), int64(n)))
	f, _ := r.Float64()
	return min(f, 1)
}

// For unequal sizes, compare with a brute-force permutation test: every
// way of choosing which n of the pooled n+m values belong to a.
func TestKSExactMatchesPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range [][2]int{{3, 4}, {4, 7}, {6, 5}, {2, 9}, {7, 8}} {
		n, m := size[0], size[1]
		a, b := make([]float64, n), make([]float64, m)
		for i := range a {
			a[i] = rng.NormFloat64()
		}
		for i := range b {
			b[i] = rng.NormFloat64() + 0.8
		}
		got := TwoSample(a, b)
		pooled := append(slices.Clone(a), b...)
		observed := got.Statistic
		var total, extreme int
		choose(len(pooled), n, func(idx []bool) {
			var x, y []float64
			for i, v := range pooled {
				if idx[i] {
					x = append(x, v)
				} else {
					y = append(y, v)
				}
			}
			total++
			if TwoSample(x, y).Statistic >= observed-1e-12 {
				extreme++
			}
		})
		want := float64(extreme) / float64(total)
		if math.Abs(got.PValue-want) > 1e-12 {
			t.Errorf("n = %d, m = %d, D = %g: p = %.15g, permutation test %.15g", n, m, observed, got.PValue, want)
		}
	}
}

func choose(n, k int, visit func([]bool)) {
	idx := make([]bool, n)
	var rec func(i, left int)
	rec = func(i, left int) {
		if left == 0 {
			visit(idx)
			return
		}
		if n-i < left {
			return
		}
		idx[i] = true
		rec(i+1, left-1)
		idx[i] = false
		rec(i+1, left)
	}
	rec(0, k)
}

// The statistic agrees with gonum's, ties included.
func TestKSStatisticMatchesGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		n, m := 1+rng.IntN(300), 1+rng.IntN(300)
		a, b := make([]float64, n), make([]float64, m)
		for i := range a {
			a[i] = math.Round(rng.NormFloat64() * 4) // rounded: many ties
		}
		for i := range b {
			b[i] = math.Round(rng.NormFloat64()*4 + rng.Float64())
		}
		got := TwoSample(a, b).Statistic
		sa, sb := slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
		want := stat.KolmogorovSmirnov(sa, nil, sb, nil)
		if math.Abs(got-want) > 1e-12 {
			t.Fatalf("D = %v, gonum %v (n = %d, m = %d)", got, want, n, m)
		}
	}
}

// Past exactMaxCells the p-value is Q(√(nm/(n+m))·D); near the switch
// the exact and asymptotic values agree to within the asymptotic error.
func TestKSAsymptotic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	gen := func(n int, shift float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64() + shift
		}
		return x
	}
	a, b := gen(3000, 0), gen(2000, 0.1)
	got := TwoSample(a, b)
	if got.Method != "asymptotic" {
		t.Fatalf("method = %s, want asymptotic for 3000×2000", got.Method)
	}
	want := Q(math.Sqrt(3000.0*2000/5000) * got.Statistic)
	if got.PValue != want {
		t.Fatalf("p = %v, want Q(√en·D) = %v", got.PValue, want)
	}
	if got.PValue >= 0.01 {
		t.Fatalf("a 0.1σ shift over 3000/2000 samples: p = %g, want < 0.01", got.PValue)
	}
	same := TwoSample(gen(3000, 0), gen(3000, 0))
	if same.PValue < 0.001 {
		t.Fatalf("same distribution: p = %g, want a large p-value", same.PValue)
	}
	// n = m = 1000 is exact; the asymptotic value at the same D is close.
	for _, h := range []int64{40_000, 60_000, 80_000} { // D = 0.04, 0.06, 0.08
		exact := exactP(1000, 1000, h)
		asym := Q(math.Sqrt(500) * float64(h) / 1e6)
		if math.Abs(exact-asym) > 0.01 {
			t.Errorf("D = %g: exact %g vs asymptotic %g", float64(h)/1e6, exact, asym)
		}
	}
}

// NaN values are left out of both the statistic and the sizes, and
// Statistic agrees with TwoSample without computing a p-value.
func TestNaNLeftOut(t *testing.T) {
	tests := []struct {
		name   string
		a, b   []float64
		d      float64
		na, nb int
	}{
		{"none", []float64{1, 2}, []float64{3, 4, 5}, 1, 2, 3},
		{"in a", []float64{1, 2, math.NaN()}, []float64{3, 4, 5}, 1, 2, 3},
		{"in both", []float64{math.NaN(), 1, 3}, []float64{2, math.NaN(), 4}, 0.5, 2, 2},
		{"all NaN", []float64{math.NaN()}, []float64{1}, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TwoSample(tt.a, tt.b)
			if got.Statistic != tt.d || got.NA != tt.na || got.NB != tt.nb {
				t.Fatalf("TwoSample = %+v, want D = %v, n = %d/%d", got, tt.d, tt.na, tt.nb)
			}
			d, na, nb := Statistic(tt.a, tt.b)
			if d != got.Statistic || na != got.NA || nb != got.NB {
				t.Fatalf("Statistic = %v, %d, %d; TwoSample says %+v", d, na, nb, got)
			}
		})
	}
}

func TestPValue(t *testing.T) {
	tests := []struct {
		name  string
		d, ne float64
		want  float64 // NaN: want NaN
	}{
		{"two samples of 4", 0.5, EffectiveN(4, 4), 2 * (math.Exp(-1) - math.Exp(-4) + math.Exp(-9) - math.Exp(-16))},
		{"one sample: ne = n", 0.1, EffectiveN(100, 0), kolmogorovSeries(1)},
		{"infinite reference: ne = n", 0.1, EffectiveN(100, math.Inf(1)), kolmogorovSeries(1)},
		{"no sample", 0.1, EffectiveN(0, 5), math.NaN()},
		{"NaN statistic", math.NaN(), 10, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PValue(tt.d, tt.ne)
			if math.IsNaN(tt.want) != math.IsNaN(got) || !math.IsNaN(got) && !near(got, tt.want, 1e-9) {
				t.Fatalf("PValue(%v, %v) = %v, want %v", tt.d, tt.ne, got, tt.want)
			}
		})
	}
}
