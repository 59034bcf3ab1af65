package gateway

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/gateway/fallback"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/driftwatch"
	"github.com/sluice-ml/sluice/internal/gateway/release/rollouthook"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/infer"
)

// fieldKind is the type of a request field or entity key.
type fieldKind uint8

const (
	kindInt64 fieldKind = iota + 1
	kindFloat32
	kindFloat64
	kindBool
	kindString
)

func parseFieldKind(s string) (fieldKind, error) {
	switch s {
	case "int64":
		return kindInt64, nil
	case "float32":
		return kindFloat32, nil
	case "float64":
		return kindFloat64, nil
	case "bool":
		return kindBool, nil
	case "string":
		return kindString, nil
	}
	return 0, fmt.Errorf("unknown type %q", s)
}

func (k fieldKind) String() string {
	return [...]string{"invalid", "int64", "float32", "float64", "bool", "string"}[k]
}

// reqField is one value a request carries: an entity join key or a
// request field.
type reqField struct {
	name     string
	kind     fieldKind
	required bool
	entity   bool
}

// part is one slice of an input tensor: a feature column or a request
// field, width elements wide.
type part struct {
	ref   string // "view:feature" or "field:name", for messages
	col   int    // index into service.features; -1 for a field
	field int    // index into service.fields; -1 for a feature
	width int
}

// missingPolicy says what fills a missing value.
type missingPolicy uint8

const (
	missingFail missingPolicy = iota
	missingDefault
	missingZero
)

// input is the assembly plan of one model input tensor.
type input struct {
	tensor  string
	dt      infer.DataType
	parts   []part
	width   int
	missing missingPolicy
	def     float64
	// unreadableMissing applies missing to a value that reads NOT_FOUND
	// for a schema reason; false fails the request (feature_unreadable).
	unreadableMissing bool
}

// output maps a model output to a name in the answer.
type output struct {
	name, from string
}

// ruleVar binds one fallback-rule variable to a field or feature column.
type ruleVar struct {
	name  string
	typ   fallback.VarType
	field int // index into service.fields, or -1
	col   int // index into service.features, or -1
}

// serviceFallback is a service's compiled business-level fallback.
type serviceFallback struct {
	monitor    *fallback.Monitor
	baseline   *baselineSync // persists the monitor's baseline; nil: not persisted
	rule       *fallback.Rule
	output     string // model output watched (and replaced)
	answer     string // the answer name the rule's value goes to
	confidence string // model output holding the confidence
	below      float64
	vars       []ruleVar
	// onUpstream is fallback.on_upstream_failure: the rule answers when
	// the model cannot be reached.
	onUpstream bool
}

// service is a compiled inference service. It is immutable after the
// configuration is built except for its stateful parts (monitor, breaker,
// rollout, drift), which are safe for concurrent use.
type service struct {
	cfg      config.Service
	name     string
	method   string
	path     string
	fields   []reqField
	fieldIdx map[string]int
	// features are the feature references read, "view:feature", in the
	// order the feature server returns them.
	features     []string
	featureTypes []feature.Type
	// entityKeys are the join keys the feature read needs (fields with
	// entity set), with the kind the feature store keys them by.
	entityKeys []entityKey
	reqCtx     []ctxField // request data for on-demand features
	inputs     []input
	outputs    []output
	requested  []infer.RequestedOutput
	routes     *route.Table
	routeCfg   map[string]*config.Route
	// routesByValue says routing (an entity hash, a sticky split, a
	// rollout) reads the request values, so the pipeline lists them.
	routesByValue bool
	fallback      *serviceFallback
	breaker       *breaker
	// hooks are the release hooks in the order the pipeline calls them;
	// made holds them by factory (nil where a factory made none), for the
	// next configuration's factories.
	hooks []release.Hook
	made  []release.Hook
	// rollout and drift are the rollout's and drift watch's hooks, for
	// the admin API and the fallback (nil when the service has none).
	rollout *rollouthook.Rollout
	drift   *driftwatch.Watch

	// The service's metric series, looked up once: the request duration,
	// and each output's prediction histogram (by index into outputs).
	duration    prometheus.Observer
	predictions []prometheus.Observer
	// spanOpts start a call's span: kind server, the service's name.
	spanOpts []trace.SpanStartOption
}

type entityKey struct {
	joinKey string
	field   int
	kind    feature.Kind
}

