package gateway

import (
	"strings"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// ctxField is a request field that an on-demand feature view the service
// reads takes as request data: it goes to the feature read's
// RequestContext, typed as the request source declares it.
type ctxField struct {
	field int // index into service.fields
	name  string
	typ   feature.Type
}

// viewSchema returns the schema of a feature view or an on-demand
// feature view.
func viewSchema(repo *registry.Repo, name string) ([]feature.Field, bool) {
	if v, ok := repo.Views[name]; ok {
		return v.Schema, true
	}
	if od, ok := repo.OnDemandViews[name]; ok {
		return od.Schema, true
	}
	return nil, false
}

// requestContext finds the request fields that the on-demand views among
// the service's features read. A request source field the service does
// not declare is simply not sent: the features that need it read
// NOT_FOUND, and the inputs' missing policy applies.
func (c *compiler) requestContext() {
	if c.repo == nil {
		return
	}
	seen := map[string]bool{}
	for _, ref := range c.s.features {
		view, _, _ := strings.Cut(ref, ":")
		od := c.repo.OnDemandViews[view]
		if od == nil {
			continue
		}
		for _, src := range od.Sources {
			rs := c.repo.RequestSources[src]
			if rs == nil {
				continue
			}
			for _, f := range rs.Schema {
				fi, ok := c.s.fieldIdx[f.Name]
				if !ok || seen[f.Name] {
					continue
				}
				seen[f.Name] = true
				if !ctxKindFits(c.s.fields[fi].kind, f.Type) {
					c.fail("request field %q: on-demand feature view %q reads it as %s (request source %q)", f.Name, od.Name, f.Type, rs.Name)
					continue
				}
				c.s.reqCtx = append(c.s.reqCtx, ctxField{field: fi, name: f.Name, typ: f.Type})
			}
		}
	}
}

// ctxKindFits reports whether a request field of kind k can carry request
// data of type t.
func ctxKindFits(k fieldKind, t feature.Type) bool {
	if t.List {
		return false
	}
	switch t.Kind {
	case feature.KindFloat32, feature.KindFloat64:
		return k == kindFloat32 || k == kindFloat64 || k == kindInt64
	case feature.KindInt32, feature.KindInt64:
		return k == kindInt64
	case feature.KindString:
		return k == kindString
	case feature.KindBool:
		return k == kindBool
	default:
		return false
	}
}

// requestContextOf is the request data of one request row: the set
// fields of reqCtx, typed for the feature store.
func (s *service) requestContextOf(vals []value) map[string][]feature.Value {
	if len(s.reqCtx) == 0 {
		return nil
	}
	out := make(map[string][]feature.Value, len(s.reqCtx))
	for _, cf := range s.reqCtx {
		v := &vals[cf.field]
		if !v.set {
			continue
		}
		var fv feature.Value
		switch cf.typ.Kind {
		case feature.KindFloat32:
			fv.F64 = float64(float32(v.num(s.fields[cf.field].kind)))
		case feature.KindFloat64:
			fv.F64 = v.num(s.fields[cf.field].kind)
		case feature.KindInt32, feature.KindInt64:
			fv.I64 = v.i
		case feature.KindString:
			fv.S = v.s
		case feature.KindBool:
			fv.Bool = v.b
		default:
			continue
		}
		out[cf.name] = []feature.Value{fv}
	}
	return out
}
