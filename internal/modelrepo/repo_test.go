package modelrepo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

func TestVersionPolicies(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		want   []string // ready versions
	}{
		{name: "default is latest 1", policy: "", want: []string{"3"}},
		{name: "latest 2", policy: "version_policy: { latest: { num_versions: 2 } }", want: []string{"2", "3"}},
		{name: "all", policy: "version_policy: { all: {} }", want: []string{"1", "2", "3"}},
		{name: "specific", policy: "version_policy: { specific: { versions: [ 1, 3 ] } }", want: []string{"1", "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := t.TempDir()
			writeFiles(t, repo, map[string]string{
				"m/config.pbtxt": fakeConfig(tt.policy),
				"m/1/model.fake": fakeFile(1000),
				"m/2/model.fake": fakeFile(2000),
				"m/3/model.fake": fakeFile(3000),
				// Not versions: a leading 0, and names that are not numbers.
				"m/04/model.fake":    fakeFile(4000),
				"m/0/model.fake":     fakeFile(4000),
				"m/abc/model.fake":   fakeFile(4000),
				"m/9x/model.fake":    fakeFile(4000),
				"m/notes/readme.txt": "hello",
				"m/10":               "a file named like a version is not a version folder",
			})
			h := newHarness(t, Options{Repositories: []string{repo}})
			h.start(t)

			md, err := h.m.Metadata(t.Context(), "m", "")
			require.NoError(t, err)
			require.Equal(t, tt.want, md.Versions)
			var ready []string
			for _, e := range h.m.Index(t.Context(), true) {
				ready = append(ready, e.Version)
			}
			require.Equal(t, tt.want, ready)

			for _, v := range tt.want {
				resp, err := h.infer(t.Context(), "m", v)
				require.NoError(t, err)
				require.Equal(t, v, resp.Version)
				require.Equal(t, fmt.Sprint(servedAdd(t, resp)/1000), v, "version %s answered by another version", v)
			}
			resp, err := h.infer(t.Context(), "m", "")
			require.NoError(t, err)
			require.Equal(t, tt.want[len(tt.want)-1], resp.Version, "no version asked: the highest ready one answers")

			_, err = h.infer(t.Context(), "m", "04")
			requireInferError(t, err, apierr.KindNotFound, ReasonVersionNotFound, "model 'm' has no version '04'")
			_, err = h.infer(t.Context(), "m", "7")
			requireInferError(t, err, apierr.KindNotFound, ReasonVersionNotFound, "model 'm' has no version 7")
		})
	}
}

// version_policy specific naming a version without a folder loads the
// versions that exist and shows the missing one in the index. As in
// Triton, that is not a failed load: --exit-on-error starts and an
// explicit load succeeds (qa/L0_lifecycle/lifecycle_test.py
// test_multiple_model_repository_polling and
// test_multiple_model_repository_control: savedmodel_float32_float32_float32
// with policy specific [1, 3] and only version 1 on disk). Only when no
// named version exists does the load fail.
func TestSpecificPolicyNamingAMissingVersion(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig("version_policy: { specific: { versions: [ 1, 5 ] } }"),
		"m/1/model.fake": fakeFile(1000),
	})
	for _, mode := range []ControlMode{ControlNone, ControlExplicit} {
		t.Run(string(mode), func(t *testing.T) {
			h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: mode, ExitOnError: true})
			h.start(t)
			if mode == ControlExplicit {
				require.NoError(t, h.m.Load(t.Context(), "m", LoadOptions{}))
			}
			require.Equal(t, []string{
				"1 READY",
				"5 UNAVAILABLE: no_versions: version 5 is named by version_policy but has no folder in " + filepath.Join(repo, "m"),
			}, entries(h, "m"))
			require.Contains(t, h.logs.String(), "the version directory is not present")
		})
	}
	t.Run("no named version exists", func(t *testing.T) {
		none := t.TempDir()
		writeFiles(t, none, map[string]string{
			"m/config.pbtxt": fakeConfig("version_policy: { specific: { versions: [ 5 ] } }"),
			"m/1/model.fake": fakeFile(1000),
		})
		h := newHarness(t, Options{Repositories: []string{none}, ControlMode: ControlExplicit})
		h.start(t)
		require.Error(t, h.m.Load(t.Context(), "m", LoadOptions{}))
	})
}

