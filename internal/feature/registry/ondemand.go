package registry

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/transform"
)

// The definitions section of on-demand feature views (Feast's name) and
// the kind its errors and positions name.
const (
	onDemandSection = "on_demand_feature_views"
	onDemandKind    = "on-demand feature view"
)

// The raw YAML shape of an on-demand feature view.
type (
	rawOnDemandField struct {
		Name       string `yaml:"name"`
		Dtype      string `yaml:"dtype"`
		Expression string `yaml:"expression"`
	}
	rawOnDemandView struct {
		Name        string             `yaml:"name"`
		Sources     []string           `yaml:"sources"`
		Schema      []rawOnDemandField `yaml:"schema"`
		Mode        string             `yaml:"mode"`
		Tags        map[string]string  `yaml:"tags"`
		Description string             `yaml:"description"`
	}
)

// requestSource compiles a source of type request: a name and a typed
// schema of request fields.
func (c *compiler) requestSource(it item[rawSource]) {
	r, n := it.raw, it.node
	obj := fmt.Sprintf("source '%s'", r.Name)
	ok := true
	bad := func(line int, format string, args ...any) {
		c.errorf(it.file, line, obj, format, args...)
		ok = false
	}
	for key, set := range map[string]bool{
		"path": r.Path != "", "timestamp_field": r.TimestampField != "",
		"created_timestamp_column": r.CreatedTimestampColumn != "", "field_mapping": r.FieldMapping != nil, "batch_source": r.BatchSource != "", "s3_endpoint_override": r.S3EndpointOverride != "",
	} {
		if set {
			bad(lineOf(n, key), "%s is not for request sources (a request source has only a schema)", key)
		}
	}
	if len(r.Schema) == 0 {
		bad(n.Line, "schema is required for a request source (at least one field)")
	}
	src := &feature.RequestSource{Name: r.Name}
	seen := map[string]bool{}
	for i, fd := range r.Schema {
		line := lineOf(n, "schema", strconv.Itoa(i))
		switch {
		case !nameRE.MatchString(fd.Name):
			bad(line, "schema[%d]: name %q may contain only letters, digits, '_', '.' and '-'", i, fd.Name)
			continue
		case seen[fd.Name]:
			bad(line, "field '%s' is listed twice", fd.Name)
			continue
		}
		seen[fd.Name] = true
		t, err := feature.ParseType(fd.Dtype)
		if err != nil {
			bad(lineOf(n, "schema", strconv.Itoa(i), "dtype"), "field '%s': %v", fd.Name, err)
			continue
		}
		src.Schema = append(src.Schema, feature.Field{Name: fd.Name, Type: t})
	}
	if ok {
		if c.repo.RequestSources == nil {
			c.repo.RequestSources = map[string]*feature.RequestSource{}
		}
		c.repo.RequestSources[r.Name] = src
	}
}

// onDemandViews compiles the on-demand feature views: their sources must
// be request sources or (stored) feature views, and every expression must
// type-check against the sources' fields and yield its feature's dtype.
func (c *compiler) onDemandViews(items []item[rawOnDemandView]) {
	for _, it := range items {
		if c.claim(onDemandKind, it.file, it.node, it.raw.Name) {
			c.onDemandView(it)
		}
	}
}

// onDemandView compiles one on-demand feature view and adds it, with its
// compiled expressions, to the repository unless it has problems.
func (c *compiler) onDemandView(it item[rawOnDemandView]) {
	r, n := it.raw, it.node
	rep := c.newReport(it.file, fmt.Sprintf("%s '%s'", onDemandKind, r.Name))
	switch r.Mode {
	case "", "expr":
	default:
		rep.bad(lineOf(n, "mode"), "mode %q is not supported (want expr: expressions in expr-lang)", r.Mode)
	}
	if len(r.Sources) == 0 {
		rep.bad(n.Line, "sources is required (request sources and feature views)")
	}
	inputs := c.onDemandInputs(rep, r, n)
	srcOK := rep.ok
	if len(r.Schema) == 0 {
		rep.bad(n.Line, "schema is required (at least one feature with its dtype and expression)")
	}
	v := &feature.OnDemandView{Name: r.Name, Sources: r.Sources, Tags: r.Tags}
	lines := onDemandSchema(rep, r, n, v)
	if !srcOK || len(v.Schema) == 0 {
		return // expressions would only report the inputs that are missing
	}
	prog, errs := transform.Compile(r.Name, inputs, v.Schema, v.Exprs)
	reportExprErrors(rep, n, v, lines, errs)
	if !rep.ok {
		return
	}
	if c.repo.OnDemandViews == nil {
		c.repo.OnDemandViews = map[string]*feature.OnDemandView{}
		c.repo.onDemand = map[string]*transform.View{}
	}
	c.repo.OnDemandViews[r.Name] = v
	c.repo.onDemand[r.Name] = prog
}

