package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// SchemaVersion is the record schema this package writes and the only one
// it reads. A change that old readers would misread gets a new version.
const SchemaVersion = 1

// The arm names. A shadowed request records both; a replay writes its
// single arm as ArmPrimary.
const (
	ArmPrimary = "primary"
	ArmShadow  = "shadow"
)

// Record is one recorded exchange: the request the gateway received, what
// it sent to the model and what each arm answered. Its JSON form (one
// object per JSONL line or NATS message) is the versioned contract that
// replay and diff read; see the package documentation for an example.
type Record struct {
	// Schema is the schema version. Encoding writes SchemaVersion when it is
	// 0; decoding rejects every value but SchemaVersion with a *VersionError.
	Schema int `json:"schema"`
	// RequestID is the gateway's request id, the key that joins two
	// recordings of the same request. Required.
	RequestID string `json:"request_id"`
	// Time is when the primary request arrived. Required; encoded in UTC.
	Time time.Time `json:"time"`
	// Service is the inference service. Required.
	Service string `json:"service"`
	// ShadowKey is the value of the configured shadow id field, the input of
	// the mirroring hash.
	ShadowKey string `json:"shadow_key,omitempty"`
	// Headers holds the allow-listed request headers. Names are written and
	// read lower-case.
	Headers map[string]string `json:"headers,omitempty"`
	// Request is the flat request body. Decoded numbers are json.Number, so
	// large integer ids survive a replay exactly.
	Request map[string]any `json:"request,omitempty"`
	// Features are the assembled features: numbers (float64 when decoded),
	// arrays for list features, nil for missing ones. Non-finite numbers are
	// written as null.
	Features map[string]any `json:"features,omitempty"`
	// Inputs are the model inputs as sent, in KServe v2 JSON tensor form.
	Inputs []Tensor `json:"inputs,omitempty"`
	// Arms maps an arm name (ArmPrimary, ArmShadow) to what it answered.
	// ArmPrimary is required.
	Arms map[string]Arm `json:"arms"`
	// JoinKey, Route and Group are set by the prediction log (online
	// accuracy): the business key outcomes join on, the route and the
	// rollout traffic group that served the request.
	JoinKey string `json:"join_key,omitempty"`
	Route   string `json:"route,omitempty"`
	Group   string `json:"group,omitempty"`
	// Outcome is the observed truth joined to the prediction; set on the
	// prediction log's joined records only.
	Outcome *Outcome `json:"outcome,omitempty"`
}

// Outcome is an observed outcome as the prediction log records it.
type Outcome struct {
	// Time is when it was observed; Received when Sluice got it.
	Time     time.Time `json:"time"`
	Received time.Time `json:"received"`
	// Values are the observed values by name.
	Values map[string]float64 `json:"values"`
}

// Arm is what one model version answered for a recorded request.
type Arm struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	// Status is the HTTP-equivalent status: 200 for success, else an error
	// explained by Reason.
	Status int    `json:"status"`
	Reason string `json:"reason"`
	// LatencyMS is the model call's latency in milliseconds.
	LatencyMS float64 `json:"latency_ms"`
	// Outputs maps output names to their values, flattened row-major. A
	// non-finite value (NaN, ±Inf) is written as null and read back as NaN.
	Outputs map[string][]float64 `json:"outputs"`
	// Source says what produced the answer ("model", "fallback_rule", …),
	// where the gateway knows.
	Source string `json:"source,omitempty"`
}

// Tensor is one model input in KServe v2 JSON form.
type Tensor struct {
	Name     string  `json:"name"`
	DataType string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	// Data is the tensor's "data" member as sent: a JSON array, flat or
	// nested row-major.
	Data       json.RawMessage `json:"data"`
	Parameters map[string]any  `json:"parameters,omitempty"`
}

// VersionError reports a record whose schema version this build cannot
// read (Version 0 means the record had none).
type VersionError struct {
	Version int
}

// Error names the version found and the one this build reads.
func (e *VersionError) Error() string {
	if e.Version == 0 {
		return fmt.Sprintf("record has no schema version (this build reads version %d)", SchemaVersion)
	}
	return fmt.Sprintf("unsupported record schema version %d (this build reads version %d)", e.Version, SchemaVersion)
}

