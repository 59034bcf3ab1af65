package modelrepo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

func TestInferValidation(t *testing.T) {
	repo := t.TempDir()
	two := func(fm *fakeModel) {
		fm.Inputs = []fakeTensor{
			{Name: "INPUT0", DataType: "INT32", Shape: []int64{-1, 4}},
			{Name: "INPUT1", DataType: "INT32", Shape: []int64{-1, 4}},
			{Name: "MASK", DataType: "BOOL", Shape: []int64{-1, 4}},
		}
		fm.Outputs = []fakeTensor{
			{Name: "OUTPUT0", DataType: "INT32", Shape: []int64{-1, 4}},
			{Name: "OUTPUT1", DataType: "INT32", Shape: []int64{-1, 4}},
		}
	}
	writeFiles(t, repo, map[string]string{
		"simple/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "MASK" data_type: TYPE_BOOL dims: [ 4 ] optional: true }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
`,
		"simple/1/model.fake": fakeFile(10, two),
		"nobatch/config.pbtxt": `backend: "fake"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2, 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2, 2 ] } ]
`,
		"nobatch/1/model.fake": fakeFile(1, func(fm *fakeModel) {
			fm.Inputs[0].Shape = []int64{2, 2}
			fm.Outputs[0].Shape = []int64{2, 2}
		}),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)

	in0 := int32Tensor("INPUT0", []int64{1, 4}, 1, 2, 3, 4)
	in1 := int32Tensor("INPUT1", []int64{1, 4}, 5, 6, 7, 8)
	req := func(inputs ...infer.Tensor) *infer.Request {
		return &infer.Request{Model: "simple", Inputs: inputs}
	}
	tests := []struct {
		name   string
		req    *infer.Request
		kind   apierr.Kind
		reason string
		msg    string
	}{
		{"unknown model", &infer.Request{Model: "foo"}, apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'foo' is not found"},
		{"bad version", &infer.Request{Model: "simple", Version: "x"}, apierr.KindNotFound, ReasonVersionNotFound, "model 'simple' has no version 'x'"},
		{"missing input", req(in0), apierr.KindInvalid, ReasonMissingInput, "input 'INPUT1' is missing"},
		// Too few inputs also answer with Triton's words, with the count
		// a range when inputs are optional
		// (qa/L0_input_validation/input_validation_test.py
		// test_input_validation_optional, _optional_empty, _required_empty,
		// _required_missing).
		{
			"missing input, Triton's words", req(in0), apierr.KindInvalid, ReasonMissingInput,
			"input 'INPUT1' is missing: expected number of inputs between 2 and 3 but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
		},
		{
			"no inputs", req(), apierr.KindInvalid, ReasonMissingInput,
			"input 'INPUT0' is missing: expected number of inputs between 2 and 3 but got 0 inputs for model 'simple'. Got input(s) [], but missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s).",
		},
		{
			"no inputs, none optional", &infer.Request{Model: "nobatch"}, apierr.KindInvalid, ReasonMissingInput,
			"input 'IN' is missing: expected 1 inputs but got 0 inputs for model 'nobatch'. Got input(s) [], but missing required input(s) ['IN']. Please provide all required input(s).",
		},
		{"unknown input", req(in0, in1, int32Tensor("EXTRA", []int64{1}, 1)), apierr.KindInvalid, ReasonUnknownInput, "input 'EXTRA' is not an input of model 'simple'"},
		// The triton_ prefix is Triton's (qa/L0_parameters/parameters_test.py,
		// the {"triton_": True} parameters every protocol must refuse).
		{
			"reserved parameter", &infer.Request{Model: "simple", Inputs: []infer.Tensor{in0, in1}, Parameters: infer.Parameters{"triton_": true}},
			apierr.KindInvalid, ReasonInvalidParameter, "parameter 'triton_': parameter keys starting with 'triton_' are reserved for Triton usage",
		},
		// qa/L0_parameters test_params_reserved_rejected: a raw HTTP infer
		// with triton_enable_empty_final_response is refused too (only the
		// gRPC stream consumes it).
		{
			"reserved stream parameter", &infer.Request{Model: "simple", Inputs: []infer.Tensor{in0, in1}, Parameters: infer.Parameters{"triton_enable_empty_final_response": "dummy-value"}},
			apierr.KindInvalid, ReasonInvalidParameter, "parameter 'triton_enable_empty_final_response': parameter keys starting with 'triton_' are reserved for Triton usage",
		},
		{"duplicate input", req(in0, in0, in1), apierr.KindInvalid, ReasonDuplicateInput, "input 'INPUT0' is given more than once"},
		{
			"datatype", req(in0, infer.Tensor{Name: "INPUT1", DataType: infer.FP32, Shape: infer.Shape{1, 4}, Data: make([]byte, 16)}),
			apierr.KindInvalid, ReasonInvalidDatatype, "input 'INPUT1': expected datatype INT32, got FP32",
		},
		{"shape", req(in0, int32Tensor("INPUT1", []int64{2, 3}, 1, 2, 3, 4, 5, 6)), apierr.KindInvalid, ReasonInvalidShape, "input 'INPUT1': expected shape [-1,4], got [2,3]"},
		{"rank", req(in0, int32Tensor("INPUT1", []int64{4}, 1, 2, 3, 4)), apierr.KindInvalid, ReasonInvalidShape, "input 'INPUT1': expected shape [-1,4], got [4]"},
		{"negative dim", req(in0, infer.Tensor{Name: "INPUT1", DataType: infer.Int32, Shape: infer.Shape{-1, 4}}), apierr.KindInvalid, ReasonInvalidShape, "expected shape [-1,4], got [-1,4]"},
		{"zero batch", req(int32Tensor("INPUT0", []int64{0, 4}), int32Tensor("INPUT1", []int64{0, 4})), apierr.KindInvalid, ReasonInvalidShape, "input 'INPUT0': batch size must be at least 1, got 0"},
		{"batch too large", req(int32Tensor("INPUT0", []int64{9, 4}, make([]int32, 36)...), in1), apierr.KindInvalid, ReasonBatchTooLarge, "input 'INPUT0': batch size 9 exceeds max_batch_size 8"},
		{"batch mismatch", req(in0, int32Tensor("INPUT1", []int64{2, 4}, make([]int32, 8)...)), apierr.KindInvalid, ReasonInvalidShape, "input 'INPUT1': batch size 2 differs from batch size 1 of input 'INPUT0'"},
		{"size", req(in0, infer.Tensor{Name: "INPUT1", DataType: infer.Int32, Shape: infer.Shape{1, 4}, Data: make([]byte, 15)}), apierr.KindInvalid, ReasonInvalidSize, "input 'INPUT1': tensor data size does not match its shape: shape [1,4] of INT32 needs 16 bytes, got 15"},
		// In parentheses Triton's words, which qa/L0_implicit_state
		// test_request_output_not_allowed looks for.
		{"unknown output", &infer.Request{Model: "simple", Inputs: []infer.Tensor{in0, in1}, Outputs: []infer.RequestedOutput{{Name: "FOO"}}}, apierr.KindInvalid, ReasonUnknownOutput, "output 'FOO' is not an output of model 'simple' (unexpected inference output 'FOO' for model 'simple')"},
		{"duplicate output", &infer.Request{Model: "simple", Inputs: []infer.Tensor{in0, in1}, Outputs: []infer.RequestedOutput{{Name: "OUTPUT0"}, {Name: "OUTPUT0"}}}, apierr.KindInvalid, ReasonDuplicateOutput, "output 'OUTPUT0' already exists in request"},
		{"no batch dim expected", &infer.Request{Model: "nobatch", Inputs: []infer.Tensor{int32Tensor("IN", []int64{1, 2, 2}, 1, 2, 3, 4)}}, apierr.KindInvalid, ReasonInvalidShape, "input 'IN': expected shape [2,2], got [1,2,2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.m.Infer(t.Context(), tt.req)
			requireInferError(t, err, tt.kind, tt.reason, tt.msg)
		})
	}

	t.Run("valid requests", func(t *testing.T) {
		resp, err := h.m.Infer(t.Context(), &infer.Request{
			ID: "42", Model: "simple", Inputs: []infer.Tensor{in1, in0},
			Outputs: []infer.RequestedOutput{{Name: "OUTPUT1"}, {Name: "OUTPUT0"}},
		})
		require.NoError(t, err)
		require.Equal(t, "42", resp.ID)
		require.Equal(t, "simple", resp.Model)
		require.Equal(t, "1", resp.Version)
		require.Equal(t, []string{"OUTPUT1", "OUTPUT0"}, []string{resp.Outputs[0].Name, resp.Outputs[1].Name}, "requested order")
		require.Equal(t, []int32{11, 12, 13, 14}, int32Values(resp.Outputs[0].Data), "inputs reach the model in config order")

		resp, err = h.m.Infer(t.Context(), req(in0, in1, infer.Tensor{Name: "MASK", DataType: infer.Bool, Shape: infer.Shape{1, 4}, Data: []byte{1, 0, 1, 0}}))
		require.NoError(t, err)
		require.Equal(t, []string{"OUTPUT0", "OUTPUT1"}, []string{resp.Outputs[0].Name, resp.Outputs[1].Name}, "config order when none requested")

		resp, err = h.m.Infer(t.Context(), &infer.Request{Model: "nobatch", Inputs: []infer.Tensor{int32Tensor("IN", []int64{2, 2}, 1, 2, 3, 4)}})
		require.NoError(t, err)
		require.Equal(t, []int32{2, 3, 4, 5}, int32Values(resp.Outputs[0].Data))
	})

	t.Run("failures are counted by reason", func(t *testing.T) {
		require.InDelta(t, 3, testutil.ToFloat64(h.m.metrics.failures.WithLabelValues("simple", "1", ReasonMissingInput)), 0)
		require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.failures.WithLabelValues("simple", "1", ReasonBatchTooLarge)), 0)
		stats, err := h.m.Statistics(t.Context(), "simple", "1")
		require.NoError(t, err)
		require.Equal(t, uint64(17), stats[0].Fail.Count, "every failure after the version was found")
	})
}

func TestInferHonoursContext(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(""),
		"m/1/model.fake": fakeFile(1, func(fm *fakeModel) { fm.ExecDelayMS = 100 }),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	// The only instance is busy: a second request waits for it until its
	// deadline.
	busy := make(chan error, 1)
	before := h.fake.executions.Load()
	go func() {
		_, err := h.infer(context.Background(), "m", "")
		busy <- err
	}()
	require.Eventually(t, func() bool { return h.fake.executions.Load() > before }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := h.infer(ctx, "m", "")
	requireInferError(t, err, apierr.KindTimeout, ReasonDeadlineExceeded, "request deadline exceeded")
	require.NoError(t, <-busy)
}

func TestBackendErrorsAreWrapped(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(`model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } } } ]`),
		"m/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	lv := h.m.lookup("m").serving.Load().latest()
	err := lv.backendError(t.Context(), context.DeadlineExceeded)
	require.Equal(t, ReasonBackendError, err.Reason)
	require.True(t, strings.HasPrefix(err.Error(), "model 'm' version 1: execute"))
	own := apierr.Errorf(apierr.KindInvalid, "custom_reason", "bad")
	require.Same(t, own, lv.backendError(t.Context(), own))
}

func TestMetrics(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt":            fakeConfig(""),
		"m/1/model.fake":            fakeFile(1),
		"m/1/model_config.json":     `{"version": "1.0.0-abc", "git_commit": "abc1234"}`,
		"broken/config.pbtxt":       fakeConfig(""),
		"broken/1/model.fake":       "nope",
		"bare/1/model.fake":         fakeFile(2),
		"bare/1/model_config.json":  `{}`,
		"bare/notes/not-a-version":  "",
		"bare/1/warmup/unused.data": "",
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"*"}})
	h.start(t)
	for range 2 {
		_, err := h.infer(t.Context(), "m", "")
		require.NoError(t, err)
	}
	_, err := h.m.Infer(t.Context(), &infer.Request{Model: "m", Inputs: []infer.Tensor{int32Tensor("IN", []int64{3, 4}, make([]int32, 12)...)}})
	require.NoError(t, err)
	_, err = h.m.Infer(t.Context(), &infer.Request{Model: "m"})
	require.Error(t, err)

	requireLintClean(t, h.reg)

	require.InDelta(t, 3, testutil.ToFloat64(h.m.metrics.requests.WithLabelValues("m", "1")), 0)
	require.InDelta(t, 5, testutil.ToFloat64(h.m.metrics.inferences.WithLabelValues("m", "1")), 0)
	require.InDelta(t, 3, testutil.ToFloat64(h.m.metrics.executions.WithLabelValues("m", "1")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.failures.WithLabelValues("m", "1", ReasonMissingInput)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.loadFailures.WithLabelValues("broken", causeUnreadable)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.state.WithLabelValues("broken", "1", "UNAVAILABLE")), 0)
	require.InDelta(t, 0, testutil.ToFloat64(h.m.metrics.state.WithLabelValues("broken", "1", "READY")), 0)
	require.Positive(t, testutil.ToFloat64(h.m.metrics.loadDuration.WithLabelValues("m", "1")))
	require.Equal(t, 2, testutil.CollectAndCount(h.m.metrics.duration), "a series per loaded version (m and bare), from the load on")

	// series counts the series of a metric family with model="m".
	series := func(name string) int {
		mfs, err := h.reg.Gather()
		require.NoError(t, err)
		n := 0
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "model" && l.GetValue() == "m" {
						n++
					}
				}
			}
		}
		return n
	}
	families := []string{
		"sluice_model_inference_requests_total", "sluice_model_inferences_total", "sluice_model_executions_total",
		"sluice_model_request_duration_seconds", "sluice_model_inference_failures_total", "sluice_model_load_duration_seconds",
		"sluice_model_info", "sluice_model_state",
	}
	for _, name := range families {
		require.Positive(t, series(name), name)
	}
	require.Equal(t, 4, series("sluice_model_state"), "one series per state")

	require.NoError(t, h.m.Unload(t.Context(), "m", UnloadOptions{}))
	for _, name := range families {
		require.Zero(t, series(name), "%s keeps series of an unloaded version", name)
	}
	n, err := testutil.GatherAndCount(h.reg, "sluice_model_info")
	require.NoError(t, err)
	require.Equal(t, 1, n, "bare's provenance stays")
	requireLintClean(t, h.reg)
}
