// Package match holds the request-matching rules that the gateway's routes
// and the rollout controller's traffic groups share: a header match as
// sluice.yaml writes it ([HeaderMatch]), checked and compiled once into a
// [Header], and the stable [Hash] behind entity hashes, sticky splits,
// rollout shares, shadow mirroring and access-log sampling.
//
// It imports only the standard library, and that is why it is a package of
// its own: a leaf that config (sluice.yaml's routes, and through
// rolloutspec its rollout groups) may import while config stays data, and
// that route and rollout use without importing each other.
package match

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// HeaderMatch matches one header of a request. The name is compared
// case-insensitively (Envoy's rule), only the header's first value is
// matched, and exactly one of Exact, Prefix, Regex and Present is set.
type HeaderMatch struct {
	// Name is the header name (case-insensitive).
	Name string `yaml:"name"`
	// Exact matches the whole value.
	Exact *string `yaml:"exact"`
	// Prefix matches the start of the value.
	Prefix *string `yaml:"prefix"`
	// Regex matches the whole value with an RE2 expression.
	Regex *string `yaml:"regex"`
	// Present matches when the header is (true) or is not (false) sent; a
	// header sent with an empty value is present.
	Present *bool `yaml:"present"`
}

// kind is the kind of a compiled header match.
type kind uint8

const (
	kindExact kind = iota
	kindPrefix
	kindRegex
	kindPresent
)

// Header is a compiled [HeaderMatch]; build one with [HeaderMatch.Compile].
// It is immutable and safe for concurrent use.
type Header struct {
	name    string // canonical key
	kind    kind
	value   string
	re      *regexp.Regexp
	present bool
}

// Compile checks h and compiles it. The name must not be empty, exactly one
// of Exact, Prefix, Regex and Present must be set, and Regex must be a valid
// RE2 expression; it is anchored so that it must match the whole value.
func (h HeaderMatch) Compile() (Header, error) {
	if h.Name == "" {
		return Header{}, errors.New("header match: name is empty")
	}
	c := Header{name: http.CanonicalHeaderKey(h.Name)}
	n := 0
	if h.Exact != nil {
		n++
		c.kind, c.value = kindExact, *h.Exact
	}
	if h.Prefix != nil {
		n++
		c.kind, c.value = kindPrefix, *h.Prefix
	}
	if h.Regex != nil {
		n++
		// The expression is checked on its own first: wrapped in the
		// anchors, an unbalanced one such as "a)|(b" would compile into a
		// half-anchored "^(?:a)|(b)$".
		_, err := regexp.Compile(*h.Regex)
		var re *regexp.Regexp
		if err == nil {
			re, err = regexp.Compile(`^(?:` + *h.Regex + `)$`)
		}
		if err != nil {
			return Header{}, fmt.Errorf("header %q: compile regex: %w", h.Name, err)
		}
		c.kind, c.re = kindRegex, re
	}
	if h.Present != nil {
		n++
		c.kind, c.present = kindPresent, *h.Present
	}
	if n != 1 {
		return Header{}, fmt.Errorf("header %q: want exactly one of exact, prefix, regex, present; got %d", h.Name, n)
	}
	return c, nil
}

// Match reports whether hdr satisfies the match. The keys of hdr must be
// canonical, as net/http produces them (and http.Header.Set/Add store
// them). Only the first value of the header is looked at. Match does not
// allocate.
func (h *Header) Match(hdr http.Header) bool {
	vs, ok := hdr[h.name]
	if h.kind == kindPresent {
		return ok == h.present
	}
	if len(vs) == 0 {
		return false
	}
	v := vs[0]
	switch h.kind {
	case kindExact:
		return v == h.value
	case kindPrefix:
		return strings.HasPrefix(v, h.value)
	case kindRegex:
		return h.re.MatchString(v)
	default:
		return false
	}
}

// Hash is the stable hash of a value: 64-bit FNV-1a over its bytes, then
// MurmurHash3's 64-bit finaliser (fmix64). FNV-1a alone leaves its high bits
// poorly spread for short ids that differ only in their last characters
// ("r1", "r2", ...); the finaliser spreads them over every bit. Hash never
// changes between releases, so one value maps the same way on every replica
// and after restarts.
func Hash(s string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
