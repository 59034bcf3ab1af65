package jsonnum

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"
)

// ParseFloat32 converts a JSON number literal (an optional '-', digits, an
// optional fraction and exponent; no surrounding space) to the nearest
// float32, with strconv.ParseFloat(string(b), 32)'s result and error.
func ParseFloat32(b []byte) (float32, error) {
	if man, exp10, neg, ok := decompose(b); ok {
		if f, ok := Decimal32(man, exp10, neg); ok {
			return f, nil
		}
	}
	f, err := strconv.ParseFloat(string(b), 32)
	return float32(f), err
}

// Decimal32 returns the float32 nearest to man × 10^exp10 (negated when
// neg), as strconv rounds it, when that can be decided quickly: false
// means the caller must ask strconv.ParseFloat (for subnormal and
// overflowing results, and rare halfway cases). man must hold every
// significant digit of the literal (at most MaxMantissaDigits), so a
// scanner that already walks a literal's digits can convert it without a
// second pass.
func Decimal32(man uint64, exp10 int, neg bool) (float32, bool) {
	if f, ok := exact32(man, exp10, neg); ok {
		return f, true
	}
	return eiselLemire32(man, exp10, neg)
}

// MaxMantissaDigits is the most significant digits that always fit a
// uint64 (10^19 < 2^64).
const MaxMantissaDigits = 19

// maxMantissaDigits is MaxMantissaDigits, for this file.
const maxMantissaDigits = MaxMantissaDigits

// decompose splits a JSON number into its significant digits as an
// integer and a power of ten. ok is false when the literal is not a JSON
// number or has more than maxMantissaDigits significant digits.
func decompose(b []byte) (man uint64, exp10 int, neg, ok bool) {
	i := 0
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	digits := 0 // significant digits in man (leading zeros not counted)
	for ; i < len(b) && b[i]-'0' <= 9; i++ {
		if man == 0 && b[i] == '0' {
			continue
		}
		if digits == maxMantissaDigits {
			return 0, 0, false, false
		}
		man = man*10 + uint64(b[i]-'0')
		digits++
	}
	if i == start {
		return 0, 0, false, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		frac := i
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			if man == 0 && b[i] == '0' {
				exp10--
				continue
			}
			if digits == maxMantissaDigits {
				return 0, 0, false, false
			}
			man = man*10 + uint64(b[i]-'0')
			digits++
			exp10--
		}
		if i == frac {
			return 0, 0, false, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		e, end, eok := ScanExponent(b, i+1)
		if !eok {
			return 0, 0, false, false
		}
		i = end
		exp10 += e
	}
	if i != len(b) {
		return 0, 0, false, false
	}
	return man, exp10, neg, true
}

// ScanExponent reads the exponent of a number literal that starts at
// b[i], just after the 'e': an optional sign, then digits. It returns the
// exponent and the offset after it; ok is false when no digit is there
// (end is then where one was expected). Exponents beyond any float's
// range are capped near 10000, which still over- or underflows.
func ScanExponent(b []byte, i int) (e, end int, ok bool) {
	eneg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		eneg = b[i] == '-'
		i++
	}
	if i >= len(b) || b[i]-'0' > 9 {
		return 0, i, false
	}
	for ; i < len(b) && b[i]-'0' <= 9; i++ {
		if e < 10000 { // beyond any float's range: strconv decides
			e = e*10 + int(b[i]-'0')
		}
	}
	if eneg {
		e = -e
	}
	return e, i, true
}

// float32Pow10 are the powers of ten a float32 holds exactly.
var float32Pow10 = [...]float32{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}

// exact32 is strconv's atof32exact: when the mantissa and the power of ten
// are both exact float32 values, one correctly rounded multiplication or
// division gives the correctly rounded result.
func exact32(man uint64, exp10 int, neg bool) (float32, bool) {
	if man>>23 != 0 {
		return 0, false
	}
	f := float32(man)
	if neg {
		f = -f
	}
	switch {
	case exp10 == 0:
		return f, true
	case exp10 > 0 && exp10 <= 7+10: // int * 10^k
		// Exact integers are <= 10^7 and exact powers of ten <= 10^10;
		// a few zeros can move into the integer part.
		if exp10 > 10 {
			f *= float32Pow10[exp10-10]
			exp10 = 10
		}
		if f > 1e7 || f < -1e7 {
			return 0, false
		}
		return f * float32Pow10[exp10], true
	case exp10 < 0 && exp10 >= -10: // int / 10^k
		return f / float32Pow10[-exp10], true
	}
	return 0, false
}

