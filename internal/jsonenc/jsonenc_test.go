package jsonenc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// replaceInvalid returns s with each byte that is not valid UTF-8 replaced
// by U+FFFD, which is what a client decoding our output must get back.
func replaceInvalid(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r)
		i += size
	}
	return b.String()
}

func TestAppendString(t *testing.T) {
	cases := []struct {
		name, in, want, wantHTML string
	}{
		{"empty", "", `""`, `""`},
		{"plain", "plain text", `"plain text"`, `"plain text"`},
		{"quote and backslash", `a"b\c`, `"a\"b\\c"`, `"a\"b\\c"`},
		{"short escapes", "\n\r\t", `"\n\r\t"`, `"\n\r\t"`},
		{"other control chars", "\x00\x01\b\f\x1f", `"\u0000\u0001\u0008\u000c\u001f"`, `"\u0000\u0001\u0008\u000c\u001f"`},
		{"delete is not a control escape", "\x7f", "\"\x7f\"", "\"\x7f\""},
		{"html characters", "<a href='x'>&</a>", `"<a href='x'>&</a>"`, `"\u003ca href='x'\u003e\u0026\u003c/a\u003e"`},
		{"multi-byte runes", "é€😀", `"é€😀"`, `"é€😀"`},
		{"line separators pass through", "\u2028\u2029", "\"\u2028\u2029\"", "\"\u2028\u2029\""},
		{"invalid byte", "a\xffb", `"a\ufffdb"`, `"a\ufffdb"`},
		{"each invalid byte is one replacement", "\xff\xfe", `"\ufffd\ufffd"`, `"\ufffd\ufffd"`},
		{"truncated rune at end", "a\xc3", `"a\ufffd"`, `"a\ufffd"`},
		{"truncated four-byte rune", "\xf0\x9f\x98", `"\ufffd\ufffd\ufffd"`, `"\ufffd\ufffd\ufffd"`},
		{"surrogate half", "\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`, `"\ufffd\ufffd\ufffd"`},
		{"literal replacement char is kept", "\uFFFD", "\"\uFFFD\"", "\"\uFFFD\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, string(AppendString(nil, c.in)))
			require.Equal(t, c.want, string(AppendString(nil, []byte(c.in))))
			require.Equal(t, c.wantHTML, string(AppendHTMLSafeString(nil, c.in)))
			require.Equal(t, c.wantHTML, string(AppendHTMLSafeString(nil, []byte(c.in))))

			for _, out := range [][]byte{AppendString(nil, c.in), AppendHTMLSafeString(nil, c.in)} {
				var back string
				require.NoError(t, json.Unmarshal(out, &back), "%s", out)
				require.Equal(t, replaceInvalid(c.in), back)
			}
		})
	}
}

func TestAppendStringAppends(t *testing.T) {
	type name string // named types are accepted
	dst := []byte(`{"k":`)
	dst = AppendString(dst, name("v"))
	dst = append(dst, `,"h":`...)
	dst = AppendHTMLSafeString(dst, json.RawMessage("<"))
	dst = append(dst, '}')
	require.Equal(t, `{"k":"v","h":"\u003c"}`, string(dst))
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	// For valid UTF-8 without \b, \f, U+2028 or U+2029 (which encoding/json
	// writes differently but equivalently), the HTML-safe output is
	// byte-for-byte what encoding/json produces.
	for _, s := range []string{"", "x", `"\`, "<>&", "\x00\x1f\n\r\t", "日本語 😀", "a\x7fb"} {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(AppendHTMLSafeString(nil, s)), "%q", s)
	}
}

func TestAppendStringDoesNotAllocate(t *testing.T) {
	in := []byte("héllo \"wörld\" \xff <😀>\n")
	dst := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		dst = AppendHTMLSafeString(dst[:0], in)
		dst = AppendString(dst, string(in))
	})
	require.Zero(t, allocs)
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\", "\x00\x1f\n", "<&>", "é😀", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "\u2028"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want := replaceInvalid(string(in))
		plain := AppendString(nil, in)
		html := AppendHTMLSafeString(nil, in)
		require.Equal(t, plain, AppendString(nil, string(in)), "string and []byte inputs agree")
		require.Equal(t, html, AppendHTMLSafeString(nil, string(in)), "string and []byte inputs agree")
		require.False(t, bytes.ContainsAny(html, "<>&"), "%s", html)
		for _, out := range [][]byte{plain, html} {
			require.True(t, json.Valid(out), "%q -> %s", in, out)
			var back string
			require.NoError(t, json.Unmarshal(out, &back))
			require.Equal(t, want, back)
		}
	})
}
