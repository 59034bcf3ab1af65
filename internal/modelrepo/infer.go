package modelrepo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// maxAcquireAttempts bounds the retries of a request that raced a swap:
// each retry sees a newer serving set, so one is almost always enough.
const maxAcquireAttempts = 8

// Infer validates a request against the model version's config and runs
// it: from the response cache when the model has one and holds the
// answer, else through the version's scheduler on its instances, or, for
// an ensemble, step by step through the step models. An empty req.Version
// picks the highest ready version. Errors are *apierr.Error values.
func (m *Manager) Infer(ctx context.Context, req *infer.Request) (*infer.Response, error) {
	start := time.Now()
	if m.closed.Load() {
		return nil, apierr.Errorf(apierr.KindUnavailable, ReasonShuttingDown, "server is shutting down")
	}
	mdl := m.lookup(req.Model)
	if mdl == nil {
		return nil, m.unknownModel(req.Model)
	}
	lv, err := m.acquire(mdl, req.Version)
	if err != nil {
		return nil, err
	}
	defer lv.release()
	if lv.decoupled() || (lv.ens != nil && m.streamsEnsemble(lv, 0)) {
		ierr := decoupledRefused(lv)
		m.failed(lv, ierr, start)
		return nil, ierr
	}
	resp, ierr := m.serve(ctx, lv, req, start)
	if ierr != nil {
		m.failed(lv, ierr, start)
		return nil, ierr
	}
	return resp, nil
}

// serve answers one request on a version the caller holds a reference
// on, and records its success in the statistics and metrics.
func (m *Manager) serve(ctx context.Context, lv *loaded, req *infer.Request, start time.Time) (*infer.Response, *apierr.Error) {
	inputs, outputs, batch, ierr := lv.prepare(req)
	if ierr != nil {
		return nil, ierr
	}
	sched, ierr := scheduleParams(req.Parameters)
	if ierr != nil {
		return nil, ierr
	}
	classes, ierr := lv.classifications(req)
	if ierr != nil {
		return nil, ierr
	}
	var key cacheKey
	var lookup time.Duration
	if lv.cached {
		t0 := time.Now()
		key = newCacheKey(lv, inputs, outputs)
		outs, hit := m.cache.get(key)
		lookup = time.Since(t0)
		if hit {
			now := time.Now()
			total := now.Sub(start)
			lv.obs.requests.Inc()
			lv.obs.cacheHits.Inc()
			lv.obs.duration.Observe(total.Seconds())
			lv.obs.triton.succeeded(batch, total, execTimes{}, false)
			lv.stats.cacheHit(total, lookup, now)
			return lv.response(req, outs, classes)
		}
	}
	var outs []infer.Tensor
	var times execTimes
	switch {
	case lv.ens != nil:
		outs, ierr = m.runEnsemble(ctx, lv, req, inputs, outputs)
	case lv.seq != nil:
		enqueued := time.Now()
		outs, times, ierr = lv.executeSequence(ctx, inputs, outputs, req.Parameters)
		traceExecution(ctx, lv, enqueued, times, batch, ierr)
	default:
		enqueued := time.Now()
		lv.obs.triton.enqueued()
		outs, times, ierr = lv.execute(ctx, inputs, outputs, batch, sched)
		lv.obs.triton.answered()
		traceExecution(ctx, lv, enqueued, times, batch, ierr)
		lv.clientShapes(outs)
	}
	if ierr == nil {
		ierr = lv.checkOutputSize(outs)
	}
	if lv.cached {
		t0 := time.Now()
		if ierr == nil {
			if size, fits := m.cache.put(key, lv.id, outs); !fits && lv.cacheTooBig.CompareAndSwap(false, true) {
				// Once per loaded version: Triton logs each failed insertion
				// ("Failed to insert key", qa/L0_response_cache test.sh).
				m.logger.Warn("failed to insert key into the response cache: the response is larger than the whole cache, so this version's responses of that size are served uncached",
					"model", lv.model, "version", lv.vstr, "entry_bytes", size, "cache_bytes", m.cache.limit)
			}
		}
		lv.stats.cacheMiss(lookup + time.Since(t0))
		lv.obs.cacheMisses.Inc()
	}
	if ierr != nil {
		return nil, ierr
	}
	now := time.Now()
	total := now.Sub(start)
	lv.obs.requests.Inc()
	lv.obs.inferences.Add(float64(batch))
	lv.obs.duration.Observe(total.Seconds())
	lv.obs.triton.succeeded(batch, total, times, true)
	if lv.ens != nil {
		lv.obs.executions.Inc()
		lv.obs.triton.executed()
		lv.stats.ensembleSuccess(uint64(batch), total, now)
	} else {
		lv.stats.success(uint64(batch), total, times, now)
	}
	return lv.response(req, outs, classes)
}

