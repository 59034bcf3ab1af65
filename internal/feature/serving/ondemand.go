package serving

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/transform"
)

// ReasonInvalidRequestValue refuses a request data value of the wrong
// type (a string for a Float64 field).
const ReasonInvalidRequestValue = "invalid_request_value"

// onDemandPlan is the part of a plan that computes on-demand features: a
// plan of the stored features the request needs (those it asks for and
// the inputs of its on-demand views), the request fields, and where each
// answered column comes from.
type onDemandPlan struct {
	base  *plan
	req   []feature.Field // request fields the views read
	views []odView
	outs  []odOut // the answer's feature columns, in request order
	// spare are join keys and request fields of the views' sources that
	// the read does not need (no wanted output reads them): accepted,
	// unused.
	spare map[string]bool
}

// odView is one on-demand view of a request.
type odView struct {
	name    string
	prog    *transform.View
	inputs  []odInput  // one per prog.Inputs
	want    []bool     // the outputs the request reads
	active  []int      // the inputs the wanted outputs read: the only ones filled per row
	scratch *sync.Pool // *odScratch: one row's inputs and outputs, reused across requests
}

// odScratch is computeView's per-row working memory.
type odScratch struct {
	in       []feature.Value
	inSt     []Status
	inTS     []time.Time
	out      []feature.Value
	outcomes []transform.Outcome
}

// odInput says where an input's value comes from: a feature column of
// the base read (col ≥ 0) or a request field (field ≥ 0).
type odInput struct {
	col, field int
}

// odOut is one answered feature column: a column of the base read
// (baseCol ≥ 0) or output out of on-demand view view.
type odOut struct {
	baseCol   int
	view, out int
}

// viewIndex returns the index of on-demand view odv in od.views, adding
// it (with its compiled program and a pool of scratch space) the first
// time the selection names it.
func (od *onDemandPlan) viewIndex(repo *registry.Repo, odv *feature.OnDemandView, viewIdx map[string]int) (int, error) {
	if vi, ok := viewIdx[odv.Name]; ok {
		return vi, nil
	}
	prog := repo.OnDemand(odv.Name)
	if prog == nil {
		return 0, apierr.Errorf(apierr.KindInternal, ReasonInternal, "on-demand feature view '%s' is not compiled", odv.Name)
	}
	vi := len(od.views)
	nIn, nOut := len(prog.Inputs), len(prog.Outputs)
	od.views = append(od.views, odView{name: odv.Name, prog: prog, want: make([]bool, nOut), scratch: &sync.Pool{New: func() any {
		return &odScratch{
			in: make([]feature.Value, nIn), inSt: make([]Status, nIn), inTS: make([]time.Time, nIn),
			out: make([]feature.Value, nOut), outcomes: make([]transform.Outcome, nOut),
		}
	}}})
	viewIdx[odv.Name] = vi
	return vi, nil
}

// selectedFeatures returns the features a selection names: its list, or
// every feature of the view's schema when it names none.
func selectedFeatures(sel selection, schema []feature.Field) []string {
	if len(sel.features) > 0 {
		return sel.features
	}
	fields := make([]string, 0, len(schema))
	for _, f := range schema {
		fields = append(fields, f.Name)
	}
	return fields
}

// prepareInputs adds the base-read columns each on-demand view's inputs
// need and collects the spare request fields: the views' join keys and
// request-source fields, which may come in a request without being read.
func (od *onDemandPlan) prepareInputs(repo *registry.Repo, addBase func(view, feat string) int) error {
	od.spare = map[string]bool{}
	for vi := range od.views {
		if err := od.addInputs(repo, &od.views[vi], addBase); err != nil {
			return err
		}
		keys, _ := repo.JoinKeys(od.views[vi].name)
		for _, k := range keys {
			od.spare[k] = true
		}
		for _, in := range od.views[vi].prog.Inputs {
			if view, _, isFeature := strings.Cut(in.Name, "__"); !isFeature || repo.Views[view] == nil {
				od.spare[in.Name] = true // a request field: needed or not, it may come
			}
		}
	}
	return nil
}

