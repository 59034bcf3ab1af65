package drift

import (
	"math"
	"testing"
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// kolmogorovSeries is the defining alternating series, summed far enough
// to be exact for z ≥ 0.3.
func kolmogorovSeries(z float64) float64 {
	var s float64
	for k := 1; k <= 200; k++ {
		s += math.Pow(-1, float64(k-1)) * math.Exp(-2*float64(k*k)*z*z)
	}
	return 2 * s
}

func TestPSIHandComputed(t *testing.T) {
	tests := []struct {
		name             string
		expected, actual []float64
		eps, want        float64
	}{
		{
			// 0.15·ln 1.6 + 0.05·ln 1.2 + 0.05·ln(1/0.8) + 0.15·ln(1/0.4)
			name:     "four bins no smoothing",
			expected: []float64{0.25, 0.25, 0.25, 0.25}, actual: []float64{0.1, 0.2, 0.3, 0.4},
			eps: 0, want: 0.22821740957339182,
		},
		{
			name:     "counts are normalised",
			expected: []float64{25, 25, 25, 25}, actual: []float64{1, 2, 3, 4},
			eps: 0, want: 0.22821740957339182,
		},
		{
			// e = (0.5+0.01)/1.02 each; a = 1.01/1.02 and 0.01/1.02.
			name:     "empty bin smoothed",
			expected: []float64{0.5, 0.5}, actual: []float64{1, 0},
			eps: 0.01, want: 2.2623139788437543,
		},
		{name: "identical", expected: []float64{0.2, 0.8}, actual: []float64{2, 8}, eps: DefaultEpsilon, want: 0},
		{name: "empty on both sides", expected: []float64{0.5, 0, 0.5}, actual: []float64{0.5, 0, 0.5}, eps: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PSI(tt.expected, tt.actual, tt.eps); !near(got, tt.want, 1e-12) {
				t.Fatalf("PSI = %.15g, want %.15g", got, tt.want)
			}
			// PSI is symmetric in its arguments.
			if got := PSI(tt.actual, tt.expected, tt.eps); !near(got, tt.want, 1e-12) {
				t.Fatalf("PSI swapped = %.15g, want %.15g", got, tt.want)
			}
		})
	}
	if got := PSI([]float64{0.5, 0.5}, []float64{1, 0}, 0); !math.IsInf(got, 1) {
		t.Fatalf("PSI with an unsmoothed empty bin = %v, want +Inf", got)
	}
}

func TestPSIInvalidInputIsNaN(t *testing.T) {
	tests := []struct {
		name             string
		expected, actual []float64
		eps              float64
	}{
		{"length mismatch", []float64{1, 2}, []float64{1}, 0},
		{"empty", nil, nil, 0},
		{"negative weight", []float64{1, -1}, []float64{1, 1}, 0},
		{"zero sum", []float64{0, 0}, []float64{1, 1}, 0},
		{"NaN weight", []float64{1, math.NaN()}, []float64{1, 1}, 0},
		{"negative eps", []float64{1, 1}, []float64{1, 1}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PSI(tt.expected, tt.actual, tt.eps); !math.IsNaN(got) {
				t.Fatalf("PSI = %v, want NaN", got)
			}
		})
	}
}

