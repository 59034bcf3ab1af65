package modelrepo

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
)

// fakeStreamBackend is the fake backend whose models may be decoupled. A
// decoupled fake model answers a request whose first input holds n
// (INT32) with n responses, the k-th (from 1) with k in every output, then
// the final flag alone, as Triton's qa/L0_simple_ensemble
// decoupled_producer does.
type fakeStreamBackend struct{ *fakeBackend }

func (fakeStreamBackend) Name() string            { return "fakestream" }
func (fakeStreamBackend) DefaultFilename() string { return "model.fakestream" }
func (fakeStreamBackend) Decoupled() bool         { return true }

func (b fakeStreamBackend) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	in, err := b.fakeBackend.Load(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &fakeStreamInstance{in.(*fakeInstance)}, nil
}

type fakeStreamInstance struct{ *fakeInstance }

func (in *fakeStreamInstance) ExecuteRequests(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, _ []infer.Parameters) ([][]infer.Tensor, []error) {
	outs, errs := make([][]infer.Tensor, len(inputs)), make([]error, len(inputs))
	for i := range inputs {
		outs[i], errs[i] = in.Execute(ctx, inputs[i], outputs[i])
	}
	return outs, errs
}

func (in *fakeStreamInstance) ExecuteStreams(ctx context.Context, inputs [][]infer.Tensor, outputs [][]string, params []infer.Parameters, senders []infer.Sender) ([][]infer.Tensor, []error) {
	outs, errs := in.ExecuteRequests(ctx, inputs, outputs, params)
	for i, send := range senders {
		if send == nil || errs[i] != nil {
			continue
		}
		first := inputs[i][0]
		for k := range int32Values(first.Data)[0] {
			var resp []infer.Tensor
			for _, name := range outputs[i] {
				resp = append(resp, int32Tensor(name, first.Shape.Clone(), k+1))
			}
			if send(resp, nil, false) != nil {
				break // the request has ended
			}
		}
		_ = send(nil, nil, true)
	}
	return outs, errs
}

// decoupledEnsembleRepo is Triton's qa/L0_simple_ensemble backpressure
// set-up: an ensemble "pipe" (max_batch_size 0, IN/OUT INT32 [1]) whose
// first step is the decoupled "producer" and whose second is "consumer"
// (adds 100; max_batch_size 1, one instance); consumerExtra and
// ensembleExtra go into their configurations.
func decoupledEnsembleRepo(t *testing.T, consumerExtra, ensembleExtra string, consumer ...func(*fakeModel)) string {
	t.Helper()
	repo := t.TempDir()
	one := func(fm *fakeModel) {
		fm.Inputs = []fakeTensor{{Name: "IN", DataType: "INT32", Shape: []int64{-1, 1}}}
		fm.Outputs = []fakeTensor{{Name: "OUT", DataType: "INT32", Shape: []int64{-1, 1}}}
	}
	model := func(be, extra string) string {
		return `backend: "` + be + `"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
` + extra
	}
	writeFiles(t, repo, map[string]string{
		"producer/config.pbtxt":       model("fakestream", "model_transaction_policy { decoupled: true }\n"),
		"producer/1/model.fakestream": fakeFile(0, one),
		"consumer/config.pbtxt":       model("fake", consumerExtra),
		"consumer/1/model.fake":       fakeFile(100, append([]func(*fakeModel){one}, consumer...)...),
		"pipe/config.pbtxt": `name: "pipe"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
` + ensembleExtra + `
  step [
    { model_name: "producer" model_version: -1 input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "mid" } },
    { model_name: "consumer" model_version: -1 input_map { key: "IN" value: "mid" } output_map { key: "OUT" value: "OUT" } }
  ]
}
`,
		"pipe/1/.keep": "",
	})
	return repo
}

// pipeRequest asks "pipe" for n responses.
func pipeRequest(n int32) *infer.Request {
	return &infer.Request{ID: "p", Model: "pipe", Inputs: []infer.Tensor{int32Tensor("IN", []int64{1}, n)}}
}

// streamed is what InferStream handed on for one request.
type streamed struct {
	values []int32 // OUT of each response, in order
	finals []bool  // each response's final flag
	flags  int     // calls with only the final flag
	err    error   // what InferStream returned
}

