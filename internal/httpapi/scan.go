package httpapi

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/kservewire"
)

// maxDepth bounds JSON nesting anywhere in a request, so a body of many
// '[' cannot exhaust the stack or the per-depth bookkeeping. It is
// Triton's limit: a "data" array may nest 99 arrays deep, and deeper
// input is refused with Triton's words (depthError).
const maxDepth = 100

// scanner is a small JSON tokenizer over a byte slice. It validates as it
// goes and reports errors with the byte offset where they were found. The
// infer decoder drives it directly, so the data arrays never pass through
// an intermediate representation.
type scanner struct {
	buf []byte
	pos int
}

// syntaxError reports malformed JSON at the current offset.
func (s *scanner) syntaxError(format string, args ...any) *apierr.Error {
	return apierr.Errorf(apierr.KindInvalid, reasonInvalidJSON, "invalid JSON at byte offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

// depthError reports JSON nested deeper than maxDepth, in Triton's words
// (QA L0_http test_json_recursion_depth_limit greps for them).
func (s *scanner) depthError() *apierr.Error {
	return s.syntaxError("JSON nesting depth exceeds maximum allowed limit (%d)", maxDepth)
}

// unexpected reports the byte at the current offset (or the end of input)
// as not what was wanted.
func (s *scanner) unexpected(want string) *apierr.Error {
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
		return s.depthError()
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

// readNumber consumes a JSON number and returns its literal and whether it
// is an integer literal (no fraction or exponent).
func (s *scanner) readNumber() (tok []byte, integer bool, err error) {
	n, err := s.readDecimal()
	return n.Lit, n.Integer, err
}

// readDecimal consumes a JSON number, validating its grammar, and splits
// it into digits and exponent as it goes (kservewire.ScanNumber).
func (s *scanner) readDecimal() (kservewire.Number, error) {
	s.skipWS()
	n, end, err := kservewire.ScanNumber(s.buf, s.pos)
	if err != nil {
		s.pos = end
		want := "a digit"
		if se, ok := errors.AsType[*kservewire.SyntaxError](err); ok {
			want = se.Want
		}
		return kservewire.Number{}, s.unexpected(want)
	}
	s.pos = end
	return n, nil
}

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
		return s.depthError()
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
