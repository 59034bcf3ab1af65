package modelrepo

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

// ensembleDepthKey is the context key holding how many ensembles a
// request is nested in.
type ensembleDepthKey struct{}

// An ensemble request runs as Triton's ensemble scheduler runs it. Every
// ensemble tensor holds a numbered series of values, one per time a step
// (or the request, for an ensemble input) produced it: a decoupled step
// produces a value for each of its responses. A step runs once for each
// number n at which all of its input tensors have a value, so each
// response of a decoupled step flows through the steps after it on its
// own; and the ensemble answers once for each number at which all the
// wanted outputs have a value. An ensemble without decoupled steps
// therefore answers exactly once.
//
// Values are numbered in the order they are produced, per tensor, as in
// Triton. The first failure (a step's error, a full queue, the client
// going away) stops new steps and responses; the request ends with it
// once the steps in flight have finished.

// ensembleValue is one value of an ensemble tensor.
type ensembleValue struct {
	t     infer.Tensor
	have  bool  // false: the producer left it out (an optional input, a subset answer)
	batch int64 // the batch size it was made with; 0: by a non-batching side
	refs  int   // consumers that have not taken it yet
}

// ensembleSeries is the numbered values of one ensemble tensor.
type ensembleSeries struct {
	next int
	vals map[int]*ensembleValue
}

// tensorAt names value n of tensor t.
type tensorAt struct{ t, n int }

// stepAt names the run of step s on the values numbered n.
type stepAt struct{ s, n int }

// ensembleRun is one ensemble request in flight.
type ensembleRun struct {
	m      *Manager
	lv     *loaded
	e      *ensemble
	req    *infer.Request
	ctx    context.Context
	cancel context.CancelFunc
	needed []bool
	wanted []int // ids of the wanted ensemble outputs, in request order
	refs   []int // consumers of each tensor: needed steps, plus 1 when a wanted output
	// emit gets each response's outputs, in order, under mu; final is set
	// on the last. A non-nil return fails the request.
	emit func(outs []infer.Tensor, final bool) error
	// decoupled: the ensemble runs a decoupled step, so, as a decoupled
	// model, it may answer with no response, only the final flag.
	decoupled bool

	mu       sync.Mutex // guards the fields below
	series   []ensembleSeries
	inflight int // steps dispatched whose final response has not come
	err      *apierr.Error
	answered bool // a response (not only the final flag) was emitted
	done     chan struct{}
	ended    bool
}

// runEnsemble runs an ensemble request that must be answered with exactly
// one response (the unary endpoints, which refuse an ensemble with a
// decoupled step beforehand, as Triton). inputs are the validated request
// inputs; outputs the ensemble outputs wanted.
func (m *Manager) runEnsemble(ctx context.Context, lv *loaded, req *infer.Request, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, *apierr.Error) {
	var got [][]infer.Tensor
	ierr := m.runEnsembleStream(ctx, lv, req, inputs, outputs, false, func(outs []infer.Tensor, _ bool) error {
		if outs != nil {
			got = append(got, outs)
		}
		return nil
	})
	if ierr != nil {
		return nil, ierr
	}
	if len(got) != 1 {
		// A step version that became decoupled after the check.
		return nil, apierr.Errorf(apierr.KindUnsupported, ReasonDecoupled,
			"ensemble '%s' answered with %d responses (a step is decoupled): this endpoint answers with one; use gRPC ModelStreamInfer or HTTP generate_stream", lv.model, len(got))
	}
	return got[0], nil
}

