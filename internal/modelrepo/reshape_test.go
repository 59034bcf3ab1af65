package modelrepo

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Triton's model configuration doc ("Reshape"): an output's reshape is the
// shape the model produces, its dims what clients see, in metadata and in
// answers (L0_infer_reshape). The fake echoes its first input, so with the
// input reshaped to [2,2] the model's OUT is [b,2,2]; clients must get
// [b,4].
func TestOutputReshape(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
`,
		"m/1/model.fake": fakeFile(10, func(fm *fakeModel) {
			fm.Inputs[0].Shape = []int64{-1, 2, 2}
			fm.Outputs[0].Shape = []int64{-1, 2, 2}
		}),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	md, err := h.m.Metadata(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, infer.Shape{-1, 4}, md.Outputs[0].Shape)
	resp, err := h.m.Infer(t.Context(), &infer.Request{Model: "m", Inputs: []infer.Tensor{int32Tensor("IN", []int64{2, 4}, 1, 2, 3, 4, 5, 6, 7, 8)}})
	require.NoError(t, err)
	require.Equal(t, infer.Shape{2, 4}, resp.Outputs[0].Shape)
	require.Equal(t, []int32{11, 12, 13, 14, 15, 16, 17, 18}, int32Values(resp.Outputs[0].Data))
}

func TestFitShape(t *testing.T) {
	tests := []struct {
		want, have infer.Shape
		batched    bool
		out        infer.Shape // nil: no fit
	}{
		{infer.Shape{-1, 1000}, infer.Shape{3, 1000, 1, 1}, true, infer.Shape{3, 1000}},
		{infer.Shape{1000}, infer.Shape{1, 1000, 1, 1}, false, infer.Shape{1000}},
		{infer.Shape{-1, -1}, infer.Shape{2, 3, 4}, true, infer.Shape{2, 12}},
		{infer.Shape{-1, -1, 2}, infer.Shape{2, 3, 4}, true, infer.Shape{2, 6, 2}},
		{infer.Shape{-1, -1, -1}, infer.Shape{2, 3, 4}, true, nil},
		{infer.Shape{-1, 5}, infer.Shape{2, 3, 4}, true, nil},
		{infer.Shape{-1, 0}, infer.Shape{2, 0}, true, infer.Shape{2, 0}},
		{infer.Shape{-1, 0, -1}, infer.Shape{2, 0}, true, nil},
		{infer.Shape{}, infer.Shape{1}, false, infer.Shape{}},
	}
	for _, tt := range tests {
		got, ok := fitShape(tt.want, tt.have, tt.batched)
		require.Equal(t, tt.out != nil, ok, "%v <- %v", tt.want, tt.have)
		if ok {
			require.Equal(t, tt.out, got, "%v <- %v", tt.want, tt.have)
		}
	}
}

// Triton's model configuration doc ("Reshape") allows variable dimensions
// in an input's reshape; Triton's request normalization fills them, in
// order, with the values the request gave the variable dimensions of dims.
// These are the variable-shape models of Triton's QA reshape generator
// (L0_infer_reshape test_ii1..ii3).
func TestReshapeInput(t *testing.T) {
	tests := []struct {
		dims, reshape, have infer.Shape
		batched             bool
		out                 infer.Shape // nil: no fit
	}{
		{infer.Shape{-1, 2, 4, -1, 6}, infer.Shape{-1, 8, -1, 1, 6}, infer.Shape{3, 2, 4, 5, 6}, true, infer.Shape{3, 8, 5, 1, 6}},
		{infer.Shape{2, 4, -1, 6}, infer.Shape{8, -1, 1, 6}, infer.Shape{2, 4, 5, 6}, false, infer.Shape{8, 5, 1, 6}},
		{infer.Shape{-1, 1, -1, 1}, infer.Shape{-1, -1}, infer.Shape{8, 1, 4, 1}, true, infer.Shape{8, 4}},
		{infer.Shape{-1, -1}, infer.Shape{-1, 1, -1, 1}, infer.Shape{1, 8}, true, infer.Shape{1, 1, 8, 1}},
		{infer.Shape{-1, 1}, infer.Shape{1, -1}, infer.Shape{4, 1}, false, infer.Shape{1, 4}},
		{infer.Shape{-1, 1}, infer.Shape{1, -1}, infer.Shape{0, 1}, false, infer.Shape{1, 0}},
		// fixed reshapes, the batch dimension kept
		{infer.Shape{-1, 4, 4}, infer.Shape{-1, 16}, infer.Shape{2, 4, 4}, true, infer.Shape{2, 16}},
		{infer.Shape{-1, 1}, infer.Shape{-1}, infer.Shape{5, 1}, true, infer.Shape{5}},
		{infer.Shape{1}, infer.Shape{}, infer.Shape{1}, false, infer.Shape{}},
		// a request of the wrong size does not fit: the backend answers it
		{infer.Shape{-1, 4, 4}, infer.Shape{-1, 16}, infer.Shape{2, 4, 5}, true, nil},
		// more variable dimensions in reshape than dims: one solved from the element count
		{infer.Shape{-1, 6}, infer.Shape{-1, 2, -1}, infer.Shape{2, 6}, true, infer.Shape{2, 2, 3}},
	}
	for _, tt := range tests {
		got, ok := reshapeInput(tt.dims, tt.reshape, tt.have, tt.batched)
		require.Equal(t, tt.out != nil, ok, "%v -> %v <- %v", tt.dims, tt.reshape, tt.have)
		if ok {
			require.Equal(t, tt.out, got, "%v -> %v <- %v", tt.dims, tt.reshape, tt.have)
		}
	}
}
