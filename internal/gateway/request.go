package gateway

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/infer"
)

// Reason codes of the errors the gateway makes itself.
const (
	ReasonInvalidJSON           = "invalid_json"
	ReasonUnknownField          = "unknown_field"
	ReasonMissingField          = "missing_field"
	ReasonInvalidField          = "invalid_field"
	ReasonMissingFeature        = "missing_feature"
	ReasonFeatureUnreadable     = "feature_unreadable"
	ReasonRateLimited           = apierr.ReasonRateLimited
	ReasonFeatureUnavailable    = "feature_service_unavailable"
	ReasonNoRoute               = "no_route"
	ReasonNoHealthyUpstream     = "no_healthy_upstream"
	ReasonUpstreamTimeout       = "upstream_timeout"
	ReasonUpstreamUnavailable   = "upstream_unavailable"
	ReasonInvalidModelOutput    = "invalid_model_output"
	ReasonNotFound              = "not_found"
	ReasonMethodNotAllowed      = "method_not_allowed"
	ReasonBodyTooLarge          = "body_too_large"
	ReasonDraining              = "draining"
	ReasonInternal              = "internal"
	ReasonGatewayNotConfigured  = "gateway_not_configured"
	ReasonInvalidRequestID      = "invalid_request_id"
	ReasonUnsupportedMediaType  = "unsupported_media_type"
	reasonFeatureViewStale      = serving.ReasonViewStale
	reasonOnlineStoreUnavailble = serving.ReasonStoreUnavailable
)

// value is one parsed request value.
type value struct {
	set bool
	i   int64
	f   float64
	b   bool
	s   string
	// raw is the value's JSON text: what parseBody found for the field
	// (the last occurrence of its key), then, for a float, the number as
	// written, which routing sees.
	raw []byte
}

// num returns the value as a float64 for a tensor.
func (v *value) num(k fieldKind) float64 {
	switch k {
	case kindInt64:
		return float64(v.i)
	case kindBool:
		if v.b {
			return 1
		}
		return 0
	default:
		return v.f
	}
}

// text is the value as routing, the shadow key and messages see it: an
// int64 in canonical form (so "007" and 7 are one id, as they are for the
// feature store), a float as written, true or false, or the string.
func (v *value) text(k fieldKind) string {
	switch k {
	case kindInt64:
		return strconv.FormatInt(v.i, 10)
	case kindFloat32, kindFloat64:
		return string(v.raw)
	case kindBool:
		return strconv.FormatBool(v.b)
	default:
		return v.s
	}
}

// parseBody decodes the flat JSON object of a service request into vals
// (one per service field). Unknown keys, wrong types and missing required
// fields are errors that name the field. A key given twice takes its last
// value, as encoding/json does.
func (s *service) parseBody(body []byte, vals []value) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidJSON, "the request body is empty; send a JSON object with %s", s.fieldList())
	}
	if body[0] != '{' || !json.Valid(body) {
		if string(body) == "null" {
			return apierr.Errorf(apierr.KindInvalid, ReasonInvalidJSON, "the request body is null; send a JSON object with %s", s.fieldList())
		}
		// encoding/json words the problem.
		var m map[string]json.RawMessage
		err := json.Unmarshal(body, &m)
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidJSON, "the request body is not a JSON object: %v", err)
	}
	// A valid object: walk its members without building a map.
	for i := skipSpace(body, 1); body[i] != '}'; {
		end := skipString(body, i)
		rawKey := body[i:end]
		var idx int
		var ok bool
		if needsUnquote(rawKey) {
			idx, ok = s.fieldIdx[unquote(rawKey)]
		} else {
			idx, ok = s.fieldIdx[string(rawKey[1:len(rawKey)-1])]
		}
		if !ok {
			return apierr.Errorf(apierr.KindInvalid, ReasonUnknownField, "unknown field %q: service %q takes %s", unquote(rawKey), s.name, s.fieldList())
		}
		i = skipSpace(body, skipSpace(body, end)+1) // past the colon
		end = skipValue(body, i)
		vals[idx].raw = body[i:end]
		i = skipSpace(body, end)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	for i := range vals {
		if raw := vals[i].raw; raw != nil {
			if err := parseValue(&s.fields[i], raw, &vals[i]); err != nil {
				return err
			}
		}
	}
	return s.checkRequired(vals)
}

