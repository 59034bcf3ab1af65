package batch

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

// requestExec is a RequestExecutor: it records how many requests each
// ExecuteRequests call got, and fails the requests whose id is 13.
type requestExec struct {
	*fakeExec
	mu     sync.Mutex         // protects sizes and params
	sizes  []int              // requests per ExecuteRequests call
	params []infer.Parameters // every request's parameters, in call order
}

func (e *requestExec) ExecuteRequests(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters) ([][]infer.Tensor, []error) {
	e.mu.Lock()
	e.sizes = append(e.sizes, len(inputs))
	e.params = append(e.params, params...)
	e.mu.Unlock()
	outs := make([][]infer.Tensor, len(inputs))
	errs := make([]error, len(inputs))
	for i := range inputs {
		if inputs[i][0].Data[0] == 13 {
			errs[i] = apierr.Errorf(apierr.KindInvalid, "model_error", "unlucky")
			continue
		}
		outs[i], errs[i] = e.Execute(ctx, inputs[i], outputs[i])
	}
	return outs, errs
}

func TestRequestExecutorKeepsBoundaries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exec := &requestExec{fakeExec: newFakeExec()}
		obs := &countingObserver{}
		b, err := New(Options{Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 8, MaxQueueDelay: time.Millisecond}, []Executor{exec}, obs, nil, nil)
		require.NoError(t, err)
		h := &harness{t: t, start: time.Now(), b: b}
		a := h.submit(t.Context(), request(1, 2))
		c := h.submit(t.Context(), request(13, 1))
		d := h.submit(t.Context(), request(3, 1))
		h.sleepUntil(time.Millisecond)
		ok(t, a, 1, 2)
		require.Equal(t, apierr.KindInvalid, asInfer(t, failed(t, c, "model_error").err).Kind)
		o := ok(t, d, 3, 1)
		require.Equal(t, 4, o.res.ExecBatch)
		require.Equal(t, []int{3}, exec.sizes, "one call with the three requests")
		// The fake's Execute ran once per request: nothing was concatenated.
		require.Equal(t, [][]int64{{1}, {3}}, exec.batches())
		require.Equal(t, []int{4}, obs.sizes())

		// A batch of one still goes to Execute.
		e := h.submit(t.Context(), request(5, 1))
		h.sleepUntil(3 * time.Millisecond)
		ok(t, e, 5, 1)
		require.Equal(t, []int{3}, exec.sizes)
		h.close()
	})
}

// Each request of a batch keeps its own parameters, and a request with
// parameters reaches ExecuteRequests even alone, as a Triton Python
// model's request.parameters() shows them
// (qa/L0_parameters/parameters_test.py test_http_parameter).
func TestRequestExecutorGetsParameters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exec := &requestExec{fakeExec: newFakeExec()}
		b, err := New(Options{Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 8, MaxQueueDelay: time.Millisecond}, []Executor{exec}, nil, nil, nil)
		require.NoError(t, err)
		h := &harness{t: t, start: time.Now(), b: b}
		withParams := func(id int64, p infer.Parameters) *Request {
			r := request(id, 1)
			r.Params = p
			return r
		}
		a := h.submit(t.Context(), withParams(1, infer.Parameters{"k": "a"}))
		c := h.submit(t.Context(), request(2, 1))
		h.sleepUntil(time.Millisecond)
		ok(t, a, 1, 1)
		ok(t, c, 2, 1)
		d := h.submit(t.Context(), withParams(3, infer.Parameters{"k": int64(3)}))
		h.sleepUntil(3 * time.Millisecond)
		ok(t, d, 3, 1)
		require.Equal(t, []int{2, 1}, exec.sizes)
		require.Equal(t, []infer.Parameters{{"k": "a"}, nil, {"k": int64(3)}}, exec.params)
		h.close()
	})
}

// countingObserver records executed batch sizes.
type countingObserver struct {
	mu      sync.Mutex // protects batches
	batches []int
}

func (o *countingObserver) Executed(n int, _, _, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches = append(o.batches, n)
}

func (o *countingObserver) sizes() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.batches...)
}
