package jsonenc

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// AppendFloat32 appends f as strconv.AppendFloat(dst, float64(f), 'g',
// -1, 32) does, byte for byte: the shortest decimal that reads back as
// the same float32 (and of those the nearest to f), with an exponent
// below 1e-4 and from 1e6 on. NaN and ±Inf are written as strconv
// writes them, which is not JSON: callers write those as they need.
//
// Values from 1e-4 to 1e6 with at most 12 decimals, which feature values
// and model outputs mostly are, take a shorter path than strconv's
// general one (see appendFixedFloat32).
func AppendFloat32(dst []byte, f float32) []byte {
	if b, ok := appendFixedFloat32(dst, f); ok {
		return b
	}
	return strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
}

// maxFixedDecimals is the most decimals appendFixedFloat32 tries: f×10^k
// is exact in a float64 while the 24 bits of f's mantissa and the
// 28 bits of 5^k fit its 53 (5^12 < 2^28).
const maxFixedDecimals = 12

// appendFixedFloat32 writes f, when 1e-4 ≤ |f| < 1e6, as m/10^k for
// the fewest decimals k (0 to maxFixedDecimals) for which m, the integer
// nearest to x = |f|×10^k, is strictly nearer to x than half the gap
// between f and its neighbour on that side (scaled alike), so that it
// reads back as f. That is strconv's answer: no decimal with fewer digits
// reads back as f (the nearest ones with k-1 decimals did not), of those
// with k decimals m is the nearest, and 'g' writes such a number without
// an exponent. The comparisons are exact: x and the half gaps are exact
// float64s (f×10^k needs at most 24+28 bits of mantissa), and so is x's
// distance to m (Sterbenz's lemma, or m = 0).
//
// The loop has no branch on the digits but its exit, which is what makes
// it faster than strconv's general algorithm for these values.
//
// ok is false, and strconv answers, for what this does not cover: zero,
// subnormals, NaN, ±Inf, values outside [1e-4, 1e6), an m exactly on the
// boundary of f's interval (whether it reads back as f depends on
// ties-to-even) or exactly halfway, a power of two once the integer on
// its far side might read back (its lower gap is half its upper one),
// and values that need more decimals.
func appendFixedFloat32(dst []byte, f float32) ([]byte, bool) {
	bits := math.Float32bits(f)
	exp := int(bits>>23) & 0xff
	if exp == 0 || exp == 0xff {
		return dst, false
	}
	x := math.Abs(float64(f))
	if x < 1e-4 || x >= 1e6 {
		return dst, false
	}
	// f = 1.mantissa × 2^(exp-127): its neighbours are 2^(exp-150) away,
	// the lower one half that at a power of two. hi and lo are half those
	// gaps, built from their float64 exponent bits (both normal).
	hi := math.Float64frombits(uint64(exp-151+1023) << 52)
	lo := hi
	pow2 := bits&(1<<23-1) == 0
	if pow2 {
		lo = hi / 2
	}
	for k := 0; k <= maxFixedDecimals && x < 1<<52; k++ {
		// x rounded to the nearest integer (ties to even): x+2^52 has
		// no fraction bits left.
		m := (x + 1<<52) - 1<<52
		d := math.Abs(x - m)
		half := hi
		if pow2 && m < x {
			half = lo
		}
		if d < half {
			if d == 0.5 || m == 0 || k == 0 && m >= 1e6 || k > 4 && uint64(m) < pow10[k-4] {
				// Both integers read back, equally near; or outside
				// [1e-4, 1e6), where strconv writes an exponent.
				return dst, false
			}
			return appendDecimal(dst, math.Signbit(float64(f)), uint64(m), k), true
		}
		if d == half || pow2 && hi >= 0.5 {
			return dst, false
		}
		x *= 10
		lo *= 10
		hi *= 10
	}
	return dst, false
}

// appendDecimal appends m/10^k as a plain decimal: "-" when neg, the
// integer digits ("0" when there are none), and k decimals after a point
// (none when k is 0). m < 10^19. The text is written in place, from its
// end, into dst's spare capacity (grown when short).
func appendDecimal(dst []byte, neg bool, m uint64, k int) []byte {
	n := max(decimalDigits(m), k+1) // digits, with a leading "0" for m < 10^k
	if k > 0 {
		n++ // the point
	}
	if neg {
		n++
	}
	dst = slices.Grow(dst, n)
	buf := dst[len(dst) : len(dst)+n]
	i := n
	// The decimals, two at a time while two are left.
	for ; k >= 2; k -= 2 {
		r := m % 100
		m /= 100
		i -= 2
		buf[i], buf[i+1] = digitPairs[2*r], digitPairs[2*r+1]
	}
	if k == 1 {
		i--
		buf[i] = byte('0' + m%10)
		m /= 10
	}
	if i < n {
		i--
		buf[i] = '.'
	}
	for m >= 100 {
		r := m % 100
		m /= 100
		i -= 2
		buf[i], buf[i+1] = digitPairs[2*r], digitPairs[2*r+1]
	}
	if m >= 10 {
		buf[i-2], buf[i-1] = digitPairs[2*m], digitPairs[2*m+1]
	} else {
		buf[i-1] = byte('0' + m)
	}
	if neg {
		buf[0] = '-'
	}
	return dst[:len(dst)+n]
}

// decimalDigits returns the number of decimal digits of m (1 for 0).
func decimalDigits(m uint64) int {
	// bits.Len64(m)×1233/4096 is log10(2^len) rounded down: the digits of
	// m, or one fewer.
	d := bits.Len64(m) * 1233 >> 12
	if d < len(pow10) && m >= pow10[d] {
		d++
	}
	return max(d, 1)
}

// pow10 holds 10^0 to 10^19.
var pow10 = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// digitPairs holds "00" to "99".
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"