// compileService builds a service from its configuration, checking feature
// references against repo (nil when the gateway has no feature store: the
// service may then only use request fields). It reports every problem.
func compileService(c config.Service, repo *registry.Repo, opts ...route.Option) (*service, error) {
	method, path, _ := strings.Cut(c.Path, " ")
	sc := &compiler{
		s: &service{
			cfg: c, name: c.Name, method: method, path: path,
			fieldIdx: map[string]int{}, routeCfg: map[string]*config.Route{},
		},
		repo: repo, colOf: map[string]int{},
	}
	sc.fields()
	sc.featureService()
	sc.inputs()
	sc.outputs()
	sc.fallback()
	sc.requested()
	sc.entityKeys()
	sc.requestContext()
	sc.routes(opts)
	sc.s.spanOpts = []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String("service", c.Name)),
	}
	if len(sc.errs) > 0 {
		return nil, fmt.Errorf("service %q: %w", c.Name, errors.Join(sc.errs...))
	}
	return sc.s, nil
}

// compiler holds a service being compiled and the problems found so far.
type compiler struct {
	s          *service
	repo       *registry.Repo
	fsFeatures map[string]feature.Type // "view:feature" → type, of the feature service
	colOf      map[string]int          // "view:feature" → index into s.features
	errs       []error
}

func (c *compiler) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// fields lists the values a request carries: the entities' join keys,
// then the request fields.
func (c *compiler) fields() {
	s := c.s
	for _, e := range s.cfg.Entities {
		k, err := parseFieldKind(e.Type)
		if err != nil {
			c.fail("entity %q: %v", e.Name, err)
		}
		s.fieldIdx[e.JoinKey] = len(s.fields)
		s.fields = append(s.fields, reqField{name: e.JoinKey, kind: k, required: true, entity: true})
	}
	for _, f := range s.cfg.RequestFields {
		k, err := parseFieldKind(f.Type)
		if err != nil {
			c.fail("request field %q: %v", f.Name, err)
		}
		s.fieldIdx[f.Name] = len(s.fields)
		s.fields = append(s.fields, reqField{name: f.Name, kind: k, required: f.Required})
	}
}

// featureService finds the features the service may read.
func (c *compiler) featureService() {
	name := c.s.cfg.FeatureService
	if name == "" {
		return
	}
	if c.repo == nil {
		c.fail("feature_service %q: the gateway has no feature store (add a feature_server section)", name)
		return
	}
	fs, err := serviceFeatures(c.repo, name)
	if err != nil {
		c.errs = append(c.errs, err)
	}
	c.fsFeatures = fs
}

// addFeature makes ref one of the features read, once, and returns its
// column and type.
func (c *compiler) addFeature(ref string) (int, feature.Type, error) {
	s := c.s
	if i, ok := c.colOf[ref]; ok {
		return i, s.featureTypes[i], nil
	}
	t, ok := c.fsFeatures[ref]
	if !ok {
		return 0, feature.Type{}, fmt.Errorf("feature %q is not in feature service %q", ref, s.cfg.FeatureService)
	}
	c.colOf[ref] = len(s.features)
	s.features = append(s.features, ref)
	s.featureTypes = append(s.featureTypes, t)
	return c.colOf[ref], t, nil
}

// inputs plans the assembly of each model input from features and fields.
func (c *compiler) inputs() {
	for _, in := range c.s.cfg.Inputs {
		dt, ok := infer.ParseDataType(in.Datatype)
		if !ok || !assemblable(dt) {
			c.fail("input %q: datatype %s cannot be assembled from features (want FP32, FP64, INT64 or INT32)", in.Tensor, in.Datatype)
			continue
		}
		ip := input{tensor: in.Tensor, dt: dt, unreadableMissing: in.Unreadable == "missing"}
		switch in.Missing {
		case "default":
			ip.missing = missingDefault
			if in.Default != nil {
				ip.def = *in.Default
			}
		case "zero":
			ip.missing = missingZero
		}
		for _, ref := range in.Features {
			if pt, ok := c.part(in.Tensor, ref); ok {
				ip.parts = append(ip.parts, pt)
				ip.width += pt.width
			}
		}
		c.s.inputs = append(c.s.inputs, ip)
	}
}

