package kservewire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/jsonnum"
)

// The KServe v2 JSON tensor encoding. A tensor's "data" is a JSON array of
// its elements, flat or nested row-major: numbers for the numeric types
// (FP16 and BF16 included), true and false for BOOL, strings for BYTES.
// This is the one implementation of it: the model server's HTTP edge
// writes outputs with AppendJSONData and reads inputs with ScanNumber and
// AppendNumber, and the clients (sluice perf, replay) use the same
// functions, so every end rounds, range-checks and formats alike.

// NonFiniteError reports a NaN or infinite element, which JSON cannot
// carry.
type NonFiniteError struct {
	Index int // the element's position in the tensor
	Value float64
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("element %d is %v, which JSON cannot represent", e.Index, e.Value)
}

// NotUTF8Error reports a BYTES element that is not valid UTF-8: a JSON
// string cannot carry it unchanged, and replacing its bytes would hand the
// client other data than the model produced.
type NotUTF8Error struct {
	Index int // the element's position in the tensor
}

func (e *NotUTF8Error) Error() string {
	return fmt.Sprintf("element %d is not valid UTF-8, which a JSON string cannot carry", e.Index)
}

// NonFiniteParamError reports a NaN or infinite parameter value.
type NonFiniteParamError struct {
	Key   string
	Value any
}

func (e *NonFiniteParamError) Error() string {
	return fmt.Sprintf("parameter %q is %v, which JSON cannot represent", e.Key, e.Value)
}

// ErrNoJSONForm is returned for a datatype the JSON encoding does not
// know (infer.Invalid).
var ErrNoJSONForm = errors.New("datatype has no JSON form")

// AppendJSONData appends t's elements to dst as a flat JSON array. Floats
// are written as AppendJSONFloat writes them, FP16 and BF16 widened to
// float32 first; a NaN or infinity fails with a *NonFiniteError, a BYTES
// element that is not valid UTF-8 with a *NotUTF8Error. t's size
// must have been checked (infer.Tensor.CheckSize): BYTES data is walked
// without bounds checks of its own.
func AppendJSONData(dst []byte, t *infer.Tensor) ([]byte, error) {
	dst = append(dst, '[')
	var err error
	switch t.DataType {
	case infer.Bool:
		dst = appendJSONBools(dst, t.Data)
	case infer.Uint8, infer.Int8, infer.Uint16, infer.Int16, infer.Uint32, infer.Int32, infer.Uint64, infer.Int64:
		dst = appendJSONInts(dst, t.Data, t.DataType)
	case infer.FP16, infer.BF16, infer.FP32, infer.FP64:
		dst, err = appendJSONFloats(dst, t.Data, t.DataType)
	case infer.Bytes:
		dst, err = appendJSONStrings(dst, t.Data)
	default:
		return nil, fmt.Errorf("%w: %s", ErrNoJSONForm, t.DataType)
	}
	if err != nil {
		return nil, err
	}
	return append(dst, ']'), nil
}

// appendJSONBools appends BOOL elements, comma-separated.
func appendJSONBools(dst, b []byte) []byte {
	sep := func(i int) {
		if i > 0 {
			dst = append(dst, ',')
		}
	}
	for i, v := range b {
		sep(i)
		if v != 0 {
			dst = append(dst, "true"...)
		} else {
			dst = append(dst, "false"...)
		}
	}
	return dst
}

// appendJSONInts appends the integer elements of datatype dt,
// comma-separated.
func appendJSONInts(dst, b []byte, dt infer.DataType) []byte {
	le := binary.LittleEndian
	sep := func(i int) {
		if i > 0 {
			dst = append(dst, ',')
		}
	}
	switch dt {
	case infer.Uint8:
		for i, v := range b {
			sep(i)
			dst = strconv.AppendUint(dst, uint64(v), 10)
		}
	case infer.Int8:
		for i, v := range b {
			sep(i)
			dst = strconv.AppendInt(dst, int64(int8(v)), 10)
		}
	case infer.Uint16:
		for i := 0; i < len(b); i += 2 {
			sep(i)
			dst = strconv.AppendUint(dst, uint64(le.Uint16(b[i:])), 10)
		}
	case infer.Int16:
		for i := 0; i < len(b); i += 2 {
			sep(i)
			dst = strconv.AppendInt(dst, int64(int16(le.Uint16(b[i:]))), 10)
		}
	case infer.Uint32:
		for i := 0; i < len(b); i += 4 {
			sep(i)
			dst = strconv.AppendUint(dst, uint64(le.Uint32(b[i:])), 10)
		}
	case infer.Int32:
		for i := 0; i < len(b); i += 4 {
			sep(i)
			dst = strconv.AppendInt(dst, int64(int32(le.Uint32(b[i:]))), 10)
		}
	case infer.Uint64:
		for i := 0; i < len(b); i += 8 {
			sep(i)
			dst = strconv.AppendUint(dst, le.Uint64(b[i:]), 10)
		}
	case infer.Int64:
		for i := 0; i < len(b); i += 8 {
			sep(i)
			dst = strconv.AppendInt(dst, int64(le.Uint64(b[i:])), 10)
		}
	default: // AppendJSONData passes only integer datatypes
	}
	return dst
}

