package kservewire

import "github.com/sluice-ml/sluice/internal/jsonnum"

// The typed fast paths below read the common elements of FP32 and INT64
// data arrays in one function each: the literal's grammar, its digits and
// its conversion, with no Number in between. They answer only what they
// can answer exactly as ScanNumber followed by AppendNumber would; for
// anything else (a malformed literal, more significant digits than a
// ScanNumber keeps exact, a value strconv must decide, an INT64 literal with a
// fraction or exponent) ok is false and the caller takes the general path,
// which also words the error.

// ScanFloat32 reads the JSON number literal at b[at] as an FP32 element:
// the float32 nearest to it (as strconv.ParseFloat(lit, 32) rounds) and
// the offset just after it. ok is false when the general path must decide
// (see above); nothing is consumed then.
func ScanFloat32(b []byte, at int) (f float32, end int, ok bool) {
	i := at
	var man uint64
	exp10 := 0
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i]-'1' < 9:
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			if man >= maxExactMant {
				return 0, at, false
			}
			man = man*10 + uint64(b[i]-'0')
		}
	default:
		return 0, at, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i]-'0' > 9 {
			return 0, at, false
		}
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			exp10--
			if man == 0 && b[i] == '0' {
				continue // a leading zero: not significant
			}
			if man >= maxExactMant {
				return 0, at, false
			}
			man = man*10 + uint64(b[i]-'0')
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		e, end, ok := jsonnum.ScanExponent(b, i+1)
		if !ok {
			return 0, at, false
		}
		exp10 += e
		i = end
	}
	if f, ok = decimalToFloat32(man, exp10, neg); !ok {
		return 0, at, false
	}
	return f, i, true
}

// decimalToFloat32 is jsonnum.Decimal32, with its most common case (a
// short decimal: an exact float32 divided by an exact power of ten, one
// correctly rounded operation) answered without a call.
func decimalToFloat32(man uint64, exp10 int, neg bool) (float32, bool) {
	if man < 1<<23 && exp10 <= 0 && exp10 >= -10 {
		f := float32(man) / float32Pow10[-exp10]
		if neg {
			f = -f
		}
		return f, true
	}
	return jsonnum.Decimal32(man, exp10, neg)
}

// ScanInt64 reads the JSON integer literal at b[at] (no fraction or
// exponent) as an INT64 element and returns it with the offset just after
// it. ok is false when the general path must decide (see above): a literal
// with a fraction or exponent, one beyond int64's range, or a malformed
// one; nothing is consumed then.
func ScanInt64(b []byte, at int) (v int64, end int, ok bool) {
	i := at
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	var mag uint64
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i]-'1' < 9:
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			if mag >= maxExactMant { // more digits than ScanNumber keeps exact
				return 0, at, false
			}
			mag = mag*10 + uint64(b[i]-'0')
		}
	default:
		return 0, at, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, at, false
	}
	// At most 18 digits: mag < 10^18, within int64's range either way.
	if neg {
		return -int64(mag), i, true
	}
	return int64(mag), i, true
}

// float32Pow10 are the powers of ten a float32 holds exactly.
var float32Pow10 = [...]float32{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}
