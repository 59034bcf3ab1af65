package replay

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
)

func TestToInferTensor(t *testing.T) {
	le := binary.LittleEndian
	f32 := func(vs ...float32) []byte {
		var b []byte
		for _, v := range vs {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	tests := []struct {
		name     string
		datatype string
		shape    []int64
		data     string
		want     []byte
		wantErr  string
	}{
		{name: "fp32 nested", datatype: "FP32", shape: []int64{2, 2}, data: "[[1.5,-2],[0.1,3e2]]", want: f32(1.5, -2, 0.1, 300)},
		{name: "fp32 null is NaN", datatype: "FP32", shape: []int64{1}, data: "[null]", want: f32(float32(math.NaN()))},
		{
			name: "fp64", datatype: "FP64", shape: []int64{2}, data: "[0.1, 1e-300]",
			want: le.AppendUint64(le.AppendUint64(nil, math.Float64bits(0.1)), math.Float64bits(1e-300)),
		},
		{
			name: "int64 exact", datatype: "INT64", shape: []int64{2}, data: "[9007199254740993,-1]",
			want: le.AppendUint64(le.AppendUint64(nil, 9007199254740993), math.MaxUint64),
		},
		{name: "int32 integral float", datatype: "INT32", shape: []int64{2}, data: "[3.0,1e3]", want: le.AppendUint32(le.AppendUint32(nil, 3), 1000)},
		{name: "int8", datatype: "INT8", shape: []int64{2}, data: "[-128,127]", want: []byte{0x80, 0x7f}},
		{name: "int16", datatype: "INT16", shape: []int64{1}, data: "[-2]", want: le.AppendUint16(nil, 0xfffe)},
		{name: "uint8/16/32/64", datatype: "UINT16", shape: []int64{1}, data: "[65535]", want: le.AppendUint16(nil, 65535)},
		{name: "uint64", datatype: "UINT64", shape: []int64{1}, data: "[18446744073709551615]", want: le.AppendUint64(nil, math.MaxUint64)},
		{name: "uint32", datatype: "UINT32", shape: []int64{1}, data: "[7]", want: le.AppendUint32(nil, 7)},
		{name: "uint8", datatype: "UINT8", shape: []int64{1}, data: "[255]", want: []byte{255}},
		{name: "bool", datatype: "BOOL", shape: []int64{3}, data: "[true,false,1]", want: []byte{1, 0, 1}},
		{name: "bytes", datatype: "BYTES", shape: []int64{2}, data: `["ab",""]`, want: infer.AppendBytesElement(infer.AppendBytesElement(nil, []byte("ab")), nil)},
		{name: "empty", datatype: "FP32", shape: []int64{0, 4}, data: "[]", want: []byte{}},
		{name: "too few", datatype: "FP32", shape: []int64{3}, data: "[1,2]", wantErr: "holds 2 elements, shape [3] needs 3"},
		{name: "too many", datatype: "FP32", shape: []int64{1}, data: "[1,2]", wantErr: "more than the 1 elements"},
		{name: "int out of range", datatype: "INT8", shape: []int64{1}, data: "[128]", wantErr: "not a 8-bit integer"},
		{name: "fractional int", datatype: "INT32", shape: []int64{1}, data: "[1.5]", wantErr: "not a 32-bit integer"},
		{name: "negative uint", datatype: "UINT32", shape: []int64{1}, data: "[-1]", wantErr: "not an unsigned 32-bit integer"},
		{name: "string in fp32", datatype: "FP32", shape: []int64{1}, data: `["1"]`, wantErr: "not a number"},
		{name: "null int", datatype: "INT64", shape: []int64{1}, data: "[null]", wantErr: "not a number"},
		{name: "number in bytes", datatype: "BYTES", shape: []int64{1}, data: "[1]", wantErr: "not a string"},
		{name: "bad bool", datatype: "BOOL", shape: []int64{1}, data: "[2]", wantErr: "not a boolean"},
		{name: "object", datatype: "FP32", shape: []int64{1}, data: `[{"a":1}]`, wantErr: "holds an object"},
		{name: "not an array", datatype: "FP32", shape: []int64{1}, data: "1", wantErr: "not a JSON array"},
		{name: "trailing", datatype: "FP32", shape: []int64{1}, data: "[1] [2]", wantErr: "trailing content"},
		{name: "fp16", datatype: "FP16", shape: []int64{1}, data: "[1]", wantErr: "cannot be replayed"},
		{name: "unknown type", datatype: "FP8", shape: []int64{1}, data: "[1]", wantErr: "unknown datatype"},
		{name: "negative dim", datatype: "FP32", shape: []int64{-1}, data: "[1]", wantErr: "negative dimension"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := toInferTensor(&record.Tensor{Name: "x", DataType: tt.datatype, Shape: tt.shape, Data: json.RawMessage(tt.data)})
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorContains(t, err, `input "x"`)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Data)
			require.Equal(t, infer.Shape(tt.shape), got.Shape)
			require.NoError(t, got.CheckSize())
		})
	}
	deep := make([]byte, 0, 2*maxDataDepth+4)
	for range maxDataDepth + 1 {
		deep = append(deep, '[')
	}
	_, err := toInferTensor(&record.Tensor{Name: "x", DataType: "FP32", Shape: []int64{1}, Data: deep})
	require.ErrorContains(t, err, "deeper than")
}