// appendJSONFloats appends the floating-point elements of datatype dt,
// comma-separated; FP16 and BF16 are widened to float32 first. A NaN or
// infinity fails with a *NonFiniteError.
func appendJSONFloats(dst, b []byte, dt infer.DataType) ([]byte, error) {
	le := binary.LittleEndian
	sep := func(i int) {
		if i > 0 {
			dst = append(dst, ',')
		}
	}
	switch dt {
	case infer.FP16, infer.BF16:
		widen := FP16ToFloat32
		if dt == infer.BF16 {
			widen = BF16ToFloat32
		}
		for i := 0; i < len(b); i += 2 {
			f := widen(le.Uint16(b[i:]))
			if !finite(float64(f)) {
				return nil, &NonFiniteError{Index: i / 2, Value: float64(f)}
			}
			sep(i)
			dst = AppendJSONFloat(dst, float64(f), 32)
		}
	case infer.FP32:
		for i := 0; i < len(b); i += 4 {
			f := math.Float32frombits(le.Uint32(b[i:]))
			if !finite(float64(f)) {
				return nil, &NonFiniteError{Index: i / 4, Value: float64(f)}
			}
			sep(i)
			dst = AppendJSONFloat(dst, float64(f), 32)
		}
	case infer.FP64:
		for i := 0; i < len(b); i += 8 {
			f := math.Float64frombits(le.Uint64(b[i:]))
			if !finite(f) {
				return nil, &NonFiniteError{Index: i / 8, Value: f}
			}
			sep(i)
			dst = AppendJSONFloat(dst, f, 64)
		}
	default: // AppendJSONData passes only floating-point datatypes
	}
	return dst, nil
}

// appendJSONStrings appends BYTES elements as JSON strings,
// comma-separated; one that is not valid UTF-8 fails with a
// *NotUTF8Error. The size check has walked the length prefixes already.
func appendJSONStrings(dst, b []byte) ([]byte, error) {
	le := binary.LittleEndian
	sep := func(i int) {
		if i > 0 {
			dst = append(dst, ',')
		}
	}
	for i := 0; len(b) > 0; i++ {
		// The size check has walked these prefixes already.
		n := le.Uint32(b)
		if !utf8.Valid(b[4 : 4+n]) {
			return nil, &NotUTF8Error{Index: i}
		}
		sep(i)
		dst = jsonenc.AppendString(dst, b[4:4+n])
		b = b[4+n:]
	}
	return dst, nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// AppendJSONFloat appends the shortest text that reads back as the same
// value at the given bit size (32 or 64): plain notation for ordinary
// magnitudes, exponent notation for very small or large ones. f must be
// finite.
func AppendJSONFloat(dst []byte, f float64, bits int) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(dst, f, format, -1, bits)
}

// AppendJSONParams appends a parameters object with sorted keys. Values
// are strings, bools, integers and floats; other types are written as
// their fmt.Sprint text, as a string. A NaN or infinite float fails with a
// *NonFiniteParamError.
func AppendJSONParams(dst []byte, p infer.Parameters) ([]byte, error) {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonenc.AppendString(dst, k)
		dst = append(dst, ':')
		switch v := p[k].(type) {
		case string:
			dst = jsonenc.AppendString(dst, v)
		case bool:
			dst = strconv.AppendBool(dst, v)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		case int:
			dst = strconv.AppendInt(dst, int64(v), 10)
		case int32:
			dst = strconv.AppendInt(dst, int64(v), 10)
		case uint64:
			dst = strconv.AppendUint(dst, v, 10)
		case uint32:
			dst = strconv.AppendUint(dst, uint64(v), 10)
		case float64:
			if !finite(v) {
				return nil, &NonFiniteParamError{Key: k, Value: v}
			}
			dst = AppendJSONFloat(dst, v, 64)
		case float32:
			if !finite(float64(v)) {
				return nil, &NonFiniteParamError{Key: k, Value: v}
			}
			dst = AppendJSONFloat(dst, float64(v), 32)
		default:
			dst = jsonenc.AppendString(dst, fmt.Sprint(v))
		}
	}
	return append(dst, '}'), nil
}