func TestAutoCompleteAndStrictConfig(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		// No config at all: backend from the file name, I/O and
		// max_batch_size from the model.
		"bare/1/model.fake": fakeFile(5),
		// A partial config: only the batch size.
		"partial/config.pbtxt":  "max_batch_size: 2\n",
		"partial/1/model.fake":  fakeFile(6),
		"complete/config.pbtxt": fakeConfig(""),
		"complete/1/model.fake": fakeFile(7),
	})

	t.Run("auto-complete", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}})
		h.start(t)
		cfg, err := h.m.Config(t.Context(), "bare", "")
		require.NoError(t, err)
		require.Equal(t, "fake", cfg.GetBackend())
		require.Equal(t, "bare", cfg.GetName())
		require.Equal(t, int32(4), cfg.GetMaxBatchSize())
		require.Len(t, cfg.GetInput(), 1)
		require.Equal(t, "IN", cfg.GetInput()[0].GetName())
		require.Equal(t, []int64{4}, cfg.GetInput()[0].GetDims())

		md, err := h.m.Metadata(t.Context(), "bare", "1")
		require.NoError(t, err)
		require.Equal(t, "fake_platform", md.Platform)
		require.Equal(t, infer.Shape{-1, 4}, md.Inputs[0].Shape)

		cfg, err = h.m.Config(t.Context(), "partial", "1")
		require.NoError(t, err)
		require.Equal(t, int32(2), cfg.GetMaxBatchSize())
		require.Len(t, cfg.GetOutput(), 1)
		resp, err := h.infer(t.Context(), "partial", "")
		require.NoError(t, err)
		require.Equal(t, int32(6), servedAdd(t, resp))
	})

	t.Run("strict", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}, StrictConfig: true})
		h.start(t)
		// Triton's words first (qa/L0_lifecycle/test.sh greps the log for
		// them after test_parse_error_no_model_config).
		require.Equal(t, []string{" UNAVAILABLE: config_invalid: failed to open text file for read " + filepath.Join(repo, "bare", "config.pbtxt") + ": No such file or directory (config.pbtxt is required with --strict-model-config)"}, entries(h, "bare"))
		got := entries(h, "partial")
		require.Len(t, got, 1)
		require.Contains(t, got[0], "UNAVAILABLE: backend_unknown: config.pbtxt sets neither backend nor platform")
		require.Equal(t, []string{"1 READY"}, entries(h, "complete"))
		_, err := h.infer(t.Context(), "bare", "")
		requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "model 'bare' is UNAVAILABLE: ")
	})
}

func TestExitOnError(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"good/config.pbtxt": fakeConfig(""),
		"good/1/model.fake": fakeFile(1),
		"bad/config.pbtxt":  fakeConfig(""),
		"bad/1/model.fake":  "this is not a model",
	})
	t.Run("degrade", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
		require.NoError(t, h.m.Start(t.Context()), "one bad model must not stop the server")
		require.Equal(t, []string{"1 READY"}, entries(h, "good"))
		bad := entries(h, "bad")
		require.Len(t, bad, 1)
		require.Contains(t, bad[0], "1 UNAVAILABLE: model_unreadable: read model "+filepath.Join(repo, "bad", "1", "model.fake")+": not a fake model")
		_, err := h.infer(t.Context(), "good", "")
		require.NoError(t, err)
		require.True(t, h.m.Live())
		require.False(t, h.m.Ready(), "strict readiness: a model without a ready version makes the server unready")
	})
	t.Run("exit", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}, ExitOnError: true})
		err := h.m.Start(t.Context())
		require.ErrorContains(t, err, "model 'bad' version 1: read model")
	})
	t.Run("unreadable repository at start", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo, filepath.Join(repo, "missing")}})
		require.ErrorContains(t, h.m.Start(t.Context()), "read model repository")
	})
}