// response answers req with outs, the outputs asked to be classified
// (classes) replaced by their top classes.
func (lv *loaded) response(req *infer.Request, outs []infer.Tensor, classes map[string]int) (*infer.Response, *apierr.Error) {
	outs, ierr := lv.classify(outs, classes)
	if ierr != nil {
		return nil, ierr
	}
	resp := &infer.Response{ID: req.ID, Model: lv.model, Version: lv.vstr, Outputs: outs}
	if lv.ens != nil {
		resp.Parameters = sequenceResponseParams(req.Parameters)
	}
	return resp, nil
}

// schedParams are the request parameters the scheduler honours.
type schedParams struct {
	priority uint64        // 0 = the model's default level
	timeout  time.Duration // 0 = the queue policy's default
	// model are the parameters the model sees (a Python model's
	// request.parameters()); nil when there are none.
	model infer.Parameters
}

// Request parameters the scheduler reads, as Triton names them.
const (
	paramPriority = "priority"
	paramTimeout  = "timeout" // microseconds
)

// serverParams are the request parameters Triton's frontends consume
// rather than hand to the model: the scheduling and sequence ones.
var serverParams = map[string]bool{
	paramPriority: true, paramTimeout: true,
	paramSequenceID: true, paramSequenceStart: true, paramSequenceEnd: true,
}

// modelParams returns the request parameters a model sees, as Triton's
// frontends pass them on (qa/L0_parameters/parameters_test.py): all but
// serverParams. It returns nil, allocating nothing, when none is left.
func modelParams(p infer.Parameters) infer.Parameters {
	n := 0
	for k := range p {
		if !serverParams[k] {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if n == len(p) {
		return p
	}
	out := make(infer.Parameters, n)
	for k, v := range p {
		if !serverParams[k] {
			out[k] = v
		}
	}
	return out
}

// scheduleParams reads the priority and timeout request parameters and
// picks the ones the model sees.
func scheduleParams(p infer.Parameters) (schedParams, *apierr.Error) {
	s := schedParams{model: modelParams(p)}
	if v, ok := p[paramPriority]; ok {
		n, ok := paramUint(v)
		if !ok {
			return s, apierr.Errorf(apierr.KindInvalid, ReasonInvalidParameter, "request parameter '%s' must be a non-negative integer, got %v", paramPriority, v)
		}
		s.priority = n
	}
	if v, ok := p[paramTimeout]; ok {
		n, ok := paramUint(v)
		if !ok || n > uint64(math.MaxInt64/int64(time.Microsecond)) {
			return s, apierr.Errorf(apierr.KindInvalid, ReasonInvalidParameter, "request parameter '%s' must be a non-negative integer number of microseconds, got %v", paramTimeout, v)
		}
		s.timeout = time.Duration(n) * time.Microsecond
	}
	return s, nil
}

// paramUint reads an integer parameter that must not be negative.
func paramUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case int64:
		return uint64(x), x >= 0
	case uint64:
		return x, true
	}
	return 0, false
}

// The messages of the errors Triton's clients match on start with
// Triton's own text ("Request for unknown model: ..."); Sluice's detail
// follows, and the reason code is Sluice's.

// withoutTritonPrefix drops the Triton words of a not-ready message,
// where Sluice's own detail reads better (index reasons).
func withoutTritonPrefix(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "Request for unknown model: "); ok {
		for _, sep := range []string{"has no available versions: ", "is not at ready state: "} {
			if _, detail, ok := strings.Cut(rest, sep); ok {
				return detail
			}
		}
	}
	return msg
}