// Number is a JSON number literal as ScanNumber read it: its text and,
// gathered in the same pass, its significant digits as an integer times a
// power of ten, so that converting it needs no second pass.
type Number struct {
	Lit     []byte
	Integer bool // no fraction and no exponent
	Neg     bool
	// Mant and Exp10 give the value as Mant × 10^Exp10 when Exact; a
	// literal with more significant digits than Mant holds is not Exact,
	// and only Lit is reliable then.
	Mant  uint64
	Exp10 int
	Exact bool
}

// SyntaxError is a malformed number literal: at byte Offset of the
// scanned text, Want was expected ("a digit", "a digit after the decimal
// point", "a digit in the exponent").
type SyntaxError struct {
	Offset int
	Want   string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("expected %s at byte offset %d", e.Want, e.Offset)
}

// maxExactMant bounds Mant before one more digit: below it, Mant*10+9
// still has at most jsonnum.MaxMantissaDigits digits.
const maxExactMant = 1_000_000_000_000_000_000 / 10 // 10^(19-1)

// ScanNumber reads the JSON number literal that starts at b[at] (JSON's
// grammar: an optional '-', an integer part without leading zeros, an
// optional fraction and exponent) and returns it with the offset just
// after it. A malformed literal is a *SyntaxError.
func ScanNumber(b []byte, at int) (Number, int, error) {
	i := at
	var man uint64
	exp10 := 0
	exact, neg, integer := true, false, true
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			if man < maxExactMant {
				man = man*10 + uint64(b[i]-'0')
			} else {
				exact = false
			}
		}
	default:
		return Number{}, i, &SyntaxError{Offset: i, Want: "a digit"}
	}
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		if i >= len(b) || b[i]-'0' > 9 {
			return Number{}, i, &SyntaxError{Offset: i, Want: "a digit after the decimal point"}
		}
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			exp10--
			switch {
			case man == 0 && b[i] == '0': // a leading zero: not significant
			case man < maxExactMant:
				man = man*10 + uint64(b[i]-'0')
			default:
				exact = false
			}
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		e, end, ok := jsonnum.ScanExponent(b, i+1)
		if !ok {
			return Number{}, end, &SyntaxError{Offset: end, Want: "a digit in the exponent"}
		}
		i = end
		exp10 += e
	}
	return Number{Lit: b[at:i], Integer: integer, Neg: neg, Mant: man, Exp10: exp10, Exact: exact}, i, nil
}

// ParseNumber reads lit, which must be exactly one JSON number literal
// (as encoding/json's Number holds), for AppendNumber.
func ParseNumber(lit []byte) (Number, error) {
	n, end, err := ScanNumber(lit, 0)
	if err != nil {
		return Number{}, err
	}
	if end != len(lit) {
		return Number{}, &SyntaxError{Offset: end, Want: "the end of the number"}
	}
	return n, nil
}

// Errors of AppendNumber.
var (
	// ErrOutOfRange is a number beyond the datatype's range (or beyond any
	// float's).
	ErrOutOfRange = errors.New("out of range")
	// ErrNotInteger is a number with a fractional part for an integer
	// datatype.
	ErrNotInteger = errors.New("not an integer")
	// ErrNotNumeric is a number for BOOL, BYTES or an invalid datatype.
	ErrNotNumeric = errors.New("datatype takes no numbers")
)