// checkRequired reports the first required field vals leave unset.
func (s *service) checkRequired(vals []value) error {
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

// The walkers below read a document json.Valid accepted: they only find
// where each token ends.

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // a number, true, false or null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// needsUnquote reports whether the JSON string s (quotes included) is
// other than its bytes: it has escapes, or bytes that are not valid UTF-8.
func needsUnquote(s []byte) bool {
	ascii := true
	for _, c := range s {
		if c == '\\' {
			return true
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return !ascii && !utf8.Valid(s)
}

// unquote decodes the JSON string s (quotes included).
func unquote(s []byte) string {
	if !needsUnquote(s) {
		return string(s[1 : len(s)-1])
	}
	var out string
	_ = json.Unmarshal(s, &out) // s is a valid JSON string
	return out
}

func (s *service) fieldList() string {
	b := make([]byte, 0, 64)
	for i, f := range s.fields {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, f.name...)
		if !f.required {
			b = append(b, " (optional)"...)
		}
	}
	return string(b)
}

// parseValue parses one JSON value of field f. null leaves the value unset.
func parseValue(f *reqField, raw []byte, v *value) error {
	raw = bytes.TrimSpace(raw)
	*v = value{}
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
		v.i = n
	case kindFloat32, kindFloat64:
		bits := 64
		if f.kind == kindFloat32 {
			bits = 32
		}
		x, err := strconv.ParseFloat(string(raw), bits)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return bad("a finite number")
		}
		v.f, v.raw = x, raw
	case kindBool:
		switch string(raw) {
		case "true":
			v.b = true
		case "false":
			v.b = false
		default:
			return bad("true or false")
		}
	case kindString:
		if len(raw) < 2 || raw[0] != '"' {
			return bad("a string")
		}
		if !needsUnquote(raw) {
			v.s = string(raw[1 : len(raw)-1])
		} else if err := json.Unmarshal(raw, &v.s); err != nil {
			return bad("a string")
		}
	}
	v.set = true
	return nil
}

// routeValues are vals as routing and rollouts match them, by field name.
func (s *service) routeValues(vals []value) map[string]string {
	out := make(map[string]string, len(vals))
	for i := range vals {
		if vals[i].set {
			out[s.fields[i].name] = vals[i].text(s.fields[i].kind)
		}
	}
	return out
}

// featureRequest builds the feature read of one request row.
func (s *service) featureRequest(vals []value) *serving.Request {
	ents := make(map[string][]feature.Value, len(s.entityKeys))
	for _, k := range s.entityKeys {
		v := &vals[k.field]
		var fv feature.Value
		switch k.kind {
		case feature.KindString, feature.KindBytes:
			fv.S = v.text(s.fields[k.field].kind)
			if k.kind == feature.KindBytes {
				fv.B = []byte(fv.S)
			}
		default:
			fv.I64 = v.i
		}
		ents[k.joinKey] = []feature.Value{fv}
	}
	return &serving.Request{Features: s.features, Entities: ents, FullFeatureNames: true, RequestContext: s.requestContextOf(vals)}
}

// featureCell returns the value of feature column col, and whether it is
// usable (present and not null).
func featureCell(resp *serving.Response, col int) (*feature.Value, serving.Status) {
	if resp == nil {
		return nil, serving.StatusNotFound
	}
	c := &resp.Results[resp.EntityColumns+col]
	if len(c.Values) == 0 {
		return nil, serving.StatusNotFound
	}
	st := c.Statuses[0]
	if st != serving.StatusPresent || c.Values[0].Null {
		if st == serving.StatusPresent {
			st = serving.StatusNullValue
		}
		return nil, st
	}
	return &c.Values[0], st
}

// unreadableCell returns why the value at col of row 0 is NOT_FOUND
// although its row exists, or "".
func unreadableCell(resp *serving.Response, col int) string {
	if resp == nil {
		return ""
	}
	c := &resp.Results[resp.EntityColumns+col]
	if len(c.Unreadable) == 0 {
		return ""
	}
	return c.Unreadable[0]
}

