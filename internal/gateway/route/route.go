package route

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/match"
)

// Buckets is the number of buckets a weighted split is cut into; weights are
// in percent, so it is 100.
const Buckets = 100

// DefaultModulo is an entity hash's modulo when the configuration leaves it 0.
const DefaultModulo = 100

// Request is what routing looks at in one request.
type Request struct {
	// Headers are the request headers with canonical keys, as net/http
	// produces them (or as http.Header.Set/Add store them); gRPC metadata must
	// be copied in with Add. Only the first value of a header is matched.
	Headers http.Header
	// Values are the request's entity join keys and request fields, as strings.
	Values map[string]string
}

// Target is where a request goes.
type Target struct {
	// Route is the name of the route that matched.
	Route string
	// Backend names the gateway backend.
	Backend string
	// Model is the model; empty means the service's model.
	Model string
	// Version is the model version; empty means the service's default version.
	Version string
}

// Table is a service's ordered routes. It is immutable once built and safe
// for concurrent use, provided the random source is.
type Table struct {
	routes []rule
	randN  func(n int) int
}

// Option configures a Table.
type Option func(*Table)

// WithRand sets the source of random buckets for non-sticky splits: randN(n)
// returns a number in [0, n). It must be safe for concurrent use if the table
// is used concurrently. The default is math/rand/v2's IntN.
func WithRand(randN func(n int) int) Option {
	return func(t *Table) { t.randN = randN }
}

type entityRule struct {
	key    string
	modulo uint64
	below  uint64
}

type share struct {
	upTo    int // exclusive cumulative bucket bound
	backend string
	model   string
	version string
}

type rule struct {
	name    string
	headers []match.Header
	entity  *entityRule
	shares  []share
	sticky  string
}

// FromConfig builds a Table from a service's routes, in order. It checks every
// route: a non-empty unique name, exactly one matcher per header match, valid
// regular expressions, 0 <= below <= modulo, and weights >= 0 that sum to 100
// with a backend for each share.
func FromConfig(routes []config.Route, opts ...Option) (*Table, error) {
	t := &Table{randN: rand.IntN}
	for _, o := range opts {
		o(t)
	}
	seen := make(map[string]bool, len(routes))
	for i := range routes {
		r, err := buildRule(&routes[i])
		if err != nil {
			return nil, fmt.Errorf("route %d (%q): %w", i, routes[i].Name, err)
		}
		if seen[r.name] {
			return nil, fmt.Errorf("route %d (%q): duplicate name", i, r.name)
		}
		seen[r.name] = true
		t.routes = append(t.routes, r)
	}
	return t, nil
}

func buildRule(c *config.Route) (rule, error) {
	r := rule{name: c.Name, sticky: c.Route.StickyKey}
	if r.name == "" {
		return rule{}, errors.New("name is empty")
	}
	for _, h := range c.Match.Headers {
		hr, err := h.Compile()
		if err != nil {
			return rule{}, err
		}
		r.headers = append(r.headers, hr)
	}
	if e := c.Match.EntityHash; e != nil {
		mod := e.Modulo
		if mod == 0 {
			mod = DefaultModulo
		}
		switch {
		case e.Key == "":
			return rule{}, errors.New("entity_hash: key is empty")
		case mod < 0:
			return rule{}, fmt.Errorf("entity_hash: modulo %d is negative", mod)
		case e.Below < 0 || e.Below > mod:
			return rule{}, fmt.Errorf("entity_hash: below %d is outside 0..%d", e.Below, mod)
		}
		r.entity = &entityRule{key: e.Key, modulo: uint64(mod), below: uint64(e.Below)}
	}
	if len(c.Route.Weighted) == 0 {
		return rule{}, errors.New("route.weighted is empty")
	}
	sum := 0
	for _, w := range c.Route.Weighted {
		if w.Backend == "" {
			return rule{}, errors.New("weighted: backend is empty")
		}
		if w.Weight < 0 {
			return rule{}, fmt.Errorf("weighted: backend %q has negative weight %d", w.Backend, w.Weight)
		}
		sum += w.Weight
		r.shares = append(r.shares, share{upTo: sum, backend: w.Backend, model: w.Model, version: w.Version})
	}
	if sum != Buckets {
		return rule{}, fmt.Errorf("weighted: weights sum to %d, want %d", sum, Buckets)
	}
	return r, nil
}

// Len returns the number of routes.
func (t *Table) Len() int { return len(t.routes) }

// UsesValues reports whether Match looks at Request.Values: a route has
// an entity-hash match or a sticky split. When it does not, a caller may
// leave Values nil.
func (t *Table) UsesValues() bool {
	for i := range t.routes {
		r := &t.routes[i]
		if r.entity != nil || (r.sticky != "" && len(r.shares) > 1) {
			return true
		}
	}
	return false
}

// Match returns the target of the first route whose match holds, and false
// when none does.
func (t *Table) Match(req Request) (Target, bool) {
	for i := range t.routes {
		r := &t.routes[i]
		if !r.matches(req) {
			continue
		}
		s := r.pick(req, t.randN)
		return Target{Route: r.name, Backend: s.backend, Model: s.model, Version: s.version}, true
	}
	return Target{}, false
}

func (r *rule) matches(req Request) bool {
	for i := range r.headers {
		if !r.headers[i].Match(req.Headers) {
			return false
		}
	}
	if e := r.entity; e != nil {
		v, ok := req.Values[e.key]
		if !ok || Hash(v)%e.modulo >= e.below {
			return false
		}
	}
	return true
}

func (r *rule) pick(req Request, randN func(int) int) *share {
	if len(r.shares) == 1 {
		return &r.shares[0]
	}
	var b int
	if v, ok := req.Values[r.sticky]; ok && r.sticky != "" {
		b = int(Hash(v) % Buckets)
	} else {
		b = randN(Buckets)
	}
	for i := range r.shares {
		if b < r.shares[i].upTo {
			return &r.shares[i]
		}
	}
	return &r.shares[len(r.shares)-1]
}

// Hash is the stable routing hash of a value, [match.Hash]: 64-bit FNV-1a
// over its bytes, then MurmurHash3's fmix64 finaliser. It never changes
// between releases, so the same id routes the same way on every replica and
// after restarts.
func Hash(s string) uint64 { return match.Hash(s) }

// ShareBuckets is the resolution of a hashed share of requests (a shadow's
// or an accuracy log's percent): key is in the share when
// Hash(key) % ShareBuckets < percent × ShareBuckets / 100.
const ShareBuckets = 10_000

// InShare reports whether the requests whose key is key fall in the share
// percent. It depends only on key and percent, so every replica, and
// every replay of a recording, picks the same requests.
func InShare(key string, percent float64) bool {
	return float64(Hash(key)%ShareBuckets) < percent*ShareBuckets/100
}
