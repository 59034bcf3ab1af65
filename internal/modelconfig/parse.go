package modelconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// maxParseProblems bounds how many parse errors Parse collects.
const maxParseProblems = 20

// Parse decodes a config.pbtxt. file names the file in positions. Unknown
// fields, values of the wrong type and syntax errors come back as an error
// from Errors.Err, each with its line and column; Parse reports as many
// of them as it can by setting aside each offending field and parsing
// again. The Source is returned even when parsing fails.
func Parse(file string, data []byte) (*inferencepb.ModelConfig, *Source, error) {
	src := newSource(file, data)
	cfg := &inferencepb.ModelConfig{}
	err := prototext.Unmarshal(data, cfg)
	if err == nil {
		return cfg, src, nil
	}
	return nil, src, parseProblems(data, src, err).Err()
}

// textErrRE matches the position protobuf's text parser puts in its errors.
var textErrRE = regexp.MustCompile(`(?s)^(.*?)\(line (\d+):(\d+)\): (.*)$`)

// parseProblems turns a prototext error into problems and keeps going by
// blanking the offending field (offsets stay the same) and parsing again.
func parseProblems(orig []byte, src *Source, err error) Errors {
	var ps Errors
	work := bytes.Clone(orig)
	blanked := map[int]bool{}
	for len(ps) < maxParseProblems {
		m := textErrRE.FindStringSubmatch(err.Error())
		if m == nil {
			ps = append(ps, Error{Pos: Position{File: src.file}, Msg: cleanTextMsg(err.Error())})
			return ps
		}
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		off := offsetOf(work, line, col)
		c := cursor{data: orig, line: 1, col: 1}
		line, col = c.at(off)
		pos := Position{File: src.file, Line: line, Col: col}
		if strings.Contains(m[1], "syntax error") {
			ps = append(ps, Error{Pos: pos, Msg: "syntax error: " + m[4]})
			return ps
		}
		sp, found := src.span(off)
		ps = append(ps, Error{Pos: pos, Msg: describeTextErr(m[4], sp, found)})
		if !found || blanked[sp.start] {
			return ps
		}
		blanked[sp.start] = true
		for i := sp.start; i < sp.end && i < len(work); i++ {
			if work[i] != '\n' {
				work[i] = ' '
			}
		}
		if err = prototext.Unmarshal(work, &inferencepb.ModelConfig{}); err == nil {
			return ps
		}
	}
	return ps
}

// cleanTextMsg drops the "proto:" prefix protobuf puts on its errors.
func cleanTextMsg(s string) string {
	s = strings.TrimPrefix(s, "proto:")
	return strings.TrimLeft(s, " \u00a0")
}

var (
	unknownFieldRE = regexp.MustCompile(`^unknown field: (.*)$`)
	invalidValueRE = regexp.MustCompile(`(?s)^invalid value for (\w+) type: (.*)$`)
	repeatedRE     = regexp.MustCompile(`^non-repeated field "(.*)" is repeated$`)
	oneofRE        = regexp.MustCompile(`^error parsing "(.*)", oneof (\S+) is already set$`)
)

// describeTextErr rewords a prototext error so that it names the field,
// its message and what was expected.
func describeTextErr(msg string, sp fieldSpan, found bool) string {
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		if found && sp.parent != nil {
			return fmt.Sprintf("unknown field %q in %s", m[1], sp.parent.FullName())
		}
		return fmt.Sprintf("unknown field %q", m[1])
	}
	if m := invalidValueRE.FindStringSubmatch(msg); m != nil {
		m[2] = strings.TrimSpace(m[2])
		if found && sp.fd != nil {
			out := fmt.Sprintf("field %q: invalid value %s, expected %s", sp.name, m[2], expected(sp.fd))
			if w := protobufIntegerWords(sp.fd, m[2]); w != "" {
				out += " (" + w + ")"
			}
			return out
		}
		return fmt.Sprintf("invalid value %s, expected %s", m[2], m[1])
	}
	if m := repeatedRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("field %q is set more than once", m[1])
	}
	if m := oneofRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("field %q: another field of %s is already set; only one may be", m[1], m[2])
	}
	return msg
}

// protobufIntegerWords is what protobuf's C++ text parser, which Triton
// uses, says of a bad value for an integer field; Triton's QA greps the
// server log for these words (qa/L0_simple_ensemble/test.sh, invalid
// max_inflight_requests values). Empty for other fields.
func protobufIntegerWords(fd protoreflect.FieldDescriptor, v string) string {
	unsigned := false
	switch fd.Kind() {
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		unsigned = true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
	default:
		return ""
	}
	digits := strings.TrimPrefix(v, "-")
	if unsigned && digits != v {
		return "Expected integer, got: -"
	}
	if _, err := strconv.ParseUint(digits, 0, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
		return "Expected integer, got: " + v
	}
	return "Integer out of range (" + v + ")"
}

// expected says in words what a field accepts.
func expected(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		names := make([]string, vals.Len())
		for i := range names {
			names[i] = string(vals.Get(i).Name())
		}
		return "one of " + strings.Join(names, ", ")
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "a quoted string"
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "a message in { }"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return "an integer (int32)"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "a non-negative integer (uint32)"
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "a non-negative integer (uint64)"
	default:
		return "an integer (int64)"
	}
}

