package serving

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// plan is a compiled read: which views and fields a feature list needs,
// the entity columns it takes and the names and types it answers with.
// Plans are immutable and shared by concurrent requests.
type plan struct {
	keys     []keyCol         // entity columns, in first-use order
	keySets  [][]int          // distinct join-key combinations (indexes into keys)
	setKinds [][]feature.Kind // the kinds of each key set's keys
	views    []viewPlan       // views read, in first-use order
	cols     []outCol         // feature columns, in request order
	names    []string         // all column names: keys, then features
	types    []feature.Type
	od       *onDemandPlan // nil unless the request names on-demand views
}

type keyCol struct {
	name string
	kind feature.Kind
}

// keyIndex returns the index in p.keys of the join key name, or -1.
func (p *plan) keyIndex(name string) int {
	for i, k := range p.keys {
		if k.name == name {
			return i
		}
	}
	return -1
}

type viewPlan struct {
	view *feature.View
	// schema is the id of view's schema: rows written with it decode
	// as they are, others through a schema mapping (layouts).
	schema feature.SchemaID
	keySet int // index into plan.keySets
	kinds  []feature.Kind
	hot    *hotPlan
	// fieldCols maps each schema field to its feature column (an index
	// into plan.cols), or -1 when the field is not requested.
	fieldCols []int
	// cols lists the view's feature columns (indexes into plan.cols), in
	// request order.
	cols []int
	// stream is the tile arithmetic of a stream feature view: its
	// stored row holds tiles, combined at read time (nil otherwise).
	stream *aggregate.Spec
}

// hotPlan is a view's hot subset as serving uses it.
type hotPlan struct {
	view string
	ttl  time.Duration
	// members holds the hot entities' keys; nil means every entity is
	// looked up in the hot view.
	members map[string]struct{}
}

type outCol struct {
	view  int // index into plan.views
	field int // index into the view's schema
	name  string
}

// planKey identifies a plan in the cache: a repository snapshot and the
// request's feature selection.
// maxCachedPlans bounds the plan cache: clients choosing arbitrary feature
// lists cannot grow it without end. Plans past the bound are compiled per
// request.
const maxCachedPlans = 4096

// planCache caches compiled plans for the current repository snapshot,
// keyed by the request's feature selection (selectionKey); a new snapshot
// drops the old one's plans.
type planCache struct {
	mu   sync.RWMutex // protects repo and m
	repo *registry.Repo
	m    map[string]*plan
}

// appendSelectionKey appends the plan cache key of a feature selection.
func appendSelectionKey(dst []byte, features []string, service string, full bool) []byte {
	if full {
		dst = append(dst, 'F')
	} else {
		dst = append(dst, 'S')
	}
	if service != "" {
		dst = append(dst, "svc\x00"...)
		dst = append(dst, service...)
	}
	for _, f := range features {
		dst = append(dst, 0)
		dst = append(dst, f...)
	}
	return dst
}

// get returns the plan of a selection against repo. buf is scratch for the
// cache key; get returns it, possibly grown, for reuse.
func (c *planCache) get(repo *registry.Repo, features []string, service string, full bool, buf []byte) (*plan, []byte, error) {
	buf = appendSelectionKey(buf[:0], features, service, full)
	c.mu.RLock()
	var (
		p  *plan
		ok bool
	)
	if c.repo == repo {
		p, ok = c.m[string(buf)] // no allocation: the key is only looked up
	}
	c.mu.RUnlock()
	if ok {
		return p, buf, nil
	}
	p, err := compile(repo, features, service, full)
	if err != nil {
		return nil, buf, err
	}
	c.mu.Lock()
	if c.repo != repo {
		c.repo, c.m = repo, make(map[string]*plan)
	}
	if len(c.m) < maxCachedPlans {
		c.m[string(buf)] = p
	}
	c.mu.Unlock()
	return p, buf, nil
}

// selection is one view's requested features.
type selection struct {
	view     string
	features []string // empty: all of the view's features
}