// compileOnDemand compiles a selection that names on-demand views; ok is
// false when it names none (the caller compiles it as usual).
func compileOnDemand(repo *registry.Repo, sels []selection, full bool) (p *plan, ok bool, err error) {
	if !slices.ContainsFunc(sels, func(s selection) bool { return repo.OnDemandViews[s.view] != nil }) {
		return nil, false, nil
	}
	od := &onDemandPlan{}
	var baseRefs []string
	baseCol := map[string]int{} // "view:feature" -> index into baseRefs
	addBase := func(view, feat string) int {
		ref := view + ":" + feat
		if i, ok := baseCol[ref]; ok {
			return i
		}
		baseCol[ref] = len(baseRefs)
		baseRefs = append(baseRefs, ref)
		return len(baseRefs) - 1
	}
	viewIdx := map[string]int{}
	p = &plan{}
	seenName := map[string]string{}
	for _, sel := range sels {
		odv := repo.OnDemandViews[sel.view]
		var schema []feature.Field
		switch {
		case odv != nil:
			schema = odv.Schema
		case repo.Views[sel.view] != nil:
			schema = repo.Views[sel.view].Schema
		default:
			return nil, true, invalidf(ReasonUnknownView, "unknown feature view '%s'", sel.view)
		}
		vi := -1
		if odv != nil {
			if vi, err = od.viewIndex(repo, odv, viewIdx); err != nil {
				return nil, true, err
			}
		}
		for _, name := range selectedFeatures(sel, schema) {
			fi := slices.IndexFunc(schema, func(f feature.Field) bool { return f.Name == name })
			if fi < 0 {
				return nil, true, invalidf(ReasonUnknownFeature, "unknown feature '%s:%s': view '%s' has no feature '%s'", sel.view, name, sel.view, name)
			}
			out, ref := name, sel.view+":"+name
			if full {
				out = sel.view + "__" + name
			}
			if prev, dup := seenName[out]; dup {
				if prev == ref {
					return nil, true, invalidf(ReasonDuplicateFeature, "feature '%s' is requested twice", ref)
				}
				return nil, true, invalidf(ReasonFeatureNameCollision, "features '%s' and '%s' are both named '%s': set full_feature_names to tell them apart", prev, ref, out)
			}
			seenName[out] = ref
			o := odOut{baseCol: -1, view: vi, out: fi}
			if odv == nil {
				o = odOut{baseCol: addBase(sel.view, name)}
			} else {
				od.views[vi].want[fi] = true
			}
			od.outs = append(od.outs, o)
			p.names = append(p.names, out)
			p.types = append(p.types, schema[fi].Type)
		}
	}
	if err := od.prepareInputs(repo, addBase); err != nil {
		return nil, true, err
	}
	if len(baseRefs) > 0 {
		if od.base, err = compile(repo, baseRefs, "", true); err != nil {
			return nil, true, err
		}
	} else {
		od.base = &plan{} // request data only
	}
	p.keys, p.keySets, p.setKinds = od.base.keys, od.base.keySets, od.base.setKinds
	for _, k := range p.keys {
		delete(od.spare, k.name)
	}
	for _, k := range p.keys {
		if _, clash := seenName[k.name]; clash {
			return nil, true, invalidf(ReasonFeatureNameCollision, "feature '%s' has the name of an entity key: set full_feature_names", seenName[k.name])
		}
	}
	names := make([]string, 0, len(p.keys)+len(p.names))
	types := make([]feature.Type, 0, len(p.keys)+len(p.names))
	for _, k := range p.keys {
		names = append(names, k.name)
		types = append(types, feature.Type{Kind: k.kind})
	}
	p.names, p.types = append(names, p.names...), append(types, p.types...)
	p.od = od
	return p, true, nil
}