// runEnsembleStream runs an ensemble request, calling emit for each
// response (outs nil: only the final flag). decoupled says whether the
// ensemble runs a decoupled step. It returns once every step it started
// has finished.
func (m *Manager) runEnsembleStream(ctx context.Context, lv *loaded, req *infer.Request, inputs []infer.Tensor, outputs []string, decoupled bool, emit func(outs []infer.Tensor, final bool) error) *apierr.Error {
	e := lv.ens
	depth, _ := ctx.Value(ensembleDepthKey{}).(int)
	if depth >= maxEnsembleDepth {
		return apierr.Errorf(apierr.KindInvalid, ReasonEnsembleError, "ensemble '%s': ensembles nest more than %d deep", e.name, maxEnsembleDepth)
	}
	rctx, cancel := context.WithCancel(context.WithValue(ctx, ensembleDepthKey{}, depth+1))
	defer cancel()
	r := &ensembleRun{
		m: m, lv: lv, e: e, req: req, ctx: rctx, cancel: cancel,
		needed:    e.neededSteps(outputs),
		emit:      emit,
		decoupled: decoupled,
		series:    make([]ensembleSeries, len(e.tensors)),
		refs:      make([]int, len(e.tensors)),
		done:      make(chan struct{}),
	}
	for _, name := range outputs {
		t := slices.Index(e.tensors, name)
		if t < 0 {
			return apierr.Errorf(apierr.KindInternal, ReasonEnsembleError, "ensemble '%s': no step produces output '%s'", e.name, name)
		}
		r.wanted = append(r.wanted, t)
		r.refs[t]++
	}
	for i, st := range e.steps {
		if !r.needed[i] {
			continue // produces nothing the wanted outputs depend on
		}
		var seen []int
		for _, in := range st.in {
			if !slices.Contains(seen, in.tensor) {
				seen = append(seen, in.tensor)
				r.refs[in.tensor]++
			}
		}
	}

	r.mu.Lock()
	var updated []tensorAt
	for _, t := range e.inputs {
		name := e.tensors[t]
		v := &ensembleValue{}
		if i := slices.IndexFunc(inputs, func(x infer.Tensor) bool { return x.Name == name }); i >= 0 {
			v.t, v.have = inputs[i], true
			if lv.maxBatch > 0 && len(inputs[i].Shape) > 0 {
				v.batch = inputs[i].Shape[0]
			}
		}
		// An optional input left out has a value that is absent.
		updated = r.add(updated, t, v)
	}
	next := r.advance(updated)
	r.mu.Unlock()
	r.dispatch(next)

	<-r.done
	if r.err != nil && ctx.Err() != nil {
		return ctxError(ctx)
	}
	return r.err
}

// add appends v to tensor t's series, unless nothing consumes it, and
// notes it in updated. Called under mu.
func (r *ensembleRun) add(updated []tensorAt, t int, v *ensembleValue) []tensorAt {
	if r.refs[t] == 0 {
		return updated
	}
	s := &r.series[t]
	if s.vals == nil {
		s.vals = map[int]*ensembleValue{}
	}
	v.refs = r.refs[t]
	n := s.next
	s.next++
	s.vals[n] = v
	return append(updated, tensorAt{t, n})
}

// take hands value n of tensor t to one consumer, dropping it after the
// last. Called under mu.
func (r *ensembleRun) take(t, n int) *ensembleValue {
	v := r.series[t].vals[n]
	if v.refs--; v.refs == 0 {
		delete(r.series[t].vals, n)
	}
	return v
}

// pendingStep is a step run made ready, with its request.
type pendingStep struct {
	s     int
	req   *infer.Request
	batch int64
	slot  bool // holds one of the step's max_inflight_requests slots
}

// inflightWait bounds how long a step waits for a max_inflight_requests
// slot before it runs without one, as Triton's limiter gives up after
// 300 seconds ("Proceeding to avoid deadlock") rather than hang.
var inflightWait = 300 * time.Second

// advance finds the steps the updated values make ready and the responses
// they complete, emits those responses, and ends the request when nothing
// is left in flight. It returns the steps to dispatch. Called under mu.
func (r *ensembleRun) advance(updated []tensorAt) []pendingStep {
	var ready []pendingStep
	var answers []int
	if r.err == nil {
		var runs []stepAt
		for _, u := range updated {
			for s, st := range r.e.steps {
				if !r.needed[s] || !slices.ContainsFunc(st.in, func(in stepTensor) bool { return in.tensor == u.t }) {
					continue
				}
				if slices.Contains(runs, stepAt{s, u.n}) || !r.hasAll(st.in, u.n) {
					continue
				}
				runs = append(runs, stepAt{s, u.n})
			}
			if slices.Contains(r.wanted, u.t) && !slices.Contains(answers, u.n) && r.hasOutputs(u.n) {
				answers = append(answers, u.n)
			}
		}
		for _, run := range runs {
			ready = append(ready, r.stepRequest(run))
		}
		r.inflight += len(ready)
	}
	for _, n := range answers {
		outs := r.outputs(n)
		r.answered = true
		if err := r.emit(outs, r.inflight == 0 && n == answers[len(answers)-1]); err != nil {
			r.fail(&apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonCanceled, Msg: "the client stopped reading the responses", Err: err})
			break
		}
	}
	if r.inflight == 0 && !r.ended {
		r.ended = true
		if r.err == nil && len(answers) == 0 {
			if !r.answered && !r.decoupled {
				// Triton's words: no response can be formed.
				r.err = apierr.Errorf(apierr.KindInvalid, ReasonEnsembleError, "in ensemble '%s', unexpected deadlock, at least one output is not set while no more ensemble steps can be made", r.e.name)
			} else if err := r.emit(nil, true); err != nil {
				r.err = &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonCanceled, Msg: "the client stopped reading the responses", Err: err}
			}
		}
		close(r.done)
	}
	return ready
}