func TestKSHandComputed(t *testing.T) {
	tests := []struct {
		name  string
		a, b  []float64
		wantD float64
	}{
		// ECDFs at 2: 2/4 against 0.
		{"disjoint halves", []float64{4, 1, 3, 2}, []float64{3, 4, 5, 6}, 0.5},
		// At 1: 2/3 against 1/3; ties count on both sides at once.
		{"ties", []float64{1, 1, 2}, []float64{1, 2, 2}, 1.0 / 3},
		{"identical", []float64{1, 2, 3}, []float64{3, 2, 1}, 0},
		{"disjoint", []float64{1, 2}, []float64{3, 4, 5}, 1},
		{"NaN ignored", []float64{1, 2, math.NaN()}, []float64{3, 4, 5}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := KS(tt.a, tt.b)
			if !near(d, tt.wantD, 1e-12) {
				t.Fatalf("D = %v, want %v", d, tt.wantD)
			}
		})
	}
	// p-value of D = 0.5 with n = m = 4: Q(√2 · 0.5) = 2(e⁻¹ − e⁻⁴ + e⁻⁹ − …).
	_, p := KS([]float64{1, 2, 3, 4}, []float64{3, 4, 5, 6})
	if want := 2 * (math.Exp(-1) - math.Exp(-4) + math.Exp(-9) - math.Exp(-16)); !near(p, want, 1e-9) {
		t.Fatalf("p = %.12g, want %.12g", p, want)
	}
	if got := KSPValue(0.5, 4, 4); !near(got, p, 1e-15) {
		t.Fatalf("KSPValue(0.5, 4, 4) = %v, want %v", got, p)
	}
	// One-sample: nₑ = n.
	if got, want := KSPValue(0.1, 100, 0), kolmogorovSeries(1); !near(got, want, 1e-10) {
		t.Fatalf("KSPValue(0.1, 100, 0) = %v, want Q(1) = %v", got, want)
	}
	if d, p := KS(nil, []float64{1}); !math.IsNaN(d) || !math.IsNaN(p) {
		t.Fatalf("KS of an empty sample = %v, %v; want NaN, NaN", d, p)
	}
	if got := KSPValue(0.1, 0, 5); !math.IsNaN(got) {
		t.Fatalf("KSPValue with n = 0 = %v, want NaN", got)
	}
}

func TestQuantileCDF(t *testing.T) {
	// Quantiles at 0, 1/3, 2/3, 1; the repeated 1 is a point mass of 1/3.
	c := quantileCDF{q: []float64{0, 1, 1, 2}}
	tests := []struct{ x, at, before float64 }{
		{-1, 0, 0},
		{0, 0, 0},
		{0.5, 1.0 / 6, 1.0 / 6},
		{1, 2.0 / 3, 1.0 / 3},
		{1.5, 5.0 / 6, 5.0 / 6},
		{2, 1, 1},
		{3, 1, 1},
	}
	for _, tt := range tests {
		if got := c.at(tt.x); !near(got, tt.at, 1e-12) {
			t.Errorf("at(%v) = %v, want %v", tt.x, got, tt.at)
		}
		if got := c.before(tt.x); !near(got, tt.before, 1e-12) {
			t.Errorf("before(%v) = %v, want %v", tt.x, got, tt.before)
		}
	}
	if got := c.value(0.5); got != 1 {
		t.Errorf("value(0.5) = %v, want 1", got)
	}
	if got := c.value(1); got != 2 {
		t.Errorf("value(1) = %v, want 2", got)
	}
}

func TestKSAgainstQuantiles(t *testing.T) {
	// Uniform on [0, 1] against {0.1, 0.2, 0.9}: the largest gap is at 0.2,
	// where the ECDF is 2/3 and the CDF 0.2.
	live := unitECDF([]float64{0.9, 0.1, 0.2})
	if got := ksStat(live, quantileCDF{q: []float64{0, 1}}); !near(got, 2.0/3-0.2, 1e-12) {
		t.Fatalf("D = %v, want %v", got, 2.0/3-0.2)
	}
	// A live value outside the reference range: all mass above the max.
	live = unitECDF([]float64{5, 6})
	if got := ksStat(live, quantileCDF{q: []float64{0, 1}}); got != 1 {
		t.Fatalf("D = %v, want 1", got)
	}
}

func TestBinProportions(t *testing.T) {
	e := unitECDF([]float64{0, 1, 1, 2, 3, 3, 3, 10})
	got := binProportions(e, []float64{1, 3}, nil)
	want := []float64{1.0 / 8, 3.0 / 8, 4.0 / 8} // (-∞,1) [1,3) [3,∞)
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Fatalf("proportions = %v, want %v", got, want)
		}
	}
}