// assemble builds the model's input tensors for one request row from the
// feature read (nil when the service reads none) and the request values.
func (s *service) assemble(resp *serving.Response, vals []value) ([]infer.Tensor, error) {
	out := make([]infer.Tensor, len(s.inputs))
	for i := range s.inputs {
		in := &s.inputs[i]
		size := in.dt.Size()
		data := make([]byte, in.width*size)
		off := 0
		for p := range in.parts {
			pt := &in.parts[p]
			if pt.field >= 0 {
				v := &vals[pt.field]
				switch {
				case !v.set:
					fill, err := in.fillMissing(pt, "is not in the request")
					if err != nil {
						return nil, err
					}
					putNum(data, off, in.dt, fill)
				case s.fields[pt.field].kind == kindInt64:
					putInt(data, off, in.dt, v.i)
				default:
					putNum(data, off, in.dt, v.num(s.fields[pt.field].kind))
				}
				off += size
				continue
			}
			fv, st := featureCell(resp, pt.col)
			if why := unreadableCell(resp, pt.col); fv == nil && why != "" && !in.unreadableMissing {
				return nil, apierr.Errorf(apierr.KindUnavailable, ReasonFeatureUnreadable,
					"input %q: %q is stored for %s but cannot be read (%s: the view's schema changed since the row was written, or the row is damaged); re-materialize or push the view, or set the input's unreadable: missing to apply its missing policy",
					in.tensor, pt.ref, s.entityText(vals), why)
			}
			if fv == nil {
				fill, err := in.fillMissing(pt, "is "+st.String()+" for "+s.entityText(vals))
				if err != nil {
					return nil, err
				}
				for j := range pt.width {
					putNum(data, off+j*size, in.dt, fill)
				}
				off += pt.width * size
				continue
			}
			if err := putFeature(data[off:off+pt.width*size], in.dt, fv, s.featureTypes[pt.col], pt); err != nil {
				return nil, err
			}
			off += pt.width * size
		}
		out[i] = infer.Tensor{Name: in.tensor, DataType: in.dt, Shape: infer.Shape{1, int64(in.width)}, Data: data}
	}
	return out, nil
}

// entityText describes the request's entity keys for error messages.
func (s *service) entityText(vals []value) string {
	b := make([]byte, 0, 32)
	for i, f := range s.fields {
		if !f.entity {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, f.name...)
		b = append(b, '=')
		b = append(b, vals[i].text(f.kind)...)
	}
	return string(b)
}

// fillMissing returns the value that replaces a missing part, or the
// missing_feature error when the input's policy is fail.
func (in *input) fillMissing(pt *part, why string) (float64, error) {
	switch in.missing {
	case missingDefault:
		return in.def, nil
	case missingZero:
		return 0, nil
	default:
	}
	return 0, apierr.Errorf(apierr.KindNotFound, ReasonMissingFeature,
		"input %q: %q %s, and the input's missing policy is fail", in.tensor, pt.ref, why)
}

// putFeature writes one feature value (a scalar or a fixed-length list)
// into dst.
func putFeature(dst []byte, dt infer.DataType, v *feature.Value, t feature.Type, pt *part) error {
	size := dt.Size()
	if !t.List {
		var x float64
		switch t.Kind {
		case feature.KindInt32, feature.KindInt64:
			putInt(dst, 0, dt, v.I64)
			return nil
		case feature.KindBool:
			if v.Bool {
				x = 1
			}
		default:
			x = v.F64
		}
		putNum(dst, 0, dt, x)
		return nil
	}
	n := 0
	switch t.Kind {
	case feature.KindFloat32:
		n = len(v.F32s)
		if n == pt.width && dt == infer.FP32 {
			for j, x := range v.F32s {
				binary.LittleEndian.PutUint32(dst[j*4:], math.Float32bits(x))
			}
			return nil
		}
		for j := range min(n, pt.width) {
			putNum(dst, j*size, dt, float64(v.F32s[j]))
		}
	case feature.KindFloat64:
		n = len(v.F64s)
		for j := range min(n, pt.width) {
			putNum(dst, j*size, dt, v.F64s[j])
		}
	case feature.KindInt32, feature.KindInt64:
		n = len(v.I64s)
		for j := range min(n, pt.width) {
			putInt(dst, j*size, dt, v.I64s[j])
		}
	case feature.KindBool:
		n = len(v.Bools)
		for j := range min(n, pt.width) {
			x := 0.0
			if v.Bools[j] {
				x = 1
			}
			putNum(dst, j*size, dt, x)
		}
	default:
	}
	if n != pt.width {
		return apierr.Errorf(apierr.KindInternal, ReasonMissingFeature,
			"feature %q has %d elements in the online store, but its type says %d", pt.ref, n, pt.width)
	}
	return nil
}

