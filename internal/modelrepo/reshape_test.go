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
