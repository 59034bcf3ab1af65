package modelrepo

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// specific returns cfg with version_policy specific{v}.
func specific(cfg *inferencepb.ModelConfig, v int64) *inferencepb.ModelConfig {
	c := proto.CloneOf(cfg)
	c.VersionPolicy = &inferencepb.ModelVersionPolicy{PolicyChoice: &inferencepb.ModelVersionPolicy_Specific_{
		Specific: &inferencepb.ModelVersionPolicy_Specific{Versions: []int64{v}},
	}}
	return c
}

func TestReloadUnderLoadHasZeroDowntime(t *testing.T) {
	repo := t.TempDir()
	slow := func(fm *fakeModel) { fm.ExecDelayMS = 1; fm.LoadDelayMS = 30 }
	writeFiles(t, repo, map[string]string{
		"parcel_eta/config.pbtxt": fakeConfig("instance_group [ { count: 2 } ]"),
		"parcel_eta/1/model.fake": fakeFile(1000, slow),
		"parcel_eta/2/model.fake": fakeFile(2000, slow),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"parcel_eta"}})
	h.start(t)
	base, err := h.m.Config(t.Context(), "parcel_eta", "")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var seen [3]atomic.Int64
	var firstErr atomic.Value
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := h.infer(context.Background(), "parcel_eta", "")
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				v, _ := strconv.Atoi(resp.Version)
				add := servedAdd(t, resp)
				if v < 1 || v > 2 || add != int32(1000*v) {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("version %s answered with +%d", resp.Version, add))
					continue
				}
				seen[v].Add(1)
				ok.Add(1)
			}
		})
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	swaps := 0
	for want := int64(1); time.Now().Before(deadline) || swaps < 2; want = 3 - want {
		require.NoError(t, h.m.Load(t.Context(), "parcel_eta", LoadOptions{Config: specific(base, want)}))
		// The swap is done: requests from now on get the new version.
		resp, err := h.infer(t.Context(), "parcel_eta", "")
		require.NoError(t, err)
		require.Equal(t, strconv.FormatInt(want, 10), resp.Version)
		swaps++
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	require.Zero(t, failed.Load(), "failed requests during reloads, first: %v", firstErr.Load())
	require.Positive(t, seen[1].Load())
	require.Positive(t, seen[2].Load())
	t.Logf("%d swaps, %d requests (v1 %d, v2 %d)", swaps, ok.Load(), seen[1].Load(), seen[2].Load())
	// Each swap retired the other version: only the live instances remain.
	require.Equal(t, int64(2), h.fake.loads.Load()-h.fake.closes.Load())
}

