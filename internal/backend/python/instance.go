package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Instance is one model instance: a supervised worker process. It
// restarts the worker when it dies (after a back-off), and stays down
// after Options.RestartLimit quick deaths in a row. While its worker is
// down, requests run on a sibling instance's worker (an instance of the
// same load of the version), or wait for the restart when no sibling is
// up.
type Instance struct {
	b        *Backend
	spec     *workerSpec
	key      groupKey
	group    *group
	name     string
	maxBatch int64
	// decoupled is model_transaction_policy { decoupled: true }: requests
	// come with senders (ExecuteStreams).
	decoupled bool
	outTypes  map[string]infer.DataType // configured output data types
	// typeWarned holds the outputs whose data type differed from the
	// configuration's once (logged once each).
	typeWarned sync.Map
	obs        workerObservers
	logger     *slog.Logger

	mu     sync.Mutex // protects the fields below
	w      *worker    // the live worker; nil while it restarts, once down or closed
	down   string     // why the instance stays down; "" otherwise
	closed bool
	change chan struct{} // closed and replaced whenever w, down or closed change

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the supervisor has returned
	closeOnce sync.Once
	closeErr  error
}

func newInstance(b *Backend, spec *workerSpec, key groupKey, g *group, name string, cfg *inferencepb.ModelConfig, w *worker) *Instance {
	in := &Instance{
		b:         b,
		spec:      spec,
		key:       key,
		group:     g,
		name:      name,
		maxBatch:  int64(cfg.GetMaxBatchSize()),
		decoupled: cfg.GetModelTransactionPolicy().GetDecoupled(),
		outTypes:  map[string]infer.DataType{},
		obs:       b.m.track(key.model, strconv.FormatInt(key.version, 10)),
		logger:    spec.logger,
		w:         w,
		change:    make(chan struct{}),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	for _, o := range cfg.GetOutput() {
		in.outTypes[o.GetName()] = modelconfig.ToInfer(o.GetDataType())
	}
	in.obs.up.Inc()
	go in.supervise(w)
	return in
}

// current returns the live worker, or nil.
func (in *Instance) current() *worker {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.w
}

// PID returns the process id of the instance's live worker, or 0 while it
// has none.
func (in *Instance) PID() int {
	if w := in.current(); w != nil {
		return w.pid
	}
	return 0
}

// Unhealthy returns why the instance stays down, or "".
func (in *Instance) Unhealthy() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.down
}

// setLocked changes the live worker and wakes the requests waiting for
// one. It reports false, changing nothing, once the instance is closed.
func (in *Instance) setLocked(w *worker, down string) bool {
	if in.closed {
		return false
	}
	in.w, in.down = w, down
	close(in.change)
	in.change = make(chan struct{})
	return true
}

func (in *Instance) set(w *worker, down string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.setLocked(w, down)
}

// supervise watches the worker and restarts it until the instance closes
// or goes down for good.
func (in *Instance) supervise(w *worker) {
	defer close(in.done)
	opts := in.b.opts
	quick := 0 // quick deaths in a row
	for {
		if !in.watch(w) {
			return
		}
		// The reader has failed the calls in flight; free the socket.
		<-w.readerDone
		_ = w.conn.Close()
		lived := time.Since(w.readyAt)
		if !in.set(nil, "") {
			return
		}
		in.obs.up.Dec()
		if lived < opts.QuickDeath {
			quick++
		} else {
			quick = 0
		}
		last := fmt.Sprintf("%s%s", w.exitStatus(), w.stderr.suffix())
		in.logger.Warn("python worker died", "pid", w.pid, "status", w.exitStatus(), "uptime", lived.Round(time.Millisecond).String(), "quick_deaths", quick)
		for {
			if quick >= opts.RestartLimit {
				reason := fmt.Sprintf("python worker %s died %d times in a row within %s of starting and stays down until the model is loaded again; last: %s",
					in.name, quick, opts.QuickDeath, last)
				if in.set(nil, reason) {
					in.logger.Warn("python worker stays down", "reason", reason)
				}
				return
			}
			delay := min(opts.RestartBackoff<<max(quick-1, 0), opts.MaxRestartBackoff)
			select {
			case <-in.stop:
				return
			case <-time.After(delay):
			}
			in.obs.restarts.Inc()
			nw, err := in.start()
			if err == nil {
				if !in.set(nw, "") {
					_ = nw.stop(opts.FinalizeTimeout, opts.KillTimeout)
					return
				}
				in.obs.up.Inc()
				in.logger.Info("python worker restarted", "pid", nw.pid, "after", delay.String())
				w = nw
				break
			}
			select {
			case <-in.stop:
				return
			default:
			}
			quick++
			last = err.Error()
			in.logger.Warn("python worker restart failed", "err", err, "quick_deaths", quick)
		}
	}
}

