package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
)

// The request decoders are differential-tested against the gateway's
// earlier ones, kept here as the reference: encoding/json into a map of
// raw values (the HTTP edge), and the protobuf fields marshalled to JSON
// and decoded again (the gRPC edge). Both must accept the same requests,
// decode the same values, and refuse the rest with the same kind and
// reason (and message, where the reference's own answer does not depend
// on map order).

// refValue is the parsed value of the reference decoder.
type refValue struct {
	set  bool
	i    int64
	f    float64
	b    bool
	s    string
	text string
}

func refParseBody(s *service, body []byte, vals []refValue) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidJSON, "the request body is empty; send a JSON object with %s", s.fieldList())
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidJSON, "the request body is not a JSON object: %v", err)
	}
	if m == nil {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidJSON, "the request body is null; send a JSON object with %s", s.fieldList())
	}
	for k, raw := range m {
		i, ok := s.fieldIdx[k]
		if !ok {
			return apierr.Errorf(apierr.KindInvalid, ReasonUnknownField, "unknown field %q: service %q takes %s", k, s.name, s.fieldList())
		}
		if err := refParseValue(&s.fields[i], raw, &vals[i]); err != nil {
			return err
		}
	}
	for i := range s.fields {
		if s.fields[i].required && !vals[i].set {
			what := "request field"
			if s.fields[i].entity {
				what = "entity key"
			}
			return apierr.Errorf(apierr.KindInvalid, ReasonMissingField, "missing %s %q (%s)", what, s.fields[i].name, s.fields[i].kind)
		}
	}
	return nil
}

// refParseValue is the gateway's parseValue before the change.
func refParseValue(f *reqField, raw json.RawMessage, v *refValue) error {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return nil
	}
	bad := func(want string) error {
		shown := string(raw)
		if len(shown) > 64 {
			shown = shown[:64] + "…"
		}
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidField, "field %q: %s is not %s", f.name, shown, want)
	}
	switch f.kind {
	case kindInt64:
		text := raw
		if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
			text = raw[1 : len(raw)-1] // ids often travel as strings
		}
		n, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return bad("an int64")
		}
		// Route and hash by the canonical form, so "007" and 7 are one id,
		// as they are for the feature store.
		v.i, v.text = n, strconv.FormatInt(n, 10)
	case kindFloat32, kindFloat64:
		bits := 64
		if f.kind == kindFloat32 {
			bits = 32
		}
		x, err := strconv.ParseFloat(string(raw), bits)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return bad("a finite number")
		}
		v.f, v.text = x, string(raw)
	case kindBool:
		switch string(raw) {
		case "true":
			v.b, v.text = true, "true"
		case "false":
			v.b, v.text = false, "false"
		default:
			return bad("true or false")
		}
	case kindString:
		if err := json.Unmarshal(raw, &v.s); err != nil {
			return bad("a string")
		}
		v.text = v.s
	}
	v.set = true
	return nil
}