// hasAll reports whether every tensor of ins has value n. Called under mu.
func (r *ensembleRun) hasAll(ins []stepTensor, n int) bool {
	for _, in := range ins {
		if _, ok := r.series[in.tensor].vals[n]; !ok {
			return false
		}
	}
	return true
}

// hasOutputs reports whether every wanted output has value n. Called
// under mu.
func (r *ensembleRun) hasOutputs(n int) bool {
	for _, t := range r.wanted {
		if _, ok := r.series[t].vals[n]; !ok {
			return false
		}
	}
	return true
}

// outputs takes value n of every wanted output, in the client's shapes.
// Called under mu.
func (r *ensembleRun) outputs(n int) []infer.Tensor {
	out := make([]infer.Tensor, 0, len(r.wanted))
	for _, t := range r.wanted {
		v := r.take(t, n)
		name := r.e.tensors[t]
		if !v.have {
			// Triton's log line, which its QA greps for.
			r.m.logger.Info("Composing models did not output tensor "+name, "ensemble", r.e.name, "output", name) //nolint:sloglint // Triton's message, tensor name included, as its QA greps it
			continue
		}
		x := v.t
		if spec := findOutput(r.lv.cfg, name); spec != nil {
			x.Shape = stepShape(batchShape(0, modelDims(spec.GetDims(), spec.GetReshape())), r.lv.maxBatch > 0, v.batch, x.Shape)
		}
		out = append(out, x)
	}
	r.lv.clientShapes(out)
	return out
}

// stepRequest builds the request of one step run, taking its input
// values. Called under mu.
func (r *ensembleRun) stepRequest(run stepAt) pendingStep {
	st := r.e.steps[run.s]
	sreq := &infer.Request{ID: r.req.ID, Model: st.model, Version: st.version, Parameters: r.req.Parameters}
	scfg, stepBatches := r.m.stepConfig(st)
	stepBatch := int64(0)
	// A step may map one ensemble tensor to several of its inputs: the
	// value is taken once and given to each.
	taken := map[int]*ensembleValue{}
	for _, in := range st.in {
		v, ok := taken[in.tensor]
		if !ok {
			v = r.take(in.tensor, run.n)
			taken[in.tensor] = v
		}
		if !v.have {
			continue
		}
		shape := v.t.Shape
		if scfg != nil {
			if spec := findInput(scfg, in.name); spec != nil {
				shape = stepShape(batchShape(0, spec.GetDims()), stepBatches, v.batch, shape)
			}
		}
		if stepBatches && stepBatch == 0 && len(shape) > 0 {
			stepBatch = shape[0]
		}
		sreq.Inputs = append(sreq.Inputs, infer.Tensor{Name: in.name, DataType: v.t.DataType, Shape: shape, Data: v.t.Data})
	}
	for _, o := range st.out {
		sreq.Outputs = append(sreq.Outputs, infer.RequestedOutput{Name: o.name})
	}
	return pendingStep{s: run.s, req: sreq, batch: stepBatch}
}

// fail records the request's first failure and stops the steps in flight.
// Called under mu.
func (r *ensembleRun) fail(ierr *apierr.Error) {
	if r.err == nil {
		r.err = ierr
		r.cancel()
	}
}

// dispatch starts step runs, each once its step has a free slot under
// max_inflight_requests: waiting here is the backpressure, since the
// caller is the producing step's response path. Called without mu.
func (r *ensembleRun) dispatch(steps []pendingStep) {
	for _, p := range steps {
		if lim := r.limit(p.s); lim != nil {
			timer := time.NewTimer(inflightWait)
			select {
			case lim <- struct{}{}:
				p.slot = true
			case <-timer.C:
				r.m.logger.Error("ensemble step waited too long for an in-flight slot (max_inflight_requests); proceeding to avoid deadlock",
					"ensemble", r.e.name, "step", p.s, "limit", cap(lim), "waited", inflightWait)
			case <-r.ctx.Done():
				timer.Stop()
				_ = r.finish(p, nil, r.ctx.Err(), true) // errEnsembleFailed stops a running stream: none here
				continue
			}
			timer.Stop()
		}
		go r.runStep(p)
	}
}

