package batch

import (
	"context"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// RequestExecutor is an Executor that can run a batch of several requests
// as separate requests in one execution, the way a Triton Python model's
// execute(requests) receives one InferenceRequest per request. The
// batcher hands it such batches without concatenating their inputs or
// splitting its outputs; a batch of one request still goes to Execute.
//
// ExecuteRequests gets each request's inputs, wanted outputs and
// parameters (nil when it has none) and returns, per request, one tensor per wanted name (in order) or that
// request's error, so one request can fail without failing the others.
// The inputs are borrowed as with Execute; the outputs become the
// requests'.
type RequestExecutor interface {
	Executor
	ExecuteRequests(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters) ([][]infer.Tensor, []error)
}

// StreamExecutor is a RequestExecutor that also runs requests to a
// decoupled model: ExecuteStreams is ExecuteRequests where each request
// has a Sender (senders[i], nil for a request without one), which gets
// the request's responses; for such a request the returned outputs are
// ignored. It may return before the responses are all sent (a decoupled
// model may send them after its execute returned); errs[i] non-nil fails
// request i, and its Sender is not called after that.
type StreamExecutor interface {
	RequestExecutor
	ExecuteStreams(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters, senders []infer.Sender) ([][]infer.Tensor, []error)
}

// executeRequests runs s.batch on a RequestExecutor and answers its
// requests, as execute does for packed batches.
func (b *Batcher) executeRequests(ctx context.Context, re RequestExecutor, s *slot, start time.Time, total int) {
	batch := s.batch
	inputs := make([][]infer.Tensor, len(batch))
	names := make([][]string, len(batch))
	params := make([]infer.Parameters, len(batch))
	var senders []infer.Sender
	for i, p := range batch {
		inputs[i], names[i], params[i] = p.req.Inputs, p.req.Outputs, p.req.Params
		if p.req.Sender != nil {
			if senders == nil {
				senders = make([]infer.Sender, len(batch))
			}
			senders[i] = p.req.Sender
		}
	}
	prepared := time.Now()
	var outs [][]infer.Tensor
	var errs []error
	if se, ok := re.(StreamExecutor); ok && senders != nil {
		outs, errs = se.ExecuteStreams(ctx, inputs, names, params, senders)
	} else if senders != nil {
		outs, errs = make([][]infer.Tensor, len(batch)), make([]error, len(batch))
		for i := range errs {
			errs[i] = b.outputError("the executor cannot send a decoupled model's responses")
		}
	} else {
		outs, errs = re.ExecuteRequests(ctx, inputs, names, params)
	}
	computed := time.Now()
	in, inf := prepared.Sub(start), computed.Sub(prepared)
	b.m.compute.Observe(inf.Seconds())
	b.m.batchSize.Observe(float64(total))
	executed := false
	for i, p := range batch {
		var err error
		switch {
		case len(outs) != len(batch) || len(errs) != len(batch):
			err = b.outputError("executor answered %d outputs and %d errors for %d requests", len(outs), len(errs), len(batch))
		case errs[i] != nil:
			err = b.backendError(ctx, errs[i])
		case p.req.Sender != nil:
			// The responses went (or go) to the sender.
		case len(outs[i]) > len(p.req.Outputs):
			// Fewer is a request executor's right: a Python model may
			// answer with a subset of the outputs asked for (Triton passes
			// the subset on); each output carries its name.
			err = b.outputError("executor returned %d outputs, want at most %d", len(outs[i]), len(p.req.Outputs))
		}
		if err != nil {
			p.out, p.err = nil, err
			continue
		}
		executed = true
		r := p.out
		r.Outputs = outs[i]
		r.InputTime, r.ComputeTime = in, inf
		r.ExecBatch = total
	}
	// The execution counts (batch_stats, execution_count) when any of its
	// requests succeeded.
	if executed && b.obs != nil {
		b.obs.Executed(total, in, inf, 0)
	}
	b.deliver(batch)
	clear(s.batch)
	s.batch = s.batch[:0]
}
