package modelrepo

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// platformEnsemble is the platform of a model that runs other models.
const platformEnsemble = "ensemble"

// maxEnsembleDepth bounds how deeply ensembles may nest, so that two
// ensembles naming each other fail instead of recursing forever.
const maxEnsembleDepth = 8

// isEnsemble reports whether a configuration describes an ensemble.
func isEnsemble(cfg *inferencepb.ModelConfig) bool {
	return cfg.GetPlatform() == platformEnsemble || cfg.GetEnsembleScheduling() != nil
}

// ensemble is the step graph of an ensemble version, resolved from its
// configuration. It is immutable once built, apart from the cache of the
// last dependency check.
type ensemble struct {
	name    string
	tensors []string // every tensor the graph names, by id
	inputs  []int    // ids of the ensemble's inputs, in config order
	steps   []ensembleStep

	// limits bound the requests each step has in flight across all of
	// the version's requests (max_inflight_requests): a slot is a value
	// in the step's channel. nil when unbounded.
	limits []chan struct{}

	// checked caches the last check of the step models against the
	// graph, keyed by the step versions it saw.
	checked atomic.Pointer[depCheck]
}

// ensembleStep is one step: a model run on some ensemble tensors, whose
// outputs become other ensemble tensors.
type ensembleStep struct {
	model   string
	version string // "" = the latest ready version
	in      []stepTensor
	out     []stepTensor
}

// stepTensor maps a step model's input or output to an ensemble tensor.
type stepTensor struct {
	name   string // the step model's tensor
	tensor int    // the ensemble tensor's id
}

// depCheck is the result of checking an ensemble against the step model
// versions in steps.
type depCheck struct {
	steps  []*loaded
	reason string // "" when the step models fit the graph
}

func stepLabel(i int, model string) string {
	return fmt.Sprintf("step %d (model '%s')", i, model)
}

// parseEnsemble builds an ensemble's graph from its configuration and
// reports every structural problem: steps naming no model, an unknown
// model or the ensemble itself, bad versions, empty maps, tensors produced
// twice, tensors consumed that nothing produces, ensemble inputs nothing
// consumes, ensemble outputs nothing produces, and cycles. exists says
// whether a model name is known; nil accepts every name.
func parseEnsemble(cfg *inferencepb.ModelConfig, src *modelconfig.Source, exists func(string) bool) (*ensemble, modelconfig.Errors) {
	ep := &ensembleParser{cfg: cfg, src: src, exists: exists}
	es := cfg.GetEnsembleScheduling()
	if es == nil {
		ep.add("platform", "platform \"ensemble\" needs ensemble_scheduling")
		return nil, ep.ps
	}
	if len(es.GetStep()) == 0 {
		ep.add("ensemble_scheduling", "ensemble_scheduling must list at least one step")
		return nil, ep.ps
	}
	e := &ensemble{name: cfg.GetName()}
	ep.e, ep.ids, ep.producer = e, map[string]int{}, map[int]int{}
	if n := es.GetMaxInflightRequests(); n > 0 {
		e.limits = make([]chan struct{}, len(es.GetStep()))
		for i := range e.limits {
			e.limits[i] = make(chan struct{}, n)
		}
	}
	for _, in := range cfg.GetInput() {
		t := ep.id(in.GetName())
		e.inputs = append(e.inputs, t)
		ep.producer[t] = fromEnsembleInput
	}
	for i, st := range es.GetStep() {
		e.steps = append(e.steps, ep.step(i, st))
	}
	ep.checkGraph()
	if len(ep.ps) > 0 {
		return nil, byPosition(ep.ps)
	}
	return e, nil
}

// fromEnsembleInput is the producer of a tensor that is an ensemble
// input rather than a step's output.
const fromEnsembleInput = -1

// ensembleParser holds what parseEnsemble builds and the problems it
// finds, each at its position in the configuration's source.
type ensembleParser struct {
	cfg      *inferencepb.ModelConfig
	src      *modelconfig.Source
	exists   func(string) bool
	e        *ensemble
	ids      map[string]int // tensor name -> index in e.tensors
	producer map[int]int    // tensor -> step, or fromEnsembleInput
	ps       modelconfig.Errors
}