// diffService has a field of every kind.
func diffService(tb testing.TB) *service {
	tb.Helper()
	s, err := compileService(config.Service{
		Name: "eta", Path: "POST /v1/services/eta:predict",
		Entities: []config.Entity{{Name: "user", JoinKey: "user_id", Type: "int64"}},
		RequestFields: []config.RequestField{
			{Name: "base_eta", Type: "float32", Required: true},
			{Name: "delay", Type: "float64"},
			{Name: "express", Type: "bool"},
			{Name: "note", Type: "string"},
		},
		Model:  config.Model{Name: "m"},
		Routes: []config.Route{{Name: "default", Route: config.RouteAction{Weighted: []config.WeightedBackend{{Backend: "local", Weight: 100}}}}},
	}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// sameDecoding fails unless vals and ref hold the same values.
func sameDecoding(t *testing.T, s *service, vals []value, ref []refValue) {
	t.Helper()
	for i := range vals {
		v, r := &vals[i], &ref[i]
		k := s.fields[i].kind
		if v.set != r.set {
			t.Fatalf("field %s: set %v, reference %v", s.fields[i].name, v.set, r.set)
		}
		if !v.set {
			continue
		}
		same := v.i == r.i && v.b == r.b && v.s == r.s && v.text(k) == r.text &&
			(v.f == r.f || (math.IsNaN(v.f) && math.IsNaN(r.f)))
		if !same {
			t.Fatalf("field %s: %+v (text %q), reference %+v", s.fields[i].name, *v, v.text(k), *r)
		}
	}
}

// refCandidates are the errors the reference may answer body with, one
// per problem: it stops at the first problem in the order it meets the
// keys, which is a map's. None: it accepts body.
func refCandidates(s *service, body []byte) []error {
	vals := make([]refValue, len(s.fields))
	trimmed := bytes.TrimSpace(body)
	var m map[string]json.RawMessage
	if len(trimmed) == 0 || json.Unmarshal(trimmed, &m) != nil || m == nil {
		return []error{refParseBody(s, body, vals)} // one answer, whatever the order
	}
	var errs []error
	for k, raw := range m {
		i, ok := s.fieldIdx[k]
		if !ok {
			errs = append(errs, apierr.Errorf(apierr.KindInvalid, ReasonUnknownField, "unknown field %q: service %q takes %s", k, s.name, s.fieldList()))
			continue
		}
		if err := refParseValue(&s.fields[i], raw, &vals[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if err := refParseBody(s, body, vals); err != nil {
		return []error{err} // a missing field: checked in field order
	}
	return nil
}

// sameError fails unless err is one of the reference's candidate answers
// (same kind, reason and message), or both accept.
func sameError(t *testing.T, err error, candidates []error) {
	t.Helper()
	if (err == nil) != (len(candidates) == 0) {
		t.Fatalf("error %v, reference %v", err, candidates)
	}
	if err == nil {
		return
	}
	ie, _ := errors.AsType[*apierr.Error](err)
	for _, c := range candidates {
		ce, _ := errors.AsType[*apierr.Error](c)
		if ce.Kind == ie.Kind && ce.Reason == ie.Reason && ce.Msg == ie.Msg {
			return
		}
	}
	t.Fatalf("error %v is none of the reference's %v", err, candidates)
}

func FuzzParseBodyMatchesReference(f *testing.F) {
	for _, seed := range []string{
		`{"user_id": 7, "base_eta": 30}`,
		`{"user_id": "007", "base_eta": 30.5, "delay": 1e-7, "express": true, "note": "fragile <&>"}`,
		`{"user_id": 7, "user_id": null, "base_eta": 1}`,
		`{"user_id": "x", "user_id": 8, "base_eta": 1e39}`,
		`{"user\u005fid": 7, "base_eta": 3, "note": "\ud83d\ude00 \u00e9"}`,
		`{"user_id": 7, "base_eta": 3, "colour": [1, {"a": "}"}]}`,
		" \u00a0{\"user_id\": 9223372036854775807, \"base_eta\": -0}\n",
		`{"user_id": 7.0, "base_eta": 3}`, `[]`, `null`, ``, `{"a":}`, `{"user_id": 7} {}`, "{\"note\": \"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	s := diffService(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		vals := make([]value, len(s.fields))
		err := s.parseBody(bytes.Clone(body), vals)
		sameError(t, err, refCandidates(s, bytes.Clone(body)))
		if err == nil {
			ref := make([]refValue, len(s.fields))
			if rerr := refParseBody(s, bytes.Clone(body), ref); rerr != nil {
				t.Fatal(rerr)
			}
			sameDecoding(t, s, vals, ref)
		}
	})
}

func FuzzGRPCFieldsMatchReference(f *testing.F) {
	for _, fields := range []map[string]any{
		{"user_id": 7, "base_eta": 30},
		{"user_id": "007", "base_eta": 30.5, "delay": 1e-7, "express": true, "note": "fragile <&>"},
		{"user_id": 7.5, "base_eta": 1e39},
		{"user_id": 1e21, "base_eta": math.Copysign(0, -1), "delay": 123456789012345678.0},
		{"user_id": nil, "base_eta": []any{1, "a"}, "note": map[string]any{"k": true}},
		{"user_id": 9.3e18, "base_eta": "3", "colour": "red"},
	} {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	nan, err := proto.Marshal(&structpb.Struct{Fields: map[string]*structpb.Value{"user_id": structpb.NewNumberValue(math.NaN())}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(nan)
	s := diffService(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var fields structpb.Struct
		if proto.Unmarshal(data, &fields) != nil {
			return
		}
		vals := make([]value, len(s.fields))
		_, err := fieldsBody{&fields}.decode(s, vals)
		body, merr := json.Marshal(fields.AsMap())
		if merr != nil {
			t.Fatalf("AsMap does not marshal: %v", merr)
		}
		sameError(t, err, refCandidates(s, body))
		if err == nil {
			ref := make([]refValue, len(s.fields))
			if rerr := refParseBody(s, body, ref); rerr != nil {
				t.Fatal(rerr)
			}
			sameDecoding(t, s, vals, ref)
		}
	})
}

func TestAppendJSONFloat(t *testing.T) {
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-6, 9.99e-7, 1e20, 1e21, 123456789012345678, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1 + 0.2} {
		want, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONFloat(nil, x); string(got) != string(want) {
			t.Fatalf("appendJSONFloat(%v) = %s, encoding/json writes %s", x, got, want)
		}
	}
}