// start starts a new worker; Close cancels it.
func (in *Instance) start() (*worker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), in.b.opts.StartTimeout)
	defer cancel()
	go func() {
		select {
		case <-in.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return startWorker(ctx, in.spec)
}

// watch waits until the worker dies (true) or the instance closes
// (false), pinging it while it is idle; a worker that does not answer is
// killed, which restarts it.
func (in *Instance) watch(w *worker) bool {
	t := time.NewTicker(in.b.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-in.stop:
			return false
		case <-w.exited:
			return true
		case <-t.C:
			if w.unanswered.Load() > 0 {
				continue // busy, or still working on an abandoned call
			}
			if !w.ping(in.b.opts.PingTimeout) {
				in.logger.Warn("python worker did not answer a ping; killing it", "pid", w.pid, "timeout", in.b.opts.PingTimeout.String())
				w.kill()
			}
		}
	}
}

// Close stops the supervisor and unloads the worker: finalize(), then
// SIGTERM, then SIGKILL (see Options). It returns once the process is
// gone; an error reports a finalize() that raised.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() {
		in.mu.Lock()
		w := in.w
		in.w = nil
		in.closed = true
		close(in.change)
		in.change = make(chan struct{})
		in.mu.Unlock()
		close(in.stop)
		<-in.done
		if w != nil {
			in.obs.up.Dec()
			if err := w.stop(in.b.opts.FinalizeTimeout, in.b.opts.KillTimeout); err != nil {
				in.closeErr = fmt.Errorf("model '%s' version %d instance %s: %w", in.key.model, in.key.version, in.name, err)
			}
			in.logger.Info("python worker stopped", "pid", w.pid)
		}
		in.b.ungroup(in.key, in)
		if in.b.m.untrack(in.key.model, strconv.FormatInt(in.key.version, 10)) {
			in.b.custom.drop(in.key.model, strconv.FormatInt(in.key.version, 10))
		}
	})
	return in.closeErr
}

