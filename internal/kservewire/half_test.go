package kservewire

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFP16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := FP16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		back, ok := float64ToFP16(float64(f))
		if math.IsInf(float64(f), 0) {
			require.False(t, ok, "%#04x", h)
			continue
		}
		require.True(t, ok, "%#04x", h)
		require.Equal(t, uint16(h), back, "%#04x -> %v", h, f)
	}
}

func TestBF16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := BF16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		back, ok := float64ToBF16(float64(f))
		if math.IsInf(float64(f), 0) {
			require.False(t, ok, "%#04x", h)
			continue
		}
		require.True(t, ok)
		require.Equal(t, uint16(h), back, "%#04x -> %v", h, f)
	}
}

// nearest is the reference rounding: the positive finite value of the
// format closest to f, ties to the even bit pattern, by search over every
// pattern (they are ordered by value). ok is false past the largest value
// plus half a step, where IEEE rounding overflows to infinity.
func nearest(f float64, widen func(uint16) float32, maxFinite uint16) (uint16, bool) {
	vals := func(i int) float64 { return float64(widen(uint16(i))) }
	i := sort.Search(int(maxFinite)+1, func(i int) bool { return vals(i) >= f })
	if i > int(maxFinite) {
		top := vals(int(maxFinite))
		step := top - vals(int(maxFinite)-1)
		if f >= top+step/2 {
			return 0, false
		}
		return maxFinite, true
	}
	if i == 0 || vals(i) == f {
		return uint16(i), true
	}
	lo, hi := vals(i-1), vals(i)
	switch {
	case f-lo < hi-f:
		return uint16(i - 1), true
	case f-lo > hi-f:
		return uint16(i), true
	case i%2 == 0:
		return uint16(i), true
	default:
		return uint16(i - 1), true
	}
}

func TestNarrowFloatRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name      string
		conv      func(float64) (uint16, bool)
		widen     func(uint16) float32
		maxFinite uint16
		// Random values are m * 2^e with m in [0,1) and e in [minExp,maxExp]:
		// from below the smallest subnormal to past the largest value.
		minExp, maxExp int
	}{
		{"FP16", float64ToFP16, FP16ToFloat32, 0x7bff, -27, 17},
		{"BF16", float64ToBF16, BF16ToFloat32, 0x7f7f, -136, 129},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(f float64) {
				want, wantOK := nearest(f, tc.widen, tc.maxFinite)
				got, ok := tc.conv(f)
				require.Equal(t, wantOK, ok, "%v", f)
				if ok {
					require.Equal(t, want, got, "%v", f)
				}
				neg, ok := tc.conv(-f)
				require.Equal(t, wantOK, ok)
				if ok {
					require.Equal(t, want|0x8000, neg, "-%v", f)
				}
			}
			for range 20000 {
				// Spread over the whole exponent range, subnormals included.
				check(math.Ldexp(rng.Float64(), tc.minExp+rng.IntN(tc.maxExp-tc.minExp+1)))
			}
			// Exact ties between neighbours, which must go to even.
			for range 2000 {
				h := uint16(rng.IntN(int(tc.maxFinite)))
				lo, hi := float64(tc.widen(h)), float64(tc.widen(h+1))
				check((lo + hi) / 2)
			}
		})
	}
}