func streamPipe(ctx context.Context, t *testing.T, h *harness, n int32) streamed {
	t.Helper()
	var s streamed
	s.err = h.m.InferStream(ctx, pipeRequest(n), func(resp *infer.Response, err error, final bool) error {
		require.NoError(t, err)
		if resp == nil {
			s.flags++
			return nil
		}
		require.Len(t, resp.Outputs, 1)
		require.Equal(t, infer.Shape{1}, resp.Outputs[0].Shape)
		require.Equal(t, final, resp.Parameters[ParamFinalResponse])
		s.values = append(s.values, int32Values(resp.Outputs[0].Data)...)
		s.finals = append(s.finals, final)
		return nil
	})
	return s
}

// Triton's qa/L0_simple_ensemble EnsembleBackpressureTest
// (ensemble_disabled): each response of a decoupled step flows through
// the following step by itself, and the ensemble streams one response for
// each, the last marked final.
func TestEnsembleDecoupledStepStreams(t *testing.T) {
	h := newHarness(t, Options{Repositories: []string{decoupledEnsembleRepo(t, "", "")}, StrictReadiness: true})
	h.start(t)
	s := streamPipe(t.Context(), t, h, 8)
	require.NoError(t, s.err)
	require.ElementsMatch(t, []int32{101, 102, 103, 104, 105, 106, 107, 108}, s.values)
	require.Equal(t, append(slices.Repeat([]bool{false}, 7), true), s.finals)
	require.Zero(t, s.flags)

	// An ensemble running a decoupled step is decoupled itself, as in
	// Triton: a request the step answers with no response gets only the
	// final flag.
	s = streamPipe(t.Context(), t, h, 0)
	require.NoError(t, s.err)
	require.Empty(t, s.values)
	require.Equal(t, 1, s.flags)

	stats, err := h.m.Statistics(t.Context(), "pipe", "1")
	require.NoError(t, err)
	require.Equal(t, uint64(2), stats[0].Success.Count)
}

// Triton marks an ensemble that runs a decoupled step decoupled
// (ensemble_utils.cc), so its unary endpoints refuse it as they refuse a
// decoupled model, however many responses the step would send.
func TestEnsembleDecoupledStepUnary(t *testing.T) {
	h := newHarness(t, Options{Repositories: []string{decoupledEnsembleRepo(t, "", "")}, StrictReadiness: true})
	h.start(t)
	for _, n := range []int32{0, 1, 3} {
		_, err := h.m.Infer(t.Context(), pipeRequest(n))
		requireInferError(t, err, apierr.KindUnsupported, ReasonDecoupled, "ensemble 'pipe' version 1 runs a decoupled step, which makes it decoupled: this endpoint doesn't support models with decoupled transaction policy")
	}
	require.Zero(t, h.fake.executions.Load(), "no step ran")
	// The configuration says so, as Triton's does: clients such as
	// perf_analyzer read it to choose the streaming endpoints.
	cfg, err := h.m.Config(t.Context(), "pipe", "")
	require.NoError(t, err)
	require.True(t, cfg.GetModelTransactionPolicy().GetDecoupled())
	cfg, err = h.m.Config(t.Context(), "consumer", "")
	require.NoError(t, err)
	require.False(t, cfg.GetModelTransactionPolicy().GetDecoupled())
}

// Triton's qa/L0_simple_ensemble EnsembleStepMaxQueueSizeTest
// test_step2_max_queue_size: the step after a decoupled one has
// dynamic_batching { default_queue_policy { max_queue_size } }; once its
// queue is full the ensemble request fails with Triton's "Exceeds maximum
// queue size" (Sluice's reason queue_full), after the responses that were
// complete by then.
func TestEnsembleStepMaxQueueSize(t *testing.T) {
	gate := t.TempDir() // a name of this run's own
	repo := decoupledEnsembleRepo(t, "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n", "",
		func(fm *fakeModel) { fm.Gate = gate })
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)

	s := overrunConsumer(t, h, gate)
	require.ErrorContains(t, s.err, "ensemble 'pipe' step 1 (model 'consumer')")
	require.Less(t, len(s.values), 8)
	for _, v := range s.values {
		require.Greater(t, v, int32(100))
	}
}