// A model in two repositories is an error for that model, as in Triton
// (modelled on qa/L0_lifecycle's test_multiple_model_repository_polling,
// where a copy of a model appearing in a second repository makes it
// unavailable): at start, and when a poll finds the second copy of a model
// that was serving.
func TestDuplicateModelAcrossRepositories(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFiles(t, a, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1)})
	writeFiles(t, b, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(2), "n/1/model.fake": fakeFile(3)})
	// The index reason is Triton's sentence, which its clients compare
	// whole (qa/L0_lifecycle/lifecycle_test.py test_model_repository_index);
	// the log names the repositories. A repository named twice is one
	// repository (test_config_override passes the same one twice).
	h := newHarness(t, Options{Repositories: []string{a, b, a + string(filepath.Separator)}})
	h.start(t)
	require.Equal(t, []string{" UNAVAILABLE: model appears in two or more repositories"}, entries(h, "m"))
	require.Contains(t, h.logs.String(), fmt.Sprintf("model 'm' is in more than one model repository (%s, %s); remove all but one", a, b))
	require.Equal(t, []string{"1 READY"}, entries(h, "n"))
}

// An explicit load that finds a model in a second repository fails and
// leaves the version serving from the first one ready, unlike a poll
// (qa/L0_lifecycle test_multiple_model_repository_control: "failed to
// load", then is_model_ready(name, "1") is still true).
func TestExplicitLoadOfDuplicateKeepsServing(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFiles(t, a, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1)})
	h := newHarness(t, Options{Repositories: []string{a, b}, ControlMode: ControlExplicit, StartupModels: []string{"m"}})
	h.start(t)
	require.Equal(t, []string{"1 READY"}, entries(h, "m"))
	writeFiles(t, b, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(2), "m/3/model.fake": fakeFile(3)})
	err := h.m.Load(t.Context(), "m", LoadOptions{})
	require.ErrorContains(t, err, "failed to load 'm'")
	require.ErrorContains(t, err, "more than one model repository")
	got := entries(h, "m")
	require.Len(t, got, 1, "version 3 is not loaded: %v", got)
	require.True(t, strings.HasPrefix(got[0], "1 READY: reload failed, the previous load keeps serving: duplicate_model"), "the version that served keeps serving: %v", got)
	resp, err := h.infer(t.Context(), "m", "1")
	require.NoError(t, err)
	require.Equal(t, "1", resp.Version)
	require.True(t, h.m.Ready())
}