// onDemandInputs checks an on-demand view's sources and returns the
// inputs its expressions may read: each request source field by name, and
// each feature view feature as view__feature and, where no other input
// shares its name, by its bare name.
func (c *compiler) onDemandInputs(rep *objReport, r rawOnDemandView, n *yaml.Node) []transform.Input {
	var inputs []transform.Input
	bare := map[string]int{} // bare input name -> how many inputs have it
	for i, s := range r.Sources {
		line := lineOf(n, "sources", strconv.Itoa(i))
		switch {
		case slices.Index(r.Sources, s) != i:
			rep.bad(line, "source '%s' is listed twice", s)
		case c.repo.RequestSources[s] != nil:
			for _, fd := range c.repo.RequestSources[s].Schema {
				inputs = append(inputs, transform.Input{Name: fd.Name, Type: fd.Type})
				bare[fd.Name]++
			}
		case c.repo.Views[s] != nil:
			for _, fd := range c.repo.Views[s].Schema {
				inputs = append(inputs, transform.Input{Name: s + "__" + fd.Name, Alias: fd.Name, Type: fd.Type})
				bare[fd.Name]++
			}
		case c.defined("feature view", s) || c.defined("source", s):
			rep.ok = false // defined but broken: reported there
		case c.defined(onDemandKind, s):
			rep.bad(line, "source '%s' is an on-demand feature view (want request sources and stored feature views)", s)
		default:
			rep.bad(line, "source '%s' is neither a request source nor a feature view (request sources: %s; feature views: %s)",
				s, keyList(c.repo.RequestSources), keyList(c.repo.Views))
		}
	}
	for i := range inputs {
		if in := &inputs[i]; in.Alias != "" && bare[in.Alias] > 1 {
			in.Alias = "" // ambiguous: only view__feature names it
		}
	}
	return inputs
}

// onDemandSchema checks an on-demand view's features, adds each good one
// and its expression to v, and returns the line of each one's expression.
func onDemandSchema(rep *objReport, r rawOnDemandView, n *yaml.Node, v *feature.OnDemandView) []int {
	seen := map[string]bool{}
	var lines []int
	for i, fd := range r.Schema {
		line := lineOf(n, "schema", strconv.Itoa(i))
		if !rep.newFeatureName(line, "schema", i, fd.Name, seen) {
			continue
		}
		if fd.Expression == "" {
			rep.bad(line, "feature '%s': expression is required", fd.Name)
			continue
		}
		t, err := feature.ParseType(fd.Dtype)
		if err != nil {
			rep.bad(lineOf(n, "schema", strconv.Itoa(i), "dtype"), "feature '%s': %v", fd.Name, err)
			continue
		}
		v.Schema = append(v.Schema, feature.Field{Name: fd.Name, Type: t})
		v.Exprs = append(v.Exprs, fd.Expression)
		lines = append(lines, lineOf(n, "schema", strconv.Itoa(i), "expression"))
	}
	return lines
}

// reportExprErrors reports each expression error at its line in the
// definitions file (and column, where the error names one).
func reportExprErrors(rep *objReport, n *yaml.Node, v *feature.OnDemandView, lines []int, errs []*transform.CompileError) {
	for _, e := range errs {
		if e.Output < 0 {
			rep.bad(n.Line, "%s", e.Msg)
			continue
		}
		line, where := lines[e.Output], ""
		if e.Line > 0 {
			line += e.Line - 1
			where = fmt.Sprintf(" (column %d)", e.Column)
		}
		rep.bad(line, "feature '%s': expression %q: %s%s", v.Schema[e.Output].Name, v.Exprs[e.Output], e.Msg, where)
	}
}