func TestOutputValues(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		dt   infer.DataType
		data []byte
		want []float64
	}{
		{infer.FP32, le.AppendUint32(nil, math.Float32bits(75.99)), []float64{float64(float32(75.99))}},
		{infer.FP64, le.AppendUint64(nil, math.Float64bits(0.1)), []float64{0.1}},
		{infer.Int64, le.AppendUint64(nil, math.MaxUint64), []float64{-1}},
		{infer.Int32, le.AppendUint32(nil, math.MaxUint32), []float64{-1}},
		{infer.Int16, le.AppendUint16(nil, math.MaxUint16), []float64{-1}},
		{infer.Int8, []byte{0xff, 2}, []float64{-1, 2}},
		{infer.Uint8, []byte{0xff}, []float64{255}},
		{infer.Uint16, le.AppendUint16(nil, 65535), []float64{65535}},
		{infer.Uint32, le.AppendUint32(nil, 7), []float64{7}},
		{infer.Uint64, le.AppendUint64(nil, 8), []float64{8}},
		{infer.Bool, []byte{0, 3}, []float64{0, 1}},
	}
	for _, tt := range tests {
		got, ok := outputValues(&infer.Tensor{DataType: tt.dt, Data: tt.data})
		require.True(t, ok, tt.dt.String())
		require.Equal(t, tt.want, got, tt.dt.String())
	}
	for _, dt := range []infer.DataType{infer.Bytes, infer.FP16, infer.BF16} {
		_, ok := outputValues(&infer.Tensor{DataType: dt, Data: []byte{0, 0, 0, 0}})
		require.False(t, ok, dt.String())
	}
}

func TestDecodeV2Response(t *testing.T) {
	a, ok := decodeV2Response([]byte(`{"model_name":"m","model_version":"7","outputs":[
		{"name":"y","datatype":"FP32","shape":[1,2],"data":[[75.99,null]]},
		{"name":"b","datatype":"BOOL","shape":[2],"data":[true,false]},
		{"name":"s","datatype":"BYTES","shape":[1],"data":["x"]},
		{"name":"bin","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}]}`), "m", "", 100)
	require.True(t, ok)
	require.Equal(t, "7", a.Version)
	require.Len(t, a.Outputs, 2)
	require.Equal(t, float64(float32(75.99)), a.Outputs["y"][0], "FP32 JSON values are rounded as the binary protocol would carry them")
	require.True(t, math.IsNaN(a.Outputs["y"][1]))
	require.Equal(t, []float64{1, 0}, a.Outputs["b"])

	for _, bad := range []string{`nope`, `{"outputs":[{"name":"","data":[1]}]}`, `{"outputs":[{"name":"y","data":[{}]}]}`, `{"outputs":[{"name":"y","data":[1,2,3]}]}`} {
		_, ok := decodeV2Response([]byte(bad), "m", "", 2)
		require.False(t, ok, bad)
	}
}

func TestDecodeServiceAnswer(t *testing.T) {
	a, ok := decodeServiceAnswer([]byte(`{"request_id":"r","model":"m","version":"2","source":"fallback_rule","outputs":{"eta":41.5,"v":[1,[2,null]],"n":null}}`), 100)
	require.True(t, ok)
	require.Equal(t, "fallback_rule", a.Source)
	require.Equal(t, []float64{41.5}, a.Outputs["eta"])
	require.Equal(t, []float64{1, 2}, a.Outputs["v"][:2])
	require.True(t, math.IsNaN(a.Outputs["v"][2]))
	require.True(t, math.IsNaN(a.Outputs["n"][0]))
	for _, bad := range []string{`[]`, `{"outputs":{"x":"text"}}`, `{"outputs":{"":1}}`, `{"outputs":{"x":{"a":1}}}`} {
		_, ok := decodeServiceAnswer([]byte(bad), 100)
		require.False(t, ok, bad)
	}
}