// Range of the powers of ten in pow10. A float32 with at most 19
// significant digits is at least 1e-64 (below, it is zero or subnormal)
// and at most 3.4e38.
const (
	pow10Min = -65
	pow10Max = 38
)

// pow10 holds 10^e for e in [pow10Min, pow10Max] as 128-bit mantissas
// rounded down, normalized so that the top bit is set: {low, high}. They
// are strconv's detailedPowersOfTen for this range, computed once.
var pow10 = func() [pow10Max - pow10Min + 1][2]uint64 {
	var t [pow10Max - pow10Min + 1][2]uint64
	ten := big.NewInt(10)
	mask := new(big.Int).SetUint64(math.MaxUint64)
	for e := pow10Min; e <= pow10Max; e++ {
		v := new(big.Int)
		if e >= 0 {
			v.Exp(ten, big.NewInt(int64(e)), nil)
			if n := v.BitLen(); n > 128 {
				v.Rsh(v, uint(n-128))
			} else {
				v.Lsh(v, uint(128-n))
			}
		} else {
			d := new(big.Int).Exp(ten, big.NewInt(int64(-e)), nil)
			// 2^k / 10^-e with k large enough for 128 bits, then cut to
			// exactly 128 bits (always rounding down).
			v.Lsh(big.NewInt(1), uint(d.BitLen()+128))
			v.Quo(v, d)
			if n := v.BitLen(); n > 128 {
				v.Rsh(v, uint(n-128))
			}
		}
		lo := new(big.Int).And(v, mask).Uint64()
		hi := new(big.Int).Rsh(v, 64).Uint64()
		t[e-pow10Min] = [2]uint64{lo, hi}
	}
	return t
}()

// eiselLemire32 is strconv's eiselLemire32 (Daniel Lemire, "Number Parsing
// at a Gigabyte per Second", after Michael Eisel): it reports false when
// it cannot decide, and then strconv's slower path must.
func eiselLemire32(man uint64, exp10 int, neg bool) (float32, bool) {
	if man == 0 {
		if neg {
			return float32(math.Copysign(0, -1)), true
		}
		return 0, true
	}
	if exp10 < pow10Min || exp10 > pow10Max {
		return 0, false
	}
	// Normalization.
	clz := bits.LeadingZeros64(man)
	man <<= uint(clz)
	const float32ExponentBias = 127
	retExp2 := uint64(217706*exp10>>16+64+float32ExponentBias) - uint64(clz)
	// Multiplication.
	p := &pow10[exp10-pow10Min]
	xHi, xLo := bits.Mul64(man, p[1])
	// Wider approximation.
	if xHi&0x3FFFFFFFFF == 0x3FFFFFFFFF && xLo+man < man {
		yHi, yLo := bits.Mul64(man, p[0])
		mergedHi, mergedLo := xHi, xLo+yHi
		if mergedLo < xLo {
			mergedHi++
		}
		if mergedHi&0x3FFFFFFFFF == 0x3FFFFFFFFF && mergedLo+1 == 0 && yLo+man < man {
			return 0, false
		}
		xHi, xLo = mergedHi, mergedLo
	}
	// Shifting to 25 bits.
	msb := xHi >> 63
	retMantissa := xHi >> (msb + 38)
	retExp2 -= 1 ^ msb
	// Halfway ambiguity.
	if xLo == 0 && xHi&0x3FFFFFFFFF == 0 && retMantissa&3 == 1 {
		return 0, false
	}
	// From 25 to 24 bits.
	retMantissa += retMantissa & 1
	retMantissa >>= 1
	if retMantissa>>24 > 0 {
		retMantissa >>= 1
		retExp2++
	}
	// Zero or underflow: subnormal; 0xFF or above: infinite. strconv
	// handles both.
	if retExp2-1 >= 0xFF-1 {
		return 0, false
	}
	retBits := retExp2<<23 | retMantissa&0x007FFFFF
	if neg {
		retBits |= 0x80000000
	}
	return math.Float32frombits(uint32(retBits)), true
}