// overrunConsumer streams 8 responses' worth through "pipe" while the
// consumer, whose queue holds one request, is held at gate: one consumer
// run executes, one waits in the queue, the next is refused. Once the
// consumer has refused one the gate opens; the request must then fail
// with the full queue.
func overrunConsumer(t *testing.T, h *harness, gate string) streamed {
	t.Helper()
	done := make(chan streamed, 1)
	go func() { done <- streamPipe(t.Context(), t, h, 8) }()
	require.Eventually(t, func() bool {
		stats, err := h.m.Statistics(t.Context(), "consumer", "1")
		return err == nil && stats[0].Fail.Count > 0
	}, 10*time.Second, time.Millisecond)
	close(fakeGate(gate))
	s := <-done
	requireInferError(t, s.err, apierr.KindUnavailable, batch.ReasonQueueFull, "Exceeds maximum queue size")
	return s
}

// Triton's qa/L0_simple_ensemble EnsembleBackpressureTest (limit 1,
// concurrent and sequential requests): with
// ensemble_scheduling { max_inflight_requests: 1 } each step has at most
// one request in flight across all of the ensemble's requests, so a
// consumer whose queue holds one request is never overrun however fast
// the decoupled step produces, and no slot is leaked from one request to
// the next.
func TestEnsembleMaxInflightRequests(t *testing.T) {
	repo := decoupledEnsembleRepo(t, "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n", "  max_inflight_requests: 1",
		func(fm *fakeModel) { fm.ExecDelayMS = 1 })
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)
	var wg sync.WaitGroup
	results := make([]streamed, 4)
	for i := range results {
		wg.Go(func() { results[i] = streamPipe(t.Context(), t, h, 8) })
	}
	wg.Wait()
	for _, s := range results {
		require.NoError(t, s.err)
		require.ElementsMatch(t, []int32{101, 102, 103, 104, 105, 106, 107, 108}, s.values)
	}
	for range 3 {
		s := streamPipe(t.Context(), t, h, 4)
		require.NoError(t, s.err)
		require.Len(t, s.values, 4)
	}
	cfg, err := h.m.Config(t.Context(), "pipe", "")
	require.NoError(t, err)
	require.Equal(t, uint32(1), cfg.GetEnsembleScheduling().GetMaxInflightRequests())
	// qa/L0_simple_ensemble/test.sh greps the server log for Triton's line
	// to tell that the limit was taken.
	require.Len(t, h.logs.logLines(t, "Ensemble model 'pipe' configured with max_inflight_requests: 1"), 1)
}

// joinConfig is a fake model "join" taking IN and IN2 (INT32 [1], batching
// up to 1) to OUT.
const joinConfig = `backend: "fake"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IN2" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`

// joinModel writes the model "join" into repo: OUT is IN plus add.
func joinModel(t *testing.T, repo string, add int32) {
	t.Helper()
	writeFiles(t, repo, map[string]string{
		"join/config.pbtxt": joinConfig,
		"join/1/model.fake": fakeFile(add, func(fm *fakeModel) {
			fm.Inputs = []fakeTensor{{Name: "IN", DataType: "INT32", Shape: []int64{-1, 1}}, {Name: "IN2", DataType: "INT32", Shape: []int64{-1, 1}}}
			fm.Outputs = []fakeTensor{{Name: "OUT", DataType: "INT32", Shape: []int64{-1, 1}}}
		}),
	})
}

// Triton's qa/L0_simple_ensemble EnsembleParallelFailedEnqueueTest
// test_parallel_step_failed_enqueue: a decoupled step fans out to a slow
// branch whose queue fills and a fast one, joined by a last step; the
// request ends with exactly one "Exceeds maximum queue size" error once
// the steps in flight are done, and every response before it is whole.
func TestEnsembleParallelStepFailedEnqueue(t *testing.T) {
	gate := t.TempDir() // a name of this run's own
	repo := decoupledEnsembleRepo(t, "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n", "",
		func(fm *fakeModel) { fm.Gate = gate })
	joinModel(t, repo, 1000)
	writeFiles(t, repo, map[string]string{
		"fast/config.pbtxt": strings.Replace(joinConfig, `, { name: "IN2" data_type: TYPE_INT32 dims: [ 1 ] }`, "", 1),
		"fast/1/model.fake": fakeFile(10, func(fm *fakeModel) {
			fm.Inputs = []fakeTensor{{Name: "IN", DataType: "INT32", Shape: []int64{-1, 1}}}
			fm.Outputs = []fakeTensor{{Name: "OUT", DataType: "INT32", Shape: []int64{-1, 1}}}
		}),
		"pipe/config.pbtxt": `name: "pipe"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "producer" input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "mid" } },
  { model_name: "consumer" input_map { key: "IN" value: "mid" } output_map { key: "OUT" value: "slow" } },
  { model_name: "fast" input_map { key: "IN" value: "mid" } output_map { key: "OUT" value: "quick" } },
  { model_name: "join" input_map { key: "IN" value: "slow" } input_map { key: "IN2" value: "quick" } output_map { key: "OUT" value: "OUT" } }
] }
`,
	})
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)

	s := overrunConsumer(t, h, gate)
	require.Less(t, len(s.values), 8)
	for _, v := range s.values {
		require.Greater(t, v, int32(1100), "the join of a slow branch value")
	}

	// Once the slow branch runs again the same ensemble serves.
	s = streamPipe(t.Context(), t, h, 1)
	require.NoError(t, s.err)
	require.Equal(t, []int32{1101}, s.values)
}