func modelNotFound(name string) *apierr.Error {
	return apierr.Errorf(apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: '%s' is not found", name)
}

// unknownModel explains a request for a model the manager does not hold.
// One whose folder a poll saw leave the repository answers as Triton does
// for it, which keeps the model unloaded rather than forgetting it
// (qa/L0_lifecycle/lifecycle_test.py test_dynamic_model_load_unload).
func (m *Manager) unknownModel(name string) *apierr.Error {
	m.mu.Lock()
	removed := m.removed[name]
	m.mu.Unlock()
	if removed {
		return apierr.Errorf(apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: '%s' has no available versions: model '%s' is %s: unloaded (its folder left the model repository)", name, name, StateUnavailable)
	}
	return modelNotFound(name)
}

// acquire takes a reference on the version a request asks for. An
// ensemble version serves only while every step model can run.
func (m *Manager) acquire(mdl *model, version string) (*loaded, *apierr.Error) {
	lv, err := mdl.acquire(version)
	if err != nil {
		return nil, err
	}
	if lv.ens != nil {
		if r := m.ensembleReason(lv, 0); r != "" {
			lv.release()
			return nil, ensembleUnavailable(lv, r)
		}
	}
	return lv, nil
}

func ensembleUnavailable(lv *loaded, reason string) *apierr.Error {
	return apierr.Errorf(apierr.KindUnavailable, ReasonModelNotReady, "Request for unknown model: '%s' version %d is not at ready state: model '%s' version %d is %s: %s",
		lv.model, lv.version, lv.model, lv.version, StateUnavailable, reason)
}

// acquire finds the version a request asks for and takes a reference on
// it. A version retired between the lookup and the reference was replaced
// by a newer serving set, so the lookup is simply repeated.
func (mdl *model) acquire(version string) (*loaded, *apierr.Error) {
	for range maxAcquireAttempts {
		lv, err := mdl.find(version)
		if err != nil {
			return nil, err
		}
		if lv.acquire() {
			return lv, nil
		}
	}
	return nil, apierr.Errorf(apierr.KindUnavailable, ReasonModelNotReady, "model '%s' is being swapped; retry", mdl.name)
}

// find resolves a version string against what serves now.
func (mdl *model) find(version string) (*loaded, *apierr.Error) {
	set := mdl.serving.Load()
	if version == "" {
		if lv := set.latest(); lv != nil {
			return lv, nil
		}
		return nil, mdl.notReady(0)
	}
	v, ok := versionNumber(version)
	if !ok {
		return nil, apierr.Errorf(apierr.KindNotFound, ReasonVersionNotFound, "Request for unknown model: '%s' version %s is not found (model '%s' has no version '%s')", mdl.name, version, mdl.name, version)
	}
	if lv := set.get(v); lv != nil {
		return lv, nil
	}
	return nil, mdl.notReady(v)
}

// notReady explains why a model (v == 0) or one of its versions cannot
// serve.
func (mdl *model) notReady(v int64) *apierr.Error {
	mdl.mu.Lock()
	defer mdl.mu.Unlock()
	unavailable := func(format string, args ...any) *apierr.Error {
		prefix := fmt.Sprintf("Request for unknown model: '%s' has no available versions: ", mdl.name)
		if v != 0 {
			prefix = fmt.Sprintf("Request for unknown model: '%s' version %d is not at ready state: ", mdl.name, v)
		}
		return apierr.Errorf(apierr.KindUnavailable, ReasonModelNotReady, prefix+format, args...)
	}
	if v != 0 {
		switch st := mdl.status[v]; {
		case st != nil && st.loading:
			return unavailable("model '%s' version %d is %s", mdl.name, v, StateLoading)
		case st != nil && st.reason != "":
			return unavailable("model '%s' version %d is %s: %s", mdl.name, v, StateUnavailable, st.reason)
		case mdl.unloaded[v]:
			return unavailable("model '%s' version %d is %s: unloaded", mdl.name, v, StateUnavailable)
		}
		return apierr.Errorf(apierr.KindNotFound, ReasonVersionNotFound, "Request for unknown model: '%s' version %d is not found (model '%s' has no version %d)", mdl.name, v, mdl.name, v)
	}
	switch {
	case mdl.reason != "":
		return unavailable("model '%s' is %s: %s", mdl.name, StateUnavailable, mdl.reason)
	case mdl.phase == phaseNotLoaded:
		return unavailable("model '%s' is not loaded", mdl.name)
	case mdl.phase == phaseUnloaded:
		return unavailable("model '%s' is %s: unloaded", mdl.name, StateUnavailable)
	}
	var versions []int64
	for v := range mdl.status {
		versions = append(versions, v)
	}
	slices.Sort(versions)
	for _, v := range slices.Backward(versions) {
		st := mdl.status[v]
		if st.loading {
			return unavailable("model '%s' version %d is %s", mdl.name, v, StateLoading)
		}
		if st.reason != "" {
			return unavailable("model '%s' version %d is %s: %s", mdl.name, v, StateUnavailable, st.reason)
		}
	}
	return unavailable("model '%s' has no ready version", mdl.name)
}

// ctxError reports a request whose context ended.
func ctxError(ctx context.Context) *apierr.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &apierr.Error{Kind: apierr.KindTimeout, Reason: ReasonDeadlineExceeded, Msg: "request deadline exceeded", Err: context.Cause(ctx)}
	}
	return &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonCanceled, Msg: "request canceled", Err: context.Cause(ctx)}
}

