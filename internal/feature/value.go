package feature

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is a feature value's scalar kind.
type Kind uint8

// The value kinds. Names follow Feast's dtypes (feast.types).
const (
	KindInvalid Kind = iota
	KindInt32
	KindInt64
	KindFloat32
	KindFloat64
	KindString
	KindBytes
	KindBool
	KindUnixTimestamp // nanoseconds since the epoch, UTC
)

var kindNames = [...]string{
	KindInvalid: "Invalid", KindInt32: "Int32", KindInt64: "Int64", KindFloat32: "Float32",
	KindFloat64: "Float64", KindString: "String", KindBytes: "Bytes", KindBool: "Bool",
	KindUnixTimestamp: "UnixTimestamp",
}

// String returns the Feast dtype name, e.g. "Float32".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Invalid"
}

// Type is a feature's type: a scalar kind, or a list of it. A list with
// Len > 0 has exactly Len elements (an embedding), Len == 0 any length.
type Type struct {
	Kind Kind
	List bool
	Len  int
}

// String formats t as it is written in definitions: "Float32",
// "Array(Float32)" or "Array(Float32, 128)".
func (t Type) String() string {
	switch {
	case !t.List:
		return t.Kind.String()
	case t.Len > 0:
		return fmt.Sprintf("Array(%s, %d)", t.Kind, t.Len)
	default:
		return fmt.Sprintf("Array(%s)", t.Kind)
	}
}

// ParseType parses a dtype as written in definitions: a Feast scalar name
// ("Int64", "Float32", "String", "Bytes", "Bool", "UnixTimestamp", …) or a
// list "Array(Float32)" / fixed-length "Array(Float32, 128)". Names are
// case-insensitive.
func ParseType(s string) (Type, error) {
	in := strings.TrimSpace(s)
	lower := strings.ToLower(in)
	if strings.HasPrefix(lower, "array(") && strings.HasSuffix(lower, ")") {
		inner := in[len("array(") : len(in)-1]
		name, n, hasLen := strings.Cut(inner, ",")
		k, ok := parseKind(name)
		if !ok || k == KindUnixTimestamp {
			return Type{}, fmt.Errorf("dtype %q: unknown list element type %q", s, strings.TrimSpace(name))
		}
		t := Type{Kind: k, List: true}
		if hasLen {
			l, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil || l <= 0 || l > MaxListLen {
				return Type{}, fmt.Errorf("dtype %q: list length must be an integer in [1, %d]", s, MaxListLen)
			}
			t.Len = l
		}
		return t, nil
	}
	k, ok := parseKind(in)
	if !ok {
		return Type{}, fmt.Errorf("dtype %q: want one of Int32, Int64, Float32, Float64, String, Bytes, Bool, UnixTimestamp or Array(T[, N])", s)
	}
	return Type{Kind: k}, nil
}

// MaxListLen bounds fixed-length lists (embeddings).
const MaxListLen = 1 << 16

func parseKind(s string) (Kind, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for i, n := range kindNames {
		if i > 0 && strings.ToLower(n) == s {
			return Kind(i), true
		}
	}
	// Common aliases.
	switch s {
	case "float":
		return KindFloat32, true
	case "double":
		return KindFloat64, true
	case "int":
		return KindInt64, true
	case "str":
		return KindString, true
	}
	return KindInvalid, false
}

// Value is one feature value. Exactly the field of its Type is meaningful;
// Null marks a missing value (the row exists but the feature is null).
type Value struct {
	Null bool
	I64  int64   // Int32, Int64, UnixTimestamp (ns)
	F64  float64 // Float32, Float64
	S    string  // String
	B    []byte  // Bytes
	Bool bool
	// Lists.
	I64s  []int64
	F32s  []float32
	F64s  []float64
	Ss    []string
	Bools []bool
}