// AppendNumber appends n to dst as one element of dt in the wire layout.
// FP32 and FP64 are rounded from the literal to the nearest value, as
// strconv.ParseFloat rounds; FP16 and BF16 to the nearest value, ties to
// even, from the literal's float64 value; the integer types are exact and
// also take a literal with a fraction or exponent whose value is integral
// (1.0, 2e3), as numpy's float-typed lists send them.
func AppendNumber(dst []byte, dt infer.DataType, n *Number) ([]byte, error) {
	le := binary.LittleEndian
	switch dt {
	case infer.FP32:
		var f float32
		var ok bool
		if n.Exact {
			f, ok = jsonnum.Decimal32(n.Mant, n.Exp10, n.Neg)
		}
		if !ok {
			var err error
			if f, err = jsonnum.ParseFloat32(n.Lit); err != nil {
				return nil, ErrOutOfRange
			}
		}
		return le.AppendUint32(dst, math.Float32bits(f)), nil
	case infer.FP64:
		f, err := strconv.ParseFloat(string(n.Lit), 64)
		if err != nil {
			return nil, ErrOutOfRange
		}
		return le.AppendUint64(dst, math.Float64bits(f)), nil
	case infer.FP16, infer.BF16:
		f, err := strconv.ParseFloat(string(n.Lit), 64)
		if err != nil {
			return nil, ErrOutOfRange
		}
		narrow := float64ToFP16
		if dt == infer.BF16 {
			narrow = float64ToBF16
		}
		h, ok := narrow(f)
		if !ok {
			return nil, ErrOutOfRange
		}
		return le.AppendUint16(dst, h), nil
	case infer.Int8, infer.Int16, infer.Int32, infer.Int64,
		infer.Uint8, infer.Uint16, infer.Uint32, infer.Uint64:
		return appendInteger(dst, dt, n)
	default:
		return nil, ErrNotNumeric
	}
}

// intBits is the width of each integer datatype.
func intBits(dt infer.DataType) (bits uint, signed bool) {
	switch dt {
	case infer.Int8:
		return 8, true
	case infer.Int16:
		return 16, true
	case infer.Int32:
		return 32, true
	case infer.Int64:
		return 64, true
	case infer.Uint8:
		return 8, false
	case infer.Uint16:
		return 16, false
	case infer.Uint32:
		return 32, false
	default:
		return 64, false
	}
}

// appendInteger appends an integer element. Integer literals are read
// exactly; a literal with a fraction or exponent only when its value is
// integral.
func appendInteger(dst []byte, dt infer.DataType, n *Number) ([]byte, error) {
	bits, signed := intBits(dt)
	var u uint64 // two's complement bit pattern
	if n.Integer {
		neg, mag, ok := parseMagnitude(n.Lit)
		switch {
		case !ok:
			return nil, ErrOutOfRange
		case signed && neg:
			if mag > 1<<(bits-1) {
				return nil, ErrOutOfRange
			}
			u = -mag
		case signed:
			if mag > 1<<(bits-1)-1 {
				return nil, ErrOutOfRange
			}
			u = mag
		default:
			if (neg && mag != 0) || (bits < 64 && mag >= 1<<bits) {
				return nil, ErrOutOfRange
			}
			u = mag
		}
	} else {
		f, err := strconv.ParseFloat(string(n.Lit), 64)
		if err != nil {
			return nil, ErrOutOfRange
		}
		if f != math.Trunc(f) {
			return nil, ErrNotInteger
		}
		if signed {
			lim := math.Ldexp(1, int(bits-1))
			if f < -lim || f >= lim {
				return nil, ErrOutOfRange
			}
			u = uint64(int64(f))
		} else {
			if f < 0 || f >= math.Ldexp(1, int(bits)) {
				return nil, ErrOutOfRange
			}
			u = uint64(f)
		}
	}
	le := binary.LittleEndian
	switch bits {
	case 8:
		return append(dst, byte(u)), nil
	case 16:
		return le.AppendUint16(dst, uint16(u)), nil
	case 32:
		return le.AppendUint32(dst, uint32(u)), nil
	default:
		return le.AppendUint64(dst, u), nil
	}
}

// parseMagnitude splits a JSON integer literal into sign and magnitude; ok
// is false when the magnitude overflows uint64.
func parseMagnitude(lit []byte) (neg bool, mag uint64, ok bool) {
	if lit[0] == '-' {
		neg = true
		lit = lit[1:]
	}
	for _, c := range lit {
		d := uint64(c - '0')
		if mag > (math.MaxUint64-d)/10 {
			return neg, 0, false
		}
		mag = mag*10 + d
	}
	return neg, mag, true
}
