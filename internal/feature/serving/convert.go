package serving

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// ToValue converts a decoded JSON value (json.Number, string, bool, nil,
// []any) or a plain Go value to a feature.Value of type t. Types are
// strict: a string is not an integer, a fraction is not an integer, and
// an integer out of Int32's range is not an Int32.
func ToValue(x any, t feature.Type) (feature.Value, error) {
	if x == nil {
		return feature.Value{Null: true}, nil
	}
	if !t.List {
		var v feature.Value
		return v, scalar(x, t.Kind, &v)
	}
	arr, ok := x.([]any)
	if !ok {
		return feature.Value{}, fmt.Errorf("want a list of %s, got %s", t.Kind, jsonKind(x))
	}
	if t.Len > 0 && len(arr) != t.Len {
		return feature.Value{}, fmt.Errorf("want %d elements (%s), got %d", t.Len, t, len(arr))
	}
	var v feature.Value
	for i, e := range arr {
		if e == nil {
			return feature.Value{}, fmt.Errorf("element %d is null", i)
		}
		var ev feature.Value
		if err := scalar(e, t.Kind, &ev); err != nil {
			return feature.Value{}, fmt.Errorf("element %d: %w", i, err)
		}
		switch t.Kind {
		case feature.KindInt32, feature.KindInt64:
			v.I64s = append(v.I64s, ev.I64)
		case feature.KindFloat32:
			v.F32s = append(v.F32s, float32(ev.F64))
		case feature.KindFloat64:
			v.F64s = append(v.F64s, ev.F64)
		case feature.KindString:
			v.Ss = append(v.Ss, ev.S)
		case feature.KindBytes:
			v.Ss = append(v.Ss, string(ev.B))
		case feature.KindBool:
			v.Bools = append(v.Bools, ev.Bool)
		default:
			return feature.Value{}, fmt.Errorf("lists of %s are not supported", t.Kind)
		}
	}
	// An empty list is a present, empty value, not a null.
	switch t.Kind {
	case feature.KindInt32, feature.KindInt64:
		if v.I64s == nil {
			v.I64s = []int64{}
		}
	case feature.KindFloat32:
		if v.F32s == nil {
			v.F32s = []float32{}
		}
	case feature.KindFloat64:
		if v.F64s == nil {
			v.F64s = []float64{}
		}
	case feature.KindString, feature.KindBytes:
		if v.Ss == nil {
			v.Ss = []string{}
		}
	case feature.KindBool:
		if v.Bools == nil {
			v.Bools = []bool{}
		}
	default: // rejected in the loop above
	}
	return v, nil
}

func jsonKind(x any) string {
	switch x.(type) {
	case json.Number, int, int64, float64, float32:
		return "a number"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	case time.Time:
		return "a time"
	}
	return fmt.Sprintf("%T", x)
}

func scalar(x any, k feature.Kind, v *feature.Value) error {
	switch k {
	case feature.KindInt32, feature.KindInt64:
		n, err := toInt(x)
		if err != nil {
			return err
		}
		if k == feature.KindInt32 && (n < math.MinInt32 || n > math.MaxInt32) {
			return fmt.Errorf("%d is out of Int32's range", n)
		}
		v.I64 = n
	case feature.KindFloat32, feature.KindFloat64:
		f, err := toFloat(x)
		if err != nil {
			return err
		}
		v.F64 = f
		if k == feature.KindFloat32 {
			v.F64 = float64(float32(f))
		}
	case feature.KindString:
		s, ok := x.(string)
		if !ok {
			return fmt.Errorf("want a string, got %s", jsonKind(x))
		}
		v.S = s
	case feature.KindBytes:
		s, ok := x.(string)
		if !ok {
			return fmt.Errorf("want base64 bytes in a string, got %s", jsonKind(x))
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("want base64 bytes: %w", err)
		}
		v.B = b
	case feature.KindBool:
		b, ok := x.(bool)
		if !ok {
			return fmt.Errorf("want true or false, got %s", jsonKind(x))
		}
		v.Bool = b
	case feature.KindUnixTimestamp:
		t, err := toTime(x)
		if err != nil {
			return err
		}
		v.I64 = t.UnixNano()
	default:
		return fmt.Errorf("values of type %s are not supported", k)
	}
	return nil
}

func toInt(x any) (int64, error) {
	switch n := x.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %s", n)
		}
		return i, nil
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, fmt.Errorf("want an integer, got %v", n)
		}
		return int64(n), nil
	}
	return 0, fmt.Errorf("want an integer, got %s", jsonKind(x))
}

func toFloat(x any) (float64, error) {
	switch n := x.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return 0, fmt.Errorf("want a number, got %s", n)
		}
		return f, nil
	case float64:
		return n, nil
	case float32:
		return float64(n), nil
	case int64:
		return float64(n), nil
	case int:
		return float64(n), nil
	}
	return 0, fmt.Errorf("want a number, got %s", jsonKind(x))
}

// timeLayouts are the string forms a timestamp may take: RFC 3339 and the
// forms pandas and Python's isoformat write (no zone means UTC).
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02",
}

// toTime parses a timestamp: a string in timeLayouts, or a number of
// seconds, milliseconds, microseconds or nanoseconds since the epoch
// (told apart by magnitude, as pandas' to_json units are).
func toTime(x any) (time.Time, error) {
	switch t := x.(type) {
	case time.Time:
		return t.UTC(), nil
	case string:
		return ParseTime(t)
	case json.Number, int64, int, float64:
		f, err := toFloat(t)
		if err != nil {
			return time.Time{}, err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= 9.2e18 {
			return time.Time{}, fmt.Errorf("timestamp %v is out of range", f)
		}
		a := math.Abs(f)
		switch {
		case a < 1e11:
			return time.Unix(0, int64(f*1e9)).UTC(), nil
		case a < 1e14:
			return time.Unix(0, int64(f*1e6)).UTC(), nil
		case a < 1e17:
			return time.Unix(0, int64(f*1e3)).UTC(), nil
		default:
			return time.Unix(0, int64(f)).UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("want a timestamp (RFC 3339 string or epoch number), got %s", jsonKind(x))
}

var errBadTime = errors.New("want an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")

// ParseTime parses a timestamp string in one of timeLayouts (RFC 3339 and
// the forms pandas and Python's isoformat write; no zone means UTC), into
// UTC: the form the feature server's requests give their timestamps in.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q: %w", s, errBadTime)
}