func TestBrokenNewVersionKeepsOldServing(t *testing.T) {
	goodSum := func(content string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(content))) }
	tests := []struct {
		name    string
		v3      map[string]string // files added to the model folder
		cause   string            // load failure metric label
		reason  string            // the Load API's reason
		message string            // in the index reason and the Load error
	}{
		{
			name:    "bad config",
			v3:      map[string]string{"m/config.pbtxt": fakeConfig("instance_grup [ { count: 2 } ]\n"), "m/3/model.fake": fakeFile(3000)},
			cause:   causeConfig,
			reason:  ReasonLoadFailed,
			message: "config.pbtxt:5:1: unknown field \"instance_grup\"",
		},
		{
			name:    "corrupt model file",
			v3:      map[string]string{"m/3/model.fake": `{"inputs": [`},
			cause:   causeUnreadable,
			reason:  ReasonLoadFailed,
			message: "read model ",
		},
		{
			name: "checksum mismatch",
			v3: map[string]string{
				"m/3/model.fake": fakeFile(3000),
				"m/3/SHA256SUMS": goodSum("something else") + "  model.fake\n",
			},
			cause:   causeChecksum,
			reason:  ReasonChecksumMismatch,
			message: "checksum mismatch: file 'model.fake' has sha256 ",
		},
		{
			name:    "signature mismatch",
			v3:      map[string]string{"m/3/model.fake": fakeFile(3000, func(fm *fakeModel) { fm.Inputs[0].Shape = []int64{-1, 5} })},
			cause:   causeSignature,
			reason:  ReasonLoadFailed,
			message: "input 'IN': config dims [4] do not match the model's [-1,5]",
		},
		{
			// An explicit model_warmup is a load condition (the automatic
			// one is not: TestAutoWarmupNeverFailsALoad).
			name: "warm-up failure",
			v3: map[string]string{
				"m/config.pbtxt": fakeConfig(`model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } } } ]`),
				"m/3/model.fake": fakeFile(3000, func(fm *fakeModel) { fm.ExecError = "kaboom" }),
			},
			cause:   causeWarmup,
			reason:  ReasonLoadFailed,
			message: "warm-up sample 'w': kaboom",
		},
		{
			name:    "instance failure",
			v3:      map[string]string{"m/3/model.fake": fakeFile(3000, func(fm *fakeModel) { fm.LoadError = "out of memory" })},
			cause:   causeInstance,
			reason:  ReasonLoadFailed,
			message: "create instance: out of memory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := t.TempDir()
			v2 := fakeFile(2000)
			writeFiles(t, repo, map[string]string{
				"m/config.pbtxt": fakeConfig(""),
				"m/1/model.fake": fakeFile(1000),
				"m/2/model.fake": v2,
				"m/2/SHA256SUMS": goodSum(v2) + "  model.fake\n",
			})
			h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"*"}})
			h.start(t)
			require.Equal(t, []string{"2 READY"}, entries(h, "m"))

			writeFiles(t, repo, tt.v3)
			err := h.m.Load(t.Context(), "m", LoadOptions{})
			requireInferError(t, err, apierr.KindInvalid, tt.reason, tt.message)

			resp, err := h.infer(t.Context(), "m", "")
			require.NoError(t, err, "v2 keeps serving")
			require.Equal(t, "2", resp.Version)
			require.Equal(t, int32(2000), servedAdd(t, resp))

			got := entries(h, "m")
			require.Len(t, got, 2)
			require.Equal(t, "2 READY", got[0])
			require.Contains(t, got[1], "3 UNAVAILABLE: ")
			require.Contains(t, got[1], tt.message)
			_, err = h.infer(t.Context(), "m", "3")
			requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "model 'm' version 3 is UNAVAILABLE: ")

			require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.loadFailures.WithLabelValues("m", tt.cause)), 0)
			require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.state.WithLabelValues("m", "2", "READY")), 0)
			require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.state.WithLabelValues("m", "3", "UNAVAILABLE")), 0)
			warns := h.logs.logLines(t, "model load failed")
			require.Len(t, warns, 1)
			require.Equal(t, "WARN", warns[0]["level"])
			require.Contains(t, warns[0]["err"], tt.message)
		})
	}
}

func TestFailedReloadOfServingVersionKeepsIt(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1000)})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlPoll})
	h.start(t)
	writeFiles(t, repo, map[string]string{"m/1/model.fake": "garbage"})
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	got := entries(h, "m")
	require.Len(t, got, 1)
	require.Contains(t, got[0], "1 READY: reload failed, the previous load keeps serving: model_unreadable: read model ")
	resp, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, int32(1000), servedAdd(t, resp))
}

func TestProvenance(t *testing.T) {
	const commit = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
	prov := `{"version": "2.1.0-a1b2c3d", "git_commit": "` + commit + `", "trained_on": "2026-08-01"}`
	files := map[string]string{
		"parcel_eta/config.pbtxt":           fakeConfig(""),
		"parcel_eta/2/model.fake":           fakeFile(2),
		"parcel_eta/2/model_config.json":    prov,
		"plain/config.pbtxt":                fakeConfig(""),
		"plain/1/model.fake":                fakeFile(1),
		"bad_json/config.pbtxt":             fakeConfig(""),
		"bad_json/1/model.fake":             fakeFile(1),
		"bad_json/1/model_config.json":      "{\n  \"version\": 2\n}",
		"pinned/config.pbtxt":               fakeConfig(""),
		"pinned/1/model.fake":               fakeFile(1),
		"pinned/1/model_config.json":        `{"git_commit": "ffff0000"}`,
		"pinned/expected_git_commit":        "a1b2c3d\n",
		"pinned_ok/config.pbtxt":            fakeConfig(""),
		"pinned_ok/1/model.fake":            fakeFile(1),
		"pinned_ok/1/model_config.json":     `{"git_commit": "` + commit + `"}`,
		"pinned_ok/expected_git_commit":     "A1B2C3D",
		"pinned_absent/config.pbtxt":        fakeConfig(""),
		"pinned_absent/1/model.fake":        fakeFile(1),
		"pinned_absent/expected_git_commit": commit,
	}

	t.Run("label, pin and bad file", func(t *testing.T) {
		repo := t.TempDir()
		writeFiles(t, repo, files)
		h := newHarness(t, Options{Repositories: []string{repo}})
		h.start(t)
		md, err := h.m.Metadata(t.Context(), "parcel_eta", "")
		require.NoError(t, err)
		require.Equal(t, "2.1.0-a1b2c3d", md.Label)
		require.Equal(t, commit, md.GitCommit)
		md, err = h.m.Metadata(t.Context(), "plain", "1")
		require.NoError(t, err)
		require.Empty(t, md.Label)

		var found bool
		for _, rec := range h.logs.logLines(t, "loading model") {
			if rec["model"] == "parcel_eta" {
				found = true
				require.Equal(t, "2", rec["version"])
				require.Equal(t, "2.1.0-a1b2c3d", rec["version_label"])
				require.Equal(t, "INFO", rec["level"])
			}
		}
		require.True(t, found, "a 'loading model' log line for parcel_eta")
		require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.info.WithLabelValues("parcel_eta", "2", "2.1.0-a1b2c3d", commit)), 0)

		require.Equal(t, []string{"1 UNAVAILABLE: provenance_invalid: " + filepath.Join(repo, "bad_json", "1", "model_config.json") + ":2:15: version must be a string, not a JSON number"}, entries(h, "bad_json"))
		require.Equal(t, []string{"1 UNAVAILABLE: model_git_mismatch: git commit mismatch: expected a1b2c3d, version has ffff0000"}, entries(h, "pinned"))
		require.Equal(t, []string{"1 READY"}, entries(h, "pinned_ok"), "an abbreviated pin matches, case aside")
		require.Equal(t, []string{"1 UNAVAILABLE: model_git_mismatch: git commit mismatch: expected " + commit + ", version has none (model_config.json names no git_commit)"}, entries(h, "pinned_absent"))
		require.InDelta(t, 2, testutil.ToFloat64(h.m.metrics.loadFailures.WithLabelValues("pinned", causeGitMismatch))+
			testutil.ToFloat64(h.m.metrics.loadFailures.WithLabelValues("pinned_absent", causeGitMismatch)), 0)
	})

	t.Run("expected commit option", func(t *testing.T) {
		repo := t.TempDir()
		writeFiles(t, repo, files)
		h := newHarness(t, Options{
			Repositories: []string{repo}, ControlMode: ControlExplicit,
			ExpectedCommits: map[string]string{"parcel_eta": "0123456789abcdef", "pinned": "ffff0000"},
		})
		h.start(t)
		err := h.m.Load(t.Context(), "parcel_eta", LoadOptions{})
		requireInferError(t, err, apierr.KindInvalid, ReasonGitMismatch, "git commit mismatch: expected 0123456789abcdef, version has "+commit)
		require.NoError(t, h.m.Load(t.Context(), "pinned", LoadOptions{}), "the option wins over the pin file")
	})
}

func TestPollPicksUpContentChangeWithUnchangedMtime(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1000)})
	path := filepath.Join(repo, "m", "1", "model.fake")
	old := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, os.Chtimes(path, old, old))
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlPoll})
	h.start(t)

	// Same size, same mtime, different content: what NFS attribute caching
	// or a careful copy tool can produce.
	writeFiles(t, repo, map[string]string{"m/1/model.fake": fakeFile(1001)})
	require.NoError(t, os.Chtimes(path, old, old))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, old, fi.ModTime().UTC())

	h.m.pollOnce(t.Context())
	resp, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, int32(1000), servedAdd(t, resp), "one poll only notes the change")
	h.m.pollOnce(t.Context())
	resp, err = h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, int32(1001), servedAdd(t, resp), "the stable change is loaded")
	loads := h.fake.loads.Load()
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	require.Equal(t, loads, h.fake.loads.Load(), "unchanged content is not reloaded")
}