func TestExplicitMode(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"a/config.pbtxt": fakeConfig(""),
		"a/1/model.fake": fakeFile(1),
		"b/config.pbtxt": fakeConfig(""),
		"b/1/model.fake": fakeFile(2),
	})

	t.Run("load-model list, load and unload", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"a"}, StrictReadiness: true})
		h.start(t)
		require.Equal(t, []string{"1 READY"}, entries(h, "a"))
		require.Equal(t, []string{" UNKNOWN: not loaded"}, entries(h, "b"))
		require.True(t, h.m.Ready(), "models nobody asked for do not make the server unready")
		_, err := h.infer(t.Context(), "b", "")
		requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'b' is not found")

		require.NoError(t, h.m.Load(t.Context(), "b", LoadOptions{}))
		resp, err := h.infer(t.Context(), "b", "")
		require.NoError(t, err)
		require.Equal(t, int32(2), servedAdd(t, resp))

		require.NoError(t, h.m.Unload(t.Context(), "a", UnloadOptions{}))
		require.Equal(t, []string{" UNAVAILABLE: unloaded"}, entries(h, "a"))
		_, err = h.infer(t.Context(), "a", "")
		requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "model 'a' is UNAVAILABLE: unloaded")
		require.True(t, h.m.Ready(), "an unloaded model does not make the server unready")
		require.Empty(t, h.m.Index(t.Context(), true)[1:], "only b is ready")

		err = h.m.Load(t.Context(), "nope", LoadOptions{})
		requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "model 'nope' not found in any model repository")
		err = h.m.Load(t.Context(), "../a", LoadOptions{})
		requireInferError(t, err, apierr.KindInvalid, ReasonInvalidLoadRequest, "invalid model name")
		err = h.m.Load(t.Context(), "a", LoadOptions{Files: map[string][]byte{"1/model.fake": []byte(fakeFile(9))}})
		requireInferError(t, err, apierr.KindInvalid, ReasonInvalidLoadRequest, "file overrides need a config override")
		// Unloading a model in no repository does nothing, as Triton's
		// unload_model answers success for it (issue 25 item 5).
		require.NoError(t, h.m.Unload(t.Context(), "nope", UnloadOptions{}))
	})

	t.Run("star loads all", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"*"}})
		h.start(t)
		require.Len(t, h.m.Index(t.Context(), true), 2)
	})

	for _, mode := range []ControlMode{ControlNone, ControlPoll} {
		t.Run("refused in mode "+string(mode), func(t *testing.T) {
			h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: mode})
			h.start(t)
			for _, err := range []error{
				h.m.Load(t.Context(), "a", LoadOptions{}),
				h.m.Unload(t.Context(), "a", UnloadOptions{}),
			} {
				requireInferError(t, err, apierr.KindUnsupported, ReasonControlDisabled, "explicit model load / unload is not allowed")
				// Triton's words in both modes, which qa/L0_http
				// python_http_aio_test.py test_load_model looks for in
				// mode none.
				require.ErrorContains(t, err, "explicit model load / unload is not allowed if polling is enabled")
			}
			require.Len(t, h.m.Index(t.Context(), true), 2, "none and poll load everything at start")
		})
	}

	t.Run("file override", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit})
		h.start(t)
		cfg, err := h.m.Config(t.Context(), "a", "")
		requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'a' is not found")
		require.Nil(t, cfg)
		require.NoError(t, h.m.Load(t.Context(), "a", LoadOptions{}))
		cfg, err = h.m.Config(t.Context(), "a", "")
		require.NoError(t, err)
		require.NoError(t, h.m.Load(t.Context(), "a", LoadOptions{
			Config: cfg,
			Files:  map[string][]byte{"3/model.fake": []byte(fakeFile(333))},
		}))
		resp, err := h.infer(t.Context(), "a", "")
		require.NoError(t, err)
		require.Equal(t, "3", resp.Version)
		require.Equal(t, int32(333), servedAdd(t, resp))
		tmp := h.m.lookup("a").tmpDirs
		require.Len(t, tmp, 1)
		require.DirExists(t, tmp[0])
		require.NoError(t, h.m.Unload(t.Context(), "a", UnloadOptions{}))
		require.NoDirExists(t, tmp[0], "the override folder goes with the unload")

		// A file at the folder's top is written there, as Triton does.
		require.NoError(t, h.m.Load(t.Context(), "a", LoadOptions{
			Config: cfg,
			Files:  map[string][]byte{"3/model.fake": []byte(fakeFile(4)), "labels.txt": []byte("x\n")},
		}))
		tmp = h.m.lookup("a").tmpDirs
		require.FileExists(t, filepath.Join(tmp[len(tmp)-1], "labels.txt"))

		// Refusals start with Triton's "failed to load" and name the file
		// as the client did, never the server's temporary folder
		// (qa/L0_lifecycle test_file_override_security; a 256-character
		// file name is too long for the file system).
		long := strings.Repeat("n", 256)
		for rel, want := range map[string]string{
			"3/" + long:       "failed to load 'a': write file override 'file:3/" + long[:62] + "...': file name too long",
			"../escape/x":     "failed to load 'a': file override 'file:../escape/x' is not a relative path inside the model folder",
			"/abs/model.fake": "failed to load 'a': file override 'file:/abs/model.fake' is not a relative path",
		} {
			err := h.m.Load(t.Context(), "a", LoadOptions{Config: cfg, Files: map[string][]byte{rel: []byte(fakeFile(5))}})
			requireInferError(t, err, apierr.KindInvalid, ReasonInvalidLoadRequest, want)
			require.NotContains(t, err.Error(), os.TempDir(), "the answer shows no server path")
			require.NotContains(t, err.Error(), "sluice-model-")
		}
		resp, err = h.infer(t.Context(), "a", "")
		require.NoError(t, err)
		require.Equal(t, int32(4), servedAdd(t, resp), "a refused load leaves the last one serving")
	})
}

func TestOptionsRejected(t *testing.T) {
	for name, opts := range map[string]Options{
		"no repository":         {},
		"unknown mode":          {Repositories: []string{"x"}, ControlMode: "sometimes"},
		"star with other names": {Repositories: []string{"x"}, ControlMode: ControlExplicit, StartupModels: []string{"*", "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(opts, &backend.Registry{}, nil, nil)
			require.Error(t, err)
		})
	}
}

