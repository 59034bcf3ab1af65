package rollout

import (
	"net/http"
	"slices"
	"strings"

	"github.com/sluice-ml/sluice/internal/match"
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
	headers []match.Header
	fields  []fieldRule
}

func compileGroup(g *Group, stage int) (groupSpec, error) {
	gs := groupSpec{name: g.Name, stage: stage}
	for _, h := range g.Headers {
		hr, err := h.Compile()
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
		if !g.headers[i].Match(req.Headers) {
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

// hash is the gateway's stable routing hash, so that a rollout's shares
// agree with the routes' sticky splits and entity hashes on every replica.
func hash(s string) uint64 { return match.Hash(s) }
