package kservewire

import (
	"math"
)

// Half-precision conversions for FP16 (IEEE 754 binary16: 5 exponent bits,
// 10 mantissa bits) and BF16 (bfloat16: 8 exponent bits, 7 mantissa bits).
// JSON carries these types as ordinary numbers, so the JSON tensor encoding
// converts them itself rather than pulling in a library for two small
// functions.

// narrowFloat rounds f (finite) to the nearest value of a binary format with
// expBits exponent bits and mantBits mantissa bits, ties to even, and
// returns its bit pattern. ok is false when the rounded magnitude does not
// fit (it would be infinite) or f is not finite.
func narrowFloat(f float64, expBits, mantBits uint) (bits uint32, ok bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	var sign uint32
	if math.Signbit(f) {
		sign = 1 << (expBits + mantBits)
		f = -f
	}
	if f == 0 {
		return sign, true
	}
	bias := 1<<(expBits-1) - 1
	_, exp := math.Frexp(f) // f = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1            // f = 1.x * 2^e
	minNormal := 1 - bias
	// quantum is the spacing of representable values around f; below the
	// normal range it is fixed (subnormals).
	qe := e - int(mantBits)
	field := e + bias - 1 // biased exponent minus one; see below
	if e < minNormal {
		qe = minNormal - int(mantBits)
		field = 0
	}
	r := math.RoundToEven(math.Ldexp(f, -qe))
	// For a normal value, bits = (e+bias)<<mant | (r - 2^mant), which
	// equals (e+bias-1)<<mant + r; when rounding carried r up to 2^(mant+1)
	// the same sum yields the next exponent with a zero mantissa. For a
	// subnormal, bits = r, and r == 2^mant is exactly the smallest normal.
	v := uint64(field)<<mantBits + uint64(r)
	if v >= uint64(1<<expBits-1)<<mantBits {
		return 0, false
	}
	return sign | uint32(v), true
}

// float64ToFP16 converts f to binary16, rounding to nearest even.
func float64ToFP16(f float64) (uint16, bool) {
	b, ok := narrowFloat(f, 5, 10)
	return uint16(b), ok
}

// float64ToBF16 converts f to bfloat16, rounding to nearest even.
func float64ToBF16(f float64) (uint16, bool) {
	b, ok := narrowFloat(f, 8, 7)
	return uint16(b), ok
}

// FP16ToFloat32 widens a binary16 bit pattern exactly.
func FP16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant * 2^-24, exact in float32.
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// BF16ToFloat32 widens a bfloat16 bit pattern exactly.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }
