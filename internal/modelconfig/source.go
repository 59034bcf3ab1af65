package modelconfig

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// maxDepth bounds how deeply Source follows nested messages; deeper text is
// skipped (protobuf's own parser rejects such input anyway).
const maxDepth = 100

// Source remembers where each field was written in a config.pbtxt, so that
// problems found later can point at the line and column of the field.
//
// Field paths use proto field names joined by dots. Repeated fields get an
// index in order of appearance ("input[1].dims", "input[0].dims[2]" for one
// element of a list) and map entries their key, quoted when it is a string
// ("parameters[\"k\"]", "dynamic_batching.priority_queue_policy[2]"). A
// list written as "dims: [1, 2]" is one field whose elements are
// "dims[0]" and "dims[1]".
type Source struct {
	file   string
	pos    map[string]Position // first place each path was written
	fields []fieldSpan         // every field, in order of appearance
}

// fieldSpan is where one field (name, separator and value) was written.
type fieldSpan struct {
	start, end int // byte offsets; end is exclusive
	name       string
	fd         protoreflect.FieldDescriptor   // nil when unknown
	parent     protoreflect.MessageDescriptor // nil when unknown
}

// Pos returns the position of fieldPath. When the path itself was not
// written it falls back to the closest parent that was, then to the file
// alone. A nil Source returns the zero Position.
func (s *Source) Pos(fieldPath string) Position {
	if s == nil {
		return Position{}
	}
	for p := fieldPath; p != ""; p = parentPath(p) {
		if pos, ok := s.pos[p]; ok {
			return pos
		}
	}
	return Position{File: s.file}
}

// File returns the file name the source was parsed from.
func (s *Source) File() string {
	if s == nil {
		return ""
	}
	return s.file
}

// parentPath drops the last index or name from a field path.
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// span returns the innermost field whose text holds byte offset off.
func (s *Source) span(off int) (fieldSpan, bool) {
	best, found := fieldSpan{}, false
	for _, f := range s.fields {
		if f.start <= off && off < f.end && (!found || f.start >= best.start) {
			best, found = f, true
		}
	}
	return best, found
}

type tokKind uint8

const (
	tokIdent tokKind = iota + 1
	tokNumber
	tokString
	tokPunct // one character: { } [ ] < > : , ; - and anything unexpected
)

type token struct {
	kind      tokKind
	text      string
	off, end  int
	line, col int
}

func (t token) is(s string) bool { return t.kind == tokPunct && t.text == s }

func (t token) opens() bool  { return t.is("{") || t.is("<") }
func (t token) closes() bool { return t.is("}") || t.is(">") }

// cursor turns increasing byte offsets into line and column the way
// protobuf's text parser counts them: columns count runes.
type cursor struct {
	data      []byte
	off       int
	line, col int
}

func (c *cursor) at(off int) (line, col int) {
	for c.off < off && c.off < len(c.data) {
		r, size := utf8.DecodeRune(c.data[c.off:])
		if r == '\n' {
			c.line++
			c.col = 1
		} else {
			c.col++
		}
		c.off += size
	}
	return c.line, c.col
}

func isLetter(b byte) bool { return b == '_' || (b|0x20 >= 'a' && b|0x20 <= 'z') }
func isDigit(b byte) bool  { return b >= '0' && b <= '9' }

// lex splits protobuf text into tokens. It never fails: anything it does
// not recognise becomes a one-character punctuation token, and every step
// consumes at least one byte.
func lex(data []byte) []token {
	var toks []token
	c := cursor{data: data, line: 1, col: 1}
	i := 0
	for i < len(data) {
		b := data[i]
		switch b {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			i++
			continue
		case '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			continue
		}
		start := i
		kind := tokPunct
		switch {
		case isLetter(b):
			kind = tokIdent
			for i < len(data) && (isLetter(data[i]) || isDigit(data[i])) {
				i++
			}
		case isDigit(b) || ((b == '-' || b == '.') && i+1 < len(data) && (isDigit(data[i+1]) || isLetter(data[i+1]) || data[i+1] == '.')):
			kind = tokNumber
			i++
			for i < len(data) {
				d := data[i]
				if isLetter(d) || isDigit(d) || d == '.' ||
					((d == '+' || d == '-') && (data[i-1] == 'e' || data[i-1] == 'E')) {
					i++
					continue
				}
				break
			}
		case b == '"' || b == '\'':
			kind = tokString
			i++
			for i < len(data) && data[i] != b && data[i] != '\n' {
				if data[i] == '\\' && i+1 < len(data) && data[i+1] != '\n' {
					i++
				}
				i++
			}
			if i < len(data) && data[i] == b {
				i++
			}
		default:
			_, size := utf8.DecodeRune(data[i:])
			i += size
		}
		line, col := c.at(start)
		toks = append(toks, token{kind: kind, text: string(data[start:i]), off: start, end: i, line: line, col: col})
	}
	return toks
}

// newSource records the position of every field in data. It is lenient:
// on malformed text it records what it can and never fails.
func newSource(file string, data []byte) *Source {
	s := &Source{file: file, pos: map[string]Position{}}
	w := walker{src: s, toks: lex(data)}
	root := (&inferencepb.ModelConfig{}).ProtoReflect().Descriptor()
	for w.i < len(w.toks) {
		w.message(root, "", false, false, 0) // a stray closer ends it early
	}
	return s
}

type walker struct {
	src  *Source
	toks []token
	i    int
}