// putNum writes x at byte offset off of dst as dt.
func putNum(dst []byte, off int, dt infer.DataType, x float64) {
	switch dt {
	case infer.FP32:
		binary.LittleEndian.PutUint32(dst[off:], math.Float32bits(float32(x)))
	case infer.FP64:
		binary.LittleEndian.PutUint64(dst[off:], math.Float64bits(x))
	case infer.Int64:
		binary.LittleEndian.PutUint64(dst[off:], uint64(int64(x)))
	case infer.Int32:
		binary.LittleEndian.PutUint32(dst[off:], uint32(int32(x)))
	default:
	}
}

// putInt writes integer x at byte offset off of dst as dt, exactly for
// integer types (a float64 would round ids above 2^53).
func putInt(dst []byte, off int, dt infer.DataType, x int64) {
	switch dt {
	case infer.Int64:
		binary.LittleEndian.PutUint64(dst[off:], uint64(x))
	case infer.Int32:
		binary.LittleEndian.PutUint32(dst[off:], uint32(int32(x)))
	default:
		putNum(dst, off, dt, float64(x))
	}
}

// scalar returns element 0 of a numeric output tensor as a float64.
func scalar(t *infer.Tensor) (float64, bool) {
	size := t.DataType.Size()
	if size == 0 || len(t.Data) < size {
		return 0, false
	}
	d := t.Data
	switch t.DataType {
	case infer.FP32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(d))), true
	case infer.FP64:
		return math.Float64frombits(binary.LittleEndian.Uint64(d)), true
	case infer.Int64:
		return float64(int64(binary.LittleEndian.Uint64(d))), true
	case infer.Int32:
		return float64(int32(binary.LittleEndian.Uint32(d))), true
	case infer.Int16:
		return float64(int16(binary.LittleEndian.Uint16(d))), true
	case infer.Int8:
		return float64(int8(d[0])), true
	case infer.Uint8:
		return float64(d[0]), true
	case infer.Uint16:
		return float64(binary.LittleEndian.Uint16(d)), true
	case infer.Uint32:
		return float64(binary.LittleEndian.Uint32(d)), true
	case infer.Uint64:
		return float64(binary.LittleEndian.Uint64(d)), true
	case infer.Bool:
		if d[0] != 0 {
			return 1, true
		}
		return 0, true
	default:
	}
	return 0, false
}

// tensorValues reads a numeric output tensor: one element is a scalar,
// more an array.
func tensorValues(name string, t *infer.Tensor) (Output, bool) {
	size := t.DataType.Size()
	if size == 0 || t.DataType == infer.FP16 || t.DataType == infer.BF16 {
		return Output{}, false
	}
	n := len(t.Data) / size
	ov := Output{Name: name, Values: make([]float64, 0, n), Array: n != 1, DataType: t.DataType}
	for j := range n {
		el := infer.Tensor{DataType: t.DataType, Data: t.Data[j*size : (j+1)*size]}
		x, ok := scalar(&el)
		if !ok {
			return Output{}, false
		}
		ov.Values = append(ov.Values, x)
	}
	return ov, true
}

func appendFloat(b []byte, x float64, dt infer.DataType) []byte {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return append(b, "null"...)
	}
	switch dt {
	case infer.FP32:
		return strconv.AppendFloat(b, x, 'g', -1, 32)
	case infer.FP64:
		return strconv.AppendFloat(b, x, 'g', -1, 64)
	case infer.Bool:
		if x != 0 {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	default:
	}
	return strconv.AppendInt(b, int64(x), 10)
}