// limit is step s's in-flight bound, nil when unbounded.
func (r *ensembleRun) limit(s int) chan struct{} {
	if r.e.limits == nil {
		return nil
	}
	return r.e.limits[s]
}

// runStep runs one step through its model's own path, handing each
// response on as it comes.
func (r *ensembleRun) runStep(p pendingStep) {
	final := false
	err := r.m.InferStream(r.ctx, p.req, func(resp *infer.Response, err error, last bool) error {
		final = final || last
		return r.finish(p, resp, err, last)
	})
	if !final {
		_ = r.finish(p, nil, err, true) // errEnsembleFailed stops a running stream: this one is over
	}
}

// finish takes one response of a step run (resp nil: none, only an error
// or the final flag): its outputs become new values, and the steps and
// responses they complete follow. A non-nil return tells the step that
// the request has failed.
func (r *ensembleRun) finish(p pendingStep, resp *infer.Response, err error, final bool) error {
	st := r.e.steps[p.s]
	r.mu.Lock()
	if final {
		r.inflight--
		if p.slot {
			<-r.limit(p.s)
		}
	}
	var updated []tensorAt
	switch {
	case err != nil:
		r.fail(stepError(r.e.name, p.s, st.model, err))
	case resp != nil && r.err == nil:
		for _, o := range st.out {
			// A step may answer with a subset of its outputs (a Python
			// model that skips one): the value is absent, like an
			// optional input left out, as Triton passes the subset on.
			v := &ensembleValue{batch: p.batch}
			if k := slices.IndexFunc(resp.Outputs, func(x infer.Tensor) bool { return x.Name == o.name }); k >= 0 {
				t := resp.Outputs[k]
				v.t = infer.Tensor{Name: r.e.tensors[o.tensor], DataType: t.DataType, Shape: t.Shape, Data: t.Data}
				v.have = true
			}
			updated = r.add(updated, o.tensor, v)
		}
	}
	next := r.advance(updated)
	failed := r.err != nil
	r.mu.Unlock()
	r.dispatch(next)
	if failed {
		return errEnsembleFailed
	}
	return nil
}

// errEnsembleFailed is what a step's response path hears once its
// ensemble request has failed: the step's remaining responses are dropped.
var errEnsembleFailed = errors.New("the ensemble request has failed")

// streamsEnsemble reports whether an ensemble version runs a decoupled
// step model (directly or in a nested ensemble), so that it may answer a
// request with any number of responses.
func (m *Manager) streamsEnsemble(lv *loaded, depth int) bool {
	if depth >= maxEnsembleDepth {
		return false
	}
	for _, st := range lv.ens.steps {
		mdl := m.lookup(st.model)
		if mdl == nil {
			continue
		}
		slv, err := mdl.find(st.version)
		if err != nil {
			continue
		}
		if slv.decoupled() || (slv.ens != nil && m.streamsEnsemble(slv, depth+1)) {
			return true
		}
	}
	return false
}

// streamEnsemble answers a request on an ensemble with decoupled steps on
// a streaming endpoint: each response as it is formed, the last marked
// final (ParamFinalResponse, as a decoupled model's).
func (m *Manager) streamEnsemble(ctx context.Context, lv *loaded, req *infer.Request, send StreamSend, start time.Time) *apierr.Error {
	inputs, outputs, batchSize, ierr := lv.prepare(req)
	if ierr != nil {
		return ierr
	}
	classes, ierr := lv.classifications(req)
	if ierr != nil {
		return ierr
	}
	ierr = m.runEnsembleStream(ctx, lv, req, inputs, outputs, true, func(outs []infer.Tensor, final bool) error {
		if outs == nil {
			return send(nil, nil, final)
		}
		resp, ierr := lv.response(req, outs, classes)
		if ierr != nil {
			return send(nil, ierr, final)
		}
		params := infer.Parameters{ParamFinalResponse: final}
		maps.Copy(params, resp.Parameters)
		resp.Parameters = params
		return send(resp, nil, final)
	})
	if ierr != nil {
		return ierr
	}
	now := time.Now()
	total := now.Sub(start)
	lv.obs.requests.Inc()
	lv.obs.inferences.Add(float64(batchSize))
	lv.obs.duration.Observe(total.Seconds())
	lv.obs.triton.succeeded(batchSize, total, execTimes{}, true)
	lv.obs.executions.Inc()
	lv.obs.triton.executed()
	lv.stats.ensembleSuccess(uint64(batchSize), total, now)
	return nil
}
