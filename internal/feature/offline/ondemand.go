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
	var (
		baseRefs []feature.FeatureRef
		views    []*odHistView
		cols     []odHistCol
		pending  [][2]string // "view", "feature" of each base column, resolved below
	)
	addBase := func(view, feat string) int {
		ref := view + ":" + feat
		for i, p := range pending {
			if p[0]+":"+p[1] == ref {
				return i
			}
		}
		pending = append(pending, [2]string{view, feat})
		i := slices.IndexFunc(baseRefs, func(r feature.FeatureRef) bool { return r.View == view })
		if i < 0 {
			baseRefs = append(baseRefs, feature.FeatureRef{View: view})
			i = len(baseRefs) - 1
		}
		baseRefs[i].Features = append(baseRefs[i].Features, feat)
		return len(pending) - 1
	}
	for _, ref := range refs {
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
			vi := slices.IndexFunc(views, func(v *odHistView) bool { return v.name == od.Name })
			if vi < 0 {
				prog := repo.OnDemand(od.Name)
				if prog == nil {
					return fmt.Errorf("on-demand feature view '%s' is not compiled", od.Name)
				}
				views = append(views, &odHistView{name: od.Name, prog: prog, want: make([]bool, len(prog.Outputs))})
				vi = len(views) - 1
			}
			hv = views[vi]
		}
		for _, n := range names {
			fi := slices.IndexFunc(schema, func(f feature.Field) bool { return f.Name == n })
			if fi < 0 {
				return fmt.Errorf("feature view '%s' has no feature '%s'", ref.View, n)
			}
			c := odHistCol{name: n, src: ref.View, typ: schema[fi].Type, base: -1, view: slices.Index(views, hv), out: fi}
			if hv == nil {
				c.base = addBase(ref.View, n)
			} else {
				hv.want[fi] = true
			}
			cols = append(cols, c)
		}
	}
	// The stored inputs the wanted outputs read join like any feature.
	type reqInput struct {
		view, input int
		field       feature.Field
	}
	var reqs []reqInput
	for vi, hv := range views {
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
				hv.inputs[i] = addBase(view, feat)
				continue
			}
			reqs = append(reqs, reqInput{view: vi, input: i, field: feature.Field{Name: in.Name, Type: in.Type}})
		}
	}

	tmp, err := os.MkdirTemp(opts.TempDir, "sluice-ondemand-")
	if err != nil {
		return fmt.Errorf("create spill folder: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	baseFile := entities
	if len(baseRefs) > 0 {
		baseFile = filepath.Join(tmp, "joined.parquet")
		if err := Historical(ctx, repo, entities, baseRefs, baseFile, opts); err != nil {
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
	nEnt := len(er.cols) - len(pending)
	colOf := make([]int, len(pending))
	for i, p := range pending {
		pos := nEnt
		for _, r := range baseRefs {
			if r.View == p[0] {
				colOf[i] = pos + slices.Index(r.Features, p[1])
				break
			}
			pos += len(r.Features)
		}
	}
	for i := range cols {
		if cols[i].base >= 0 {
			cols[i].base = colOf[cols[i].base]
		}
	}
	for _, hv := range views {
		for i, c := range hv.inputs {
			if c >= 0 {
				hv.inputs[i] = colOf[c]
			}
		}
	}
	// Request data comes from the entity columns of the same names.
	for _, rq := range reqs {
		ci := slices.IndexFunc(er.cols[:nEnt], func(c Column) bool { return c.Name == rq.field.Name })
		if ci < 0 {
			return fmt.Errorf("entity rows %s: no column '%s' (request data that on-demand feature view '%s' reads)", entities, rq.field.Name, views[rq.view].name)
		}
		views[rq.view].inputs[rq.input] = ci
	}

	outCols := slices.Clone(er.cols[:nEnt])
	seen := map[string]int{}
	for _, c := range outCols {
		seen[c.Name]++
	}
	for _, c := range cols {
		seen[c.name]++
	}
	for i, c := range cols {
		name := c.name
		if seen[name] > 1 {
			name = c.src + "__" + c.name
		}
		if slices.ContainsFunc(outCols, func(o Column) bool { return o.Name == name }) {
			return fmt.Errorf("feature '%s' is requested twice or clashes with an entity column", name)
		}
		outCols = append(outCols, Column{Name: name, Type: cols[i].typ})
	}
	return writeOnDemand(ctx, out, er, outCols, nEnt, cols, views)
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