// backendError keeps a backend's *apierr.Error and wraps anything else.
func (lv *loaded) backendError(ctx context.Context, err error) *apierr.Error {
	if ie, ok := errors.AsType[*apierr.Error](err); ok {
		if ie.Reason == "" {
			c := *ie
			c.Reason = ReasonBackendError
			return &c
		}
		return ie
	}
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	return &apierr.Error{
		Kind: apierr.KindInternal, Reason: ReasonBackendError,
		Msg: fmt.Sprintf("model '%s' version %d: execute", lv.model, lv.version), Err: err,
	}
}

// prepare checks a request against the config and returns the inputs in
// config order (reshaped for the model), the outputs to compute and the
// batch size (1 for models that do not batch).
func (lv *loaded) prepare(req *infer.Request) ([]infer.Tensor, []string, int64, *apierr.Error) {
	invalid := func(reason, format string, args ...any) ([]infer.Tensor, []string, int64, *apierr.Error) {
		return nil, nil, 0, apierr.Errorf(apierr.KindInvalid, reason, format, args...)
	}
	for k := range req.Parameters {
		// Triton reserves the prefix and refuses such keys (qa/L0_parameters
		// test_params_reserved_rejected); the gRPC stream consumes its
		// triton_enable_empty_final_response before the request gets here.
		if strings.HasPrefix(k, "triton_") {
			return invalid(ReasonInvalidParameter, "parameter '%s': parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.", k)
		}
	}
	var byInputBuf [8]int
	byInput := byInputBuf[:0]
	byInput = append(byInput, make([]int, len(lv.inputs))...) // config index -> request index + 1
	batch, batchFrom := int64(-1), ""
	for ri := range req.Inputs {
		t := &req.Inputs[ri]
		ci := slices.IndexFunc(lv.inputs, func(s inputSpec) bool { return s.name == t.Name })
		if ci < 0 {
			return invalid(ReasonUnknownInput, "input '%s' is not an input of model '%s'", t.Name, lv.model)
		}
		if byInput[ci] != 0 {
			return invalid(ReasonDuplicateInput, "input '%s' is given more than once", t.Name)
		}
		byInput[ci] = ri + 1
		spec := lv.inputs[ci]
		if t.DataType != spec.dtype {
			return invalid(ReasonInvalidDatatype, "input '%s': expected datatype %s, got %s", t.Name, spec.dtype, t.DataType)
		}
		if !t.Shape.Matches(spec.shape) || slices.ContainsFunc(t.Shape, func(d int64) bool { return d < 0 }) {
			return invalid(ReasonInvalidShape, "input '%s': expected shape %s, got %s", t.Name, spec.shape, t.Shape)
		}
		if lv.maxBatch > 0 {
			b := t.Shape[0]
			switch {
			case b < 1:
				return invalid(ReasonInvalidShape, "input '%s': batch size must be at least 1, got %d", t.Name, b)
			case b > lv.maxBatch:
				return invalid(ReasonBatchTooLarge, "input '%s': batch size %d exceeds max_batch_size %d", t.Name, b, lv.maxBatch)
			case batch >= 0 && b != batch:
				return invalid(ReasonInvalidShape, "input '%s': batch size %d differs from batch size %d of input '%s'", t.Name, b, batch, batchFrom)
			}
			batch, batchFrom = b, t.Name
		}
		if err := t.CheckSize(); err != nil {
			return invalid(ReasonInvalidSize, "input '%s': %v", t.Name, err)
		}
	}
	inputs := make([]infer.Tensor, 0, len(req.Inputs))
	for ci, spec := range lv.inputs {
		if byInput[ci] == 0 {
			if spec.optional {
				continue
			}
			return invalid(ReasonMissingInput, "input '%s' is missing%s", spec.name, lv.inputCountDetail(req))
		}
		inputs = append(inputs, lv.modelTensor(spec, req.Inputs[byInput[ci]-1]))
	}
	outputs := lv.outputs
	if len(req.Outputs) > 0 {
		outputs = make([]string, 0, len(req.Outputs))
		for _, o := range req.Outputs {
			if !slices.Contains(lv.outputs, o.Name) {
				// In parentheses Triton's words, which its QA looks for
				// (qa/L0_implicit_state test_request_output_not_allowed:
				// a state output the configuration does not list).
				return invalid(ReasonUnknownOutput, "output '%s' is not an output of model '%s' (unexpected inference output '%s' for model '%s')", o.Name, lv.model, o.Name, lv.model)
			}
			if slices.Contains(outputs, o.Name) {
				return invalid(ReasonDuplicateOutput, "output '%s' already exists in request (Duplicate output name '%s' is not allowed in a request)", o.Name, o.Name)
			}
			outputs = append(outputs, o.Name)
		}
	}
	if batch < 0 {
		batch = 1
	}
	return inputs, outputs, batch, nil
}