func TestStatisticsAndMetadata(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1)})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	for range 3 {
		_, err := h.infer(t.Context(), "m", "")
		require.NoError(t, err)
	}
	_, err := h.m.Infer(t.Context(), &infer.Request{Model: "m", Inputs: []infer.Tensor{int32Tensor("IN", []int64{2, 4}, 1, 2, 3, 4, 5, 6, 7, 8)}})
	require.NoError(t, err)
	_, err = h.m.Infer(t.Context(), &infer.Request{Model: "m"})
	require.Error(t, err)

	stats, err := h.m.Statistics(t.Context(), "m", "")
	require.NoError(t, err)
	require.Len(t, stats, 1)
	s := stats[0]
	require.Equal(t, "m", s.Name)
	require.Equal(t, "1", s.Version)
	require.Equal(t, uint64(5), s.InferenceCount, "a batch of 2 counts 2")
	require.Equal(t, uint64(4), s.ExecutionCount)
	require.Equal(t, uint64(4), s.Success.Count)
	require.Equal(t, uint64(1), s.Fail.Count)
	require.Equal(t, uint64(4), s.ComputeInfer.Count)
	require.NotZero(t, s.LastInference)
	require.Len(t, s.BatchStats, 2)
	require.Equal(t, uint64(1), s.BatchStats[0].BatchSize)
	require.Equal(t, uint64(3), s.BatchStats[0].ComputeInfer.Count)
	require.Equal(t, uint64(2), s.BatchStats[1].BatchSize)

	all, err := h.m.Statistics(t.Context(), "", "")
	require.NoError(t, err)
	require.Len(t, all, 1)
	_, err = h.m.Statistics(t.Context(), "zzz", "")
	requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'zzz' is not found")

	// The statistics of a version that does not serve answer with Triton's
	// words (qa/L0_server_status/server_status_test.py
	// test_model_versions_added), then Sluice's reason.
	_, err = h.m.Statistics(t.Context(), "m", "2")
	requireInferError(t, err, apierr.KindNotFound, ReasonVersionNotFound, "requested model version is not available for model 'm': Request for unknown model: 'm' version 2 is not found")

	require.NoError(t, h.m.ModelReady(t.Context(), "m", "1"))
	requireInferError(t, h.m.ModelReady(t.Context(), "m", "2"), apierr.KindNotFound, ReasonVersionNotFound, "model 'm' has no version 2")
	requireInferError(t, h.m.ModelReady(t.Context(), "x", ""), apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'x' is not found")
}

func TestCloseDrainsInFlightRequests(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(""),
		"m/1/model.fake": fakeFile(1, func(fm *fakeModel) { fm.ExecDelayMS = 150 }),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, StrictReadiness: true})
	h.start(t)
	require.True(t, h.m.Ready())
	started := h.fake.executions.Load()
	errc := make(chan error, 1)
	go func() {
		_, err := h.infer(context.Background(), "m", "")
		errc <- err
	}()
	require.Eventually(t, func() bool { return h.fake.executions.Load() > started }, 5e9, 1e6)
	require.NoError(t, h.m.Close(t.Context()))
	require.NoError(t, <-errc, "a request in flight at Close finishes")
	require.Equal(t, h.fake.loads.Load(), h.fake.closes.Load())
	require.False(t, h.m.Live())
	require.False(t, h.m.Ready())
	_, err := h.infer(t.Context(), "m", "")
	requireInferError(t, err, apierr.KindUnavailable, ReasonShuttingDown, "shutting down")
}

func TestInstanceGroupCount(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig("instance_group [ { kind: KIND_CPU count: 2 }, { count: 1 } ]"),
		"m/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"m"}})
	h.start(t)
	require.Equal(t, int64(3), h.fake.loads.Load())
	require.NoError(t, h.m.Load(t.Context(), "m", LoadOptions{})) // a reload
	require.Equal(t, int64(6), h.fake.loads.Load())
	require.Equal(t, int64(3), h.fake.executions.Load(), "each new instance is warmed up once on reload")
}

func TestWarmupFromConfig(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(`version_policy: { all: {} }
model_warmup [
  { name: "zeros" batch_size: 2 count: 3 inputs { key: "IN" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } } },
  { name: "random" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_INT32 dims: [ 4 ] random_data: true } } },
  { name: "file" batch_size: 2 inputs { key: "IN" value: { data_type: TYPE_INT32 dims: [ 4 ] input_data_file: "in.bin" } } }
]`),
		"m/1/model.fake":    fakeFile(1),
		"m/1/warmup/in.bin": string(int32Tensor("IN", nil, 1, 2, 3, 4, 5, 6, 7, 8).Data),
		"m/2/model.fake":    fakeFile(2),
		"m/2/warmup/in.bin": "short",
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	got := entries(h, "m")
	require.Len(t, got, 2)
	require.Equal(t, "1 READY", got[0])
	require.Contains(t, got[1], "2 UNAVAILABLE: warmup_failed: warm-up sample 'file': input 'IN': input_data_file in.bin")
	require.Equal(t, int64(5), h.fake.executions.Load(), "v1: 3 zero samples, 1 random and 1 from the file; v2: none, its file is refused before any run")
}

