package jsonenc

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// wantFloat32 is what AppendFloat32 must write: strconv's shortest 'g'.
func wantFloat32(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) }

// requireFloat32 checks AppendFloat32(f) against strconv, appended after
// a prefix that must stay.
func requireFloat32(t *testing.T, f float32) {
	t.Helper()
	got := string(AppendFloat32([]byte("x"), f))
	if got != "x"+wantFloat32(f) {
		t.Fatalf("AppendFloat32(%v, bits %#08x) = %q, strconv writes %q", f, math.Float32bits(f), got[1:], wantFloat32(f))
	}
}

func TestAppendFloat32MatchesStrconv(t *testing.T) {
	t.Run("special values and range edges", func(t *testing.T) {
		for _, f := range []float32{
			0, float32(math.Copysign(0, -1)), 1, -1, 0.5, 2, 1024, 0.1, 0.2, 0.3, 1.0 / 3, 42.01, -42.01,
			float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
			math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1.17549435e-38, 1e-38,
			1e-4, 1e6, 999999.94, 999999.9, 1e5, 123456.7, 16777216, 16777215, 1e-5, 0.00012345678,
		} {
			requireFloat32(t, f)
			for _, g := range []float32{math.Nextafter32(f, float32(math.Inf(1))), math.Nextafter32(f, float32(math.Inf(-1)))} {
				requireFloat32(t, g)
			}
		}
	})
	t.Run("decimals of up to 9 digits and their neighbours", func(t *testing.T) {
		// What features mostly hold: decimals with a few digits, read
		// from text or computed, rounded to float32.
		r := rand.New(rand.NewPCG(1, 2))
		for range 200_000 {
			digits := 1 + r.IntN(9)
			m := r.Int64N(int64(math.Pow10(digits)))
			f := float32(float64(m) / math.Pow10(r.IntN(14)))
			if r.IntN(2) == 0 {
				f = -f
			}
			requireFloat32(t, f)
			requireFloat32(t, math.Nextafter32(f, 0))
			requireFloat32(t, math.Nextafter32(f, 2*f))
		}
	})
	t.Run("powers of ten and two, and their neighbours", func(t *testing.T) {
		for e := -46; e <= 39; e++ {
			for _, f := range []float32{float32(math.Pow10(e)), float32(math.Ldexp(1, e*3))} {
				g, h := f, f
				for range 4 {
					requireFloat32(t, g)
					requireFloat32(t, h)
					g, h = math.Nextafter32(g, 0), math.Nextafter32(h, float32(math.Inf(1)))
				}
			}
		}
	})
	t.Run("random bits", func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for range 500_000 {
			requireFloat32(t, math.Float32frombits(r.Uint32()))
		}
	})
}

// TestAppendFloat32TakesTheFixedPath pins that the common values take the
// short path (it answers for them, rather than strconv): a change that
// sent everything to strconv would still write the right bytes, slower.
func TestAppendFloat32TakesTheFixedPath(t *testing.T) {
	for _, f := range []float32{42.01, -0.3, 1, 999.5, 0.001, 123456.7, 3.1415927, 0.73412345} {
		b, ok := appendFixedFloat32(nil, f)
		require.True(t, ok, "%v", f)
		require.Equal(t, wantFloat32(f), string(b))
	}
}

func FuzzAppendFloat32(f *testing.F) {
	for _, x := range []float32{0, 1, 42.01, 1e-4, 1e6, 999999.94, 0.1, 16777216} {
		f.Add(math.Float32bits(x))
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		requireFloat32(t, math.Float32frombits(bits))
	})
}

// BenchmarkAppendFloat32 formats feature-like values (two decimals) and
// random float32s in [0, 1) with AppendFloat32 and with strconv.
func BenchmarkAppendFloat32(b *testing.B) {
	sets := map[string][]float32{}
	r := rand.New(rand.NewPCG(5, 6))
	for range 1024 {
		sets["decimal2"] = append(sets["decimal2"], float32(r.IntN(100_000))/100)
		sets["unit"] = append(sets["unit"], r.Float32())
	}
	for _, name := range []string{"decimal2", "unit"} {
		vals := sets[name]
		buf := make([]byte, 0, 64)
		b.Run(name+"/jsonenc", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				buf = AppendFloat32(buf[:0], vals[i%len(vals)])
			}
		})
		b.Run(name+"/strconv", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				buf = strconv.AppendFloat(buf[:0], float64(vals[i%len(vals)]), 'g', -1, 32)
			}
		})
	}
}

func TestDecimalDigits(t *testing.T) {
	require.Equal(t, 1, decimalDigits(0))
	for d := 1; d <= 19; d++ {
		p := uint64(math.Pow10(d - 1)) // 10^(d-1): d digits
		if d == 19 {
			p = 1_000_000_000_000_000_000
		}
		require.Equal(t, d, decimalDigits(p), "10^%d", d-1)
		require.Equal(t, d, decimalDigits(p*10-1), "10^%d-1", d)
	}
	require.Equal(t, 20, decimalDigits(math.MaxUint64))
}
