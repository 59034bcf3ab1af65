package modelrepo

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

func checkRegistry() *backend.Registry {
	var reg backend.Registry
	reg.Register(&fakeBackend{}, "fake_platform")
	return &reg
}

func TestCheckGoodRepository(t *testing.T) {
	require.Empty(t, Check(t.Context(), []string{"testdata/check/good"}, checkRegistry(), false))

	ps := Check(t.Context(), []string{"testdata/check/good"}, checkRegistry(), true)
	require.Len(t, ps, 1, "strict: the model without config.pbtxt")
	require.Equal(t, "testdata/check/good/autocompleted/config.pbtxt: config.pbtxt is missing (required with --strict-model-config)", ps[0].Error())

	// What Check passes, the server loads.
	h := newHarness(t, Options{Repositories: []string{"testdata/check/good"}, StrictReadiness: true})
	h.start(t)
	require.True(t, h.m.Ready())
	require.Len(t, h.m.Index(t.Context(), true), 3)
}

func TestCheckBrokenRepository(t *testing.T) {
	const dir = "testdata/check/broken/"
	want := []struct{ pos, msg string }{
		{"corrupt/1/model.fake", "read model: not a fake model"},
		{"files/config.pbtxt:5:1", "version 4 is named by version_policy but has no folder"},
		{"files/1/model_config.json", "git commit mismatch: expected_git_commit expects a1b2c3d, version 1 has none"},
		{"files/1/model.fake", "model file is missing"},
		{"files/2/model_config.json", "git commit mismatch"},
		{"files/2/SHA256SUMS:2:1", "malformed line"},
		{"files/2/SHA256SUMS:1:67", "checksum mismatch: file 'model.fake' has sha256 b9fbf762"},
		{"files/3/model_config.json:3:21", "git_commit must be a string, not a JSON number"},
		{"invalid/config.pbtxt:5:20", "KIND_GPU"},
		{"mismatch/config.pbtxt:3:22", "input 'IN': config data_type TYPE_FP32 does not match the model's TYPE_INT32"},
		{"mismatch/config.pbtxt:3:43", "input 'IN': config dims [5] do not match the model's [-1,4]"},
		{"no_versions", "no version folder"},
		{"syntax/config.pbtxt:2:17", `"eight"`},
		{"syntax/config.pbtxt:4:1", `unknown field "ouptut"`},
		{"unknown_backend/config.pbtxt:1:1", `unknown backend "tensorflow"`},
	}
	ps := Check(t.Context(), []string{"testdata/check/broken"}, checkRegistry(), false)
	var got []string
	for _, p := range ps {
		got = append(got, p.Error())
	}
	require.Len(t, got, len(want), "problems:\n%s", strings.Join(got, "\n"))
	for i, w := range want {
		require.True(t, strings.HasPrefix(got[i], dir+w.pos+": "), "problem %d = %q, want it at %s", i, got[i], w.pos)
		require.Contains(t, got[i], w.msg)
	}
}

func TestCheckUnreadableAndDuplicate(t *testing.T) {
	ps := Check(t.Context(), []string{"testdata/check/good", "testdata/check/good", "testdata/check/missing"}, checkRegistry(), false)
	var got []string
	for _, p := range ps {
		got = append(got, p.Error())
	}
	require.Contains(t, got, "testdata/check/missing: read model repository: open testdata/check/missing: no such file or directory")
	require.Contains(t, got, "testdata/check/good/simple: model 'simple' is in more than one model repository (testdata/check/good, testdata/check/good)")
}

// checkingBackend is fakeBackend plus an offline version check that
// reports one problem per version, located in the version's model file.
type checkingBackend struct {
	fakeBackend
	versions []string // version folders checked, in order
}

func (b *checkingBackend) Name() string { return "checking" }

func (b *checkingBackend) CheckVersion(_ context.Context, versionDir string, cfg *inferencepb.ModelConfig) []backend.Problem {
	b.versions = append(b.versions, versionDir)
	return []backend.Problem{{File: filepath.Join(versionDir, "model.fake"), Line: 3, Col: 7, Msg: "checked " + cfg.GetName()}}
}

func TestCheckVersionChecker(t *testing.T) {
	root := t.TempDir()
	cfg := strings.Replace(fakeConfig(""), `backend: "fake"`, `backend: "checking"`, 1)
	writeFiles(t, root, map[string]string{
		"m/config.pbtxt":   cfg + "version_policy: { all: { } }\n",
		"m/1/model.fake":   fakeFile(1),
		"m/2/model.fake":   fakeFile(2),
		"bad/config.pbtxt": strings.Replace(cfg, "dims: [ 4 ] } ]\noutput", "dims: [ 5 ] } ]\noutput", 1),
		"bad/1/model.fake": fakeFile(1),
	})
	be := &checkingBackend{}
	var reg backend.Registry
	reg.Register(be)
	var got []string
	for _, p := range Check(t.Context(), []string{root}, &reg, false) {
		got = append(got, strings.TrimPrefix(p.Error(), root+string(filepath.Separator)))
	}
	// The version whose signature does not fit its config is not checked
	// further; the others' problems come in version order.
	require.Len(t, got, 3, "problems:\n%s", strings.Join(got, "\n"))
	require.Contains(t, got[0], "bad/config.pbtxt")
	require.Equal(t, []string{"m/1/model.fake:3:7: checked m", "m/2/model.fake:3:7: checked m"}, got[1:])
	require.Equal(t, []string{filepath.Join(root, "m", "1"), filepath.Join(root, "m", "2")}, be.versions)
}
