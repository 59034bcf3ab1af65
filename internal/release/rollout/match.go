package rollout

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Attributes are what the controller looks at in one request.
type Attributes struct {
	// Headers are the request headers with canonical keys, as net/http
	// produces them. Only the first value of a header is matched.
	Headers http.Header
	// Values are the request's entity join keys and request fields, as
	// strings.
	Values map[string]string
	// RequestID is hashed to pick the traffic and control shares when the
	// request carries no value for Config.HashKey.
	RequestID string
}

// compileHeader checks and compiles one header match.
func compileHeader(h HeaderMatch) (headerRule, error) {
	if h.Name == "" {
		return headerRule{}, errors.New("header match: name is empty")
	}
	hr := headerRule{name: http.CanonicalHeaderKey(h.Name)}
	n := 0
	if h.Exact != nil {
		n++
		hr.kind, hr.value = headerExact, *h.Exact
	}
	if h.Prefix != nil {
		n++
		hr.kind, hr.value = headerPrefix, *h.Prefix
	}
	if h.Regex != nil {
		n++
		re, err := regexp.Compile(`^(?:` + *h.Regex + `)$`)
		if err != nil {
			return headerRule{}, fmt.Errorf("header %q: compile regex: %w", h.Name, err)
		}
		hr.kind, hr.re = headerRegex, re
	}
	if h.Present != nil {
		n++
		hr.kind, hr.present = headerPresent, *h.Present
	}
	if n != 1 {
		return headerRule{}, fmt.Errorf("header %q: want exactly one of exact, prefix, regex, present; got %d", h.Name, n)
	}
	return hr, nil
}

func (h *headerRule) matches(hdr http.Header) bool {
	vs, ok := hdr[h.name]
	if h.kind == headerPresent {
		return ok == h.present
	}
	if len(vs) == 0 {
		return false
	}
	v := vs[0]
	switch h.kind {
	case headerExact:
		return v == h.value
	case headerPrefix:
		return strings.HasPrefix(v, h.value)
	case headerRegex:
		return h.re.MatchString(v)
	default:
		return false
	}
}

// fieldRule matches one request field against a set of values.
type fieldRule struct {
	field  string
	values []string
}

// groupSpec is a compiled Group.
type groupSpec struct {
	name    string
	stage   int
	all     bool // the final stage's group: matches every request
	headers []headerRule
	fields  []fieldRule
}

func compileGroup(g *Group, stage int) (groupSpec, error) {
	gs := groupSpec{name: g.Name, stage: stage}
	for _, h := range g.Headers {
		hr, err := compileHeader(h)
		if err != nil {
			return groupSpec{}, err
		}
		gs.headers = append(gs.headers, hr)
	}
	for f, vs := range g.Fields {
		gs.fields = append(gs.fields, fieldRule{field: f, values: slices.Clone(vs)})
	}
	// Sorted so that the match order, and so its cost, never varies.
	slices.SortFunc(gs.fields, func(a, b fieldRule) int { return strings.Compare(a.field, b.field) })
	return gs, nil
}

func (g *groupSpec) matches(req *Attributes) bool {
	if g.all {
		return true
	}
	for i := range g.headers {
		if !g.headers[i].matches(req.Headers) {
			return false
		}
	}
	for i := range g.fields {
		v, ok := req.Values[g.fields[i].field]
		if !ok || !slices.Contains(g.fields[i].values, v) {
			return false
		}
	}
	return true
}

// hash is the gateway's stable routing hash (route.Hash): 64-bit FNV-1a over
// the bytes of s, then MurmurHash3's fmix64 finaliser. It is copied rather
// than imported because the config package embeds this package's Config,
// and route imports config.
func hash(s string) uint64 {
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