// pick returns the worker to run a call on: the instance's own, else a
// live sibling's, else (while the instance restarts) the first of those
// to come up before ctx ends.
func (in *Instance) pick(ctx context.Context) (*worker, error) {
	var poll *time.Ticker
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		in.mu.Lock()
		w, down, closed, change := in.w, in.down, in.closed, in.change
		in.mu.Unlock()
		if w != nil && !w.failed() {
			return w, nil
		}
		if closed {
			return nil, apierr.Errorf(apierr.KindUnavailable, ReasonWorkerCrashed,
				"model '%s' version %d: instance %s is closed", in.key.model, in.key.version, in.name)
		}
		if sib := in.group.live(in); sib != nil {
			return sib, nil
		}
		if down != "" {
			return nil, apierr.Errorf(apierr.KindUnavailable, ReasonWorkerCrashed,
				"model '%s' version %d: no python worker is up: %s", in.key.model, in.key.version, down)
		}
		if poll == nil {
			// Siblings coming up do not signal this instance; look again
			// now and then.
			poll = time.NewTicker(50 * time.Millisecond)
		}
		select {
		case <-change:
		case <-poll.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// Execute runs one request (the inputs of a whole batch, when the
// scheduler concatenated several) in one execute() call.
func (in *Instance) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	outs, errs := in.ExecuteRequests(ctx, [][]infer.Tensor{inputs}, [][]string{outputs}, nil)
	if errs[0] != nil {
		return nil, errs[0]
	}
	return outs[0], nil
}

// ExecuteRequests runs several requests in one execute() call, so that the
// model sees them as separate InferenceRequest objects, each with its own
// parameters (params[i], or all none when params is nil) as
// request.parameters(). It returns each request's outputs (one tensor per
// name it asked for, in order) or its error; a failure of the whole call
// is every request's error.
func (in *Instance) ExecuteRequests(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters) ([][]infer.Tensor, []error) {
	return in.run(ctx, inputs, outputs, params, nil)
}

// ExecuteStreams runs requests to a decoupled model in one execute()
// call: each request's responses go to its sender (senders[i]) as the
// model sends them through its InferenceResponseSender, also after
// execute returned. It returns when execute has returned; errs[i] is set
// only when request i never reached the worker. A model that is not
// decoupled answers each request once, as a final response.
func (in *Instance) ExecuteStreams(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters, senders []infer.Sender) ([][]infer.Tensor, []error) {
	if !in.decoupled {
		outs, errs := in.run(ctx, inputs, outputs, params, nil)
		for i, send := range senders {
			if send != nil && errs[i] == nil {
				_ = send(outs[i], nil, true)
				outs[i] = nil
			}
		}
		return outs, errs
	}
	return in.run(ctx, inputs, outputs, params, senders)
}

// gathered is what one request to a decoupled model answered when it was
// run without a sender: its last response.
type gathered struct {
	outs []infer.Tensor
	err  error
	done chan struct{}
}

// gather runs requests to a decoupled model without senders (a warm-up):
// each request's result is its last response, once the model has sent the
// final flag; no response at all gives no outputs.
func (in *Instance) gather(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters) ([][]infer.Tensor, []error) {
	got := make([]gathered, len(inputs))
	senders := make([]infer.Sender, len(inputs))
	for i := range got {
		g := &got[i]
		g.done = make(chan struct{})
		senders[i] = func(outs []infer.Tensor, err error, final bool) error {
			if outs != nil || err != nil {
				g.outs, g.err = outs, err
			}
			if final {
				close(g.done)
			}
			return nil
		}
	}
	outs, errs := in.run(ctx, inputs, outputs, params, senders)
	for i := range got {
		if errs[i] != nil {
			continue
		}
		select {
		case <-got[i].done:
			outs[i], errs[i] = got[i].outs, got[i].err
		case <-ctx.Done():
			errs[i] = context.Cause(ctx)
		}
	}
	return outs, errs
}

// run is ExecuteRequests and, with senders, ExecuteStreams.
func (in *Instance) run(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters, senders []infer.Sender) ([][]infer.Tensor, []error) {
	if in.decoupled && senders == nil {
		return in.gather(ctx, inputs, outputs, params)
	}
	outs := make([][]infer.Tensor, len(inputs))
	errs := make([]error, len(inputs))
	fail := func(err error) ([][]infer.Tensor, []error) {
		for i := range errs {
			errs[i] = err
		}
		return outs, errs
	}
	reqs, err := execRequests(inputs, outputs, params, senders)
	if err != nil {
		return fail(err)
	}
	w, f, st, err := in.send(ctx, reqs, senders != nil)
	if err != nil {
		return fail(err)
	}
	if st != nil {
		// From here on every outcome reaches the senders through the
		// stream, in the order the worker sent its frames.
		go in.dispatch(w, st, reqs, senders)
	}
	if st != nil && f.op == 0 {
		// The call ended without an answer (its context ended, or the
		// worker died): the stream reports the death; a context that
		// ended leaves the requests to the model's final flags.
		return outs, errs
	}
	if err := in.answerError(w, f); err != nil {
		if st != nil {
			st.fail(err)
			return outs, errs
		}
		return fail(err)
	}
	if st != nil {
		if _, derr := decodeResponses(f.payload, 0); derr != nil {
			in.logger.Warn("python worker sent a malformed response; killing it", "pid", w.pid, "err", derr)
			w.kill()
		}
		return outs, errs
	}
	resps, err := decodeResponses(f.payload, len(reqs))
	if err != nil {
		// A worker that garbles its answers cannot be trusted with the
		// next ones: it restarts.
		in.logger.Warn("python worker sent a malformed response; killing it", "pid", w.pid, "err", err)
		w.kill()
		return fail(fmt.Errorf("python worker sent a malformed response: %w", err))
	}
	for i := range reqs {
		outs[i], errs[i] = in.collect(&reqs[i], &resps[i])
	}
	return outs, errs
}

// execRequests checks that the request lists agree in length and builds
// the execute requests, encoding parameters only for requests that have
// some: the common request pays nothing.
func execRequests(inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters, senders []infer.Sender) ([]execRequest, error) {
	if len(inputs) != len(outputs) {
		return nil, fmt.Errorf("execute: %d input lists for %d output lists", len(inputs), len(outputs))
	}
	if params != nil && len(params) != len(inputs) {
		return nil, fmt.Errorf("execute: %d parameter sets for %d requests", len(params), len(inputs))
	}
	if senders != nil && len(senders) != len(inputs) {
		return nil, fmt.Errorf("execute: %d senders for %d requests", len(senders), len(inputs))
	}
	reqs := make([]execRequest, len(outputs))
	for i, out := range outputs {
		reqs[i] = execRequest{inputs: inputs[i], outputs: out}
		if params != nil && len(params[i]) > 0 {
			p, err := json.Marshal(params[i])
			if err != nil {
				return nil, fmt.Errorf("execute: encode request parameters: %w", err)
			}
			reqs[i].params = p
		}
	}
	return reqs, nil
}

// send sends reqs to a worker, picking another when the one picked died
// before they went out, and returns the worker, its answer frame and,
// when streaming (decoupled), the call's stream. An error on a stream the
// worker has taken over is left for the stream to report.
func (in *Instance) send(ctx context.Context, reqs []execRequest, streaming bool) (*worker, frame, *stream, error) {
	for {
		w, err := in.pick(ctx)
		if err != nil {
			return nil, frame{}, nil, err
		}
		var st *stream
		if streaming {
			st = newStream()
		}
		f, err := in.call(ctx, w, st, reqs)
		if errors.Is(err, errNotSent) {
			continue // the worker died before the requests went out: pick again
		}
		if err != nil && (st == nil || errors.Is(err, errTooLarge) || !w.streaming(st)) {
			return nil, frame{}, nil, err
		}
		return w, f, st, nil
	}
}

// answerError is the error an answer frame other than a result carries:
// the model's exception, an answer over the output limit, or (killing the
// worker) an op execute does not expect.
func (in *Instance) answerError(w *worker, f frame) error {
	switch {
	case f.op == opError:
		we := parseWorkerError(f.payload)
		if we.Traceback != "" {
			in.logger.Warn("python model execute failed", "pid", w.pid, "traceback", we.Traceback)
		}
		return &apierr.Error{
			Kind: apierr.KindInternal, Reason: ReasonModelException,
			Msg: fmt.Sprintf("model '%s' version %d: %s", in.key.model, in.key.version, we.Message),
		}
	case f.op == opOversize:
		return &apierr.Error{
			Kind: apierr.KindResourceExhausted, Reason: apierr.ReasonResponseTooLarge,
			Msg: fmt.Sprintf("model '%s' version %d: the worker's answer is %d bytes, over the %d bytes its maximum output allows (config.pbtxt parameter max_output_bytes, or the server's --max-output-bytes); it was dropped unread",
				in.key.model, in.key.version, f.size, in.spec.maxResult),
		}
	case f.op != opResult:
		w.kill()
		return fmt.Errorf("python worker %d answered op %d to execute", w.pid, f.op)
	}
	return nil
}

// dispatch hands a decoupled call's responses to the requests' senders
// until every request has had its final response, then stops routing the
// call's frames. An error event (the worker died, execute raised) ends
// every request still open with that error.
func (in *Instance) dispatch(w *worker, st *stream, reqs []execRequest, senders []infer.Sender) {
	defer w.endStream(st)
	open := 0
	for _, s := range senders {
		if s != nil {
			open++
		}
	}
	end := func(i int, outs []infer.Tensor, err error, final bool) {
		if senders[i] == nil {
			return
		}
		if senders[i](outs, err, final) != nil || final {
			senders[i] = nil
			open--
		}
	}
	for open > 0 {
		for _, e := range st.take() {
			if e.err != nil {
				err := e.err
				if errors.Is(err, errDead) {
					err = crashError(in.key.model, in.key.version, in.name, err)
				}
				for i := range senders {
					end(i, nil, err, true)
				}
				break
			}
			sr, err := decodeStreamed(e.f.payload)
			if err == nil && sr.index >= len(reqs) {
				err = fmt.Errorf("response for request %d of %d", sr.index, len(reqs))
			}
			if err != nil {
				in.logger.Warn("python worker sent a malformed response; killing it", "pid", w.pid, "err", err)
				w.kill() // its death ends the open requests
				continue
			}
			var outs []infer.Tensor
			var rerr error
			if sr.resp != nil {
				outs, rerr = in.collect(&reqs[sr.index], sr.resp)
			}
			if sr.resp == nil && !sr.final {
				continue
			}
			end(sr.index, outs, rerr, sr.final)
		}
	}
}

// call sends the requests to w and waits for the answer, keeping the
// metrics.
func (in *Instance) call(ctx context.Context, w *worker, st *stream, reqs []execRequest) (frame, error) {
	in.obs.pending.Inc()
	start := time.Now()
	f, err := w.callStreaming(ctx, opExecute, st, func(fw *frameWriter) error { return fw.requests(reqs) })
	in.obs.busy.Add(time.Since(start).Seconds())
	in.obs.pending.Dec()
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, errDead):
		return frame{}, crashError(in.key.model, in.key.version, in.name, err)
	case ctx.Err() != nil:
		return frame{}, err
	case errors.Is(err, errTooLarge):
		return frame{}, &apierr.Error{
			Kind: apierr.KindResourceExhausted, Reason: ReasonRequestTooLarge,
			Msg: fmt.Sprintf("model '%s' version %d", in.key.model, in.key.version), Err: err,
		}
	default:
		return frame{}, err
	}
}