// addInputs adds the inputs that v's wanted outputs read: source views'
// features to the base read (through addBase) and request fields. Inputs
// no wanted output reads are left out (col and field -1).
func (od *onDemandPlan) addInputs(repo *registry.Repo, v *odView, addBase func(view, feat string) int) error {
	prog := v.prog
	v.inputs = make([]odInput, len(prog.Inputs))
	used := make([]bool, len(prog.Inputs))
	for oi, o := range prog.Outputs {
		if v.want[oi] {
			for _, u := range o.Uses {
				used[u] = true
			}
		}
	}
	for i, in := range prog.Inputs {
		if !used[i] {
			v.inputs[i] = odInput{col: -1, field: -1}
			continue
		}
		v.active = append(v.active, i)
		view, feat, isFeature := strings.Cut(in.Name, "__")
		if isFeature && repo.Views[view] != nil {
			v.inputs[i] = odInput{col: addBase(view, feat), field: -1}
			continue
		}
		fi := slices.IndexFunc(od.req, func(f feature.Field) bool { return f.Name == in.Name })
		if fi < 0 {
			fi = len(od.req)
			od.req = append(od.req, feature.Field{Name: in.Name, Type: in.Type})
		} else if od.req[fi].Type != in.Type {
			return invalidf(ReasonInvalidRequest, "request field '%s' is %s in one request source and %s in another", in.Name, od.req[fi].Type, in.Type)
		}
		v.inputs[i] = odInput{col: -1, field: fi}
	}
	return nil
}

// requestField returns the type of request field name, if p reads one.
func (p *plan) requestField(name string) (feature.Type, bool) {
	if p.od == nil {
		return feature.Type{}, false
	}
	for _, f := range p.od.req {
		if f.Name == name {
			return f.Type, true
		}
	}
	return feature.Type{}, false
}

// withContext returns entities with the request fields of ctx that p
// reads added (Feast's request_context); other names in ctx are ignored.
func (p *plan) withContext(entities, ctx map[string][]feature.Value) map[string][]feature.Value {
	if p.od == nil || len(ctx) == 0 {
		return entities
	}
	out := make(map[string][]feature.Value, len(entities)+len(p.od.req))
	maps.Copy(out, entities)
	for _, f := range p.od.req {
		if v, ok := ctx[f.Name]; ok {
			if _, set := out[f.Name]; !set {
				out[f.Name] = v
			}
		}
	}
	return out
}

// statusRank orders statuses from best to worst: a computed value gets
// the worst status of the inputs it reads.
func statusRank(s Status) int {
	switch s {
	case StatusPresent:
		return 0
	case StatusNullValue:
		return 1
	case StatusOutsideMaxAge:
		return 2
	default:
		return 3
	}
}

// readOnDemand answers a plan with on-demand views: it reads the stored
// features, then computes each on-demand value from its inputs. Bad
// request data never fails the request: a missing request field or a
// null input gives its features NOT_FOUND or NULL_VALUE, an expression
// that fails (integer division by zero) or yields NaN or ±Inf gives
// NULL_VALUE.
func (s *Server) readOnDemand(ctx context.Context, p *plan, entities map[string][]feature.Value, eventTS *time.Time) (*Response, error) {
	od := p.od
	keys := make(map[string][]feature.Value, len(p.keys))
	reqCols := make([][]feature.Value, len(od.req))
	reqSet := make([]bool, len(od.req))
	n := -1
	first := ""
	for name, col := range entities {
		if fi := slices.IndexFunc(od.req, func(f feature.Field) bool { return f.Name == name }); fi >= 0 {
			reqCols[fi], reqSet[fi] = col, true
			if n < 0 {
				n, first = len(col), name
			} else if len(col) != n {
				return nil, invalidf(ReasonEntityLengthMismatch, "'%s' has %d values but '%s' has %d: every entity and request data column needs one value per row", name, len(col), first, n)
			}
			continue
		}
		if !od.spare[name] {
			keys[name] = col
		}
	}
	var base *Response
	if len(od.base.keys) > 0 || len(od.base.cols) > 0 {
		var err error
		if base, err = s.read(ctx, od.base, keys, eventTS); err != nil {
			return nil, err
		}
		if len(base.Results) > 0 {
			rows := len(base.Results[0].Values)
			if n >= 0 && rows != n {
				return nil, invalidf(ReasonEntityLengthMismatch, "request data column '%s' has %d values but the entity columns have %d", first, n, rows)
			}
			n = rows
		}
	} else if len(keys) > 0 {
		for name := range keys {
			return nil, invalidf(ReasonUnknownEntityKey, "unknown entity key '%s': no requested feature view is keyed by it", name)
		}
	}
	n = max(n, 0)
	resp := &Response{FeatureNames: p.names, Types: p.types, EntityColumns: len(p.keys), Results: make([]Column, len(p.names))}
	if base != nil {
		copy(resp.Results, base.Results[:base.EntityColumns])
	}
	// Compute every on-demand view's outputs row by row.
	computed := make([][]Column, len(od.views))
	var counts [len(statusNames)]int
	for vi := range od.views {
		computed[vi] = s.computeView(&od.views[vi], base, reqCols, reqSet, od.req, n)
	}
	for i, o := range od.outs {
		ci := len(p.keys) + i
		if o.baseCol >= 0 {
			resp.Results[ci] = base.Results[base.EntityColumns+o.baseCol]
			continue
		}
		resp.Results[ci] = computed[o.view][o.out]
		for _, st := range computed[o.view][o.out].Statuses {
			counts[st]++
		}
	}
	for st, c := range counts {
		if c > 0 {
			s.statusCounters[st].Add(float64(c))
		}
	}
	return resp, nil
}

