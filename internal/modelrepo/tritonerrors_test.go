package modelrepo

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Triton's clients and QA tests match on Triton's error text
// (qa/L0_infer, qa/L0_lifecycle: "Request for unknown model: 'm' is not
// found", "... version N is not found", "... has no available versions",
// "load failed for model 'm'", "failed to load 'm'"); Sluice keeps its
// reason codes and adds its detail after Triton's words.
func TestTritonErrorText(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(`version_policy: { all: {} }`),
		"m/1/model.fake": fakeFile(1),
		"m/2/model.fake": "broken",
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"m"}})
	h.start(t)

	_, err := h.infer(t.Context(), "nope", "")
	requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model: 'nope' is not found")
	_, err = h.infer(t.Context(), "m", "7")
	requireInferError(t, err, apierr.KindNotFound, ReasonVersionNotFound, "Request for unknown model: 'm' version 7 is not found")
	_, err = h.infer(t.Context(), "m", "2")
	requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "Request for unknown model: 'm' version 2 is not at ready state: model 'm' version 2 is UNAVAILABLE: ")

	err = h.m.Load(t.Context(), "m", LoadOptions{})
	requireInferError(t, err, apierr.KindInvalid, ReasonLoadFailed, "load failed for model 'm': version 2 is at UNAVAILABLE state: ")
	err = h.m.Load(t.Context(), "nope", LoadOptions{})
	requireInferError(t, err, apierr.KindNotFound, ReasonModelNotFound, "failed to load 'nope', failed to poll from model repository")

	writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig("bogus_field: 1\n")})
	err = h.m.Load(t.Context(), "m", LoadOptions{})
	requireInferError(t, err, apierr.KindInvalid, ReasonLoadFailed, "failed to load 'm': ")

	require.NoError(t, h.m.Unload(t.Context(), "m", UnloadOptions{}))
	_, err = h.infer(t.Context(), "m", "")
	requireInferError(t, err, apierr.KindUnavailable, ReasonModelNotReady, "Request for unknown model: 'm' has no available versions: ")
}