// collect matches one response to the outputs its request asked for.
func (in *Instance) collect(req *execRequest, resp *response) ([]infer.Tensor, error) {
	if resp.failed {
		msg := resp.errMsg
		if msg == "" {
			msg = "the model returned an error without a message"
		}
		return nil, &apierr.Error{Kind: kindOfCode(resp.errCode), Reason: ReasonModelError, Msg: msg}
	}
	bs := int64(-1)
	if in.maxBatch > 0 && len(req.inputs) > 0 && len(req.inputs[0].Shape) > 0 {
		bs = req.inputs[0].Shape[0]
	}
	// A requested output the model did not return is left out, as
	// Triton's Python backend does: a model may answer with a subset of
	// its outputs (an ensemble then passes that subset on).
	out := make([]infer.Tensor, 0, len(req.outputs))
	for _, name := range req.outputs {
		k := slices.IndexFunc(resp.outputs, func(t infer.Tensor) bool { return t.Name == name })
		if k < 0 {
			continue
		}
		t := resp.outputs[k]
		// An output of another data type than the configuration's is
		// answered as the model made it, as Triton does (neither its
		// Python backend nor its core compares them): Triton's
		// bls_decoupled example answers its TYPE_INT32 output SUM with
		// numpy's default int64. The first of each output is logged.
		if want, ok := in.outTypes[name]; ok && want != t.DataType {
			if _, seen := in.typeWarned.LoadOrStore(name, true); !seen {
				in.logger.Warn("python model output's data type is not the configuration's; answered as the model returned it",
					"output", name, "returned", t.DataType.String(), "configured", want.String())
			}
		}
		if bs >= 0 && (len(t.Shape) == 0 || t.Shape[0] != bs) {
			return nil, apierr.Errorf(apierr.KindInternal, ReasonInvalidModelOutput,
				"model '%s' version %d: output '%s' has shape %s, want the batch size %d first", in.key.model, in.key.version, name, t.Shape, bs)
		}
		out = append(out, t)
	}
	return out, nil
}
