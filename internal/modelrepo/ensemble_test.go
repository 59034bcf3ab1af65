package modelrepo

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// step writes one ensemble step on one line; ins and outs are
// "stepTensor:ensembleTensor" pairs separated by commas.
func step(model, ins, outs string, extra ...string) string {
	mapping := func(field, pairs string) string {
		var b strings.Builder
		for p := range strings.SplitSeq(pairs, ",") {
			if p == "" {
				continue
			}
			k, v, _ := strings.Cut(p, ":")
			fmt.Fprintf(&b, " %s { key: %q value: %q }", field, k, v)
		}
		return b.String()
	}
	return fmt.Sprintf(`  { model_name: %q%s%s%s }`, model, strings.Join(extra, ""), mapping("input_map", ins), mapping("output_map", outs))
}

// ensembleConfig is an ensemble "e" with INT32 [4] tensors (batching up to
// 8): inputs and outputs are "name" or "name:TYPE:dims" items. The steps
// start on line 7, one a line.
func ensembleConfig(inputs, outputs string, steps ...string) string {
	tensors := func(list string) string {
		var items []string
		for it := range strings.SplitSeq(list, ",") {
			parts := strings.Split(it, ":")
			dt, dims := "TYPE_INT32", "4"
			if len(parts) == 3 {
				dt, dims = parts[1], parts[2]
			}
			items = append(items, fmt.Sprintf("{ name: %q data_type: %s dims: [ %s ] }", parts[0], dt, dims))
		}
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf(`name: "e"
platform: "ensemble"
max_batch_size: 8
input [ %s ]
output [ %s ]
ensemble_scheduling { step [
%s
] }
`, tensors(inputs), tensors(outputs), strings.Join(steps, ",\n"))
}

// stepConfigs are the step models the validation cases may name.
func stepConfigs(t *testing.T) map[string]*inferencepb.ModelConfig {
	t.Helper()
	cfgs := map[string]*inferencepb.ModelConfig{}
	for name, text := range map[string]string{
		"a":     fakeConfig(""),
		"b":     fakeConfig(""),
		"f":     strings.ReplaceAll(fakeConfig(""), "TYPE_INT32", "TYPE_FP32"),
		"small": strings.Replace(fakeConfig(""), "max_batch_size: 8", "max_batch_size: 2", 1),
		"c": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "IN2" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
`,
	} {
		cfg, _, err := modelconfig.Parse(name+"/config.pbtxt", []byte(text))
		require.NoError(t, err)
		modelconfig.ApplyDefaults(cfg, name)
		cfgs[name] = cfg
	}
	return cfgs
}

// ensembleProblems runs the load-time checks of an ensemble config against
// the step models of stepConfigs.
func ensembleProblems(t *testing.T, text string) []string {
	t.Helper()
	steps := stepConfigs(t)
	cfg, src, err := modelconfig.Parse("e/config.pbtxt", []byte(text))
	require.NoError(t, err, text)
	modelconfig.ApplyDefaults(cfg, "e")
	require.Empty(t, modelconfig.Validate(cfg, src), text)
	e, ps := parseEnsemble(cfg, src, func(name string) bool { return steps[name] != nil })
	if e != nil {
		require.Empty(t, ps)
		ps = e.checkTypes(cfg, src, func(i int) *inferencepb.ModelConfig { return steps[e.steps[i].model] })
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Error())
	}
	return out
}

func TestEnsembleValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  string
		want string // one problem, with its position
	}{
		{
			"unknown step model",
			ensembleConfig("X", "Y", step("nope", "IN:X", "OUT:Y")),
			`e/config.pbtxt:7:5: step 0 (model 'nope'): model 'nope' is not in any model repository`,
		},
		{
			"ensemble runs itself",
			ensembleConfig("X", "Y", step("e", "IN:X", "OUT:Y")),
			`e/config.pbtxt:7:5: step 0 (model 'e'): an ensemble cannot be a step of itself`,
		},
		{
			"cycle between steps",
			ensembleConfig("X", "Y", step("c", "IN:X,IN2:T2", "OUT:T1"), step("b", "IN:T1", "OUT:T2"), step("a", "IN:T1", "OUT:Y")),
			`the steps form a cycle: step 1 (model 'b') → step 0 (model 'c') → step 1 (model 'b')`,
		},
		{
			"step consumes its own output",
			ensembleConfig("X", "Y", step("c", "IN:X,IN2:T", "OUT:T"), step("a", "IN:T", "OUT:Y")),
			`e/config.pbtxt:7:`,
		},
		{
			"ensemble input not consumed",
			ensembleConfig("X,Z", "Y", step("a", "IN:X", "OUT:Y")),
			`e/config.pbtxt:4:58: ensemble input 'Z' is not consumed by any step`,
		},
		{
			"tensor consumed but never produced",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:Y"), step("b", "IN:ghost", "OUT:W")),
			`e/config.pbtxt:8:21: tensor 'ghost' is consumed by step 1 (model 'b') but no step produces it and it is not an ensemble input`,
		},
		{
			"ensemble output not produced",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:T")),
			`e/config.pbtxt:5:10: ensemble output 'Y' is not produced by any step`,
		},
		{
			"tensor produced twice",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:Y"), step("b", "IN:X", "OUT:Y")),
			`e/config.pbtxt:8:`,
		},
		{
			"step overwrites an ensemble input",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:X"), step("b", "IN:X", "OUT:Y")),
			`tensor 'X' is produced by step 0 (model 'a') but it is also an ensemble input`,
		},
		{
			"data type differs between steps",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:T"), step("f", "IN:T", "OUT:F"), step("b", "IN:T", "OUT:Y")),
			`e/config.pbtxt:8:21: tensor 'T': step 0 (model 'a') output 'OUT' is INT32 [-1,4] but step 1 (model 'f') input 'IN' wants FP32 [-1,4]`,
		},
		{
			"ensemble input type differs from the step's",
			ensembleConfig("X:TYPE_FP32:4", "Y", step("a", "IN:X", "OUT:Y")),
			`tensor 'X': ensemble input 'X' is FP32 [-1,4] but step 0 (model 'a') input 'IN' wants INT32 [-1,4]`,
		},
		{
			"shape differs",
			ensembleConfig("X:TYPE_INT32:5", "Y", step("a", "IN:X", "OUT:Y")),
			`tensor 'X': ensemble input 'X' is INT32 [-1,5] but step 0 (model 'a') input 'IN' wants INT32 [-1,4]`,
		},
		{
			"ensemble output declared otherwise",
			ensembleConfig("X", "Y:TYPE_INT32:8", step("a", "IN:X", "OUT:Y")),
			`e/config.pbtxt:5:10: ensemble output 'Y' is declared INT32 [-1,8] but step 0 (model 'a') output 'OUT' is INT32 [-1,4]`,
		},
		{
			"step input left unmapped",
			ensembleConfig("X", "Y", step("c", "IN:X", "OUT:Y")),
			`step 0 (model 'c'): input 'IN2' of model 'c' is not mapped`,
		},
		{
			"step input the model lacks",
			ensembleConfig("X", "Y", step("a", "IN:X,NOPE:X", "OUT:Y")),
			`step 0 (model 'a'): 'NOPE' is not an input of model 'a'; its inputs are [IN]`,
		},
		{
			"step output the model lacks",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:Y,NOPE:Z")),
			`step 0 (model 'a'): 'NOPE' is not an output of model 'a'; its outputs are [OUT]`,
		},
		{
			"step batches less than the ensemble",
			ensembleConfig("X", "Y", step("small", "IN:X", "OUT:Y")),
			`step 0 (model 'small'): max_batch_size 2 is less than the ensemble's max_batch_size 8`,
		},
		{
			"bad model_version",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:Y", " model_version: -2")),
			`e/config.pbtxt:7:`,
		},
		{
			"step maps no output",
			ensembleConfig("X", "Y", step("a", "IN:X", "OUT:Y"), step("b", "IN:X", "")),
			`step 1 (model 'b') maps no output: output_map is empty`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ensembleProblems(t, tt.cfg)
			require.NotEmpty(t, got, tt.cfg)
			found := false
			for _, g := range got {
				found = found || strings.Contains(g, tt.want)
			}
			require.True(t, found, "want a problem containing %q, got:\n%s\nconfig:\n%s", tt.want, strings.Join(got, "\n"), tt.cfg)
		})
	}

	t.Run("specific messages", func(t *testing.T) {
		got := ensembleProblems(t, ensembleConfig("X", "Y", step("c", "IN:X,IN2:T", "OUT:T"), step("a", "IN:T", "OUT:Y")))
		require.Contains(t, strings.Join(got, "\n"), "step 0 (model 'c') consumes its own output 'T' (a cycle)")
		got = ensembleProblems(t, ensembleConfig("X", "Y", step("a", "IN:X", "OUT:Y"), step("b", "IN:X", "OUT:Y")))
		require.Contains(t, strings.Join(got, "\n"), "tensor 'Y' is produced by step 0 (model 'a') and by step 1 (model 'b')")
		got = ensembleProblems(t, ensembleConfig("X", "Y", step("a", "IN:X", "OUT:Y", " model_version: -2")))
		require.Contains(t, strings.Join(got, "\n"), "step 0 (model 'a'): model_version must be -1 (latest) or a version >= 1, got -2")
	})

	t.Run("a valid diamond has no problems", func(t *testing.T) {
		got := ensembleProblems(t, ensembleConfig("X", "Y",
			step("c", "IN:L,IN2:R", "OUT:Y"), // listed first, runs last
			step("a", "IN:X", "OUT:L"),
			step("b", "IN:X", "OUT:R", " model_version: 1")))
		require.Empty(t, got)
	})
}