// Validate reports the first problem that would make the record unreadable
// or useless to replay and diff. Encoding and decoding both call it.
func (r *Record) Validate() error {
	if r.Schema != 0 && r.Schema != SchemaVersion {
		return &VersionError{Version: r.Schema}
	}
	switch {
	case r.RequestID == "":
		return errors.New("record has no request_id")
	case r.Service == "":
		return errors.New("record has no service")
	case r.Time.IsZero():
		return errors.New("record has no time")
	}
	// JSON times are RFC 3339 with four-digit years; refuse what could not
	// be written back.
	if y := r.Time.UTC().Year(); y < 1 || y > 9999 {
		return fmt.Errorf("record time %s is outside years 1 to 9999", r.Time.UTC().Format(time.RFC3339))
	}
	if _, ok := r.Arms[ArmPrimary]; !ok {
		return errors.New(`record has no "primary" arm`)
	}
	for name, a := range r.Arms {
		if err := a.validate(); err != nil {
			return fmt.Errorf("arm %q: %w", name, err)
		}
	}
	for i := range r.Inputs {
		if err := r.Inputs[i].validate(); err != nil {
			return fmt.Errorf("inputs[%d]: %w", i, err)
		}
	}
	return nil
}

func (a *Arm) validate() error {
	if a.Status < 100 || a.Status > 599 {
		return fmt.Errorf("status %d is not an HTTP status code", a.Status)
	}
	if !finite(a.LatencyMS) || a.LatencyMS < 0 {
		return fmt.Errorf("latency_ms %v is not a non-negative number", a.LatencyMS)
	}
	for name := range a.Outputs {
		if name == "" {
			return errors.New("output with an empty name")
		}
	}
	return nil
}

func (t *Tensor) validate() error {
	if t.Name == "" {
		return errors.New("tensor has no name")
	}
	if t.DataType == "" {
		return fmt.Errorf("tensor %q has no datatype", t.Name)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q has a negative dimension in shape %v", t.Name, t.Shape)
		}
	}
	if d := bytes.TrimLeft(t.Data, " \t\r\n"); len(d) == 0 || d[0] != '[' {
		return fmt.Errorf("tensor %q: data is not a JSON array", t.Name)
	}
	return nil
}

// plainRecord has Record's fields without its methods, so encoding it does
// not recurse into Record.MarshalJSON.
type plainRecord Record

// Encode returns r as one compact JSON object without a trailing newline.
// It validates r first, writes SchemaVersion when r.Schema is 0, writes
// Time in UTC, lower-cases header names and writes non-finite feature and
// output values as null. r is not modified.
func Encode(r *Record) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	p := plainRecord(*r)
	p.Schema = SchemaVersion
	p.Time = r.Time.UTC()
	p.Headers = lowerKeys(r.Headers)
	p.Features = finiteFeatures(r.Features)
	b, err := json.Marshal(&p)
	if err != nil {
		return nil, fmt.Errorf("encode record %s: %w", r.RequestID, err)
	}
	return b, nil
}

// MarshalJSON is Encode, so json.Marshal of a Record writes the schema.
func (r Record) MarshalJSON() ([]byte, error) { return Encode(&r) }

// Decode parses one JSON record, as written by Encode. It rejects schema
// versions other than SchemaVersion with a *VersionError, and records that
// fail Validate. Unknown members are ignored, so later additions that keep
// the version stay readable.
func Decode(data []byte) (*Record, error) {
	r := new(Record)
	if err := r.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return r, nil
}

// wireRecord is plainRecord with the request body kept raw, so it can be
// decoded with json.Number.
type wireRecord struct {
	plainRecord
	Request json.RawMessage    `json:"request,omitempty"`
	Arms    map[string]wireArm `json:"arms"` // decoded without a second pass through Arm.UnmarshalJSON
}

// UnmarshalJSON decodes and validates a record; see Decode.
func (r *Record) UnmarshalJSON(data []byte) error {
	var w wireRecord
	if err := json.Unmarshal(data, &w); err != nil {
		// A record from a newer schema may not fit this one's types:
		// name its version rather than the type mismatch.
		var probe struct {
			Schema int `json:"schema"`
		}
		if json.Unmarshal(data, &probe) == nil && probe.Schema != SchemaVersion {
			return &VersionError{Version: probe.Schema}
		}
		return fmt.Errorf("decode record: %w", err)
	}
	if w.Schema != SchemaVersion {
		return &VersionError{Version: w.Schema}
	}
	out := Record(w.plainRecord)
	out.Request = nil
	out.Arms = nil
	if w.Arms != nil {
		out.Arms = make(map[string]Arm, len(w.Arms))
		for k, a := range w.Arms {
			out.Arms[k] = a.arm()
		}
	}
	if len(w.Request) > 0 && !bytes.Equal(bytes.TrimSpace(w.Request), []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(w.Request))
		dec.UseNumber()
		if err := dec.Decode(&out.Request); err != nil {
			return fmt.Errorf("decode record: request: %w", err)
		}
	}
	out.Headers = lowerKeys(out.Headers)
	if err := out.Validate(); err != nil {
		return fmt.Errorf("decode record: %w", err)
	}
	*r = out
	return nil
}