// inputCountDetail adds Triton's words for a request with fewer inputs
// than the model requires, as its clients and QA match on them: ": expected
// 3 inputs but got 1 inputs for model 'm'. Got input(s) ['A'], but missing
// required input(s) ['B','C']. Please provide all required input(s)." With
// optional inputs the count is a range ("expected number of inputs between
// 3 and 4 ..."). Empty when the count is in range.
func (lv *loaded) inputCountDetail(req *infer.Request) string {
	var missing []string
	for _, spec := range lv.inputs {
		if spec.optional || slices.ContainsFunc(req.Inputs, func(t infer.Tensor) bool { return t.Name == spec.name }) {
			continue
		}
		missing = append(missing, "'"+spec.name+"'")
	}
	required := 0
	for _, spec := range lv.inputs {
		if !spec.optional {
			required++
		}
	}
	if len(req.Inputs) >= required || len(missing) == 0 {
		return ""
	}
	given := make([]string, len(req.Inputs))
	for i, t := range req.Inputs {
		given[i] = "'" + t.Name + "'"
	}
	expected := fmt.Sprintf("expected %d inputs", len(lv.inputs))
	if required < len(lv.inputs) {
		expected = fmt.Sprintf("expected number of inputs between %d and %d", required, len(lv.inputs))
	}
	return fmt.Sprintf(": %s but got %d inputs for model '%s'. Got input(s) [%s], but missing required input(s) [%s]. Please provide all required input(s).",
		expected, len(req.Inputs), lv.model, strings.Join(given, ","), strings.Join(missing, ","))
}

// modelTensor gives a request tensor the shape the model wants when the
// config reshapes it. The data is shared.
func (lv *loaded) modelTensor(spec inputSpec, t infer.Tensor) infer.Tensor {
	if spec.reshape == nil {
		return t
	}
	if s, ok := reshapeInput(spec.shape, spec.reshape, t.Shape, lv.maxBatch > 0); ok {
		t.Shape = s
	}
	return t // no fit: the backend answers the shape error
}