// Triton's ensemble validation (ensemble_utils.cc) refuses a step whose
// inputs follow two different decoupled steps, and the response cache on
// an ensemble that a decoupled step makes decoupled (qa/L0_response_cache
// test.sh, "ensemble model with cache enabled and decoupled mode enabled
// in composing model": "response cache does not currently support").
func TestEnsembleDecoupledStepChecks(t *testing.T) {
	repo := decoupledEnsembleRepo(t, "", "")
	joinModel(t, repo, 0)
	writeFiles(t, repo, map[string]string{
		"twice/config.pbtxt": `platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "producer" input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "a" } },
  { model_name: "producer" input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "b" } },
  { model_name: "join" input_map { key: "IN" value: "a" } input_map { key: "IN2" value: "b" } output_map { key: "OUT" value: "OUT" } }
] }
`,
		"twice/1/.keep": "",
	})
	pipe, err := os.ReadFile(filepath.Join(repo, "pipe", "config.pbtxt"))
	require.NoError(t, err)
	writeFiles(t, repo, map[string]string{
		"cached/config.pbtxt": strings.Replace(string(pipe), `name: "pipe"`, `name: "cached"`, 1) + "response_cache { enable: true }\n",
		"cached/1/.keep":      "",
		// An ensemble's own decoupled setting is ignored, as Triton
		// derives it from the steps: "plain" runs none.
		"plain/config.pbtxt": `platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "consumer" input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }
model_transaction_policy { decoupled: true }
`,
		"plain/1/.keep": "",
	})
	h := newHarness(t, Options{Repositories: []string{repo}, CacheSizeBytes: 1 << 20})
	h.start(t)
	require.Equal(t, []string{"1 READY"}, entries(h, "pipe"))
	twice := entries(h, "twice")
	require.Len(t, twice, 1)
	require.Contains(t, twice[0], "in ensemble twice, step of model 'join' receives inputs originated from different decoupled models")
	cached := entries(h, "cached")
	require.Len(t, cached, 1)
	require.Contains(t, cached[0], "response cache does not currently support model 'cached' with 'decoupled' transaction policy")
	require.Equal(t, []string{"1 READY"}, entries(h, "plain"))
	cfg, err := h.m.Config(t.Context(), "plain", "")
	require.NoError(t, err)
	require.False(t, cfg.GetModelTransactionPolicy().GetDecoupled())
}

// As Triton's limiter, a step that cannot get a max_inflight_requests
// slot within the wait runs without one and logs that it did, rather than
// hang the request; it gives back only slots it took.
func TestEnsembleMaxInflightRequestsWaitBounded(t *testing.T) {
	saved := inflightWait
	inflightWait = 0
	t.Cleanup(func() { inflightWait = saved })
	gate := t.TempDir()
	repo := decoupledEnsembleRepo(t, "", "  max_inflight_requests: 1", func(fm *fakeModel) { fm.Gate = gate })
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)
	const msg = "ensemble step waited too long for an in-flight slot (max_inflight_requests); proceeding to avoid deadlock"
	done := make(chan streamed, 1)
	go func() { done <- streamPipe(t.Context(), t, h, 3) }()
	require.Eventually(t, func() bool { return len(h.logs.logLines(t, msg)) > 0 }, 10*time.Second, time.Millisecond)
	close(fakeGate(gate))
	s := <-done
	require.NoError(t, s.err)
	require.ElementsMatch(t, []int32{101, 102, 103}, s.values)

	inflightWait = saved
	for range 2 {
		s = streamPipe(t.Context(), t, h, 2)
		require.NoError(t, s.err)
		require.Len(t, s.values, 2)
	}
}
