package modelrepo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Triton's ensemble rules on batching (server/src/core ensemble_utils:
// "batchable ensemble can include non-batchable models as long as the
// expanded shapes are consistent"), and its scheduler running only the
// steps the requested outputs need.
func TestEnsembleBatchingAndPruning(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"a/config.pbtxt": fakeConfig(""),
		"a/1/model.fake": fakeFile(1),
		"b/config.pbtxt": fakeConfig(""),
		"b/1/model.fake": fakeFile(10),
		// A step that does not batch: its dims spell the batch dimension.
		"nb/config.pbtxt": `backend: "fake"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1, 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1, 4 ] } ]
`,
		"nb/1/model.fake": fakeFile(100),
		// A batching ensemble over the non-batching step.
		"batching_over_nb/config.pbtxt": strings.Replace(ensembleConfig("X", "Y", step("a", "IN:X", "OUT:T"), step("nb", "IN:T", "OUT:Y")), `"e"`, `"batching_over_nb"`, 1),
		"batching_over_nb/1/.keep":      "",
		// A non-batching ensemble over batching steps.
		"nonbatching/config.pbtxt": `name: "nonbatching"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ -1, 4 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1, 4 ] } ]
ensemble_scheduling { step [
` + step("a", "IN:X", "OUT:T") + ",\n" + step("b", "IN:T", "OUT:Y") + `
] }
`,
		"nonbatching/1/.keep": "",
		// Two outputs from two independent steps.
		"fork/config.pbtxt": strings.Replace(ensembleConfig("X", "YA,YB", step("a", "IN:X", "OUT:YA"), step("b", "IN:X", "OUT:YB")), `"e"`, `"fork"`, 1),
		"fork/1/.keep":      "",
	})
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)
	require.True(t, h.m.Ready(), "every ensemble loads: %v", h.m.Index(t.Context(), false))

	for model, want := range map[string][]int32{
		"batching_over_nb": {102, 103, 104, 105, 106, 107, 108, 109},
		"nonbatching":      {12, 13, 14, 15, 16, 17, 18, 19},
	} {
		resp, err := h.m.Infer(t.Context(), ensembleRequest(model))
		require.NoError(t, err, model)
		require.Equal(t, want, int32Values(resp.Outputs[0].Data), model)
	}

	before := stepSuccesses(t, h, "b")
	resp, err := h.m.Infer(t.Context(), &infer.Request{Model: "fork", Inputs: ensembleRequest("fork").Inputs, Outputs: []infer.RequestedOutput{{Name: "YA"}}})
	require.NoError(t, err)
	require.Len(t, resp.Outputs, 1)
	require.Equal(t, "YA", resp.Outputs[0].Name)
	require.Equal(t, before, stepSuccesses(t, h, "b"), "b produces only YB, which nobody asked for: it must not run")
	resp, err = h.m.Infer(t.Context(), ensembleRequest("fork"))
	require.NoError(t, err)
	require.Len(t, resp.Outputs, 2)
	require.Equal(t, before+1, stepSuccesses(t, h, "b"))
}

func stepSuccesses(t *testing.T, h *harness, model string) uint64 {
	t.Helper()
	st, err := h.m.Statistics(t.Context(), model, "")
	require.NoError(t, err)
	require.Len(t, st, 1)
	return st[0].Success.Count
}

// An ensemble's response carries the request's sequence parameters, as
// Triton's ensemble scheduler answers them ("parameters": {"sequence_id":
// 0, "sequence_start": false, "sequence_end": false} when the request had
// none).
func TestEnsembleResponseSequenceParameters(t *testing.T) {
	h := newHarness(t, Options{Repositories: []string{ensembleRepo(t)}})
	h.start(t)
	resp, err := h.m.Infer(t.Context(), ensembleRequest("chain"))
	require.NoError(t, err)
	require.Equal(t, infer.Parameters{"sequence_id": uint64(0), "sequence_start": false, "sequence_end": false}, resp.Parameters)

	req := ensembleRequest("chain")
	req.Parameters = infer.Parameters{"sequence_id": "abc", "sequence_start": true}
	resp, err = h.m.Infer(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, infer.Parameters{"sequence_id": "abc", "sequence_start": true, "sequence_end": false}, resp.Parameters)

	in := ensembleRequest("a").Inputs[0]
	in.Name = "IN"
	resp, err = h.m.Infer(t.Context(), &infer.Request{Model: "a", Inputs: []infer.Tensor{in}})
	require.NoError(t, err)
	require.Nil(t, resp.Parameters, "a plain model's response has none")
}