func TestPollWaitsForHalfWrittenVersion(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt":    fakeConfig(""),
		"m/1/model.fake":    fakeFile(1000),
		"keep/1/model.fake": fakeFile(7),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlPoll})
	h.start(t)
	full := fakeFile(2000)

	// A copy in progress: each poll sees more of the file.
	for i, part := range []string{full[:5], full[:20]} {
		writeFiles(t, repo, map[string]string{"m/2/model.fake": part})
		h.m.pollOnce(t.Context())
		require.Equal(t, []string{"1 READY"}, entries(h, "m"), "poll %d loaded a version still being written", i)
	}
	writeFiles(t, repo, map[string]string{"m/2/model.fake": full})
	h.m.pollOnce(t.Context())
	require.Equal(t, []string{"1 READY"}, entries(h, "m"))
	h.m.pollOnce(t.Context())
	require.Equal(t, []string{"2 READY"}, entries(h, "m"), "stable for two polls: loaded, and v1 retired by latest{1}")

	// A new model folder loads; a removed one unloads.
	writeFiles(t, repo, map[string]string{"n/1/model.fake": fakeFile(5)})
	h.m.pollOnce(t.Context())
	require.Empty(t, entries(h, "n"))
	h.m.pollOnce(t.Context())
	require.Equal(t, []string{"1 READY"}, entries(h, "n"))
	require.NoError(t, os.RemoveAll(filepath.Join(repo, "n")))
	h.m.pollOnce(t.Context())
	require.Empty(t, entries(h, "n"))
	// As in Triton, the removed model is unloaded, not unknown
	// (qa/L0_lifecycle/lifecycle_test.py test_dynamic_model_load_unload).
	_, err := h.infer(t.Context(), "n", "")
	requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'n' has no available versions: model 'n' is UNAVAILABLE: unloaded")
	_, err = h.infer(t.Context(), "never", "")
	requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'never' is not found")
	require.Equal(t, []string{"1 READY"}, entries(h, "keep"))

	// Back in the repository, it loads and serves again.
	writeFiles(t, repo, map[string]string{"n/1/model.fake": fakeFile(5)})
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	require.Equal(t, []string{"1 READY"}, entries(h, "n"))
	_, err = h.infer(t.Context(), "n", "")
	require.NoError(t, err)

	// A version whose folder left is unloaded too, not unknown
	// (test_dynamic_version_load_unload: "version 1 is not at ready state").
	writeFiles(t, repo, map[string]string{
		"all/config.pbtxt": fakeConfig("version_policy: { all { } }"),
		"all/1/model.fake": fakeFile(1000),
		"all/2/model.fake": fakeFile(2000),
	})
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	require.Equal(t, []string{"1 READY", "2 READY"}, entries(h, "all"))
	require.NoError(t, os.RemoveAll(filepath.Join(repo, "all", "1")))
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	require.Equal(t, []string{"2 READY"}, entries(h, "all"))
	_, err = h.infer(t.Context(), "all", "1")
	requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "Request for unknown model: 'all' version 1 is not at ready state: model 'all' version 1 is UNAVAILABLE: unloaded")
	_, err = h.infer(t.Context(), "all", "7")
	requireInferError(t, err, apierr.KindNotFound, ReasonVersionNotFound, "'all' version 7 is not found")
}

func TestUnreadableRepositoryKeepsServing(t *testing.T) {
	for _, how := range []string{"renamed away", "replaced by a file"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			repo := filepath.Join(root, "repo")
			writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1000)})
			h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlPoll, StrictReadiness: true})
			h.start(t)
			up := h.m.metrics.repoUp.WithLabelValues(repo)
			require.InDelta(t, 1, testutil.ToFloat64(up), 0)
			loads := h.fake.loads.Load()

			away := filepath.Join(root, "away")
			require.NoError(t, os.Rename(repo, away))
			if how == "replaced by a file" {
				require.NoError(t, os.WriteFile(repo, []byte("not a folder"), 0o644))
			}
			for range 3 {
				h.m.pollOnce(t.Context())
			}
			resp, err := h.infer(t.Context(), "m", "")
			require.NoError(t, err, "models keep serving while the repository is unreadable")
			require.Equal(t, int32(1000), servedAdd(t, resp))
			require.True(t, h.m.Ready())
			got := entries(h, "m")
			require.Len(t, got, 1)
			require.Contains(t, got[0], "1 READY: repository "+repo+" unreadable: ")
			require.InDelta(t, 0, testutil.ToFloat64(up), 0)
			require.InDelta(t, 3, testutil.ToFloat64(h.m.metrics.repoErrors.WithLabelValues(repo)), 0)
			warns := h.logs.logLines(t, "model repository unreadable; its models keep serving")
			require.Len(t, warns, 1, "logged once per outage")
			require.Equal(t, repo, warns[0]["repository"])

			require.NoError(t, os.RemoveAll(repo))
			require.NoError(t, os.Rename(away, repo))
			h.m.pollOnce(t.Context())
			require.Equal(t, []string{"1 READY"}, entries(h, "m"), "the error clears")
			require.InDelta(t, 1, testutil.ToFloat64(up), 0)
			require.Equal(t, loads, h.fake.loads.Load(), "nothing was unloaded or reloaded")

			// Polling works again.
			writeFiles(t, repo, map[string]string{"m/1/model.fake": fakeFile(1001)})
			h.m.pollOnce(t.Context())
			h.m.pollOnce(t.Context())
			resp, err = h.infer(t.Context(), "m", "")
			require.NoError(t, err)
			require.Equal(t, int32(1001), servedAdd(t, resp))
		})
	}
}