// compile resolves a feature list ("view:feature") or a feature service
// against repo.
func compile(repo *registry.Repo, features []string, service string, full bool) (*plan, error) {
	sels, err := selections(repo, features, service)
	if err != nil {
		return nil, err
	}
	if p, ok, err := compileOnDemand(repo, sels, full); ok {
		return p, err
	}
	p := &plan{}
	seenName, err := p.selectColumns(repo, sels, full)
	if err != nil {
		return nil, err
	}
	if err := p.indexColumns(); err != nil {
		return nil, err
	}
	if err := p.nameOutputs(seenName); err != nil {
		return nil, err
	}
	return p, nil
}

// selections are the views and features a request names: a feature
// service's, or its "view:feature" references, never both.
func selections(repo *registry.Repo, features []string, service string) ([]selection, error) {
	var sels []selection
	switch {
	case service != "" && len(features) > 0:
		return nil, invalidf(ReasonInvalidRequest, "give either features or feature_service, not both")
	case service != "":
		svc, ok := repo.Services[service]
		if !ok {
			return nil, invalidf(ReasonUnknownService, "unknown feature service '%s'", service)
		}
		for _, r := range svc.Features {
			sels = append(sels, selection{view: r.View, features: r.Features})
		}
	case len(features) > 0:
		for _, ref := range features {
			view, feat, ok := strings.Cut(ref, ":")
			if !ok || view == "" || feat == "" {
				return nil, invalidf(ReasonUnknownFeature, "feature reference '%s': want 'view:feature'", ref)
			}
			sels = append(sels, selection{view: view, features: []string{feat}})
		}
	default:
		return nil, invalidf(ReasonInvalidRequest, "the request names no features: give features or feature_service")
	}
	return sels, nil
}

// selectColumns adds the views and output columns of sels to p, in
// request order, and returns each output name's "view:feature". A
// feature asked twice, or two features of one output name, are refused.
func (p *plan) selectColumns(repo *registry.Repo, sels []selection, full bool) (map[string]string, error) {
	viewIdx := make(map[string]int)
	seenName := make(map[string]string) // output name -> "view:feature"
	for _, sel := range sels {
		vi, err := p.viewIndex(repo, viewIdx, sel.view)
		if err != nil {
			return nil, err
		}
		v := p.views[vi].view
		fields := sel.features
		if len(fields) == 0 {
			fields = make([]string, len(v.Schema))
			for i, f := range v.Schema {
				fields[i] = f.Name
			}
		}
		for _, name := range fields {
			fi := slices.IndexFunc(v.Schema, func(f feature.Field) bool { return f.Name == name })
			if fi < 0 {
				return nil, invalidf(ReasonUnknownFeature, "unknown feature '%s:%s': view '%s' has no feature '%s'", v.Name, name, v.Name, name)
			}
			out := name
			if full {
				out = v.Name + "__" + name
			}
			ref := v.Name + ":" + name
			if prev, dup := seenName[out]; dup {
				if prev == ref {
					return nil, invalidf(ReasonDuplicateFeature, "feature '%s' is requested twice", ref)
				}
				return nil, invalidf(ReasonFeatureNameCollision, "features '%s' and '%s' are both named '%s': set full_feature_names to tell them apart", prev, ref, out)
			}
			seenName[out] = ref
			p.cols = append(p.cols, outCol{view: vi, field: fi, name: out})
		}
	}
	return seenName, nil
}

// viewIndex is the index in p.views of the view named name, added on its
// first mention; an unknown or offline view is refused.
func (p *plan) viewIndex(repo *registry.Repo, viewIdx map[string]int, name string) (int, error) {
	if vi, ok := viewIdx[name]; ok {
		return vi, nil
	}
	v, found := repo.Views[name]
	if !found {
		return 0, invalidf(ReasonUnknownView, "unknown feature view '%s'", name)
	}
	if !v.Online {
		return 0, invalidf(ReasonViewNotOnline, "feature view '%s' is not online (online: false)", v.Name)
	}
	vp, err := p.addView(repo, v)
	if err != nil {
		return 0, err
	}
	vi := len(p.views)
	p.views = append(p.views, vp)
	viewIdx[name] = vi
	return vi, nil
}