// reshapeInput gives the shape the model gets for an input whose config
// has a reshape, as Triton's request normalization does: the batch
// dimension (when batched) is kept, and the variable dimensions of the
// reshape take, in order, the values the request gave the variable
// dimensions of dims (dims [2,4,-1,6] with reshape [8,-1,1,6] turns a
// [b,2,4,5,6] request into [b,8,5,1,6]). When that does not fit the
// element count, one variable dimension solved from the element count is
// tried (fitShape).
func reshapeInput(dims, reshape, have infer.Shape, batched bool) (infer.Shape, bool) {
	start := 0
	if batched {
		start = 1
	}
	if len(have) == len(dims) && len(reshape) >= start && len(have) >= start {
		var vals []int64
		for i := start; i < len(dims); i++ {
			if dims[i] < 0 {
				vals = append(vals, have[i])
			}
		}
		s := append(make(infer.Shape, 0, len(reshape)), reshape...) // [] stays [], not nil
		if batched {
			s[0] = have[0]
		}
		k, ok := 0, true
		for i := start; i < len(s); i++ {
			if s[i] >= 0 {
				continue
			}
			if k == len(vals) {
				ok = false // more variable dimensions in reshape than in dims
				break
			}
			s[i] = vals[k]
			k++
		}
		if ok && k == len(vals) {
			want, err1 := s.Elements()
			got, err2 := have.Elements()
			if err1 == nil && err2 == nil && want == got {
				return s, true
			}
		}
	}
	return fitShape(reshape, have, batched)
}

// clientShapes gives the outputs whose config has a reshape the shape of
// their config dims, as Triton does: the model's [1,1000,1,1] becomes the
// [1000] the metadata shows (batch dimension kept). A variable dimension
// of dims takes what the element count leaves for it; an output whose
// element count does not fit dims keeps the model's shape.
func (lv *loaded) clientShapes(outs []infer.Tensor) {
	if lv.outShapes == nil {
		return
	}
	for i := range outs {
		want, ok := lv.outShapes[outs[i].Name]
		if !ok {
			continue
		}
		if s, ok := fitShape(want, outs[i].Shape, lv.maxBatch > 0); ok {
			outs[i].Shape = s
		}
	}
}

// fitShape returns want with its batch dimension (when batched) taken
// from have and at most one other variable dimension solved from have's
// element count.
func fitShape(want, have infer.Shape, batched bool) (infer.Shape, bool) {
	elems, err := have.Elements()
	if err != nil {
		return nil, false
	}
	n := int64(elems)
	s := append(make(infer.Shape, 0, len(want)), want...) // [] stays [], not nil
	if batched {
		if len(s) == 0 || len(have) == 0 {
			return nil, false
		}
		s[0] = have[0]
	}
	known, free := int64(1), -1
	for i, d := range s {
		switch {
		case d >= 0:
			known *= d
		case free >= 0:
			return nil, false // two unknowns: ambiguous
		default:
			free = i
		}
	}
	if free >= 0 {
		if known == 0 || n%known != 0 {
			return nil, false
		}
		s[free] = n / known
		known = n
	}
	if known != n {
		return nil, false
	}
	return s, true
}

// Metadata returns a model's metadata, as of the given version or, when
// version is empty, the highest ready one.
func (m *Manager) Metadata(_ context.Context, name, version string) (*Metadata, error) {
	mdl, lv, err := m.resolve(name, version)
	if err != nil {
		return nil, err
	}
	md := &Metadata{
		Name:      name,
		Platform:  lv.platform,
		Inputs:    cloneSpecs(lv.client.Inputs),
		Outputs:   cloneSpecs(lv.client.Outputs),
		Label:     lv.label,
		GitCommit: lv.commit,
		LoadedAt:  lv.loadedAt,
	}
	for _, s := range mdl.serving.Load().all() {
		md.Versions = append(md.Versions, s.vstr)
	}
	return md, nil
}

