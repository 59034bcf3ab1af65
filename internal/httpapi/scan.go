package httpapi

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonnum"
)

// maxDepth bounds JSON nesting anywhere in a request, so a body of many
// '[' cannot exhaust the stack or the per-depth bookkeeping.
const maxDepth = 64

// scanner is a small JSON tokenizer over a byte slice. It validates as it
// goes and reports errors with the byte offset where they were found. The
// infer decoder drives it directly, so the data arrays never pass through
// an intermediate representation.
type scanner struct {
	buf []byte
	pos int
}

// syntaxError reports malformed JSON at the current offset.
func (s *scanner) syntaxError(format string, args ...any) *infer.Error {
	return infer.Errorf(infer.KindInvalid, reasonInvalidJSON, "invalid JSON at byte offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

// unexpected reports the byte at the current offset (or the end of input)
// as not what was wanted.
func (s *scanner) unexpected(want string) *infer.Error {
	if s.pos >= len(s.buf) {
		return s.syntaxError("unexpected end of input, expected %s", want)
	}
	return s.syntaxError("unexpected %s, expected %s", quoteByte(s.buf[s.pos]), want)
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("'%c'", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// skipWS moves past JSON whitespace.
func (s *scanner) skipWS() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte without consuming it, or 0 at the
// end of input.
func (s *scanner) peek() byte {
	s.skipWS()
	if s.pos >= len(s.buf) {
		return 0
	}
	return s.buf[s.pos]
}

// is reports whether the next value starts with want. When the next bytes
// cannot start any JSON value it returns a syntax error instead, so callers
// report type errors only for well-formed input.
func (s *scanner) is(want byte) (bool, error) {
	c := s.peek()
	if c == want {
		return true, nil
	}
	if !isValueStart(c) {
		return false, s.unexpected("a value")
	}
	return false, nil
}

// consume skips whitespace and consumes c, or fails.
func (s *scanner) consume(c byte) error {
	if s.peek() != c {
		return s.unexpected(fmt.Sprintf("'%c'", c))
	}
	s.pos++
	return nil
}

// atEnd reports an error unless only whitespace remains.
func (s *scanner) atEnd() error {
	if s.peek() != 0 || s.pos < len(s.buf) {
		return s.syntaxError("unexpected data after the top-level value")
	}
	return nil
}

// readObject iterates over the members of an object. field is called with
// the (unescaped) key while the scanner sits at the member's value; it must
// consume exactly that value. The key slice is only valid during the call.
func (s *scanner) readObject(depth int, field func(key []byte) error) error {
	if depth > maxDepth {
		return s.syntaxError("nesting deeper than %d levels", maxDepth)
	}
	if err := s.consume('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.unexpected("an object key")
		}
		raw, escaped, err := s.readStringRaw()
		if err != nil {
			return err
		}
		key := raw
		if escaped { // rare; only then does the key need its own bytes
			key = appendUnescaped(nil, raw)
		}
		if err := s.consume(':'); err != nil {
			return err
		}
		s.skipWS()
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.unexpected("',' or '}' after an object member")
		}
	}
}

// readStringRaw consumes a string and returns the bytes between the quotes
// (escapes left as they are) and whether any escape occurs. It checks the
// escapes and rejects raw control characters.
func (s *scanner) readStringRaw() (raw []byte, escaped bool, err error) {
	if s.peek() != '"' {
		return nil, false, s.unexpected("a string")
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.buf) {
		c := s.buf[s.pos]
		switch {
		case c == '"':
			raw = s.buf[start:s.pos]
			s.pos++
			return raw, escaped, nil
		case c == '\\':
			escaped = true
			if s.pos+1 >= len(s.buf) {
				s.pos++
				return nil, false, s.syntaxError("unterminated string")
			}
			switch s.buf[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.buf) || !isHex4(s.buf[s.pos+2:s.pos+6]) {
					return nil, false, s.syntaxError("invalid \\u escape in string")
				}
				s.pos += 6
			default:
				s.pos++
				return nil, false, s.syntaxError("invalid escape %s in string", quoteByte(s.buf[s.pos]))
			}
		case c < 0x20:
			return nil, false, s.syntaxError("control character %s in string", quoteByte(c))
		default:
			s.pos++
		}
	}
	return nil, false, s.syntaxError("unterminated string")
}

// readString consumes a string and returns it unescaped, as a new string.
func (s *scanner) readString() (string, error) {
	raw, escaped, err := s.readStringRaw()
	if err != nil {
		return "", err
	}
	if !escaped {
		return string(raw), nil
	}
	return string(appendUnescaped(nil, raw)), nil
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if hexVal(c) < 0 {
			return false
		}
	}
	return true
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func hex4(b []byte) rune {
	return rune(hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3]))
}