// Triton runs no warm-up unless the config asks for one, so Sluice's own
// automatic all-zero request runs only where it checks something before
// traffic moves: a reload, where a version serves already. A first load
// runs none, so a client's load call is as quick as Triton's
// (qa/L0_lifecycle test_grpc_load_model allows 5 s; issue 25 item 9). The
// automatic request must never make a model unavailable (issue 16 item
// 7): a failure of it is a warning, and a model with BYTES inputs (where
// empty strings are no valid input, e.g. Triton's simple_string with its
// string-to-int Cast) gets none at all.
func TestAutoWarmupOnlyOnReloadNeverFailsALoad(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"failing/config.pbtxt": strings.Replace(fakeConfig(""), `max_batch_size: 8`, `name: "failing"
max_batch_size: 8`, 1),
		"failing/1/model.fake": fakeFile(1, func(fm *fakeModel) { fm.ExecError = "Cast: cannot parse ''" }),
		"strings/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 2 ] } ]
`,
		"strings/1/model.fake": fakeFile(0, func(fm *fakeModel) {
			fm.Inputs[0] = fakeTensor{Name: "IN", DataType: "BYTES", Shape: []int64{-1, 2}}
			fm.Outputs[0] = fakeTensor{Name: "OUT", DataType: "BYTES", Shape: []int64{-1, 2}}
		}),
	})
	const warning = "automatic warm-up failed; the version serves anyway (add model_warmup to the config to make warm-up a load condition)"
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"failing", "strings"}})
	h.start(t)
	require.Equal(t, []string{"1 READY"}, entries(h, "failing"))
	require.Equal(t, []string{"1 READY"}, entries(h, "strings"))
	require.Zero(t, h.fake.executions.Load(), "a first load runs no automatic warm-up")

	for _, name := range []string{"failing", "strings"} {
		require.NoError(t, h.m.Load(t.Context(), name, LoadOptions{}))
	}
	require.Equal(t, []string{"1 READY"}, entries(h, "failing"))
	require.Equal(t, []string{"1 READY"}, entries(h, "strings"))
	require.Equal(t, int64(1), h.fake.executions.Load(), "one automatic warm-up run on reload (the failing one); none for the BYTES model")
	warns := h.logs.logLines(t, warning)
	require.Len(t, warns, 1)
	require.Equal(t, "WARN", warns[0]["level"])
	require.Equal(t, "failing", warns[0]["model"])
	require.Contains(t, warns[0]["error"], "Cast: cannot parse ''")
	require.True(t, h.m.Ready(), "strict readiness: every model is ready")

	data := infer.AppendBytesElement(infer.AppendBytesElement(nil, []byte("7")), []byte("35"))
	resp, err := h.m.Infer(t.Context(), &infer.Request{Model: "strings", Inputs: []infer.Tensor{{Name: "IN", DataType: infer.Bytes, Shape: infer.Shape{1, 2}, Data: data}}})
	require.NoError(t, err)
	require.Equal(t, data, resp.Outputs[0].Data)
}

// Auto-complete shows in the config API what the model runs with, as
// Triton's --strict-model-config=false does (modelled on
// qa/L0_model_config's autofill cases): platform, backend,
// default_model_filename and, when auto-complete chose max_batch_size,
// dynamic_batching. The resolved backend shows even without it.
func TestConfigShowsCompletion(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"bare/1/model.fake":       fakeFile(1),
		"byplatform/config.pbtxt": strings.Replace(fakeConfig(""), `backend: "fake"`, `platform: "fake_platform"`, 1),
		"byplatform/1/model.fake": fakeFile(2),
	})
	t.Run("auto-complete", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}})
		h.start(t)
		cfg, err := h.m.Config(t.Context(), "bare", "")
		require.NoError(t, err)
		require.Equal(t, "fake_platform", cfg.GetPlatform())
		require.Equal(t, "fake", cfg.GetBackend())
		require.Equal(t, "model.fake", cfg.GetDefaultModelFilename())
		require.Equal(t, int32(4), cfg.GetMaxBatchSize())
		require.NotNil(t, cfg.GetDynamicBatching(), "the batch size auto-complete chose comes with the dynamic batcher")

		cfg, err = h.m.Config(t.Context(), "byplatform", "")
		require.NoError(t, err)
		require.Equal(t, "fake", cfg.GetBackend(), "the backend the platform resolved to")
		require.Nil(t, cfg.GetDynamicBatching(), "the config set max_batch_size: no batcher is added")
	})
	t.Run("strict", func(t *testing.T) {
		h := newHarness(t, Options{Repositories: []string{repo}, StrictConfig: true})
		h.start(t)
		cfg, err := h.m.Config(t.Context(), "byplatform", "")
		require.NoError(t, err)
		require.Equal(t, "fake", cfg.GetBackend())
		require.Empty(t, cfg.GetDefaultModelFilename(), "nothing is auto-completed")
	})
}

func TestDuplicateModelFoundByPoll(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFiles(t, a, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1)})
	h := newHarness(t, Options{Repositories: []string{a, b}, ControlMode: ControlPoll, StrictReadiness: true})
	h.start(t)
	require.Equal(t, []string{"1 READY"}, entries(h, "m"))

	writeFiles(t, b, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(2)})
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context()) // a change is applied once it is stable
	require.Equal(t, []string{" UNAVAILABLE: model appears in two or more repositories"}, entries(h, "m"))
	_, err := h.infer(t.Context(), "m", "")
	requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "model appears in two or more repositories")
	require.True(t, h.m.Ready(), "as in Triton, which unloads the model, it does not hold strict readiness back")

	require.NoError(t, os.RemoveAll(filepath.Join(b, "m")))
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	require.Equal(t, []string{"1 READY"}, entries(h, "m"), "serves again once one copy is gone")
}

// Folders that are not versions are skipped and the log says why in
// Triton's words (qa/L0_lifecycle/test.sh greps them after
// test_parse_ignore_zero_prefixed_version and
// test_parse_ignore_non_intergral_version).
func TestIgnoredVersionFoldersAreLogged(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt":     fakeConfig("version_policy: { all { } }"),
		"m/1/model.fake":     fakeFile(1000),
		"m/003/model.fake":   fakeFile(3000),
		"m/abc/model.fake":   fakeFile(4000),
		"m/.git/HEAD":        "x",
		"m/notes.txt":        "a file, not a folder",
		"m/2.5/model.fake":   fakeFile(5000),
		"m/-1/model.fake":    fakeFile(6000),
		"m/0001x/model.fake": fakeFile(7000),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	require.Equal(t, []string{"1 READY"}, entries(h, "m"))
	logs := h.logs.String()
	for _, want := range []string{
		"ignore version directory '003' which contains leading zeros in its directory name",
		"ignore version directory 'abc' which fails to convert to integral number",
		"ignore version directory '2.5' which fails to convert to integral number",
		"ignore version directory '-1' which fails to convert to integral number",
		"ignore version directory '0001x' which fails to convert to integral number",
	} {
		require.Contains(t, logs, want)
	}
	require.NotContains(t, logs, "'.git'")
	require.NotContains(t, logs, "notes.txt")
}

// The models of qa/L0_batch_input (allow_ragged_batch inputs, batch_input
// tensors) get no automatic warm-up: only the batcher can form their
// inputs, and the zero sample failed with a warning at every load.
func TestAutoWarmupSkipsRaggedModels(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"ragged/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
`,
		"ragged/1/model.fake": fakeFile(0, func(fm *fakeModel) {
			fm.Inputs[0] = fakeTensor{Name: "IN", DataType: "INT32", Shape: []int64{-1}}
			fm.Outputs[0] = fakeTensor{Name: "OUT", DataType: "INT32", Shape: []int64{-1, -1}}
		}),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"ragged"}})
	h.start(t)
	require.NoError(t, h.m.Load(t.Context(), "ragged", LoadOptions{})) // a reload
	require.Equal(t, []string{"1 READY"}, entries(h, "ragged"))
	require.Zero(t, h.fake.executions.Load(), "no automatic warm-up run")
	require.Empty(t, h.logs.logLines(t, "automatic warm-up failed; the version serves anyway (add model_warmup to the config to make warm-up a load condition)"))
}