func cloneSpecs(in []infer.TensorSpec) []infer.TensorSpec {
	out := make([]infer.TensorSpec, len(in))
	for i, s := range in {
		out[i] = infer.TensorSpec{Name: s.Name, DataType: s.DataType, Shape: s.Shape.Clone()}
	}
	return out
}

// Config returns the configuration a ready version runs with, after
// defaults and auto-complete. The result is a copy. An ensemble that runs
// a decoupled step shows model_transaction_policy { decoupled: true }, as
// Triton marks it, so that clients choose the streaming endpoints.
func (m *Manager) Config(_ context.Context, name, version string) (*inferencepb.ModelConfig, error) {
	_, lv, err := m.resolve(name, version)
	if err != nil {
		return nil, err
	}
	cfg := proto.CloneOf(lv.cfg)
	if lv.ens != nil && m.streamsEnsemble(lv, 0) {
		cfg.ModelTransactionPolicy = &inferencepb.ModelTransactionPolicy{Decoupled: true}
	}
	return cfg, nil
}

// ModelReady returns nil when the model version (or, with an empty
// version, any version) is ready, else why it is not.
func (m *Manager) ModelReady(_ context.Context, name, version string) error {
	_, _, err := m.resolve(name, version)
	return err
}

// resolve finds a ready version without taking a reference.
func (m *Manager) resolve(name, version string) (*model, *loaded, error) {
	mdl := m.lookup(name)
	if mdl == nil {
		return nil, nil, m.unknownModel(name)
	}
	lv, ierr := mdl.find(version)
	if ierr != nil {
		return nil, nil, ierr
	}
	if lv.ens != nil {
		if r := m.ensembleReason(lv, 0); r != "" {
			return nil, nil, ensembleUnavailable(lv, r)
		}
	}
	return mdl, lv, nil
}

// Statistics returns the statistics of the ready versions of one model
// (name set), or of every model (name empty). With a version, only that
// version's.
func (m *Manager) Statistics(_ context.Context, name, version string) ([]ModelStats, error) {
	var models []*model
	if name == "" {
		models = m.sortedModels()
	} else {
		mdl := m.lookup(name)
		if mdl == nil {
			return nil, m.unknownModel(name)
		}
		models = []*model{mdl}
	}
	var out []ModelStats
	for _, mdl := range models {
		versions := mdl.serving.Load().all()
		if version != "" {
			lv, err := mdl.find(version)
			if err != nil {
				// Triton answers the statistics of a version that does
				// not serve with these words; its QA matches on them.
				err.Msg = fmt.Sprintf("requested model version is not available for model '%s': %s", mdl.name, err.Msg)
				return nil, err
			}
			versions = []*loaded{lv}
		}
		for _, lv := range versions {
			out = append(out, lv.stats.snapshot(mdl.name, lv.version))
		}
	}
	return out, nil
}