// OnDemand returns the compiled expressions of an on-demand feature view,
// or nil when there is no such view. They are compiled once, when the
// repository is loaded, and shared by every reader of this snapshot.
func (r *Repo) OnDemand(name string) *transform.View { return r.onDemand[name] }

// onDemandAsView returns an on-demand view as a feature view with only
// its name and schema (for feature references), or nil.
func (r *Repo) onDemandAsView(name string) *feature.View {
	od := r.OnDemandViews[name]
	if od == nil {
		return nil
	}
	return &feature.View{Name: od.Name, Schema: od.Schema, Online: true}
}

// onDemandJoinKeys returns the join keys of an on-demand view: those of
// its source feature views, in first-use order.
func (r *Repo) onDemandJoinKeys(name string) ([]string, []feature.Kind) {
	od := r.OnDemandViews[name]
	if od == nil {
		return nil, nil
	}
	var names []string
	var kinds []feature.Kind
	for _, s := range od.Sources {
		keys, ks := r.JoinKeys(s)
		for i, k := range keys {
			if !slices.Contains(names, k) {
				names, kinds = append(names, k), append(kinds, ks[i])
			}
		}
	}
	return names, kinds
}

// SnapshotOnDemandView is an on-demand feature view in the registry file.
type SnapshotOnDemandView struct {
	Name    string            `json:"name"`
	Sources []string          `json:"sources"`
	Schema  []SnapshotODField `json:"schema"`
	Tags    map[string]string `json:"tags,omitempty"`
}

// SnapshotODField is one computed feature in the registry file.
type SnapshotODField struct {
	Name       string `json:"name"`
	Dtype      string `json:"dtype"`
	Expression string `json:"expression"`
}

// snapshotOnDemand adds the request sources (as sources of type request)
// and the on-demand views to s.
func (r *Repo) snapshotOnDemand(s *Snapshot) {
	for _, name := range slices.Sorted(maps.Keys(r.RequestSources)) {
		rs := r.RequestSources[name]
		ss := SnapshotSource{Name: rs.Name, Type: "request"}
		for _, f := range rs.Schema {
			ss.Schema = append(ss.Schema, SnapshotField{Name: f.Name, Dtype: f.Type.String()})
		}
		s.Sources = append(s.Sources, ss)
	}
	slices.SortFunc(s.Sources, func(a, b SnapshotSource) int { return cmpString(a.Name, b.Name) })
	for _, name := range slices.Sorted(maps.Keys(r.OnDemandViews)) {
		od := r.OnDemandViews[name]
		sv := SnapshotOnDemandView{Name: od.Name, Sources: od.Sources, Tags: od.Tags}
		for i, f := range od.Schema {
			sv.Schema = append(sv.Schema, SnapshotODField{Name: f.Name, Dtype: f.Type.String(), Expression: od.Exprs[i]})
		}
		s.OnDemandViews = append(s.OnDemandViews, sv)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	default:
		return 0
	}
}

// onDemandDiff lists what changed in an on-demand view: its sources, and
// each feature's dtype and expression.
func onDemandDiff(a, b SnapshotOnDemandView) []string {
	var out []string
	if !slices.Equal(a.Sources, b.Sources) {
		out = append(out, fmt.Sprintf("sources: %v → %v", a.Sources, b.Sources))
	}
	old := make(map[string]SnapshotODField, len(a.Schema))
	for _, f := range a.Schema {
		old[f.Name] = f
	}
	for _, f := range b.Schema {
		o, ok := old[f.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("schema: + %s %s = %s", f.Name, f.Dtype, f.Expression))
		case o != f:
			out = append(out, fmt.Sprintf("schema: ~ %s %s = %s → %s = %s", f.Name, o.Dtype, o.Expression, f.Dtype, f.Expression))
		}
		delete(old, f.Name)
	}
	for _, f := range a.Schema {
		if _, gone := old[f.Name]; gone {
			out = append(out, fmt.Sprintf("schema: - %s", f.Name))
		}
	}
	if !maps.Equal(a.Tags, b.Tags) {
		out = append(out, fmt.Sprintf("tags: %v → %v", a.Tags, b.Tags))
	}
	return out
}