func (ep *ensembleParser) add(path, format string, args ...any) {
	ep.ps = append(ep.ps, modelconfig.Error{Pos: ep.src.Pos(path), Msg: fmt.Sprintf(format, args...)})
}

// id is the index of the tensor named name, added on first mention.
func (ep *ensembleParser) id(name string) int {
	if i, ok := ep.ids[name]; ok {
		return i
	}
	ep.ids[name] = len(ep.e.tensors)
	ep.e.tensors = append(ep.e.tensors, name)
	return ep.ids[name]
}

// step parses step i: its model and version, then its input and output
// maps.
func (ep *ensembleParser) step(i int, st *inferencepb.ModelEnsembling_Step) ensembleStep {
	at := fmt.Sprintf("ensemble_scheduling.step[%d]", i)
	name := st.GetModelName()
	label := stepLabel(i, name)
	step := ensembleStep{model: name}
	switch {
	case name == "":
		ep.add(at, "ensemble_scheduling: step[%d]: model_name must be set", i)
	case name == ep.cfg.GetName():
		ep.add(at+".model_name", "%s: an ensemble cannot be a step of itself", label)
	case ep.exists != nil && !ep.exists(name):
		ep.add(at+".model_name", "%s: model '%s' is not in any model repository", label, name)
	}
	// proto3 cannot tell an omitted model_version from 0: both mean
	// the latest version, like -1.
	switch v := st.GetModelVersion(); {
	case v == -1 || v == 0:
	case v >= 1:
		step.version = strconv.FormatInt(v, 10)
	default:
		ep.add(at+".model_version", "%s: model_version must be -1 (latest) or a version >= 1, got %d", label, v)
	}
	if len(st.GetInputMap()) == 0 {
		ep.add(at, "%s maps no input: input_map is empty", label)
	}
	if len(st.GetOutputMap()) == 0 {
		ep.add(at, "%s maps no output: output_map is empty", label)
	}
	for _, k := range sortedKeys(st.GetInputMap()) {
		v := st.GetInputMap()[k]
		if v == "" {
			ep.add(at+".input_map["+strconv.Quote(k)+"]", "%s: input '%s' is mapped to an empty tensor name", label, k)
			continue
		}
		step.in = append(step.in, stepTensor{name: k, tensor: ep.id(v)})
	}
	for _, k := range sortedKeys(st.GetOutputMap()) {
		if t, ok := ep.output(i, at, label, k, st.GetOutputMap()[k]); ok {
			step.out = append(step.out, stepTensor{name: k, tensor: t})
		}
	}
	return step
}

// output records step i as the producer of the tensor its output k is
// mapped to (v); a tensor produced twice, or also an ensemble input, is
// refused.
func (ep *ensembleParser) output(i int, at, label, k, v string) (int, bool) {
	path := at + ".output_map[" + strconv.Quote(k) + "]"
	if v == "" {
		ep.add(path, "%s: output '%s' is mapped to an empty tensor name", label, k)
		return 0, false
	}
	t := ep.id(v)
	switch p, ok := ep.producer[t]; {
	case !ok:
		ep.producer[t] = i
	case p == fromEnsembleInput:
		ep.add(path, "tensor '%s' is produced by %s but it is also an ensemble input", v, label)
	case p == i:
		ep.add(path, "tensor '%s' is produced twice by %s", v, label)
	default:
		ep.add(path, "tensor '%s' is produced by %s and by %s", v, stepLabel(p, ep.cfg.GetEnsembleScheduling().GetStep()[p].GetModelName()), label)
	}
	return t, true
}