func (w *walker) peek() (token, bool) {
	if w.i < len(w.toks) {
		return w.toks[w.i], true
	}
	return token{}, false
}

func (w *walker) record(path string, t token) {
	if _, ok := w.src.pos[path]; !ok {
		w.src.pos[path] = Position{File: w.src.file, Line: t.line, Col: t.col}
	}
}

// message walks the fields of one message up to its closing brace (or the
// end of input when closed is false). mapEntry marks a map entry, whose
// "value" field is recorded under the entry's own path.
func (w *walker) message(md protoreflect.MessageDescriptor, prefix string, closed, mapEntry bool, depth int) {
	if depth > maxDepth {
		w.skipBlock()
		return
	}
	counts := map[string]int{}
	for {
		t, ok := w.peek()
		if !ok {
			return
		}
		switch {
		case t.closes():
			w.i++
			if closed {
				return
			}
		case t.kind == tokIdent:
			w.field(md, prefix, counts, mapEntry, depth)
		default:
			w.i++
		}
	}
}

// skipBlock skips to the end of the current message without recording.
func (w *walker) skipBlock() {
	depth := 0
	for ; w.i < len(w.toks); w.i++ {
		t := w.toks[w.i]
		switch {
		case t.opens():
			depth++
		case t.closes():
			if depth == 0 {
				w.i++
				return
			}
			depth--
		}
	}
}

func (w *walker) field(md protoreflect.MessageDescriptor, prefix string, counts map[string]int, mapEntry bool, depth int) {
	nameTok := w.toks[w.i]
	w.i++
	name := nameTok.text
	var fd protoreflect.FieldDescriptor
	if md != nil {
		fd = md.Fields().ByTextName(name)
	}
	base := join(prefix, name)
	if mapEntry && name == "value" {
		base = prefix
	}
	var sub protoreflect.MessageDescriptor
	if fd != nil {
		sub = fd.Message()
	}
	repeated := fd != nil && (fd.IsList() || fd.IsMap())
	isMap := fd != nil && fd.IsMap()

	// elem names the next element of a repeated field.
	elem := func(keyAt int) string {
		n := counts[name]
		counts[name]++
		if isMap {
			if k, ok := w.mapKey(keyAt); ok {
				return base + "[" + k + "]"
			}
		}
		return base + "[" + strconv.Itoa(n) + "]"
	}
	msgValue := func(path string) {
		w.record(path, w.toks[w.i])
		w.i++ // the opening brace
		w.message(sub, path, true, isMap, depth+1)
	}

	w.record(base, nameTok)
	if t, ok := w.peek(); ok && t.is(":") {
		w.i++
	}
	t, ok := w.peek()
	switch {
	case !ok:
	case t.opens():
		path := base
		if repeated {
			path = elem(w.i + 1)
			w.record(path, nameTok)
		}
		msgValue(path)
	case t.is("["):
		w.i++
		for {
			t, ok := w.peek()
			if !ok || t.closes() {
				break
			}
			if t.is("]") {
				w.i++
				break
			}
			switch {
			case t.is(","):
				w.i++
			case t.opens():
				path := base
				if repeated {
					path = elem(w.i + 1)
				}
				msgValue(path)
			case t.kind == tokPunct && !t.is("-"):
				w.i++
			default:
				w.record(elem(w.i), t)
				w.scalar()
			}
		}
	case t.kind != tokPunct || t.is("-"):
		if repeated {
			w.record(elem(w.i), t)
		}
		w.scalar()
	}
	if t, ok := w.peek(); ok && (t.is(",") || t.is(";")) {
		w.i++
	}
	end := nameTok.end
	if w.i > 0 && w.i <= len(w.toks) {
		end = w.toks[w.i-1].end
	}
	w.src.fields = append(w.src.fields, fieldSpan{start: nameTok.off, end: end, name: name, fd: fd, parent: md})
}

// scalar consumes one scalar value: an optional sign, then a number or
// identifier, or a run of adjacent strings.
func (w *walker) scalar() {
	t := w.toks[w.i]
	w.i++
	if t.is("-") {
		if n, ok := w.peek(); ok && (n.kind == tokNumber || n.kind == tokIdent) {
			w.i++
		}
		return
	}
	if t.kind == tokString {
		for n, ok := w.peek(); ok && n.kind == tokString; n, ok = w.peek() {
			w.i++
		}
	}
}

// mapKey finds the "key" field of the map entry whose fields start at
// token i and formats it for a path: strings quoted, numbers bare.
func (w *walker) mapKey(i int) (string, bool) {
	depth := 0
	for j := i; j < len(w.toks); j++ {
		t := w.toks[j]
		switch {
		case t.opens() || t.is("["):
			depth++
		case t.closes() || t.is("]"):
			if depth == 0 {
				return "", false
			}
			depth--
		case depth == 0 && t.kind == tokIdent && t.text == "key":
			k := j + 1
			if k < len(w.toks) && w.toks[k].is(":") {
				k++
			}
			if k >= len(w.toks) {
				return "", false
			}
			v := w.toks[k]
			switch v.kind {
			case tokString:
				return strconv.Quote(unquote(v.text)), true
			case tokNumber, tokIdent:
				return v.text, true
			default:
				return "", false
			}
		}
	}
	return "", false
}

// unquote decodes a protobuf text string literal as well as it can.
func unquote(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		s = `"` + strings.ReplaceAll(s[1:len(s)-1], `"`, `\"`) + `"`
	}
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return strings.Trim(s, `"'`)
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}
