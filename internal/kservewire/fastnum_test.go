package kservewire

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// checkFastScanners asserts that ScanFloat32 and ScanInt64, wherever they
// answer, answer as the general path (ScanNumber, then AppendNumber) and,
// for FP32, as strconv.ParseFloat: the same bits and the same end offset.
// It reports whether each answered.
func checkFastScanners(t *testing.T, text []byte, at int) (f32, i64 bool) {
	t.Helper()
	f, fend, f32 := ScanFloat32(text, at)
	v, vend, i64 := ScanInt64(text, at)
	if !f32 && fend != at || !i64 && vend != at {
		t.Fatalf("%q at %d: declined but moved to %d / %d", text, at, fend, vend)
	}
	if !f32 && !i64 {
		return false, false
	}
	n, end, err := ScanNumber(text, at)
	if err != nil {
		t.Fatalf("%q at %d: fast path accepted what ScanNumber rejects: %v", text, at, err)
	}
	if f32 {
		if fend != end {
			t.Fatalf("%q at %d: ScanFloat32 ends at %d, ScanNumber at %d", text, at, fend, end)
		}
		want, err := AppendNumber(nil, infer.FP32, &n)
		if err != nil {
			t.Fatalf("%q: ScanFloat32 gave %v, the general path fails: %v", n.Lit, f, err)
		}
		if got := math.Float32bits(f); got != binary.LittleEndian.Uint32(want) {
			t.Fatalf("%q: ScanFloat32 gave %#x, the general path %#x", n.Lit, got, want)
		}
		ref, err := strconv.ParseFloat(string(n.Lit), 32)
		if err != nil || math.Float32bits(float32(ref)) != math.Float32bits(f) {
			t.Fatalf("%q: ScanFloat32 gave %v (%#x), strconv %v, %v", n.Lit, f, math.Float32bits(f), ref, err)
		}
	}
	if i64 {
		if vend != end {
			t.Fatalf("%q at %d: ScanInt64 ends at %d, ScanNumber at %d", text, at, vend, end)
		}
		want, err := AppendNumber(nil, infer.Int64, &n)
		if err != nil || int64(binary.LittleEndian.Uint64(want)) != v {
			t.Fatalf("%q: ScanInt64 gave %d, the general path %v, %v", n.Lit, v, want, err)
		}
	}
	return f32, i64
}

func TestFastScannersEdges(t *testing.T) {
	for _, c := range []struct {
		lit      string
		f32, i64 bool // whether each fast path answers
	}{
		{"0", true, true},
		{"-0", true, true},
		{"-0.0", true, false},
		{"0.299", true, false},
		{"-1.344", true, false},
		{"2.0", true, false},
		{"1e3", true, false},
		{"1E+3", true, false},
		{"1e-45", false, false}, // subnormal: strconv decides
		{"1e39", false, false},  // overflow: strconv decides
		{"3.4028235e38", true, false},
		{"0.30000001192092896", true, false},
		{"16777217", false, true},             // 2^24+1, halfway between two float32s: strconv decides
		{"9223372036854775807", false, false}, // 19 digits: the general path
		{"-9223372036854775808", false, false},
		{"9223372036854775808", false, false},
		{"18446744073709551616", false, false}, // 20 digits
		{"0.00000000000000000000000000001", true, false},
		{"123456789012345678", true, true}, // 18 digits, the most the fast paths take
		{"1234567890123456789", false, false},
		{"12345678901234567890", false, false},
		{"01", true, true}, // "0", then the caller sees the '1'
		{"1.", false, false},
		{"1.e3", false, false},
		{"1e", false, false},
		{"1e+", false, false},
		{"-", false, false},
		{".5", false, false},
		{"+1", false, false},
		{"", false, false},
		{"x", false, false},
	} {
		for _, tail := range []string{"", ",1", "]", " ,"} {
			text := []byte(" [" + c.lit + tail)
			f32, i64 := checkFastScanners(t, text, 2)
			if f32 != c.f32 || i64 != c.i64 {
				t.Errorf("%q: fast FP32 %v, INT64 %v; want %v, %v", c.lit, f32, i64, c.f32, c.i64)
			}
		}
	}
}

// TestFastScannersRandom compares the fast paths with the general path and
// strconv on random literals, and checks that what clients commonly send
// (short decimals, and nearly all of numpy's float64 reprs of float32
// data, as FP32; integers of up to 18 digits as INT64) takes
// the fast path.
func TestFastScannersRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	reprs, reprMisses := 0, 0
	for i := range 200_000 {
		var s string
		commonF32, commonI64 := i%6 == 1, i%6 == 2
		switch i % 6 {
		case 0: // numpy's tolist of float32 data: the float64 repr
			s = strconv.FormatFloat(float64(float32(rng.NormFloat64())), 'g', -1, 64)
		case 1: // rounded to a few decimals, as examples and hand-written bodies have them
			s = strconv.FormatFloat(rng.NormFloat64(), 'f', rng.IntN(5), 64)
		case 2: // integers
			s = strconv.FormatInt(rng.Int64()>>(6+rng.IntN(57)), 10) // at most 18 digits
			if rng.IntN(2) == 0 {
				s = "-" + s
			}
		case 3: // any bits, any number of digits
			f := math.Float32frombits(rng.Uint32())
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				continue
			}
			s = strconv.FormatFloat(float64(f), 'e', rng.IntN(22), 64)
		case 4: // random digits and exponent
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
		f32, i64 := checkFastScanners(t, []byte(s+","), 0)
		if i%6 == 0 {
			reprs++
			if !f32 {
				reprMisses++
			}
		}
		if commonF32 && !f32 || commonI64 && !i64 {
			t.Fatalf("%q: a common literal missed the fast path (FP32 %v, INT64 %v)", s, f32, i64)
		}
	}
	// Eisel–Lemire declines a few exactly representable values (the
	// product's low bits are all zero), which strconv then decides.
	if reprMisses*100 > reprs {
		t.Fatalf("%d of %d numpy reprs missed the FP32 fast path", reprMisses, reprs)
	}
}

func BenchmarkScanFloat32(b *testing.B) {
	text := []byte("-0.30000001192092896,")
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, _, ok := ScanFloat32(text, 0); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		var dst [4]byte
		for b.Loop() {
			n, _, err := ScanNumber(text, 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := AppendNumber(dst[:0], infer.FP32, &n); err != nil {
				b.Fatal(err)
			}
		}
	})
}