// checkGraph checks the steps' tensors as a graph: every consumed
// tensor produced (by another step) or an input, every input consumed,
// every output produced, and no cycle.
func (ep *ensembleParser) checkGraph() {
	e := ep.e
	consumed := map[int]bool{}
	for i, st := range e.steps {
		for _, in := range st.in {
			consumed[in.tensor] = true
			path := fmt.Sprintf("ensemble_scheduling.step[%d].input_map[%s]", i, strconv.Quote(in.name))
			switch p, ok := ep.producer[in.tensor]; {
			case !ok:
				ep.add(path, "tensor '%s' is consumed by %s but no step produces it and it is not an ensemble input", e.tensors[in.tensor], stepLabel(i, st.model))
			case p == i:
				ep.add(path, "%s consumes its own output '%s' (a cycle)", stepLabel(i, st.model), e.tensors[in.tensor])
			}
		}
	}
	for i, in := range ep.cfg.GetInput() {
		if t := ep.ids[in.GetName()]; !consumed[t] {
			ep.add(fmt.Sprintf("input[%d]", i), "ensemble input '%s' is not consumed by any step", in.GetName())
		}
	}
	for i, out := range ep.cfg.GetOutput() {
		if _, ok := ep.producer[ep.id(out.GetName())]; !ok {
			ep.add(fmt.Sprintf("output[%d]", i), "ensemble output '%s' is not produced by any step", out.GetName())
		}
	}
	if cycle := e.cycle(ep.producer); cycle != nil {
		labels := make([]string, len(cycle))
		for j, s := range cycle {
			labels[j] = stepLabel(s, e.steps[s].model)
		}
		ep.add("ensemble_scheduling", "the steps form a cycle: %s", strings.Join(labels, " → "))
	}
}

// byPosition orders problems by line and column, those without a line
// last, keeping the order found among equals.
func byPosition(ps modelconfig.Errors) modelconfig.Errors {
	key := func(p modelconfig.Error) (int, int) {
		if p.Pos.Line <= 0 {
			return math.MaxInt, 0
		}
		return p.Pos.Line, p.Pos.Col
	}
	slices.SortStableFunc(ps, func(a, b modelconfig.Error) int {
		al, ac := key(a)
		bl, bc := key(b)
		if c := cmp.Compare(al, bl); c != 0 {
			return c
		}
		return cmp.Compare(ac, bc)
	})
	return ps
}

