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
			i = identEnd(data, i)
		case startsNumber(data, i):
			kind = tokNumber
			i = numberEnd(data, i)
		case b == '"' || b == '\'':
			kind = tokString
			i = stringEnd(data, i)
		default:
			_, size := utf8.DecodeRune(data[i:])
			i += size
		}
		line, col := c.at(start)
		toks = append(toks, token{kind: kind, text: string(data[start:i]), off: start, end: i, line: line, col: col})
	}
	return toks
}

// identEnd returns the end of the identifier that starts at i.
func identEnd(data []byte, i int) int {
	for i < len(data) && (isLetter(data[i]) || isDigit(data[i])) {
		i++
	}
	return i
}

// startsNumber reports whether a number starts at i: a digit, or a sign
// or point followed by a digit, letter (inf, nan) or point.
func startsNumber(data []byte, i int) bool {
	b := data[i]
	if isDigit(b) {
		return true
	}
	if (b != '-' && b != '.') || i+1 >= len(data) {
		return false
	}
	n := data[i+1]
	return isDigit(n) || isLetter(n) || n == '.'
}

// numberEnd returns the end of the number that starts at i: letters,
// digits and points, and a sign right after an exponent's e.
func numberEnd(data []byte, i int) int {
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
	return i
}

// stringEnd returns the end of the quoted string that starts at i: past
// its closing quote, or at the end of its line when it has none.
func stringEnd(data []byte, i int) int {
	q := data[i]
	i++
	for i < len(data) && data[i] != q && data[i] != '\n' {
		if data[i] == '\\' && i+1 < len(data) && data[i+1] != '\n' {
			i++
		}
		i++
	}
	if i < len(data) && data[i] == q {
		i++
	}
	return i
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

// field walks one field, from its name to its value's end, recording the
// position of the field and of each element of a repeated one.
func (w *walker) field(md protoreflect.MessageDescriptor, prefix string, counts map[string]int, mapEntry bool, depth int) {
	nameTok := w.toks[w.i]
	w.i++
	name := nameTok.text
	var fd protoreflect.FieldDescriptor
	if md != nil {
		fd = md.Fields().ByTextName(name)
	}
	f := walkedField{w: w, name: name, base: join(prefix, name), counts: counts, depth: depth}
	if mapEntry && name == "value" {
		f.base = prefix
	}
	if fd != nil {
		f.sub = fd.Message()
		f.repeated = fd.IsList() || fd.IsMap()
		f.isMap = fd.IsMap()
	}

	w.record(f.base, nameTok)
	if t, ok := w.peek(); ok && t.is(":") {
		w.i++
	}
	t, ok := w.peek()
	switch {
	case !ok:
	case t.opens():
		path := f.base
		if f.repeated {
			path = f.elem(w.i + 1)
			w.record(path, nameTok)
		}
		f.msgValue(path)
	case t.is("["):
		w.i++
		f.list()
	case t.kind != tokPunct || t.is("-"):
		if f.repeated {
			w.record(f.elem(w.i), t)
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

// walkedField is the field walker.field is in: where its values' paths
// start and what kind of field it is.
type walkedField struct {
	w        *walker
	name     string
	base     string                         // the field's path
	counts   map[string]int                 // elements seen so far, by field name
	sub      protoreflect.MessageDescriptor // the message type of its values, if any
	repeated bool
	isMap    bool
	depth    int
}

// elem names the next element of a repeated field: a map entry by its
// key (found from token keyAt on) where it has one, else by its index.
func (f *walkedField) elem(keyAt int) string {
	n := f.counts[f.name]
	f.counts[f.name]++
	if f.isMap {
		if k, ok := f.w.mapKey(keyAt); ok {
			return f.base + "[" + k + "]"
		}
	}
	return f.base + "[" + strconv.Itoa(n) + "]"
}

// msgValue walks a message value, from its opening brace, under path.
func (f *walkedField) msgValue(path string) {
	w := f.w
	w.record(path, w.toks[w.i])
	w.i++ // the opening brace
	w.message(f.sub, path, true, f.isMap, f.depth+1)
}

// list walks a list value after its opening bracket, up to and past its
// closing one (or up to a stray closing brace).
func (f *walkedField) list() {
	w := f.w
	for {
		t, ok := w.peek()
		if !ok || t.closes() {
			return
		}
		switch {
		case t.is("]"):
			w.i++
			return
		case t.is(","):
			w.i++
		case t.opens():
			path := f.base
			if f.repeated {
				path = f.elem(w.i + 1)
			}
			f.msgValue(path)
		case t.kind == tokPunct && !t.is("-"):
			w.i++
		default:
			w.record(f.elem(w.i), t)
			w.scalar()
		}
	}
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