// indexColumns maps each view's schema fields to the output columns they
// fill, and lists each entity key set's kinds.
func (p *plan) indexColumns() error {
	for vi := range p.views {
		fc := make([]int, len(p.views[vi].view.Schema))
		for i := range fc {
			fc[i] = -1
		}
		p.views[vi].fieldCols = fc
	}
	for ci, c := range p.cols {
		vp := &p.views[c.view]
		if vp.fieldCols[c.field] >= 0 { // unreachable: duplicates are refused in selectColumns
			return invalidf(ReasonDuplicateFeature, "feature '%s:%s' is requested twice", vp.view.Name, vp.view.Schema[c.field].Name)
		}
		vp.fieldCols[c.field] = ci
		vp.cols = append(vp.cols, ci)
	}
	for _, set := range p.keySets {
		kinds := make([]feature.Kind, len(set))
		for j, ki := range set {
			kinds[j] = p.keys[ki].kind
		}
		p.setKinds = append(p.setKinds, kinds)
	}
	return nil
}

// nameOutputs lists the response's names and types: the entity keys,
// then the feature columns; a feature named as an entity key is refused.
func (p *plan) nameOutputs(seenName map[string]string) error {
	for _, k := range p.keys {
		p.names = append(p.names, k.name)
		p.types = append(p.types, feature.Type{Kind: k.kind})
	}
	for _, c := range p.cols {
		if slices.ContainsFunc(p.keys, func(k keyCol) bool { return k.name == c.name }) {
			return invalidf(ReasonFeatureNameCollision, "feature '%s' has the name of an entity key: set full_feature_names", seenName[c.name])
		}
		p.names = append(p.names, c.name)
		p.types = append(p.types, p.views[c.view].view.Schema[c.field].Type)
	}
	return nil
}

// addView resolves v's join keys into p's entity columns.
func (p *plan) addView(repo *registry.Repo, v *feature.View) (viewPlan, error) {
	vp := viewPlan{view: v, schema: feature.Fingerprint(v.Schema), stream: repo.StreamSpec(v.Name)}
	if v.Stream != nil && vp.stream == nil {
		return vp, fmt.Errorf("stream feature view '%s' is not compiled", v.Name)
	}
	set := make([]int, 0, len(v.Entities))
	for _, en := range v.Entities {
		e, ok := repo.Entities[en]
		if !ok {
			return vp, fmt.Errorf("feature view '%s': entity '%s' is not defined", v.Name, en)
		}
		ki := slices.IndexFunc(p.keys, func(k keyCol) bool { return k.name == e.JoinKey })
		if ki < 0 {
			ki = len(p.keys)
			p.keys = append(p.keys, keyCol{name: e.JoinKey, kind: e.ValueType.Kind})
		} else if p.keys[ki].kind != e.ValueType.Kind {
			return vp, invalidf(ReasonInvalidRequest, "join key '%s' is %s in one view and %s in view '%s'", e.JoinKey, p.keys[ki].kind, e.ValueType.Kind, v.Name)
		}
		set = append(set, ki)
		vp.kinds = append(vp.kinds, e.ValueType.Kind)
	}
	vp.keySet = slices.IndexFunc(p.keySets, func(s []int) bool { return slices.Equal(s, set) })
	if vp.keySet < 0 {
		vp.keySet = len(p.keySets)
		p.keySets = append(p.keySets, set)
	}
	if h := v.Hot; h != nil && h.View != "" {
		hp := &hotPlan{view: h.View, ttl: h.TTL}
		if len(h.Keys) > 0 && len(vp.kinds) == 1 {
			hp.members = make(map[string]struct{}, len(h.Keys))
			for _, k := range h.Keys {
				b, err := feature.AppendEntityKey(nil, vp.kinds, []feature.Value{k})
				if err != nil {
					return vp, fmt.Errorf("feature view '%s': hot key: %w", v.Name, err)
				}
				hp.members[string(b)] = struct{}{}
			}
		}
		vp.hot = hp
	}
	return vp, nil
}
