package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeRequest(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "req.json")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

const twoRows = `{"inputs":[
 {"name":"a","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5,6]},
 {"name":"b","shape":[2,1],"datatype":"FP32","data":[7,8]}]}`

func TestLoadFeaturesRejectsBadFiles(t *testing.T) {
	tests := []struct{ name, body string }{
		{"not json", `{"inputs":`},
		{"no inputs", `{"inputs":[]}`},
		{"data length mismatch", `{"inputs":[{"name":"a","shape":[2,3],"datatype":"FP32","data":[1,2,3]}]}`},
		{"not FP32", `{"inputs":[{"name":"a","shape":[1,1],"datatype":"INT64","data":[1]}]}`},
		{"rank 1", `{"inputs":[{"name":"a","shape":[3],"datatype":"FP32","data":[1,2,3]}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFeatures(writeRequest(t, tt.body))
			require.Error(t, err)
		})
	}
	_, err := loadFeatures(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
}

func TestNewWorkloadCyclesRowsAndEncodesEveryTransport(t *testing.T) {
	src, err := loadFeatures(writeRequest(t, twoRows))
	require.NoError(t, err)
	w, err := newWorkload("m", []string{"y", "z"}, src, 3)
	require.NoError(t, err)

	// JSON: rows 0, 1, 0 of each input, shape [3, width].
	var j struct {
		Inputs []struct {
			Name  string    `json:"name"`
			Shape []int     `json:"shape"`
			Data  []float32 `json:"data"`
		} `json:"inputs"`
	}
	require.NoError(t, json.Unmarshal(w.JSONBody, &j))
	require.Len(t, j.Inputs, 2)
	require.Equal(t, []int{3, 3}, j.Inputs[0].Shape)
	require.Equal(t, []float32{1, 2, 3, 4, 5, 6, 1, 2, 3}, j.Inputs[0].Data)
	require.Equal(t, []float32{7, 8, 7}, j.Inputs[1].Data)

	// Binary: JSON header of the stated length, then each input's bytes
	// in order, sized as the header says; binary outputs requested.
	hl := w.BinaryHeaderLn
	var h struct {
		Inputs []struct {
			Name       string `json:"name"`
			Parameters struct {
				BinaryDataSize int `json:"binary_data_size"`
			} `json:"parameters"`
		} `json:"inputs"`
		Outputs []struct {
			Name       string `json:"name"`
			Parameters struct {
				BinaryData bool `json:"binary_data"`
			} `json:"parameters"`
		} `json:"outputs"`
		Parameters struct {
			BinaryDataOutput bool `json:"binary_data_output"`
		} `json:"parameters"`
	}
	require.NoError(t, json.Unmarshal(w.BinaryBody[:hl], &h))
	require.Equal(t, 9*4, h.Inputs[0].Parameters.BinaryDataSize)
	require.Equal(t, 3*4, h.Inputs[1].Parameters.BinaryDataSize)
	require.Equal(t, len(w.BinaryBody)-hl, 9*4+3*4)
	require.True(t, h.Parameters.BinaryDataOutput)
	require.Len(t, h.Outputs, 2)
	require.True(t, h.Outputs[0].Parameters.BinaryData)
	got, err := fp32Values(w.BinaryBody[hl : hl+36])
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2, 3, 4, 5, 6, 1, 2, 3}, got)

	// In-process tensors and gRPC raw contents carry the same bytes.
	require.Len(t, w.Tensors, 2)
	require.Equal(t, "a", w.Tensors[0].Name)
	require.EqualValues(t, []int64{3, 3}, w.Tensors[0].Shape)
	require.Equal(t, w.BinaryBody[hl:hl+36], w.Tensors[0].Data)
	require.Equal(t, "m", w.GRPC.GetModelName())
	require.Len(t, w.GRPC.GetRawInputContents(), 2)
	require.Equal(t, w.Tensors[1].Data, w.GRPC.GetRawInputContents()[1])
	require.Equal(t, []int64{3, 1}, w.GRPC.GetInputs()[1].GetShape())
}

func TestFP32RoundTrip(t *testing.T) {
	in := []float32{0, -1.5, 3.25e10, 1e-20}
	out, err := fp32Values(fp32Bytes(in))
	require.NoError(t, err)
	require.Equal(t, in, out)
	_, err = fp32Values([]byte{1, 2, 3})
	require.Error(t, err)
}
