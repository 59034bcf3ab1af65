package aggregate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// MaxEventBytes bounds one event's JSON.
const MaxEventBytes = 1 << 20

// Decoder decodes JSON events of one stream view: a JSON object with the
// event time (an RFC 3339 string or a number of seconds since the epoch),
// the entities' join keys and the aggregated columns (numbers; null or
// absent means the event does not carry the column).
type Decoder struct {
	TimeField string
	KeyFields []string       // event fields of the join keys, in key order
	KeyKinds  []feature.Kind // their kinds
	Columns   []string       // event fields of Spec.Columns
	vals      []feature.Value
}

// NewDecoder returns a decoder of spec's columns; fields maps a join key
// or column name to the event field that holds it (a source's
// field_mapping, reversed); names not in it are read as they are.
func NewDecoder(s *Spec, timeField string, keys []string, kinds []feature.Kind, fields map[string]string) *Decoder {
	name := func(n string) string {
		if f, ok := fields[n]; ok {
			return f
		}
		return n
	}
	d := &Decoder{TimeField: timeField, KeyKinds: kinds}
	for _, k := range keys {
		d.KeyFields = append(d.KeyFields, name(k))
	}
	for _, c := range s.Columns {
		d.Columns = append(d.Columns, name(c))
	}
	return d
}

// ErrEvent wraps every decoding error: the event is malformed and will
// never decode.
var ErrEvent = errors.New("malformed event")

// Decode parses one event into ev (its Time and Values; Seq and Arrival
// are the caller's) and appends its entity key (feature.AppendEntityKey)
// to key.
func (d *Decoder) Decode(data []byte, ev *Event, key []byte) ([]byte, error) {
	if len(data) > MaxEventBytes {
		return key, fmt.Errorf("%w: %d bytes (at most %d)", ErrEvent, len(data), MaxEventBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return key, fmt.Errorf("%w: not a JSON object: %w", ErrEvent, err)
	}
	raw, ok := obj[d.TimeField]
	if !ok {
		return key, fmt.Errorf("%w: no event time field '%s'", ErrEvent, d.TimeField)
	}
	t, err := parseTime(raw)
	if err != nil {
		return key, fmt.Errorf("%w: field '%s': %w", ErrEvent, d.TimeField, err)
	}
	ev.Time = t
	d.vals = d.vals[:0]
	for i, f := range d.KeyFields {
		raw, ok := obj[f]
		if !ok || string(raw) == "null" {
			return key, fmt.Errorf("%w: no join key field '%s'", ErrEvent, f)
		}
		v, err := parseKey(raw, d.KeyKinds[i])
		if err != nil {
			return key, fmt.Errorf("%w: field '%s': %w", ErrEvent, f, err)
		}
		d.vals = append(d.vals, v)
	}
	key, err = feature.AppendEntityKey(key, d.KeyKinds, d.vals)
	if err != nil {
		return key, fmt.Errorf("%w: %w", ErrEvent, err)
	}
	ev.Values = ev.Values[:0]
	for _, c := range d.Columns {
		raw, ok := obj[c]
		if !ok || string(raw) == "null" {
			ev.Values = append(ev.Values, math.NaN())
			continue
		}
		x, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return key, fmt.Errorf("%w: field '%s': want a finite number, got %.40s", ErrEvent, c, raw)
		}
		ev.Values = append(ev.Values, x)
	}
	return key, nil
}

// parseTime reads an RFC 3339 string or a number of seconds.
func parseTime(raw json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, fmt.Errorf("%q is not an RFC 3339 time", s)
		}
		if t.Year() < 1678 || t.Year() > 2261 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return t.UnixNano(), nil
	}
	x, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
	if err != nil || math.IsNaN(x) || math.Abs(x) > 9e9 {
		return 0, fmt.Errorf("want an RFC 3339 string or seconds since the epoch, got %.40s", raw)
	}
	sec, frac := math.Modf(x)
	return int64(sec)*1e9 + int64(math.Round(frac*1e9)), nil
}

func parseKey(raw json.RawMessage, k feature.Kind) (feature.Value, error) {
	switch k {
	case feature.KindInt32, feature.KindInt64:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return feature.Value{}, fmt.Errorf("want an integer")
			}
			n = json.Number(s)
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || (k == feature.KindInt32 && (i < math.MinInt32 || i > math.MaxInt32)) {
			return feature.Value{}, fmt.Errorf("want an %s", k)
		}
		return feature.Value{I64: i}, nil
	case feature.KindString:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return feature.Value{}, fmt.Errorf("want a string")
		}
		return feature.Value{S: s}, nil
	case feature.KindBytes:
		var b []byte
		if err := json.Unmarshal(raw, &b); err != nil {
			return feature.Value{}, fmt.Errorf("want base64 bytes")
		}
		return feature.Value{B: b}, nil
	default:
		return feature.Value{}, fmt.Errorf("%s is not a join key type", k)
	}
}