// offsetOf converts a protobuf text position (1-based line, rune column)
// to a byte offset in data.
func offsetOf(data []byte, line, col int) int {
	off, l, c := 0, 1, 1
	for off < len(data) && (l < line || (l == line && c < col)) {
		r, size := utf8.DecodeRune(data[off:])
		if r == '\n' {
			if l == line {
				break
			}
			l++
			c = 1
		} else {
			c++
		}
		off += size
	}
	return off
}

// ParseJSON decodes a configuration in JSON, as the repository-load API's
// "config" parameter carries it. Proto field names and JSON names are both
// accepted; unknown fields are an error of kind KindInvalid.
func ParseJSON(data []byte) (*inferencepb.ModelConfig, error) {
	data = withoutExtensions(data)
	cfg := &inferencepb.ModelConfig{}
	if err := protojson.Unmarshal(data, cfg); err != nil {
		return nil, &apierr.Error{
			Kind:   apierr.KindInvalid,
			Reason: ReasonInvalidConfig,
			Msg:    "parse model configuration JSON: " + cleanTextMsg(err.Error()),
		}
	}
	return cfg, nil
}

// extensionFields are the members Sluice adds beside Triton's fields in
// the configuration it answers (GET .../config). A client that reads the
// configuration, edits it and sends it back as a load override (as
// tritonclient users do) sends them too, so they are dropped before the
// strict decode.
var extensionFields = []string{"loaded_at"}

// withoutExtensions returns data with extensionFields removed from its
// top-level object; data as given when it has none (or is not an object,
// which the strict decode then reports with its position).
func withoutExtensions(data []byte) []byte {
	found := false
	for _, f := range extensionFields {
		if bytes.Contains(data, []byte(`"`+f+`"`)) {
			found = true
		}
	}
	if !found {
		return data
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return data
	}
	for _, f := range extensionFields {
		delete(obj, f)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return data
	}
	return out
}

// MarshalJSON encodes cfg the way Triton answers GET .../config: proto
// field names, every scalar, list and map present even when empty, unset
// messages left out, enums by name, and 64-bit integers as JSON numbers
// (protojson would quote them). Fields come in declaration order.
func MarshalJSON(cfg *inferencepb.ModelConfig) ([]byte, error) {
	if cfg == nil {
		return nil, errors.New("marshal model configuration: nil config")
	}
	var b bytes.Buffer
	if err := writeMessage(&b, cfg.ProtoReflect()); err != nil {
		return nil, fmt.Errorf("marshal model configuration: %w", err)
	}
	return b.Bytes(), nil
}

func writeMessage(b *bytes.Buffer, m protoreflect.Message) error {
	b.WriteByte('{')
	fields := m.Descriptor().Fields()
	first := true
	for i := range fields.Len() {
		fd := fields.Get(i)
		if (fd.ContainingOneof() != nil || fd.Message() != nil && !fd.IsList() && !fd.IsMap()) && !m.Has(fd) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(b, string(fd.Name()))
		b.WriteByte(':')
		var err error
		switch {
		case fd.IsList():
			err = writeList(b, fd, m.Get(fd).List())
		case fd.IsMap():
			err = writeMap(b, fd, m.Get(fd).Map())
		default:
			err = writeValue(b, fd, m.Get(fd))
		}
		if err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func writeList(b *bytes.Buffer, fd protoreflect.FieldDescriptor, l protoreflect.List) error {
	b.WriteByte('[')
	for i := range l.Len() {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := writeValue(b, fd, l.Get(i)); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	return nil
}

func writeMap(b *bytes.Buffer, fd protoreflect.FieldDescriptor, mp protoreflect.Map) error {
	keys := make([]protoreflect.MapKey, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, func(a, c protoreflect.MapKey) int {
		switch fd.MapKey().Kind() {
		case protoreflect.StringKind:
			return strings.Compare(a.String(), c.String())
		case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
			return cmpOrdered(a.Uint(), c.Uint())
		case protoreflect.BoolKind:
			return cmpOrdered(strconv.FormatBool(a.Bool()), strconv.FormatBool(c.Bool()))
		default:
			return cmpOrdered(a.Int(), c.Int())
		}
	})
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		if !utf8.ValidString(k.String()) {
			return fmt.Errorf("field %s: map key holds invalid UTF-8", fd.Name())
		}
		writeString(b, k.String())
		b.WriteByte(':')
		if err := writeValue(b, fd.MapValue(), mp.Get(k)); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func cmpOrdered[T int64 | uint64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func writeValue(b *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return writeMessage(b, v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			writeString(b, string(ev.Name()))
		} else {
			b.WriteString(strconv.Itoa(int(v.Enum())))
		}
	case protoreflect.BoolKind:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return fmt.Errorf("field %s holds invalid UTF-8", fd.Name())
		}
		writeString(b, v.String())
	case protoreflect.BytesKind:
		return fmt.Errorf("field %s: bytes fields are not supported", fd.Name())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		switch {
		case math.IsNaN(f):
			b.WriteString(`"NaN"`)
		case math.IsInf(f, 1):
			b.WriteString(`"Infinity"`)
		case math.IsInf(f, -1):
			b.WriteString(`"-Infinity"`)
		default:
			b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
		}
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	default:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	}
	return nil
}

// writeString writes s as a JSON string.
func writeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := range len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