// ensembleRepo writes step models a (+1), b (+10) and c (IN + 100, with a
// second input IN2) and ensembles:
//
//	chain:   X -> a -> T -> b -> Y           (Y = X + 11)
//	diamond: X -> a -> L, X -> b -> R, (L, R) -> c -> Y   (Y = X + 101)
func ensembleRepo(tb testing.TB) string {
	tb.Helper()
	repo := tb.TempDir()
	cIn := func(fm *fakeModel) {
		fm.Inputs = append(fm.Inputs, fakeTensor{Name: "IN2", DataType: "INT32", Shape: []int64{-1, 4}})
	}
	writeFiles(tb, repo, map[string]string{
		"a/config.pbtxt": fakeConfig(""),
		"a/1/model.fake": fakeFile(1),
		"b/config.pbtxt": fakeConfig(""),
		"b/1/model.fake": fakeFile(10),
		"c/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "IN2" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
`,
		"c/1/model.fake":          fakeFile(100, cIn),
		"chain/config.pbtxt":      strings.Replace(ensembleConfig("X", "Y", step("a", "IN:X", "OUT:T"), step("b", "IN:T", "OUT:Y")), `"e"`, `"chain"`, 1),
		"chain/1/.keep":           "",
		"diamond/config.pbtxt":    strings.Replace(ensembleConfig("X", "Y", step("c", "IN:L,IN2:R", "OUT:Y"), step("a", "IN:X", "OUT:L"), step("b", "IN:X", "OUT:R")), `"e"`, `"diamond"`, 1),
		"diamond/.no-version-dir": "",
	})
	return repo
}

func ensembleRequest(model string) *infer.Request {
	return &infer.Request{ID: "e1", Model: model, Inputs: []infer.Tensor{int32Tensor("X", []int64{2, 4}, 1, 2, 3, 4, 5, 6, 7, 8)}}
}

func TestEnsembleServes(t *testing.T) {
	h := newHarness(t, Options{Repositories: []string{ensembleRepo(t)}, StrictReadiness: true})
	h.start(t)
	require.True(t, h.m.Ready())

	resp, err := h.m.Infer(t.Context(), ensembleRequest("chain"))
	require.NoError(t, err)
	require.Equal(t, "e1", resp.ID)
	require.Equal(t, "chain", resp.Model)
	require.Equal(t, "1", resp.Version)
	require.Len(t, resp.Outputs, 1)
	require.Equal(t, "Y", resp.Outputs[0].Name)
	require.Equal(t, infer.Shape{2, 4}, resp.Outputs[0].Shape)
	require.Equal(t, []int32{12, 13, 14, 15, 16, 17, 18, 19}, int32Values(resp.Outputs[0].Data))

	// The diamond has no version folder: it serves as version 1, and its
	// first-listed step waits for the two others.
	resp, err = h.m.Infer(t.Context(), ensembleRequest("diamond"))
	require.NoError(t, err)
	require.Equal(t, "1", resp.Version)
	require.Equal(t, []int32{102, 103, 104, 105, 106, 107, 108, 109}, int32Values(resp.Outputs[0].Data))

	md, err := h.m.Metadata(t.Context(), "chain", "")
	require.NoError(t, err)
	require.Equal(t, "ensemble", md.Platform)
	require.Equal(t, []infer.TensorSpec{{Name: "X", DataType: infer.Int32, Shape: infer.Shape{-1, 4}}}, md.Inputs)

	stats := map[string]ModelStats{}
	all, err := h.m.Statistics(t.Context(), "", "")
	require.NoError(t, err)
	for _, s := range all {
		stats[s.Name] = s
	}
	require.Equal(t, uint64(1), stats["chain"].Success.Count)
	require.Equal(t, uint64(2), stats["chain"].InferenceCount)
	require.Equal(t, uint64(2), stats["a"].Success.Count, "each ensemble ran a once")
	require.Equal(t, uint64(4), stats["a"].InferenceCount)
	require.Equal(t, uint64(1), stats["c"].Success.Count)
	// Modelled on qa/L0_optional_input/optional_input_test.py
	// test_ensemble_all_inputs: an ensemble reports one execution of the
	// request's batch size per request, in batch_stats too.
	require.Equal(t, uint64(1), stats["chain"].ExecutionCount)
	require.Len(t, stats["chain"].BatchStats, 1)
	require.Equal(t, uint64(2), stats["chain"].BatchStats[0].BatchSize)
	require.Equal(t, uint64(1), stats["chain"].BatchStats[0].ComputeInfer.Count)
	require.Equal(t, uint64(1), stats["chain"].ComputeInfer.Count)

	// A step failing fails the ensemble, naming the step.
	_, err = h.m.Infer(t.Context(), &infer.Request{Model: "chain", Inputs: []infer.Tensor{int32Tensor("X", []int64{1, 3}, 1, 2, 3)}})
	requireInferError(t, err, apierr.KindInvalid, ReasonInvalidShape, "input 'X': expected shape [-1,4], got [1,3]")
	all, err = h.m.Statistics(t.Context(), "chain", "1")
	require.NoError(t, err)
	require.Equal(t, uint64(1), all[0].Fail.Count)
}

func TestEnsembleFollowsItsStepModels(t *testing.T) {
	repo := ensembleRepo(t)
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"chain"}, StrictReadiness: true})
	h.start(t)
	// Loading the ensemble loaded the models it runs, and only those.
	require.Equal(t, []string{"1 READY"}, entries(h, "a"))
	require.Equal(t, []string{"1 READY"}, entries(h, "b"))
	require.Equal(t, []string{" UNKNOWN: not loaded"}, entries(h, "c"))
	require.Equal(t, []string{"1 READY"}, entries(h, "chain"))

	// Unloading a step model takes the ensemble out of service, saying why.
	require.NoError(t, h.m.Unload(t.Context(), "b", UnloadOptions{}))
	require.Equal(t, []string{"1 UNAVAILABLE: step 1 (model 'b') is not ready: model 'b' is UNAVAILABLE: unloaded"}, entries(h, "chain"))
	_, err := h.m.Infer(t.Context(), ensembleRequest("chain"))
	requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "model 'chain' version 1 is UNAVAILABLE: step 1 (model 'b') is not ready")
	require.Error(t, h.m.ModelReady(t.Context(), "chain", ""))
	require.False(t, h.m.Ready())

	// Loading it again brings the ensemble back.
	require.NoError(t, h.m.Load(t.Context(), "b", LoadOptions{}))
	require.Equal(t, []string{"1 READY"}, entries(h, "chain"))
	_, err = h.m.Infer(t.Context(), ensembleRequest("chain"))
	require.NoError(t, err)

	// A step model reloaded with tensors that no longer fit makes the
	// ensemble unavailable rather than failing each request inside.
	cfg, err := h.m.Config(t.Context(), "b", "")
	require.NoError(t, err)
	cfg.Input[0].Name = "OTHER"
	writeFiles(t, repo, map[string]string{"b/1/model.fake": fakeFile(10, func(fm *fakeModel) { fm.Inputs[0].Name = "OTHER" })})
	require.NoError(t, h.m.Load(t.Context(), "b", LoadOptions{Config: cfg}))
	require.Contains(t, entries(h, "chain")[0], "1 UNAVAILABLE: the step models do not fit the ensemble: ")
	require.Contains(t, entries(h, "chain")[0], "step 1 (model 'b'): 'IN' is not an input of model 'b'; its inputs are [OTHER]")
	writeFiles(t, repo, map[string]string{"b/1/model.fake": fakeFile(10)})
	require.NoError(t, h.m.Load(t.Context(), "b", LoadOptions{}))
	require.Equal(t, []string{"1 READY"}, entries(h, "chain"))

	// unload_dependents unloads the models the ensemble runs.
	require.NoError(t, h.m.Unload(t.Context(), "chain", UnloadOptions{UnloadDependents: true}))
	require.Equal(t, []string{" UNAVAILABLE: unloaded"}, entries(h, "a"))
	require.Equal(t, []string{" UNAVAILABLE: unloaded"}, entries(h, "b"))
	require.Equal(t, []string{" UNAVAILABLE: unloaded"}, entries(h, "chain"))
}

func TestUnloadDependentsKeepsModelsOtherEnsemblesRun(t *testing.T) {
	h := newHarness(t, Options{Repositories: []string{ensembleRepo(t)}, ControlMode: ControlExplicit, StartupModels: []string{"chain", "diamond"}})
	h.start(t)
	require.NoError(t, h.m.Unload(t.Context(), "chain", UnloadOptions{UnloadDependents: true}))
	// diamond still runs a and b.
	require.Equal(t, []string{"1 READY"}, entries(h, "a"))
	require.Equal(t, []string{"1 READY"}, entries(h, "b"))
	_, err := h.m.Infer(t.Context(), ensembleRequest("diamond"))
	require.NoError(t, err)
	require.NoError(t, h.m.Unload(t.Context(), "diamond", UnloadOptions{UnloadDependents: true}))
	for _, name := range []string{"a", "b", "c"} {
		require.Equal(t, []string{" UNAVAILABLE: unloaded"}, entries(h, name), name)
	}
}

func TestEnsembleLoadFailsOnMismatchWithLoadedSteps(t *testing.T) {
	repo := ensembleRepo(t)
	writeFiles(t, repo, map[string]string{
		"bad/config.pbtxt": strings.Replace(ensembleConfig("X:TYPE_FP32:4", "Y", step("a", "IN:X", "OUT:Y")), `"e"`, `"bad"`, 1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	got := entries(h, "bad")
	require.Len(t, got, 1)
	require.Contains(t, got[0], "1 UNAVAILABLE: ensemble_invalid: ")
	require.Contains(t, got[0], "config.pbtxt:7:21: tensor 'X': ensemble input 'X' is FP32 [-1,4] but step 0 (model 'a') input 'IN' wants INT32 [-1,4]")
}

func TestCheckValidatesEnsembles(t *testing.T) {
	repo := ensembleRepo(t)
	require.Empty(t, Check(t.Context(), []string{repo}, checkRegistry(), false))

	writeFiles(t, repo, map[string]string{
		"chain/config.pbtxt": strings.Replace(ensembleConfig("X", "Y", step("a", "IN:X", "OUT:T"), step("b", "IN:ghost", "OUT:Y"), step("nope", "IN:T", "OUT:Z")), `"e"`, `"chain"`, 1),
		"mism/config.pbtxt":  strings.Replace(ensembleConfig("X", "Y:TYPE_FP32:4", step("a", "IN:X", "OUT:T"), step("c", "IN:T,IN2:T", "OUT:Y")), `"e"`, `"mism"`, 1),
		"mism/1/.keep":       "",
	})
	var got []string
	for _, p := range Check(t.Context(), []string{repo}, checkRegistry(), false) {
		got = append(got, strings.TrimPrefix(p.Error(), repo+"/"))
	}
	require.Equal(t, []string{
		"chain/config.pbtxt:8:21: tensor 'ghost' is consumed by step 1 (model 'b') but no step produces it and it is not an ensemble input",
		"chain/config.pbtxt:9:5: step 2 (model 'nope'): model 'nope' is not in any model repository",
		"mism/config.pbtxt:5:10: ensemble output 'Y' is declared FP32 [-1,4] but step 1 (model 'c') output 'OUT' is INT32 [-1,4]",
	}, got)
}

// FuzzEnsembleGraph feeds arbitrary configurations (the repository-load
// API accepts them from clients) to the ensemble checks: they must never
// panic, and a graph they accept must run to completion, every step after
// the steps that produce its inputs.
func FuzzEnsembleGraph(f *testing.F) {
	f.Add(ensembleConfig("X", "Y", step("a", "IN:X", "OUT:T"), step("b", "IN:T", "OUT:Y")))
	f.Add(ensembleConfig("X", "Y", step("c", "IN:L,IN2:R", "OUT:Y"), step("a", "IN:X", "OUT:L"), step("b", "IN:X", "OUT:R")))
	f.Add(ensembleConfig("X", "Y", step("c", "IN:X,IN2:T2", "OUT:T1"), step("b", "IN:T1", "OUT:T2"), step("a", "IN:T1", "OUT:Y")))
	f.Add(ensembleConfig("X:TYPE_FP32:4", "Y:TYPE_INT32:8", step("f", "IN:X", "OUT:Y", " model_version: 3")))
	f.Add(`platform: "ensemble" input [ {} ] output [ {} ] ensemble_scheduling { step [ { input_map { key: "" value: "" } } ] }`)
	steps := map[string]*inferencepb.ModelConfig{}
	for name, text := range map[string]string{"a": fakeConfig(""), "b": fakeConfig(""), "c": fakeConfig(""), "f": fakeConfig("")} {
		cfg, _, err := modelconfig.Parse("config.pbtxt", []byte(text))
		if err != nil {
			f.Fatal(err)
		}
		steps[name] = cfg
	}
	f.Fuzz(func(t *testing.T, text string) {
		cfg, src, err := modelconfig.Parse("e/config.pbtxt", []byte(text))
		if err != nil {
			return
		}
		modelconfig.ApplyDefaults(cfg, "e")
		e, _ := parseEnsemble(cfg, src, func(name string) bool { return steps[name] != nil })
		if e == nil {
			return
		}
		_ = e.checkTypes(cfg, src, func(i int) *inferencepb.ModelConfig { return steps[e.steps[i].model] })
		// Run the graph the way runEnsemble does, without models.
		ready := make([]bool, len(e.tensors))
		for _, in := range e.inputs {
			ready[in] = true
		}
		done := make([]bool, len(e.steps))
		for progress := true; progress; {
			progress = false
			for i, st := range e.steps {
				if done[i] || slices.ContainsFunc(st.in, func(s stepTensor) bool { return !ready[s.tensor] }) {
					continue
				}
				done[i], progress = true, true
				for _, o := range st.out {
					ready[o.tensor] = true
				}
			}
		}
		if i := slices.Index(done, false); i >= 0 {
			t.Fatalf("accepted graph never runs step %d:\n%s", i, text)
		}
	})
}

// Modelled on qa/L0_simple_ensemble/ensemble_test.py
// test_ensemble_partial_add_sub: its first step feeds one ensemble tensor
// to both of the step model's inputs (INPUT0 and INPUT1 from INPUT1).
func TestEnsembleStepTakesOneTensorTwice(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"c/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "IN2" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
`,
		"c/1/model.fake": fakeFile(100, func(fm *fakeModel) {
			fm.Inputs = append(fm.Inputs, fakeTensor{Name: "IN2", DataType: "INT32", Shape: []int64{-1, 4}})
		}),
		"twice/config.pbtxt": strings.Replace(ensembleConfig("X", "Y", step("c", "IN:X,IN2:X", "OUT:Y")), `"e"`, `"twice"`, 1),
		"twice/1/.keep":      "",
	})
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)

	resp, err := h.m.Infer(t.Context(), ensembleRequest("twice"))
	require.NoError(t, err)
	require.Len(t, resp.Outputs, 1)
	require.Equal(t, []int32{101, 102, 103, 104, 105, 106, 107, 108}, int32Values(resp.Outputs[0].Data))
}
