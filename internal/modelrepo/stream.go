package modelrepo

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
)

// ReasonDecoupled is the reason of a request for a decoupled model that
// came in on an endpoint answering with one response.
const ReasonDecoupled = "decoupled_model"

// ParamFinalResponse is the response parameter that marks a decoupled
// model's last response (Triton's name); each of its responses has it.
const ParamFinalResponse = "triton_final_response"

// StreamSend receives one response of a request answered by InferStream:
// a response, or the error a decoupled model answered with (the request
// goes on), or, with both nil, only the final flag. final is set on the
// last call. A non-nil return stops the responses: InferStream returns it.
// It is backend.StreamSend, so that the Manager is the backend.StreamServer
// of Python models' decoupled BLS requests.
type StreamSend = backend.StreamSend

// Streamer is implemented by Models that answer a request with any number
// of responses: a decoupled model's (model_transaction_policy { decoupled:
// true }), or the one response of any other model, marked final. The
// protocol edges use it for gRPC ModelStreamInfer and HTTP generate /
// generate_stream.
type Streamer interface {
	// InferStream runs one request and calls send for each response, in
	// order, from one goroutine at a time, the last with final set. It
	// returns once the final response was sent, or with the error that
	// failed the request before any response, or when ctx ends (no call
	// of send follows the return).
	InferStream(ctx context.Context, req *infer.Request, send StreamSend) error
}

var (
	_ Streamer             = (*Manager)(nil)
	_ backend.StreamServer = (*Manager)(nil)
)

// errStreamGone is what a decoupled model's sender hears once its request
// ended (its client went away): the instance drops the rest.
var errStreamGone = errors.New("the request's responses are no longer awaited")

// decoupled reports whether the version is a decoupled model.
func (lv *loaded) decoupled() bool {
	return lv.cfg.GetModelTransactionPolicy().GetDecoupled()
}

// decoupledRefused answers a request for a decoupled model on an endpoint
// that answers with one response, in Triton's words.
func decoupledRefused(lv *loaded) *apierr.Error {
	if lv.ens != nil {
		// As Triton, which marks an ensemble decoupled when a step is.
		return apierr.Errorf(apierr.KindUnsupported, ReasonDecoupled,
			"ensemble '%s' version %d runs a decoupled step, which makes it decoupled: this endpoint doesn't support models with decoupled transaction policy; use gRPC ModelStreamInfer or HTTP generate_stream", lv.model, lv.version)
	}
	return apierr.Errorf(apierr.KindUnsupported, ReasonDecoupled,
		"model '%s' version %d is decoupled (model_transaction_policy { decoupled: true }): this endpoint doesn't support models with decoupled transaction policy; use gRPC ModelStreamInfer or HTTP generate_stream", lv.model, lv.version)
}

// InferStream implements Streamer.
func (m *Manager) InferStream(ctx context.Context, req *infer.Request, send StreamSend) error {
	start := time.Now()
	if m.closed.Load() {
		return apierr.Errorf(apierr.KindUnavailable, ReasonShuttingDown, "server is shutting down")
	}
	mdl := m.lookup(req.Model)
	if mdl == nil {
		return m.unknownModel(req.Model)
	}
	lv, ierr := m.acquire(mdl, req.Version)
	if ierr != nil {
		return ierr
	}
	// The version stays loaded until the last response: a decoupled
	// model may send it long after its execute returned.
	defer lv.release()
	if lv.ens != nil && m.streamsEnsemble(lv, 0) {
		if ierr := m.streamEnsemble(ctx, lv, req, send, start); ierr != nil {
			m.failed(lv, ierr, start)
			return ierr
		}
		return nil
	}
	if !lv.decoupled() {
		resp, ierr := m.serve(ctx, lv, req, start)
		if ierr != nil {
			m.failed(lv, ierr, start)
			return ierr
		}
		return send(resp, nil, true)
	}
	ierr = m.stream(ctx, lv, req, send)
	if ierr != nil {
		m.failed(lv, ierr, start)
		return ierr
	}
	return nil
}

// failed records a failed request in the statistics and metrics.
func (m *Manager) failed(lv *loaded, ierr *apierr.Error, start time.Time) {
	m.metrics.failures.WithLabelValues(lv.model, lv.vstr, ierr.Reason).Inc()
	lv.obs.triton.failed(ierr.Reason)
	lv.stats.fail(time.Since(start))
}

// stream runs one request on a decoupled model's instances and waits for
// its final response.
func (m *Manager) stream(ctx context.Context, lv *loaded, req *infer.Request, send StreamSend) *apierr.Error {
	start := time.Now()
	if lv.batcher == nil {
		return apierr.Errorf(apierr.KindUnsupported, ReasonDecoupled, "model '%s' version %d: a decoupled model with sequence batching is not supported", lv.model, lv.version)
	}
	inputs, outputs, batchSize, ierr := lv.prepare(req)
	if ierr != nil {
		return ierr
	}
	sched, ierr := scheduleParams(req.Parameters)
	if ierr != nil {
		return ierr
	}
	priority, ierr := lv.priorities.request(lv.model, sched.priority)
	if ierr != nil {
		return ierr
	}
	classes, ierr := lv.classifications(req)
	if ierr != nil {
		return ierr
	}
	var (
		mu       sync.Mutex // serializes send with the end of the request
		finished bool
		sendErr  error
		done     = make(chan struct{})
	)
	sender := func(outs []infer.Tensor, err error, final bool) error {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return errStreamGone
		}
		var e error
		switch {
		case err != nil:
			e = send(nil, lv.backendError(ctx, err), final)
		case outs != nil:
			lv.clientShapes(outs)
			resp, ierr := lv.response(req, outs, classes)
			if ierr != nil {
				e = send(nil, ierr, final)
			} else {
				resp.Parameters = infer.Parameters{ParamFinalResponse: final}
				e = send(resp, nil, final)
			}
		case final:
			e = send(nil, nil, true)
		}
		if final || e != nil {
			finished, sendErr = true, e
			close(done)
		}
		return e
	}
	enqueued := time.Now()
	lv.obs.triton.enqueued()
	res, err := lv.batcher.Submit(ctx, &batch.Request{
		Inputs:    inputs,
		Outputs:   outputs,
		BatchSize: int(batchSize),
		Priority:  priority,
		Timeout:   sched.timeout,
		Params:    sched.model,
		Sender:    sender,
	})
	lv.obs.triton.answered()
	var times execTimes
	if err != nil {
		mu.Lock()
		finished = true
		mu.Unlock()
		if ctx.Err() != nil {
			ierr = ctxError(ctx)
		} else {
			ierr = lv.backendError(ctx, err)
		}
		traceExecution(ctx, lv, enqueued, times, batchSize, ierr)
		return ierr
	}
	times = execTimes{queue: res.QueueTime, input: res.InputTime, infer: res.ComputeTime, output: res.OutputTime}
	traceExecution(ctx, lv, enqueued, times, batchSize, nil)
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		if !finished {
			finished = true
			close(done)
		}
		mu.Unlock()
		if sendErr == nil {
			return ctxError(ctx)
		}
	}
	if sendErr != nil {
		return &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonCanceled, Msg: "the client stopped reading the responses", Err: sendErr}
	}
	now := time.Now()
	total := now.Sub(start)
	lv.obs.requests.Inc()
	lv.obs.inferences.Add(float64(batchSize))
	lv.obs.duration.Observe(total.Seconds())
	lv.obs.triton.succeeded(batchSize, total, times, true)
	lv.stats.success(uint64(batchSize), total, times, now)
	return nil
}