func TestRunPollsUntilCancelled(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1000)})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlPoll, PollInterval: 5 * time.Millisecond})
	h.start(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	writeFiles(t, repo, map[string]string{"m/2/model.fake": fakeFile(2000)})
	require.Eventually(t, func() bool {
		resp, err := h.infer(t.Context(), "m", "")
		return err == nil && resp.Version == "2"
	}, 5*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

func TestPollFollowsSymlinkedVersionFolders(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	store := filepath.Join(root, "store")
	writeFiles(t, root, map[string]string{"repo/m/config.pbtxt": fakeConfig(""), "store/v1/model.fake": fakeFile(1000)})
	require.NoError(t, os.Symlink(filepath.Join(store, "v1"), filepath.Join(repo, "m", "1")))
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlPoll})
	h.start(t)
	writeFiles(t, store, map[string]string{"v1/model.fake": fakeFile(2000)})
	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	resp, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, int32(2000), servedAdd(t, resp), "a change behind a symbolic link is a change")
}

// TestLoadedAt: each serving version carries when it began to serve, in
// the index, the metadata and sluice_model_loaded_timestamp_seconds; a
// poll that finds no change leaves it, a reload sets it anew.
func TestLoadedAt(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1000)})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlPoll})
	started := time.Now()
	h.start(t)

	loadedAt := func() time.Time {
		t.Helper()
		md, err := h.m.Metadata(t.Context(), "m", "1")
		require.NoError(t, err)
		require.False(t, md.LoadedAt.IsZero(), "metadata carries loaded_at")
		var idx []IndexEntry
		for _, e := range h.m.Index(t.Context(), false) {
			if e.Name == "m" {
				idx = append(idx, e)
			}
		}
		require.Len(t, idx, 1)
		require.True(t, idx[0].LoadedAt.Equal(md.LoadedAt), "index %v, metadata %v", idx[0].LoadedAt, md.LoadedAt)
		got := testutil.ToFloat64(h.m.metrics.loadedAt.WithLabelValues("m", "1"))
		require.InDelta(t, float64(md.LoadedAt.UnixNano())/1e9, got, 1e-3, "the gauge says the same time")
		return md.LoadedAt
	}
	first := loadedAt()
	require.False(t, first.Before(started), "loaded at %v, before the manager started at %v", first, started)

	h.m.pollOnce(t.Context())
	h.m.pollOnce(t.Context())
	require.True(t, loadedAt().Equal(first), "a poll that finds no change keeps loaded_at")

	writeFiles(t, repo, map[string]string{"m/1/model.fake": fakeFile(1001)})
	reloaded := func() bool {
		h.m.pollOnce(t.Context())
		resp, err := h.infer(t.Context(), "m", "")
		return err == nil && servedAdd(t, resp) == 1001
	}
	for range 5 {
		if reloaded() {
			break
		}
	}
	resp, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, int32(1001), servedAdd(t, resp), "the change is loaded")
	second := loadedAt()
	require.True(t, second.After(first), "a reload sets loaded_at anew: %v, then %v", first, second)

	// Unloading the version forgets its series.
	writeFiles(t, repo, map[string]string{"m/2/model.fake": fakeFile(2)})
	require.NoError(t, os.RemoveAll(filepath.Join(repo, "m", "1")))
	for range 5 {
		h.m.pollOnce(t.Context())
	}
	require.Equal(t, 1, testutil.CollectAndCount(h.m.metrics.loadedAt), "only version 2 has a series")
	require.Greater(t, testutil.ToFloat64(h.m.metrics.loadedAt.WithLabelValues("m", "2")), 0.0)
}
