package jsonnum

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// want is strconv's answer, the reference.
func want(s string) (float32, error) {
	f, err := strconv.ParseFloat(s, 32)
	return float32(f), err
}

func requireSame(t *testing.T, s string) {
	t.Helper()
	got, gotErr := ParseFloat32([]byte(s))
	w, wErr := want(s)
	require.Equal(t, math.Float32bits(w), math.Float32bits(got), "%q: got %g, strconv %g", s, got, w)
	if wErr == nil {
		require.NoError(t, gotErr, s)
	} else {
		require.EqualError(t, gotErr, wErr.Error(), s)
	}
}

func TestParseFloat32MatchesStrconv(t *testing.T) {
	for _, s := range []string{
		"0", "-0", "0.0", "-0.0", "1", "-1", "0.5", "1e0", "1E+2", "1e-2", "123456789", "16777216", "16777217",
		"0.1", "0.30000001192092896", "-0.7071067690849304", "3.4028234663852886e38", "3.4028235e38", "3.5e38",
		"1e39", "-1e39", "1e38", "1.1754943508222875e-38", "1.401298464324817e-45", "7e-46", "1e-46", "1e-64",
		"1e-65", "1e-400", "1e400", "1e99999999", "1234567890123456789", "12345678901234567890",
		"0.000000000000000000000000000000000001", "100000000000000000000000000000000000000",
		"9999999999999999999", "0.00001", "123.456e-7", "5e-324", "340282356779733661637539395458142568448",
		"1.00000005960464477539062499", "1.000000059604644775390625", "1.00000005960464477539062501",
		"8388608.5", "8388609.5", "16777217.0", "0.1e1", "10e-1", "1e-10", "1e-11", "1e17", "1e18",
	} {
		requireSame(t, s)
	}
}

func TestParseFloat32RandomLiterals(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	for i := range n {
		var s string
		switch i % 5 {
		case 0: // numpy's tolist of float32 data: the float64 repr
			s = strconv.FormatFloat(float64(float32(rng.NormFloat64())), 'g', -1, 64)
		case 1: // the shortest float32 repr
			s = strconv.FormatFloat(float64(float32(rng.NormFloat64()*1e3)), 'g', -1, 32)
		case 2: // any bits
			f := math.Float32frombits(rng.Uint32())
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				continue
			}
			s = strconv.FormatFloat(float64(f), 'e', rng.IntN(20), 64)
		case 3: // random digits and exponent
			digits := make([]byte, 1+rng.IntN(21))
			for j := range digits {
				digits[j] = byte('0' + rng.IntN(10))
			}
			if digits[0] == '0' {
				digits[0] = '1'
			}
			s = string(digits)
			if k := rng.IntN(len(s)); k > 0 {
				s = s[:k] + "." + s[k:]
			}
			s += "e" + strconv.Itoa(rng.IntN(100)-60)
		default: // halfway points between neighbouring float32 values
			f := math.Float32frombits(rng.Uint32() & 0x7f7fffff)
			up := math.Nextafter32(f, float32(math.Inf(1)))
			s = strconv.FormatFloat((float64(f)+float64(up))/2, 'e', -1, 64)
		}
		requireSame(t, s)
	}
}

func TestParseFloat32Errors(t *testing.T) {
	for _, s := range []string{"", "-", ".5", "1.", "1e", "1e+", "--1", "1x", "0x10", "1_0", "Inf", "NaN", " 1"} {
		_, err := ParseFloat32([]byte(s))
		_, werr := want(s)
		if werr != nil {
			require.Error(t, err, s)
		}
	}
}

func FuzzParseFloat32(f *testing.F) {
	for _, s := range []string{"0", "-1.5", "0.30000001192092896", "3.4028235e38", "1e-46", "12345678901234567890e-30"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gotErr := ParseFloat32([]byte(s))
		w, wErr := want(s)
		if (gotErr == nil) != (wErr == nil) {
			t.Fatalf("%q: error %v, strconv %v", s, gotErr, wErr)
		}
		if wErr == nil && math.Float32bits(got) != math.Float32bits(w) {
			t.Fatalf("%q: got %g, strconv %g", s, got, w)
		}
	})
}

func BenchmarkParseFloat32(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	lits := make([][]byte, 224)
	for i := range lits {
		lits[i] = []byte(strconv.FormatFloat(float64(float32(rng.NormFloat64())), 'g', -1, 64))
	}
	b.Run("jsonnum", func(b *testing.B) {
		for b.Loop() {
			for _, l := range lits {
				if _, err := ParseFloat32(l); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("strconv", func(b *testing.B) {
		for b.Loop() {
			for _, l := range lits {
				if _, err := strconv.ParseFloat(string(l), 32); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
