package modelrepo

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

// Triton's classification extension (docs/protocol/
// extension_classification.md; L0_infer's class_count cases): an output
// requested with "classification": k answers BYTES [batch, k] strings
// "value:index[:label]", labels from the output's label_filename in the
// model folder.
func TestClassification(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] label_filename: "labels.txt" } ]
response_cache { enable: true }
`,
		"m/labels.txt":   "cat\ndog\r\nbird\n",
		"m/1/model.fake": fakeFile(0),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, CacheSizeBytes: 1 << 20})
	h.start(t)
	req := func(k any) *infer.Request {
		return &infer.Request{
			Model:   "m",
			Inputs:  []infer.Tensor{int32Tensor("IN", []int64{2, 4}, 1, 9, 4, 7, -3, -1, -2, 0)},
			Outputs: []infer.RequestedOutput{{Name: "OUT", Parameters: infer.Parameters{"classification": k}}},
		}
	}
	for range 2 { // a miss, then the same answer from the cache
		resp, err := h.m.Infer(t.Context(), req(int64(2)))
		require.NoError(t, err)
		out := resp.Outputs[0]
		require.Equal(t, infer.Bytes, out.DataType)
		require.Equal(t, infer.Shape{2, 2}, out.Shape)
		els, err := infer.SplitBytes(out.Data)
		require.NoError(t, err)
		var got []string
		for _, e := range els {
			got = append(got, string(e))
		}
		require.Equal(t, []string{"9:1:dog", "7:3", "0:3", "-1:1:dog"}, got, "index 3 has no line in labels.txt: no label")
	}
	// Without the parameter the raw tensor comes back (not the cached
	// classification).
	resp, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, infer.Int32, resp.Outputs[0].DataType)

	for _, bad := range []any{int64(0), int64(-1), "3", 2.5, true} {
		_, err := h.m.Infer(t.Context(), req(bad))
		requireInferError(t, err, apierr.KindInvalid, ReasonInvalidParameter, "output 'OUT': parameter 'classification' must be a positive integer")
	}
}

func TestClassificationLabelFileMissing(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig("") + `output [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] label_filename: "nope.txt" } ]`,
		"m/1/model.fake": fakeFile(0, func(fm *fakeModel) {
			fm.Outputs = append(fm.Outputs, fakeTensor{Name: "X", DataType: "INT32", Shape: []int64{-1, 4}})
		}),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	got := entries(h, "m")
	require.Len(t, got, 1)
	require.Contains(t, got[0], "1 UNAVAILABLE: ")
	require.Contains(t, got[0], "output 'X': label_filename: open ")
}

// Triton's QA L0_infer test_ensemble_label_lookup: classification of an
// ensemble output takes the labels of the step model that produced it
// (also through a nested ensemble) unless the ensemble's own output names
// a label_filename, which then wins (label_override).
func TestEnsembleClassificationLabels(t *testing.T) {
	repo := t.TempDir()
	ens := func(name, step, label string) string {
		return `name: "` + name + `"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ]` + label + ` } ]
ensemble_scheduling { step [ { model_name: "` + step + `" model_version: -1 input_map { key: "` + map[bool]string{true: "IN", false: "X"}[step == "m"] + `" value: "X" } output_map { key: "` + map[bool]string{true: "OUT", false: "Y"}[step == "m"] + `" value: "Y" } } ] }
`
	}
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] label_filename: "labels.txt" } ]
`,
		"m/labels.txt":          "cat\ndog\nbird\nfish\n",
		"m/1/model.fake":        fakeFile(0),
		"e/config.pbtxt":        ens("e", "m", ""),
		"e/1/.keep":             "",
		"nested/config.pbtxt":   ens("nested", "e", ""),
		"nested/1/.keep":        "",
		"override/config.pbtxt": ens("override", "m", ` label_filename: "mine.txt"`),
		"override/mine.txt":     "zero\none\ntwo\nthree\n",
		"override/1/.keep":      "",
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	for model, want := range map[string][]string{
		"e":        {"9:1:dog", "7:3:fish"},
		"nested":   {"9:1:dog", "7:3:fish"},
		"override": {"9:1:one", "7:3:three"},
	} {
		resp, err := h.m.Infer(t.Context(), &infer.Request{
			Model:   model,
			Inputs:  []infer.Tensor{int32Tensor("X", []int64{1, 4}, 1, 9, 4, 7)},
			Outputs: []infer.RequestedOutput{{Name: "Y", Parameters: infer.Parameters{"classification": int64(2)}}},
		})
		require.NoError(t, err, model)
		els, err := infer.SplitBytes(resp.Outputs[0].Data)
		require.NoError(t, err)
		var got []string
		for _, e := range els {
			got = append(got, string(e))
		}
		require.Equal(t, want, got, model)
	}
}

// Triton's QA L0_parameters test_classificattion_unsupported_data_type
// (HTTP and gRPC clients): classification of a BYTES output is refused
// with Triton's words, "class result not available for output due to
// unsupported type 'BYTES'"; BOOL is refused the same way.
func TestClassificationUnsupportedTypeTritonWording(t *testing.T) {
	repo := t.TempDir()
	for name, pair := range map[string][2]string{"bytes": {"TYPE_STRING", "BYTES"}, "bools": {"TYPE_BOOL", "BOOL"}} {
		cfgType, wire := pair[0], pair[1]
		writeFiles(t, repo, map[string]string{
			name + "/config.pbtxt": `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: ` + cfgType + ` dims: [ 2 ] } ]
output [ { name: "OUT" data_type: ` + cfgType + ` dims: [ 2 ] } ]
`,
			name + "/1/model.fake": fakeFile(0, func(fm *fakeModel) {
				fm.Inputs[0] = fakeTensor{Name: "IN", DataType: wire, Shape: []int64{-1, 2}}
				fm.Outputs[0] = fakeTensor{Name: "OUT", DataType: wire, Shape: []int64{-1, 2}}
			}),
		})
	}
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	cases := []struct {
		model string
		in    infer.Tensor
		want  string
	}{
		{"bytes", infer.Tensor{Name: "IN", DataType: infer.Bytes, Shape: infer.Shape{1, 2}, Data: []byte{4, 0, 0, 0, 't', 'e', 's', 't', 4, 0, 0, 0, 't', 'e', 's', 't'}}, "BYTES"},
		{"bools", infer.Tensor{Name: "IN", DataType: infer.Bool, Shape: infer.Shape{1, 2}, Data: []byte{1, 0}}, "BOOL"},
	}
	for _, c := range cases {
		_, err := h.m.Infer(t.Context(), &infer.Request{
			Model:   c.model,
			Inputs:  []infer.Tensor{c.in},
			Outputs: []infer.RequestedOutput{{Name: "OUT", Parameters: infer.Parameters{"classification": int64(1)}}},
		})
		requireInferError(t, err, apierr.KindInvalid, ReasonInvalidParameter,
			"output 'OUT': class result not available for output due to unsupported type '"+c.want+"'")
	}
	require.Zero(t, h.fake.executions.Load(), "refused before the model runs")
}