// Triton's QA ensembles (gen_ensemble_model_utils: simple/sequence/fan
// over "nop" steps; L0_infer, L0_infer_zero) put a non-batching ensemble
// with dims [4] in front of batching steps with dims [4]: Triton's
// validation accepts tensors whose dims agree even when their full shapes
// do not (core ensemble_utils ValidateTensorConsistency), and its
// scheduler gives the batching step a batch of 1 and strips it again for a
// non-batching consumer or the ensemble's output (ReshapeTensorDims).
func TestNonBatchingEnsembleOverBatchingSteps(t *testing.T) {
	repo := t.TempDir()
	nonBatching := func(name string, steps ...string) string {
		return `name: "` + name + `"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ]
ensemble_scheduling { step [
` + strings.Join(steps, ",\n") + `
] }
`
	}
	writeFiles(t, repo, map[string]string{
		"a/config.pbtxt": fakeConfig(""),
		"a/1/model.fake": fakeFile(1),
		"b/config.pbtxt": fakeConfig(""),
		"b/1/model.fake": fakeFile(10),
		// A step that does not batch, with the ensemble's dims.
		"flat/config.pbtxt": `backend: "fake"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
`,
		"flat/1/model.fake": fakeFile(100, func(fm *fakeModel) {
			fm.Inputs[0].Shape = []int64{4}
			fm.Outputs[0].Shape = []int64{4}
		}),
		"batching_steps/config.pbtxt": nonBatching("batching_steps", step("a", "IN:X", "OUT:T"), step("b", "IN:T", "OUT:Y")),
		"batching_steps/1/.keep":      "",
		"mixed/config.pbtxt":          nonBatching("mixed", step("a", "IN:X", "OUT:T"), step("flat", "IN:T", "OUT:U"), step("b", "IN:U", "OUT:Y")),
		"mixed/1/.keep":               "",
	})
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)
	require.True(t, h.m.Ready(), "every ensemble loads: %v", h.m.Index(t.Context(), false))
	for model, want := range map[string][]int32{
		"batching_steps": {12, 13, 14, 15},
		"mixed":          {112, 113, 114, 115},
	} {
		resp, err := h.m.Infer(t.Context(), &infer.Request{Model: model, Inputs: []infer.Tensor{int32Tensor("X", []int64{4}, 1, 2, 3, 4)}})
		require.NoError(t, err, model)
		require.Equal(t, infer.Shape{4}, resp.Outputs[0].Shape, model)
		require.Equal(t, want, int32Values(resp.Outputs[0].Data), model)
	}
}

// Triton's ensemble validation and scheduler see an ensemble input's or
// output's reshape, not its dims (core ensemble_utils: "input.has_reshape()
// ? input.reshape().shape() : input.dims()"), as Triton's QA reshape
// ensembles use them (L0_infer_reshape, simple_reshape_*): clients send
// and get [4,4]; the graph and its steps work on [16].
func TestEnsembleInputOutputReshape(t *testing.T) {
	repo := t.TempDir()
	flat := func(fm *fakeModel) {
		fm.Inputs[0].Shape = []int64{-1, 16}
		fm.Outputs[0].Shape = []int64{-1, 16}
	}
	writeFiles(t, repo, map[string]string{
		"s/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
`,
		"s/1/model.fake": fakeFile(1, flat),
		"e/config.pbtxt": `name: "e"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 4, 4 ] reshape: { shape: [ 16 ] } } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4, 4 ] reshape: { shape: [ 16 ] } } ]
ensemble_scheduling { step [
` + step("s", "IN:X", "OUT:Y") + `
] }
`,
		"e/1/.keep": "",
	})
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)
	require.True(t, h.m.Ready(), "the ensemble loads: %v", h.m.Index(t.Context(), false))
	vals := make([]int32, 16)
	for i := range vals {
		vals[i] = int32(i)
	}
	resp, err := h.m.Infer(t.Context(), &infer.Request{Model: "e", Inputs: []infer.Tensor{int32Tensor("X", []int64{1, 4, 4}, vals...)}})
	require.NoError(t, err)
	require.Equal(t, infer.Shape{1, 4, 4}, resp.Outputs[0].Shape, "clients get the output's dims")
	require.Equal(t, int32(1), int32Values(resp.Outputs[0].Data)[0])
	require.Equal(t, int32(16), int32Values(resp.Outputs[0].Data)[15])
}