// Index lists every model the repositories hold and each known version,
// with its state and, when it is not ready, why. With readyOnly, only
// READY entries. A READY entry may still carry a reason: a reload of it
// that failed, or an unreadable repository.
func (m *Manager) Index(_ context.Context, readyOnly bool) []IndexEntry {
	m.mu.Lock()
	repoErr := make(map[string]string, len(m.repoErr))
	for repo, e := range m.repoErr {
		repoErr[repo] = m.repoWarning(repo, e)
	}
	m.mu.Unlock()

	var out []IndexEntry
	seen := map[string]bool{}
	for _, mdl := range m.sortedModels() {
		seen[mdl.name] = true
		out = append(out, m.ensembleIndex(mdl, mdl.index(repoErr))...)
	}
	if m.opts.ControlMode == ControlExplicit {
		// Triton's index also lists the models nobody loaded yet.
		for _, repo := range m.opts.Repositories {
			names, err := listRepository(repo)
			if err != nil {
				continue
			}
			for _, n := range names {
				if !seen[n] {
					seen[n] = true
					out = append(out, IndexEntry{Name: n, State: StateUnknown, Reason: "not loaded"})
				}
			}
		}
		slices.SortStableFunc(out, func(a, b IndexEntry) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
	}
	if readyOnly {
		out = slices.DeleteFunc(out, func(e IndexEntry) bool { return e.State != StateReady })
	}
	for i := range out {
		out[i].Reason = m.showRemotePaths(out[i].Reason)
	}
	return out
}

// ensembleIndex marks the READY entries of ensemble versions whose step
// models cannot run as UNAVAILABLE, with the reason.
func (m *Manager) ensembleIndex(mdl *model, es []IndexEntry) []IndexEntry {
	set := mdl.serving.Load()
	for i, e := range es {
		v, ok := versionNumber(e.Version)
		if !ok || e.State != StateReady {
			continue
		}
		if lv := set.get(v); lv != nil && lv.ens != nil {
			if r := m.ensembleReason(lv, 0); r != "" {
				es[i].State, es[i].Reason = StateUnavailable, r
			}
		}
	}
	return es
}

// index lists one model's entries.
func (mdl *model) index(repoErr map[string]string) []IndexEntry {
	set := mdl.serving.Load()
	mdl.mu.Lock()
	defer mdl.mu.Unlock()
	warn := ""
	if mdl.repo != "" {
		warn = repoErr[mdl.repo]
	}
	versions := map[int64]bool{}
	for _, lv := range set.all() {
		versions[lv.version] = true
	}
	for v := range mdl.status {
		versions[v] = true
	}
	if len(versions) == 0 {
		e := IndexEntry{Name: mdl.name, State: StateUnavailable, Reason: mdl.reason}
		switch {
		case mdl.reason != "":
		case mdl.phase == phaseNotLoaded:
			e.State, e.Reason = StateUnknown, "not loaded"
		case mdl.phase == phaseUnloaded:
			e.Reason = "unloaded"
		default:
			e.Reason = "no version loaded"
		}
		return []IndexEntry{e}
	}
	sorted := make([]int64, 0, len(versions))
	for v := range versions {
		sorted = append(sorted, v)
	}
	slices.Sort(sorted)
	out := make([]IndexEntry, 0, len(sorted))
	for _, v := range sorted {
		e := IndexEntry{Name: mdl.name, Version: strconv.FormatInt(v, 10)}
		st := mdl.status[v]
		switch {
		case set.get(v) != nil:
			e.State = StateReady
			e.LoadedAt = set.get(v).loadedAt
			var reasons []string
			if r, allDown := set.get(v).instanceHealth(); r != "" {
				if allDown {
					e.State = StateUnavailable
				}
				reasons = append(reasons, r)
			}
			if st != nil && st.loading {
				reasons = append(reasons, "reloading")
			}
			if st != nil && st.reason != "" {
				reasons = append(reasons, "reload failed, the previous load keeps serving: "+st.reason)
			}
			if warn != "" {
				reasons = append(reasons, warn)
			}
			e.Reason = strings.Join(reasons, "; ")
		case st != nil && st.loading:
			e.State = StateLoading
		default:
			e.State = StateUnavailable
			if st != nil {
				e.Reason = st.reason
			}
		}
		out = append(out, e)
	}
	return out
}

// tracer names the model server's spans.
var tracer = telemetry.Tracer("github.com/sluice-ml/sluice/internal/modelrepo")

// traceExecution records the request's time in the scheduler queue and in
// execution as two spans under ctx's span, from the times the batcher
// measured (the batcher itself knows nothing of requests' contexts).
func traceExecution(ctx context.Context, lv *loaded, enqueued time.Time, t execTimes, batch int64, ierr *apierr.Error) {
	if !trace.SpanFromContext(ctx).SpanContext().IsSampled() {
		return
	}
	attrs := trace.WithAttributes(attribute.String("model", lv.model), attribute.String("version", lv.vstr), attribute.Int64("batch_size", batch))
	started := enqueued.Add(t.queue)
	_, q := tracer.Start(ctx, "model.queue", trace.WithTimestamp(enqueued), attrs)
	q.End(trace.WithTimestamp(started))
	_, x := tracer.Start(ctx, "model.execute", trace.WithTimestamp(started), attrs)
	if ierr != nil {
		x.SetStatus(codes.Error, ierr.Reason)
	}
	x.End(trace.WithTimestamp(started.Add(t.input + t.infer + t.output)))
}