// cycle returns the steps of one cycle (the first step repeated at the
// end), or nil when the steps form a DAG. A step consuming its own output
// is reported elsewhere and ignored here.
func (e *ensemble) cycle(producer map[int]int) []int {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(e.steps))
	var stack []int
	var found []int
	var visit func(s int) bool
	visit = func(s int) bool {
		color[s] = grey
		stack = append(stack, s)
		// s depends on the producers of its inputs; a path back to a grey
		// step closes a cycle.
		for _, in := range e.steps[s].in {
			p, ok := producer[in.tensor]
			if !ok || p < 0 || p == s {
				continue
			}
			switch color[p] {
			case grey:
				// stack[k] consumes what stack[k+1] produces; reversed,
				// each step feeds the next.
				found = slices.Clone(stack[slices.Index(stack, p):])
				slices.Reverse(found)
				found = append(found, found[0])
				return true
			case white:
				if visit(p) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[s] = black
		return false
	}
	for s := range e.steps {
		if color[s] == white && visit(s) {
			return found
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// tensorType is what one side of an ensemble tensor says it holds.
type tensorType struct {
	dtype infer.DataType
	shape infer.Shape // -1 for the batch dimension and variable ones
	dims  infer.Shape // the config's dims, without the batch dimension
	who   string      // "step 0 (model 'a') output 'x'", for messages
}

func (t tensorType) String() string { return t.dtype.String() + " " + t.shape.String() }

// fits reports whether a producer's type can feed a consumer's: the same
// data type, and either their dims or their full shapes (batch dimension
// included) of one rank with dimensions that agree wherever both are
// fixed, as Triton's ensemble validation: a non-batching side with dims
// [-1,16] meets a batching [16] by the full shape, a non-batching [16]
// meets a batching [-1] by the dims (the runtime then adds or strips a
// batch dimension of 1, see stepShape).
func (t tensorType) fits(c tensorType) bool {
	return t.dtype == c.dtype && (dimsMatch(t.shape, c.shape) || dimsMatch(t.dims, c.dims))
}

// dimsMatch reports whether two shapes have one rank and agree wherever
// both are fixed (Triton's CompareDimsWithWildcard).
func dimsMatch(a, b infer.Shape) bool {
	if a == nil || b == nil || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] >= 0 && b[i] >= 0 && a[i] != b[i] {
			return false
		}
	}
	return true
}

// stepShape is the shape an ensemble tensor takes when it meets a model
// tensor (a step input, or an ensemble output), as Triton's ensemble
// scheduler converts between batching and non-batching sides: dims are
// the model tensor's config dims, batching whether that side batches,
// batch the batch size the tensor was made with (0: made by a
// non-batching side). A batching side given an unbatched tensor that
// matches its dims gets a batch of 1 prepended; a non-batching side given
// a batch of 1 that does not match its dims gets the batch dimension
// stripped; every other tensor passes as it is.
func stepShape(dims infer.Shape, batching bool, batch int64, shape infer.Shape) infer.Shape {
	if batching == (batch != 0) {
		return shape
	}
	if batching {
		if dimsMatch(dims, shape) {
			return append(infer.Shape{1}, shape...)
		}
		return shape
	}
	if batch == 1 && len(shape) > 0 && !dimsMatch(dims, shape) {
		return append(infer.Shape{}, shape[1:]...)
	}
	return shape
}

// checkTypes checks the graph against its step models' configurations:
// mapped names exist, required inputs are mapped, max_batch_size is large
// enough, and each tensor's data type and shape agree between its
// producer and its consumers and with the ensemble's declared inputs and
// outputs. stepCfg returns the configuration of step i's model, or nil
// when it is not known; such steps are skipped.
func (e *ensemble) checkTypes(cfg *inferencepb.ModelConfig, src *modelconfig.Source, stepCfg func(int) *inferencepb.ModelConfig) modelconfig.Errors {
	var ps modelconfig.Errors
	add := func(path, format string, args ...any) {
		ps = append(ps, modelconfig.Error{Pos: src.Pos(path), Msg: fmt.Sprintf(format, args...)})
	}
	ensBatch := int64(cfg.GetMaxBatchSize())
	types := map[int]tensorType{}
	for i, in := range cfg.GetInput() {
		// As Triton, the graph sees an ensemble tensor's reshape, not its dims.
		types[e.inputs[i]] = tensorType{
			dtype: modelconfig.ToInfer(in.GetDataType()),
			shape: batchShape(ensBatch, modelDims(in.GetDims(), in.GetReshape())),
			dims:  batchShape(0, modelDims(in.GetDims(), in.GetReshape())),
			who:   fmt.Sprintf("ensemble input '%s'", in.GetName()),
		}
	}
	cfgs := make([]*inferencepb.ModelConfig, len(e.steps))
	for i, st := range e.steps {
		sc := stepCfg(i)
		if sc == nil {
			continue
		}
		cfgs[i] = sc
		at := fmt.Sprintf("ensemble_scheduling.step[%d]", i)
		label := stepLabel(i, st.model)
		// As Triton: a batching ensemble may run steps that do not batch
		// (their dims then spell the batch dimension out), but a batching
		// step must take the ensemble's largest batch.
		if mb := int64(sc.GetMaxBatchSize()); ensBatch > 0 && mb != 0 && mb < ensBatch {
			add(at, "%s: max_batch_size %d is less than the ensemble's max_batch_size %d", label, mb, ensBatch)
		}
		for _, o := range st.out {
			spec := findOutput(sc, o.name)
			if spec == nil {
				add(at+".output_map["+strconv.Quote(o.name)+"]", "%s: '%s' is not an output of model '%s'; its outputs are [%s]",
					label, o.name, st.model, strings.Join(outputNames(sc), ", "))
				continue
			}
			types[o.tensor] = tensorType{
				dtype: modelconfig.ToInfer(spec.GetDataType()),
				shape: batchShape(int64(sc.GetMaxBatchSize()), spec.GetDims()),
				dims:  batchShape(0, spec.GetDims()),
				who:   fmt.Sprintf("%s output '%s'", label, o.name),
			}
		}
	}
	for i, st := range e.steps {
		sc := cfgs[i]
		if sc == nil {
			continue
		}
		at := fmt.Sprintf("ensemble_scheduling.step[%d]", i)
		label := stepLabel(i, st.model)
		for _, in := range st.in {
			path := at + ".input_map[" + strconv.Quote(in.name) + "]"
			spec := findInput(sc, in.name)
			if spec == nil {
				add(path, "%s: '%s' is not an input of model '%s'; its inputs are [%s]",
					label, in.name, st.model, strings.Join(inputNames(sc), ", "))
				continue
			}
			want := tensorType{
				dtype: modelconfig.ToInfer(spec.GetDataType()),
				shape: batchShape(int64(sc.GetMaxBatchSize()), spec.GetDims()),
				dims:  batchShape(0, spec.GetDims()),
			}
			if have, ok := types[in.tensor]; ok && !have.fits(want) {
				add(path, "tensor '%s': %s is %s but %s input '%s' wants %s",
					e.tensors[in.tensor], have.who, have, label, in.name, want)
			}
		}
		for _, spec := range sc.GetInput() {
			mapped := slices.ContainsFunc(st.in, func(s stepTensor) bool { return s.name == spec.GetName() })
			if !mapped && !spec.GetOptional() {
				add(at+".input_map", "%s: input '%s' of model '%s' is not mapped", label, spec.GetName(), st.model)
			}
		}
	}
	for i, out := range cfg.GetOutput() {
		md := modelDims(out.GetDims(), out.GetReshape())
		declared := tensorType{dtype: modelconfig.ToInfer(out.GetDataType()), shape: batchShape(ensBatch, md), dims: batchShape(0, md)}
		// Every ensemble output has an id: parseEnsemble named it.
		t := slices.Index(e.tensors, out.GetName())
		if have, ok := types[t]; t >= 0 && ok && !have.fits(declared) {
			add(fmt.Sprintf("output[%d]", i), "ensemble output '%s' is declared %s but %s is %s", out.GetName(), declared, have.who, have)
		}
	}
	ps = append(ps, e.checkDecoupled(cfg, src, cfgs)...)
	return byPosition(ps)
}

// checkDecoupled checks the steps that are decoupled models (cfgs holds
// each step's configuration, nil when not known) as Triton's ensemble
// validation does: a step may not take inputs that come from different
// decoupled steps (their responses could not be paired), and an ensemble
// that runs a decoupled step, being decoupled itself, may not enable the
// response cache.
func (e *ensemble) checkDecoupled(cfg *inferencepb.ModelConfig, src *modelconfig.Source, cfgs []*inferencepb.ModelConfig) modelconfig.Errors {
	var ps modelconfig.Errors
	// origin[t] is the decoupled step whose responses tensor t follows
	// (1 + its index), 0 for the request's own; absent: not known yet.
	origin := map[int]int{}
	for _, t := range e.inputs {
		origin[t] = 0
	}
	decoupled := false
	done := make([]bool, len(e.steps))
	for progress := true; progress; {
		progress = false
		for i, st := range e.steps {
			if done[i] || len(st.in) == 0 || slices.ContainsFunc(st.in, func(in stepTensor) bool { _, ok := origin[in.tensor]; return !ok }) {
				continue // done, or an input not known yet
			}
			done[i], progress = true, true
			from := origin[st.in[0].tensor]
			for _, in := range st.in[1:] {
				if origin[in.tensor] != from {
					ps = append(ps, modelconfig.Error{
						Pos: src.Pos(fmt.Sprintf("ensemble_scheduling.step[%d]", i)),
						Msg: fmt.Sprintf("in ensemble %s, step of model '%s' receives inputs originated from different decoupled models", e.name, st.model),
					})
					break
				}
			}
			if cfgs[i].GetModelTransactionPolicy().GetDecoupled() {
				decoupled = true
				from = i + 1
			}
			for _, o := range st.out {
				origin[o.tensor] = from
			}
		}
	}
	if decoupled && cfg.GetResponseCache().GetEnable() {
		ps = append(ps, modelconfig.Error{
			Pos: src.Pos("response_cache"),
			Msg: fmt.Sprintf("response cache does not currently support model '%s' with 'decoupled' transaction policy (it runs a decoupled step); disable the response cache", e.name),
		})
	}
	return ps
}

func findInput(cfg *inferencepb.ModelConfig, name string) *inferencepb.ModelInput {
	for _, in := range cfg.GetInput() {
		if in.GetName() == name {
			return in
		}
	}
	return nil
}

func findOutput(cfg *inferencepb.ModelConfig, name string) *inferencepb.ModelOutput {
	for _, out := range cfg.GetOutput() {
		if out.GetName() == name {
			return out
		}
	}
	return nil
}

func inputNames(cfg *inferencepb.ModelConfig) []string {
	var out []string
	for _, in := range cfg.GetInput() {
		out = append(out, in.GetName())
	}
	return out
}

func outputNames(cfg *inferencepb.ModelConfig) []string {
	var out []string
	for _, o := range cfg.GetOutput() {
		out = append(out, o.GetName())
	}
	return out
}

// stepModels lists the distinct models an ensemble configuration runs.
func stepModels(cfg *inferencepb.ModelConfig) []string {
	var out []string
	for _, st := range cfg.GetEnsembleScheduling().GetStep() {
		if n := st.GetModelName(); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// ensembleReason says why an ensemble version cannot serve now: a step
// model that has no ready version, or step models whose tensors no longer
// fit the graph. It returns "" when every step can run.
func (m *Manager) ensembleReason(lv *loaded, depth int) string {
	e := lv.ens
	if depth >= maxEnsembleDepth {
		return fmt.Sprintf("ensembles nest more than %d deep (do two ensembles name each other?)", maxEnsembleDepth)
	}
	steps := make([]*loaded, len(e.steps))
	for i, st := range e.steps {
		label := stepLabel(i, st.model)
		mdl := m.lookup(st.model)
		if mdl == nil {
			return label + " is not loaded"
		}
		slv, ierr := mdl.find(st.version)
		if ierr != nil {
			return label + " is not ready: " + withoutTritonPrefix(ierr.Msg)
		}
		if slv.ens != nil {
			if r := m.ensembleReason(slv, depth+1); r != "" {
				return label + " is not ready: model '" + st.model + "' version " + slv.vstr + ": " + r
			}
		}
		steps[i] = slv
	}
	if c := e.checked.Load(); c != nil && slices.Equal(c.steps, steps) {
		return c.reason
	}
	ps := e.checkTypes(lv.cfg, nil, func(i int) *inferencepb.ModelConfig { return steps[i].cfg })
	c := &depCheck{steps: steps}
	if len(ps) > 0 {
		c.reason = "the step models do not fit the ensemble: " + oneLine(ps.Error())
	}
	e.checked.Store(c)
	return c.reason
}

// modelDims is the shape a tensor has inside the model: its reshape when
// the config has one, else its dims.
func modelDims(dims []int64, reshape *inferencepb.ModelTensorReshape) []int64 {
	if reshape != nil {
		return reshape.GetShape()
	}
	return dims
}

// stepConfig returns the configuration of the version a step runs and
// whether it batches; nil when that version is not ready (its Infer then
// answers why).
func (m *Manager) stepConfig(st ensembleStep) (*inferencepb.ModelConfig, bool) {
	mdl := m.lookup(st.model)
	if mdl == nil {
		return nil, false
	}
	slv, err := mdl.find(st.version)
	if err != nil {
		return nil, false
	}
	return slv.cfg, slv.maxBatch > 0
}

// neededSteps marks the steps the wanted ensemble outputs depend on, as
// Triton runs only those: a step is needed when one of its outputs is
// wanted or feeds a needed step.
func (e *ensemble) neededSteps(outputs []string) []bool {
	producer := map[int]int{}
	for i, st := range e.steps {
		for _, o := range st.out {
			producer[o.tensor] = i
		}
	}
	needed := make([]bool, len(e.steps))
	var todo []int
	want := func(t int) {
		if i, ok := producer[t]; ok && !needed[i] {
			needed[i] = true
			todo = append(todo, i)
		}
	}
	for _, name := range outputs {
		if t := slices.Index(e.tensors, name); t >= 0 {
			want(t)
		}
	}
	for len(todo) > 0 {
		i := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, in := range e.steps[i].in {
			want(in.tensor)
		}
	}
	return needed
}

// stepError names the ensemble step a failure happened in, keeping the
// step's kind and reason so clients see why.
func stepError(ensemble string, i int, model string, err error) *apierr.Error {
	ie, ok := errors.AsType[*apierr.Error](err)
	if !ok {
		return &apierr.Error{
			Kind: apierr.KindInternal, Reason: ReasonEnsembleError,
			Msg: fmt.Sprintf("ensemble '%s' %s", ensemble, stepLabel(i, model)), Err: err,
		}
	}
	return &apierr.Error{
		Kind: ie.Kind, Reason: ie.Reason,
		Msg: fmt.Sprintf("ensemble '%s' %s: %s", ensemble, stepLabel(i, model), ie.Msg), Err: ie.Err,
	}
}