// plainArm has Arm's fields without its methods.
type plainArm Arm

// wireArm is an Arm whose outputs may hold nulls for non-finite values.
type wireArm struct {
	plainArm
	Outputs map[string]floats `json:"outputs"`
}

// MarshalJSON writes non-finite output values as null; encoding/json
// refuses them.
func (a Arm) MarshalJSON() ([]byte, error) {
	if allFinite(a.Outputs) {
		return json.Marshal(plainArm(a))
	}
	w := wireArm{plainArm: plainArm(a), Outputs: make(map[string]floats, len(a.Outputs))}
	for k, v := range a.Outputs {
		w.Outputs[k] = v
	}
	return json.Marshal(&w)
}

// UnmarshalJSON reads null output values as NaN.
func (a *Arm) UnmarshalJSON(data []byte) error {
	var w wireArm
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*a = w.arm()
	return nil
}

func (w *wireArm) arm() Arm {
	a := Arm(w.plainArm)
	a.Outputs = nil
	if w.Outputs != nil {
		a.Outputs = make(map[string][]float64, len(w.Outputs))
		for k, v := range w.Outputs {
			a.Outputs[k] = v
		}
	}
	return a
}

// floats is a []float64 whose JSON form writes non-finite values as null
// and reads null as NaN.
type floats []float64

func (f floats) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+len(f)*8)
	b = append(b, '[')
	for i, v := range f {
		if i > 0 {
			b = append(b, ',')
		}
		if !finite(v) {
			b = append(b, "null"...)
			continue
		}
		enc, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		b = append(b, enc...)
	}
	return append(b, ']'), nil
}

func (f *floats) UnmarshalJSON(data []byte) error {
	if !bytes.Contains(data, []byte("null")) {
		return json.Unmarshal(data, (*[]float64)(f))
	}
	var ps []*float64
	if err := json.Unmarshal(data, &ps); err != nil {
		return err
	}
	if ps == nil {
		*f = nil
		return nil
	}
	out := make([]float64, len(ps))
	for i, p := range ps {
		if p == nil {
			out[i] = math.NaN()
		} else {
			out[i] = *p
		}
	}
	*f = out
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func allFinite(outputs map[string][]float64) bool {
	for _, v := range outputs {
		for _, f := range v {
			if !finite(f) {
				return false
			}
		}
	}
	return true
}

// lowerKeys returns h with lower-case names, or h itself when it has none
// to change.
func lowerKeys(h map[string]string) map[string]string {
	clean := true
	for k := range h {
		if strings.ToLower(k) != k {
			clean = false
			break
		}
	}
	if clean {
		return h
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[strings.ToLower(k)] = v
	}
	return out
}

// finiteFeatures returns features with non-finite numbers replaced by nil,
// or features itself when there are none.
func finiteFeatures(features map[string]any) map[string]any {
	clean := true
	for _, v := range features {
		if !finiteValue(v) {
			clean = false
			break
		}
	}
	if clean {
		return features
	}
	out := make(map[string]any, len(features))
	for k, v := range features {
		out[k] = finiteCopy(v)
	}
	return out
}

func finiteValue(v any) bool {
	switch x := v.(type) {
	case float64:
		return finite(x)
	case float32:
		return finite(float64(x))
	case []float64:
		for _, f := range x {
			if !finite(f) {
				return false
			}
		}
	case []float32:
		for _, f := range x {
			if !finite(float64(f)) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !finiteValue(e) {
				return false
			}
		}
	}
	return true
}

func finiteCopy(v any) any {
	if finiteValue(v) {
		return v
	}
	switch x := v.(type) {
	case float64, float32:
		return nil
	case []float64:
		out := make([]any, len(x))
		for i, f := range x {
			out[i] = finiteCopy(f)
		}
		return out
	case []float32:
		out := make([]any, len(x))
		for i, f := range x {
			out[i] = finiteCopy(f)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = finiteCopy(e)
		}
		return out
	}
	return v
}
