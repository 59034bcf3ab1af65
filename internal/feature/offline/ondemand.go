package offline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/transform"
)

// hasOnDemand reports whether refs name an on-demand feature view.
func hasOnDemand(repo *registry.Repo, refs []feature.FeatureRef) bool {
	return slices.ContainsFunc(refs, func(r feature.FeatureRef) bool { return repo.OnDemandViews[r.View] != nil })
}

// odHistView is one requested on-demand view of a historical retrieval.
type odHistView struct {
	name   string
	prog   *transform.View
	want   []bool
	inputs []int // per prog input: a column of the base file, or -1 when no wanted output reads it
}

// odHistCol is one requested feature column of the output: a column of
// the base file (base ≥ 0) or output out of on-demand view view.
type odHistCol struct {
	name, src string // feature and view names
	typ       feature.Type
	base      int
	view, out int
}

// historicalOnDemand is Historical for requests that name on-demand
// views: the point-in-time join of the stored features they need runs
// first (as Historical does it), then each row's on-demand features are
// computed from that row's joined features and its request data (the
// entity rows' columns named after the request fields) by the
// expressions serving runs, compiled once with the repository. A value
// that serving answers with a status other than PRESENT (a missing input,
// a failed expression, NaN or ±Inf) is null here.
func historicalOnDemand(ctx context.Context, repo *registry.Repo, entities string, refs []feature.FeatureRef, out string, opts Options) (err error) {
	pl := &odPlan{}
	for _, ref := range refs {
		if err := pl.addRef(repo, ref); err != nil {
			return err
		}
	}
	pl.addInputs(repo)

	tmp, err := os.MkdirTemp(opts.TempDir, "sluice-ondemand-")
	if err != nil {
		return fmt.Errorf("create spill folder: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	baseFile := entities
	if len(pl.baseRefs) > 0 {
		baseFile = filepath.Join(tmp, "joined.parquet")
		if err := Historical(ctx, repo, entities, pl.baseRefs, baseFile, opts); err != nil {
			return err
		}
	}
	er, err := openEntities(baseFile, nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, er.done()) }()
	// Historical writes the entity columns, then the features grouped
	// by view in baseRefs order.
	nEnt := len(er.cols) - len(pl.pending)
	if err := pl.resolve(er.cols[:nEnt], entities); err != nil {
		return err
	}
	outCols, err := pl.outColumns(er.cols[:nEnt])
	if err != nil {
		return err
	}
	return writeOnDemand(ctx, out, er, outCols, nEnt, pl.cols, pl.views)
}

// odPlan is what historicalOnDemand joins and computes: the stored
// features to join first, the on-demand views to run and the columns to
// write.
type odPlan struct {
	baseRefs []feature.FeatureRef
	views    []*odHistView
	cols     []odHistCol
	pending  [][2]string // "view", "feature" of each base column, resolved below
	reqs     []odReqInput
}

// odReqInput is request data an on-demand view reads: input of views[view].
type odReqInput struct {
	view, input int
	field       feature.Field
}

// addBase adds a stored feature to join and returns its index in pending.
func (pl *odPlan) addBase(view, feat string) int {
	ref := view + ":" + feat
	for i, p := range pl.pending {
		if p[0]+":"+p[1] == ref {
			return i
		}
	}
	pl.pending = append(pl.pending, [2]string{view, feat})
	i := slices.IndexFunc(pl.baseRefs, func(r feature.FeatureRef) bool { return r.View == view })
	if i < 0 {
		pl.baseRefs = append(pl.baseRefs, feature.FeatureRef{View: view})
		i = len(pl.baseRefs) - 1
	}
	pl.baseRefs[i].Features = append(pl.baseRefs[i].Features, feat)
	return len(pl.pending) - 1
}

// addRef adds the columns of one requested reference.
func (pl *odPlan) addRef(repo *registry.Repo, ref feature.FeatureRef) error {
	od := repo.OnDemandViews[ref.View]
	var schema []feature.Field
	switch {
	case od != nil:
		schema = od.Schema
	case repo.Views[ref.View] != nil:
		schema = repo.Views[ref.View].Schema
	default:
		return fmt.Errorf("unknown feature view '%s'", ref.View)
	}
	names := ref.Features
	if len(names) == 0 {
		for _, f := range schema {
			names = append(names, f.Name)
		}
	}
	var hv *odHistView
	if od != nil {
		vi := slices.IndexFunc(pl.views, func(v *odHistView) bool { return v.name == od.Name })
		if vi < 0 {
			prog := repo.OnDemand(od.Name)
			if prog == nil {
				return fmt.Errorf("on-demand feature view '%s' is not compiled", od.Name)
			}
			pl.views = append(pl.views, &odHistView{name: od.Name, prog: prog, want: make([]bool, len(prog.Outputs))})
			vi = len(pl.views) - 1
		}
		hv = pl.views[vi]
	}
	for _, n := range names {
		fi := slices.IndexFunc(schema, func(f feature.Field) bool { return f.Name == n })
		if fi < 0 {
			return fmt.Errorf("feature view '%s' has no feature '%s'", ref.View, n)
		}
		c := odHistCol{name: n, src: ref.View, typ: schema[fi].Type, base: -1, view: slices.Index(pl.views, hv), out: fi}
		if hv == nil {
			c.base = pl.addBase(ref.View, n)
		} else {
			hv.want[fi] = true
		}
		pl.cols = append(pl.cols, c)
	}
	return nil
}

// addInputs adds the inputs the wanted outputs read: stored ones join
// like any feature, the others are request data.
func (pl *odPlan) addInputs(repo *registry.Repo) {
	for vi, hv := range pl.views {
		hv.inputs = make([]int, len(hv.prog.Inputs))
		used := make([]bool, len(hv.prog.Inputs))
		for oi, o := range hv.prog.Outputs {
			if hv.want[oi] {
				for _, u := range o.Uses {
					used[u] = true
				}
			}
		}
		for i, in := range hv.prog.Inputs {
			hv.inputs[i] = -1
			if !used[i] {
				continue
			}
			if view, feat, ok := strings.Cut(in.Name, "__"); ok && repo.Views[view] != nil {
				hv.inputs[i] = pl.addBase(view, feat)
				continue
			}
			pl.reqs = append(pl.reqs, odReqInput{view: vi, input: i, field: feature.Field{Name: in.Name, Type: in.Type}})
		}
	}
}

// resolve turns indexes into pending into columns of the joined file,
// whose entity columns are entCols, and finds each request input among
// them.
func (pl *odPlan) resolve(entCols []Column, entities string) error {
	nEnt := len(entCols)
	colOf := make([]int, len(pl.pending))
	for i, p := range pl.pending {
		pos := nEnt
		for _, r := range pl.baseRefs {
			if r.View == p[0] {
				colOf[i] = pos + slices.Index(r.Features, p[1])
				break
			}
			pos += len(r.Features)
		}
	}
	for i := range pl.cols {
		if pl.cols[i].base >= 0 {
			pl.cols[i].base = colOf[pl.cols[i].base]
		}
	}
	for _, hv := range pl.views {
		for i, c := range hv.inputs {
			if c >= 0 {
				hv.inputs[i] = colOf[c]
			}
		}
	}
	// Request data comes from the entity columns of the same names.
	for _, rq := range pl.reqs {
		ci := slices.IndexFunc(entCols, func(c Column) bool { return c.Name == rq.field.Name })
		if ci < 0 {
			return fmt.Errorf("entity rows %s: no column '%s' (request data that on-demand feature view '%s' reads)", entities, rq.field.Name, pl.views[rq.view].name)
		}
		pl.views[rq.view].inputs[rq.input] = ci
	}
	return nil
}

// outColumns names the written columns: the entity columns, then each
// requested one, prefixed with its view where two share a name.
func (pl *odPlan) outColumns(entCols []Column) ([]Column, error) {
	outCols := slices.Clone(entCols)
	seen := map[string]int{}
	for _, c := range outCols {
		seen[c.Name]++
	}
	for _, c := range pl.cols {
		seen[c.name]++
	}
	for i, c := range pl.cols {
		name := c.name
		if seen[name] > 1 {
			name = c.src + "__" + c.name
		}
		if slices.ContainsFunc(outCols, func(o Column) bool { return o.Name == name }) {
			return nil, fmt.Errorf("feature '%s' is requested twice or clashes with an entity column", name)
		}
		outCols = append(outCols, Column{Name: name, Type: pl.cols[i].typ})
	}
	return outCols, nil
}

// writeOnDemand writes out: each row of er's entity columns, then the
// requested columns, stored ones copied and on-demand ones computed.
func writeOnDemand(ctx context.Context, out string, er *entityReader, outCols []Column, nEnt int, cols []odHistCol, views []*odHistView) (err error) {
	return writeAtomic(out, outCols, func(w *Writer) error {
		ins := make([][]feature.Value, len(views))
		outs := make([][]feature.Value, len(views))
		outcomes := make([][]transform.Outcome, len(views))
		for vi, hv := range views {
			ins[vi] = make([]feature.Value, len(hv.prog.Inputs))
			outs[vi] = make([]feature.Value, len(hv.prog.Outputs))
			outcomes[vi] = make([]transform.Outcome, len(hv.prog.Outputs))
		}
		row := make([]feature.Value, 0, len(outCols))
		line := 0
		err := er.each(ctx, func(vals []feature.Value) error {
			line++
			for vi, hv := range views {
				for i, c := range hv.inputs {
					if c < 0 {
						ins[vi][i] = feature.Value{Null: true}
						continue
					}
					v, err := coerce(vals[c], er.cols[c].Type, hv.prog.Inputs[i].Type)
					if err != nil {
						return fmt.Errorf("entity row %d: column '%s': %w", line, er.cols[c].Name, err)
					}
					ins[vi][i] = v
				}
				hv.prog.Eval(ins[vi], hv.want, outs[vi], outcomes[vi])
			}
			row = append(row[:0], vals[:nEnt]...)
			for _, c := range cols {
				if c.base >= 0 {
					row = append(row, vals[c.base])
					continue
				}
				row = append(row, outs[c.view][c.out])
			}
			if err := w.Write(row); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return nil
	})
}

// coerce converts a value of an entity column (type from) into request
// field type to, as serving's JSON decoding does: integers widen to
// floats, Float32 rounds, text (a CSV column) is parsed.
func coerce(v feature.Value, from, to feature.Type) (feature.Value, error) {
	if v.Null || from == to {
		return v, nil
	}
	isInt := func(k feature.Kind) bool { return k == feature.KindInt32 || k == feature.KindInt64 }
	isFloat := func(k feature.Kind) bool { return k == feature.KindFloat32 || k == feature.KindFloat64 }
	if from.List || to.List {
		return v, fmt.Errorf("%s values cannot be request data of type %s", from, to)
	}
	switch {
	case from.Kind == feature.KindString && to.Kind != feature.KindString:
		return parseRequestText(v.S, to.Kind)
	case isInt(from.Kind) && isFloat(to.Kind):
		v = feature.Value{F64: float64(v.I64)}
	case isFloat(from.Kind) && isFloat(to.Kind), isInt(from.Kind) && isInt(to.Kind):
	default:
		return v, fmt.Errorf("%s values cannot be request data of type %s", from, to)
	}
	if to.Kind == feature.KindFloat32 {
		v.F64 = float64(float32(v.F64))
	}
	if to.Kind == feature.KindInt32 && (v.I64 < math.MinInt32 || v.I64 > math.MaxInt32) {
		return v, fmt.Errorf("%d is out of Int32's range", v.I64)
	}
	return v, nil
}

// parseRequestText parses request data written as text (a CSV cell).
func parseRequestText(s string, k feature.Kind) (feature.Value, error) {
	s = strings.TrimSpace(s)
	switch k {
	case feature.KindInt32, feature.KindInt64:
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil || (k == feature.KindInt32 && (x < math.MinInt32 || x > math.MaxInt32)) {
			return feature.Value{}, fmt.Errorf("%q is not an %s", s, k)
		}
		return feature.Value{I64: x}, nil
	case feature.KindFloat32, feature.KindFloat64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return feature.Value{}, fmt.Errorf("%q is not a number", s)
		}
		if k == feature.KindFloat32 {
			x = float64(float32(x))
		}
		return feature.Value{F64: x}, nil
	case feature.KindBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return feature.Value{}, fmt.Errorf("%q is not true or false", s)
		}
		return feature.Value{Bool: b}, nil
	default:
		return feature.Value{}, fmt.Errorf("text cannot be request data of type %s", k)
	}
}