// appendUnescaped appends the decoded form of raw, the validated inside of
// a JSON string, to dst. Unpaired surrogates become U+FFFD, as in
// encoding/json. Bytes that are not escapes are copied unchanged.
func appendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			j := i + 1
			for j < len(raw) && raw[j] != '\\' {
				j++
			}
			dst = append(dst, raw[i:j]...)
			i = j
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r2 := utf16.DecodeRune(r, hex4(raw[i+2:])); r2 != utf8.RuneError {
						dst = utf8.AppendRune(dst, r2)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

// number is a JSON number literal as readNumber found it: its text, and
// its significant digits as an integer times a power of ten, gathered in
// the same pass so that converting it needs no second one.
type number struct {
	tok     []byte
	integer bool // no fraction and no exponent
	neg     bool
	man     uint64 // the significant digits, when exact
	exp10   int
	// exact is false when the literal has more significant digits than
	// man holds; only tok is reliable then.
	exact bool
}

// float32 converts the number as strconv.ParseFloat(tok, 32) does,
// result and error alike.
func (n *number) float32() (float32, error) {
	if n.exact {
		if f, ok := jsonnum.Decimal32(n.man, n.exp10, n.neg); ok {
			return f, nil
		}
	}
	return jsonnum.ParseFloat32(n.tok)
}

// readNumber consumes a JSON number and returns its literal and whether it
// is an integer literal (no fraction or exponent).
func (s *scanner) readNumber() (tok []byte, integer bool, err error) {
	n, err := s.readDecimal()
	return n.tok, n.integer, err
}

// readDecimal consumes a JSON number, validating its grammar, and splits
// it into digits and exponent as it goes.
func (s *scanner) readDecimal() (number, error) {
	s.skipWS()
	start := s.pos
	b := s.buf
	i := s.pos
	var man uint64
	exp10 := 0
	exact, neg, integer := true, false, true
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			if man < maxExactMantissa {
				man = man*10 + uint64(b[i]-'0')
			} else {
				exact = false
			}
		}
	default:
		s.pos = i
		return number{}, s.unexpected("a digit")
	}
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		if i >= len(b) || b[i]-'0' > 9 {
			s.pos = i
			return number{}, s.unexpected("a digit after the decimal point")
		}
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			exp10--
			switch {
			case man == 0 && b[i] == '0': // a leading zero: not significant
			case man < maxExactMantissa:
				man = man*10 + uint64(b[i]-'0')
			default:
				exact = false
			}
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		if i >= len(b) || b[i]-'0' > 9 {
			s.pos = i
			return number{}, s.unexpected("a digit in the exponent")
		}
		e := 0
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			if e < 10000 { // beyond any float's range: strconv decides
				e = e*10 + int(b[i]-'0')
			}
		}
		if eneg {
			e = -e
		}
		exp10 += e
	}
	s.pos = i
	return number{tok: b[start:i], integer: integer, neg: neg, man: man, exp10: exp10, exact: exact}, nil
}

// maxExactMantissa bounds man before one more digit: below it, man*10+9
// still has at most jsonnum.MaxMantissaDigits digits.
const maxExactMantissa = 1_000_000_000_000_000_000 / 10 // 10^(19-1)

// readLiteral consumes true, false or null. It returns the literal's first
// byte.
func (s *scanner) readLiteral() (byte, error) {
	s.skipWS()
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.buf)-s.pos >= len(lit) && string(s.buf[s.pos:s.pos+len(lit)]) == lit {
			s.pos += len(lit)
			return lit[0], nil
		}
	}
	return 0, s.unexpected("a value")
}

// skipValue consumes any one JSON value, checking its syntax.
func (s *scanner) skipValue(depth int) error {
	switch c := s.peek(); c {
	case '{':
		return s.readObject(depth+1, func([]byte) error { return s.skipValue(depth + 1) })
	case '[':
		return s.readArray(depth+1, func(int) error { return s.skipValue(depth + 1) })
	case '"':
		_, _, err := s.readStringRaw()
		return err
	case 't', 'f', 'n':
		_, err := s.readLiteral()
		return err
	default:
		_, _, err := s.readNumber()
		return err
	}
}

// readArray iterates over the elements of an array; elem is called with the
// element index while the scanner sits at the element and must consume it.
func (s *scanner) readArray(depth int, elem func(i int) error) error {
	if depth > maxDepth {
		return s.syntaxError("nesting deeper than %d levels", maxDepth)
	}
	if err := s.consume('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		s.skipWS()
		if err := elem(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.unexpected("',' or ']' after an array element")
		}
	}
}