// computeView computes all outputs of one on-demand view for n rows.
func (s *Server) computeView(v *odView, base *Response, reqCols [][]feature.Value, reqSet []bool, req []feature.Field, n int) []Column {
	outs := v.prog.Outputs
	cols := make([]Column, len(outs)) // only the wanted ones get storage
	wanted := 0
	for _, w := range v.want {
		if w {
			wanted++
		}
	}
	values := make([]feature.Value, n*wanted)
	statuses := make([]Status, n*wanted)
	stamps := make([]time.Time, n*wanted)
	k := 0
	for oi := range cols {
		if !v.want[oi] {
			continue
		}
		cols[oi] = Column{Values: values[k*n : (k+1)*n : (k+1)*n], Statuses: statuses[k*n : (k+1)*n : (k+1)*n], EventTimestamps: stamps[k*n : (k+1)*n : (k+1)*n]}
		k++
	}
	sc := v.scratch.Get().(*odScratch)
	defer func() {
		clear(sc.in) // drop references to the request's strings and lists
		clear(sc.out)
		v.scratch.Put(sc)
	}()
	in, inSt, inTS, out, outcomes := sc.in, sc.inSt, sc.inTS, sc.out, sc.outcomes
	var failed [4]int
	for r := range n {
		for _, i := range v.active {
			src := v.inputs[i]
			inTS[i] = epoch
			switch {
			case src.col >= 0:
				c := &base.Results[base.EntityColumns+src.col]
				in[i], inSt[i], inTS[i] = c.Values[r], c.Statuses[r], c.EventTimestamps[r]
			case src.field < 0 || !reqSet[src.field]:
				in[i], inSt[i] = feature.Value{Null: true}, StatusNotFound
			default:
				in[i], inSt[i] = reqCols[src.field][r], StatusPresent
				if in[i].Null {
					inSt[i] = StatusNullValue
				} else if t := req[src.field].Type; t.Kind == feature.KindFloat32 && !t.List {
					// As every edge decodes a Float32 (Go API callers too).
					in[i].F64 = float64(float32(in[i].F64))
				}
			}
			if inSt[i] == StatusNotFound {
				in[i] = feature.Value{Null: true}
			}
		}
		v.prog.Eval(in, v.want, out, outcomes)
		for oi := range outs {
			if !v.want[oi] {
				continue
			}
			st, ts := StatusPresent, epoch
			for _, u := range outs[oi].Uses {
				if statusRank(inSt[u]) > statusRank(st) {
					st = inSt[u]
				}
				if inTS[u].After(ts) {
					ts = inTS[u]
				}
			}
			// A missing input already gave st its status; an expression
			// that failed on inputs that were there gives NULL_VALUE.
			if oc := outcomes[oi]; oc == transform.Failed || oc == transform.NotFinite {
				failed[oc]++
				if st == StatusPresent {
					st = StatusNullValue
				}
			}
			cols[oi].Values[r], cols[oi].Statuses[r], cols[oi].EventTimestamps[r] = out[oi], st, ts
		}
	}
	for oc, c := range failed {
		if c > 0 {
			s.metrics.odFailures.WithLabelValues(v.name, transform.Outcome(oc).Reason()).Add(float64(c))
		}
	}
	return cols
}