// part resolves one reference of input tensor: "field:<name>" or a
// feature.
func (c *compiler) part(tensor, ref string) (part, bool) {
	s := c.s
	kind, name, _ := strings.Cut(ref, ":")
	if kind == "field" {
		fi, ok := s.fieldIdx[name]
		if !ok {
			c.fail("input %q: %q is not an entity join_key or request field", tensor, ref)
			return part{}, false
		}
		if s.fields[fi].kind == kindString {
			c.fail("input %q: field %q is a string; tensors take numbers", tensor, name)
		}
		return part{ref: ref, col: -1, field: fi, width: 1}, true
	}
	col, t, err := c.addFeature(ref)
	if err != nil {
		c.fail("input %q: %v", tensor, err)
		return part{}, false
	}
	w, err := featureWidth(t)
	if err != nil {
		c.fail("input %q: feature %q (%s): %v", tensor, ref, t, err)
		return part{}, false
	}
	return part{ref: ref, col: col, field: -1, width: w}, true
}

// outputs maps the model's outputs to the answer's names.
func (c *compiler) outputs() {
	for _, o := range c.s.cfg.Outputs {
		c.s.outputs = append(c.s.outputs, output{name: o.Name, from: o.From})
	}
}

// fallback compiles the business-level fallback rule.
func (c *compiler) fallback() {
	fb := c.s.cfg.Fallback
	if fb == nil {
		return
	}
	sf, err := c.s.compileFallback(fb, c.fsFeatures, c.addFeature)
	if err != nil {
		c.errs = append(c.errs, err)
	}
	c.s.fallback = sf
}

// requested lists the outputs the model must return: the mapped ones plus
// the fallback's watched and confidence outputs.
func (c *compiler) requested() {
	s := c.s
	want := []string{}
	for _, o := range s.outputs {
		want = append(want, o.from)
	}
	if s.fallback != nil {
		want = append(want, s.fallback.output, s.fallback.confidence)
	}
	slices.Sort(want)
	for _, n := range slices.Compact(want) {
		s.requested = append(s.requested, infer.RequestedOutput{Name: n})
	}
}

// entityKeys checks that the service's entities provide the join keys of
// the features read, with the kinds the feature store keys them by.
func (c *compiler) entityKeys() {
	s := c.s
	if len(s.features) == 0 {
		return
	}
	keys, err := joinKeys(c.repo, s.features)
	if err != nil {
		c.errs = append(c.errs, err)
	}
	for _, k := range keys {
		fi, ok := s.fieldIdx[k.joinKey]
		if !ok || !s.fields[fi].entity {
			c.fail("the features read need entity key %q, which is not among the service's entities", k.joinKey)
			continue
		}
		isString := k.kind == feature.KindString || k.kind == feature.KindBytes
		if isString != (s.fields[fi].kind == kindString) {
			c.fail("entity key %q is %s in the service but %s in the feature repository", k.joinKey, s.fields[fi].kind, k.kind)
			continue
		}
		k.field = fi
		s.entityKeys = append(s.entityKeys, k)
	}
}

// routes builds the routing table.
func (c *compiler) routes(opts []route.Option) {
	s := c.s
	rt, err := route.FromConfig(s.cfg.Routes, opts...)
	if err != nil {
		c.errs = append(c.errs, err)
	}
	s.routes = rt
	for i := range s.cfg.Routes {
		s.routeCfg[s.cfg.Routes[i].Name] = &s.cfg.Routes[i]
	}
}

