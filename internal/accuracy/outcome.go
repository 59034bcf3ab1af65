package accuracy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
)

// MaxBatch bounds the outcomes of one POST, NATS message or import batch.
const MaxBatch = 10_000

// OutcomeError is a body of outcomes that cannot be read: Field names the
// part at fault (e.g. "outcomes[3].values.actual_minutes").
type OutcomeError struct {
	Field string
	Msg   string
}

func (e *OutcomeError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// wireOutcome is one outcome as JSON writes it.
type wireOutcome struct {
	Key    json.RawMessage            `json:"key"`
	Values map[string]json.RawMessage `json:"values"`
	Time   string                     `json:"time"`
}

// ParseOutcomes reads the outcomes of service from a JSON body: one object
// or an array of them, each
//
//	{"key": "o-1", "values": {"actual_minutes": 42.5}, "time": "2026-12-01T10:00:00Z"}
//
// key is a string or an integer (the business key); values maps observed
// names to finite numbers (true and false read as 1 and 0); time (RFC
// 3339) is when the outcome was observed, the time of arrival when absent.
// It never returns more than MaxBatch outcomes.
func ParseOutcomes(service string, body []byte) ([]Outcome, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, &OutcomeError{Msg: "empty body: want an outcome object or an array of them"}
	}
	var ws []wireOutcome
	prefix := "outcomes"
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if body[0] == '[' {
		if err := dec.Decode(&ws); err != nil {
			return nil, &OutcomeError{Field: prefix, Msg: jsonMsg(err)}
		}
	} else {
		var w wireOutcome
		if err := dec.Decode(&w); err != nil {
			return nil, &OutcomeError{Field: "outcome", Msg: jsonMsg(err)}
		}
		ws, prefix = []wireOutcome{w}, ""
	}
	if dec.More() {
		return nil, &OutcomeError{Msg: "trailing data after the JSON value"}
	}
	if len(ws) > MaxBatch {
		return nil, &OutcomeError{Field: prefix, Msg: fmt.Sprintf("%d outcomes; at most %d per request", len(ws), MaxBatch)}
	}
	out := make([]Outcome, 0, len(ws))
	for i, w := range ws {
		p := "outcome"
		if prefix != "" {
			p = fmt.Sprintf("%s[%d]", prefix, i)
		}
		o, err := w.outcome(service, p)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func (w *wireOutcome) outcome(service, p string) (Outcome, error) {
	o := Outcome{Service: service, Values: make(map[string]float64, len(w.Values))}
	key, err := keyOf(w.Key)
	if err != nil {
		return o, &OutcomeError{Field: p + ".key", Msg: err.Error()}
	}
	o.Key = key
	if len(w.Values) == 0 {
		return o, &OutcomeError{Field: p + ".values", Msg: "is required: at least one observed value"}
	}
	for name, raw := range w.Values {
		v, err := numberOf(raw)
		if err != nil {
			return o, &OutcomeError{Field: p + ".values." + name, Msg: err.Error()}
		}
		o.Values[name] = v
	}
	if w.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Time)
		if err != nil {
			return o, &OutcomeError{Field: p + ".time", Msg: fmt.Sprintf("%q is not an RFC 3339 time", w.Time)}
		}
		o.Time = t
	}
	return o, nil
}

// keyOf reads a business key: a non-empty string, or an integer.
func keyOf(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", fmt.Errorf("is required")
	}
	var k string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &k); err != nil {
			return "", fmt.Errorf("not a string")
		}
	} else {
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return "", fmt.Errorf("want a string or an integer")
		}
		if _, err := n.Int64(); err != nil {
			return "", fmt.Errorf("want a string or an integer, got %s", n)
		}
		k = n.String()
	}
	if k == "" {
		return "", fmt.Errorf("must not be empty")
	}
	if len(k) > maxKeyLen {
		return "", fmt.Errorf("longer than %d bytes", maxKeyLen)
	}
	return k, nil
}

// numberOf reads an observed value: a finite number, or a boolean.
func numberOf(raw json.RawMessage) (float64, error) {
	switch s := string(bytes.TrimSpace(raw)); s {
	case "true":
		return 1, nil
	case "false":
		return 0, nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("want a number or a boolean")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("must be finite")
	}
	return v, nil
}

// jsonMsg shortens a decoder's error.
func jsonMsg(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}
