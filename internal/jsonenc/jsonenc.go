// Package jsonenc appends JSON string literals, and float32 numbers in
// their shortest form, to byte slices without reflection or allocation,
// for the hand-written response encoders of the HTTP edges (httpapi and
// the feature server).
//
// The output is always valid JSON: bytes that are not valid UTF-8 become
// \ufffd (U+FFFD), so a client decoding the string gets each such byte as
// one replacement character. Quote, backslash and control characters are
// escaped as encoding/json escapes them; other runes, U+2028 and U+2029
// included, are written as they are.
package jsonenc

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s to dst as a quoted JSON string and returns the
// extended slice.
func AppendString[S ~string | ~[]byte](dst []byte, s S) []byte {
	return appendString(dst, s, false)
}

// AppendHTMLSafeString is AppendString that also escapes '<', '>' and '&'
// (as \u003c, \u003e and \u0026, like encoding/json's default), so the
// string is safe to embed in HTML.
func AppendHTMLSafeString[S ~string | ~[]byte](dst []byte, s S) []byte {
	return appendString(dst, s, true)
}

func appendString[S ~string | ~[]byte](dst []byte, s S, htmlSafe bool) []byte {
	dst = append(dst, '"')
	start := 0 // s[start:i] is pending: it needs no escaping
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!htmlSafe || (c != '<' && c != '>' && c != '&')) {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		// At most utf8.UTFMax bytes are converted, so for a []byte the
		// conversion stays on the stack.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