func (s *service) compileFallback(fb *config.Fallback, fsFeatures map[string]feature.Type,
	addFeature func(string) (int, feature.Type, error),
) (*serviceFallback, error) {
	sf := &serviceFallback{output: fb.Output, confidence: fb.Confidence.Output, below: fb.Confidence.Below, answer: fb.Output, onUpstream: fb.OnUpstreamFailure}
	for _, o := range s.outputs {
		if o.from == fb.Output {
			sf.answer = o.name
			break
		}
	}
	// Variables: request fields by name; features by their short name when
	// it is unique in the feature service, and always as view__feature.
	decl := map[string]fallback.VarType{}
	bind := map[string]ruleVar{}
	for i, f := range s.fields {
		t := fallback.Float
		switch f.kind {
		case kindInt64:
			t = fallback.Int
		case kindBool:
			t = fallback.Bool
		case kindString:
			t = fallback.String
		default:
		}
		decl[f.name] = t
		bind[f.name] = ruleVar{name: f.name, typ: t, field: i, col: -1}
	}
	short := map[string]int{}
	for ref := range fsFeatures {
		_, name, _ := strings.Cut(ref, ":")
		short[name]++
	}
	for _, ref := range slices.Sorted(maps.Keys(fsFeatures)) {
		t, ok := ruleType(fsFeatures[ref])
		if !ok {
			continue
		}
		view, name, _ := strings.Cut(ref, ":")
		full := view + "__" + name
		decl[full] = t
		bind[full] = ruleVar{name: full, typ: t, field: -1, col: -1}
		if _, clash := decl[name]; !clash && short[name] == 1 {
			decl[name] = t
			bind[name] = ruleVar{name: name, typ: t, field: -1, col: -1}
		}
	}
	rule, err := fallback.CompileRule(fb.Rule, decl)
	if err != nil {
		return nil, fmt.Errorf("fallback.rule: %w", err)
	}
	sf.rule = rule
	for _, name := range rule.Vars() {
		v := bind[name]
		if v.field < 0 {
			ref := name
			if view, feat, ok := strings.Cut(name, "__"); ok {
				ref = view + ":" + feat
			} else {
				for r := range fsFeatures {
					if _, n, _ := strings.Cut(r, ":"); n == name {
						ref = r
						break
					}
				}
			}
			col, _, err := addFeature(ref)
			if err != nil {
				return nil, fmt.Errorf("fallback.rule: %w", err)
			}
			v.col = col
		}
		sf.vars = append(sf.vars, v)
	}
	return sf, nil
}

// serviceFeatures lists a feature service's features as "view:feature".
func serviceFeatures(repo *registry.Repo, name string) (map[string]feature.Type, error) {
	fs, ok := repo.Services[name]
	if !ok {
		return nil, fmt.Errorf("feature service %q is not defined in feature repository %q", name, repo.Project)
	}
	out := map[string]feature.Type{}
	for _, ref := range fs.Features {
		schema, ok := viewSchema(repo, ref.View)
		if !ok {
			return nil, fmt.Errorf("feature service %q: unknown feature view %q", name, ref.View)
		}
		for _, f := range schema {
			if len(ref.Features) == 0 || slices.Contains(ref.Features, f.Name) {
				out[ref.View+":"+f.Name] = f.Type
			}
		}
	}
	return out, nil
}

// joinKeys returns the entity join keys the views of refs are keyed by.
func joinKeys(repo *registry.Repo, refs []string) ([]entityKey, error) {
	var out []entityKey
	seen := map[string]bool{}
	for _, ref := range refs {
		view, _, _ := strings.Cut(ref, ":")
		if seen[view] {
			continue
		}
		seen[view] = true
		names, kinds := repo.JoinKeys(view)
		for i, n := range names {
			if slices.ContainsFunc(out, func(k entityKey) bool { return k.joinKey == n }) {
				continue
			}
			out = append(out, entityKey{joinKey: n, kind: kinds[i]})
		}
	}
	return out, nil
}

// assemblable reports whether the gateway can build a tensor of dt.
func assemblable(dt infer.DataType) bool {
	switch dt {
	case infer.FP32, infer.FP64, infer.Int64, infer.Int32:
		return true
	default:
	}
	return false
}

// featureWidth is how many tensor elements a feature fills.
func featureWidth(t feature.Type) (int, error) {
	switch t.Kind {
	case feature.KindInt32, feature.KindInt64, feature.KindFloat32, feature.KindFloat64, feature.KindBool:
	default:
		return 0, errors.New("only numeric and bool features can go into a tensor")
	}
	if !t.List {
		return 1, nil
	}
	if t.Len <= 0 {
		return 0, errors.New("a list feature needs a fixed length (Array(T, N)) to go into a tensor")
	}
	return t.Len, nil
}

// ruleType is the rule variable type of a scalar feature; lists are not
// rule variables.
func ruleType(t feature.Type) (fallback.VarType, bool) {
	if t.List {
		return 0, false
	}
	switch t.Kind {
	case feature.KindFloat32, feature.KindFloat64:
		return fallback.Float, true
	case feature.KindInt32, feature.KindInt64:
		return fallback.Int, true
	case feature.KindBool:
		return fallback.Bool, true
	case feature.KindString:
		return fallback.String, true
	default:
	}
	return 0, false
}
