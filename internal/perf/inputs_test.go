package perf

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

func fp32(vals ...float32) []byte {
	b := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func bytesElems(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = infer.AppendBytesElement(b, []byte(e))
	}
	return b
}

func TestParseRequest(t *testing.T) {
	body := `{"id":"x","inputs":[
		{"name":"a","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4.5]]},
		{"name":"b","shape":[3],"datatype":"INT64","data":[-1,0,9007199254740993]},
		{"name":"c","shape":[2],"datatype":"BOOL","data":[true,false]},
		{"name":"d","shape":[1,2],"datatype":"BYTES","data":["hi",""]},
		{"name":"e","shape":[1],"datatype":"UINT8","data":[255]}]}`
	ts, err := ParseRequest([]byte(body))
	require.NoError(t, err)
	require.Len(t, ts, 5)
	require.Equal(t, infer.Tensor{Name: "a", DataType: infer.FP32, Shape: infer.Shape{2, 2}, Data: fp32(1, 2, 3, 4.5)}, ts[0])
	b := ts[1].Data
	require.Equal(t, int64(-1), int64(binary.LittleEndian.Uint64(b)))
	require.Equal(t, int64(9007199254740993), int64(binary.LittleEndian.Uint64(b[16:])), "int64 survives without float rounding")
	require.Equal(t, []byte{1, 0}, ts[2].Data)
	require.Equal(t, bytesElems("hi", ""), ts[3].Data)
	require.Equal(t, []byte{255}, ts[4].Data)

	bad := []string{
		`not json`,
		`{"inputs":[]}`,
		`{"inputs":[{"name":"a","shape":[3],"datatype":"FP32","data":[1,2]}]}`,
		`{"inputs":[{"name":"a","shape":[1],"datatype":"FLOAT","data":[1]}]}`,
		`{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":["x"]}]}`,
		`{"inputs":[{"name":"a","shape":[1],"datatype":"UINT8","data":[256]}]}`,
		`{"inputs":[{"name":"a","shape":[1],"datatype":"INT8","data":[1.5]}]}`,
		`{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]},{"name":"a","shape":[1],"datatype":"FP32","data":[1]}]}`,
		`{"inputs":[{"name":"a","shape":[-1],"datatype":"FP32","data":[1]}]}`,
	}
	for _, s := range bad {
		_, err := ParseRequest([]byte(s))
		require.ErrorIs(t, err, ErrInput, s)
	}
}

func TestReadRequestFileExample(t *testing.T) {
	ts, err := ReadRequestFile(filepath.Join("..", "..", "examples", "requests", "parcel_eta.json"))
	require.NoError(t, err)
	require.Len(t, ts, 3)
	require.Equal(t, infer.Shape{2, 128}, ts[0].Shape)
	_, err = ReadRequestFile(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
}

func TestTileCyclesRows(t *testing.T) {
	src := infer.Tensor{Name: "x", DataType: infer.FP32, Shape: infer.Shape{2, 2}, Data: fp32(1, 2, 3, 4)}
	got, err := Tile(src, 5)
	require.NoError(t, err)
	require.Equal(t, infer.Shape{5, 2}, got.Shape)
	require.Equal(t, fp32(1, 2, 3, 4, 1, 2, 3, 4, 1, 2), got.Data, "rows cycle")
	one, err := Tile(src, 1)
	require.NoError(t, err)
	require.Equal(t, fp32(1, 2), one.Data, "batch 1 takes the first row")
	require.Equal(t, infer.Shape{2, 2}, src.Shape, "the source is not modified")

	strs := infer.Tensor{Name: "s", DataType: infer.Bytes, Shape: infer.Shape{2, 2}, Data: bytesElems("a", "bb", "", "ccc")}
	got, err = Tile(strs, 3)
	require.NoError(t, err)
	require.Equal(t, bytesElems("a", "bb", "", "ccc", "a", "bb"), got.Data)
	require.NoError(t, got.CheckSize())

	_, err = Tile(infer.Tensor{Name: "s", DataType: infer.Bytes, Shape: infer.Shape{2}, Data: bytesElems("a")}, 3)
	require.ErrorIs(t, err, ErrInput)
	_, err = Tile(infer.Tensor{Name: "z", DataType: infer.FP32, Shape: infer.Shape{}, Data: fp32(1)}, 3)
	require.ErrorIs(t, err, ErrInput)
}

func parcelInfo() *ModelInfo {
	return &ModelInfo{MaxBatchSize: 128, Inputs: []infer.TensorSpec{
		{Name: "u", DataType: infer.FP32, Shape: infer.Shape{-1, 2}},
		{Name: "v", DataType: infer.FP32, Shape: infer.Shape{-1, 3}},
	}}
}

func TestResolveInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	file := []infer.Tensor{
		{Name: "u", DataType: infer.FP32, Shape: infer.Shape{2, 2}, Data: fp32(1, 2, 3, 4)},
		{Name: "v", DataType: infer.FP32, Shape: infer.Shape{3}, Data: fp32(5, 6, 7)}, // no batch dim: one row
	}
	t.Run("file tiled to the batch", func(t *testing.T) {
		got, notes, err := resolveInputs(parcelInfo(), 3, "f.json", file, nil, rng)
		require.NoError(t, err)
		require.Empty(t, notes)
		require.Equal(t, infer.Shape{3, 2}, got[0].Shape)
		require.Equal(t, fp32(1, 2, 3, 4, 1, 2), got[0].Data)
		require.Equal(t, infer.Shape{3, 3}, got[1].Shape)
		require.Equal(t, fp32(5, 6, 7, 5, 6, 7, 5, 6, 7), got[1].Data)
	})
	t.Run("random fills every element", func(t *testing.T) {
		got, _, err := resolveInputs(parcelInfo(), 4, InputRandom, nil, nil, rng)
		require.NoError(t, err)
		require.Equal(t, infer.Shape{4, 2}, got[0].Shape)
		require.Len(t, got[0].Data, 4*2*4)
		require.NotEqual(t, make([]byte, 32), got[0].Data)
	})
	t.Run("zero", func(t *testing.T) {
		got, _, err := resolveInputs(parcelInfo(), 1, InputZero, nil, nil, rng)
		require.NoError(t, err)
		require.Equal(t, make([]byte, 12), got[1].Data)
	})
	t.Run("no metadata takes the file as is", func(t *testing.T) {
		got, notes, err := resolveInputs(nil, 1, "f.json", file[:1], nil, rng)
		require.NoError(t, err)
		require.NotEmpty(t, notes)
		require.Equal(t, infer.Shape{1, 2}, got[0].Shape)
	})
	t.Run("no metadata and no file", func(t *testing.T) {
		_, _, err := resolveInputs(nil, 1, InputRandom, nil, nil, rng)
		require.ErrorIs(t, err, ErrInput)
	})
	t.Run("variable dims need --shape", func(t *testing.T) {
		info := &ModelInfo{MaxBatchSize: 0, Inputs: []infer.TensorSpec{{Name: "img", DataType: infer.Uint8, Shape: infer.Shape{-1, 4}}}}
		_, _, err := resolveInputs(info, 1, InputZero, nil, nil, rng)
		require.ErrorIs(t, err, ErrInput)
		got, _, err := resolveInputs(info, 1, InputZero, nil, map[string]infer.Shape{"img": {3, 4}}, rng)
		require.NoError(t, err)
		require.Equal(t, infer.Shape{3, 4}, got[0].Shape)
		_, _, err = resolveInputs(info, 1, InputZero, nil, map[string]infer.Shape{"img": {3, 5}}, rng)
		require.ErrorIs(t, err, ErrInput, "a --shape must agree with fixed dims")
		_, _, err = resolveInputs(info, 1, InputZero, nil, map[string]infer.Shape{"nope": {1}}, rng)
		require.ErrorIs(t, err, ErrInput)
	})
	t.Run("non-batching model refuses -b", func(t *testing.T) {
		info := &ModelInfo{MaxBatchSize: 0, Inputs: []infer.TensorSpec{{Name: "x", DataType: infer.FP32, Shape: infer.Shape{2}}}}
		_, _, err := resolveInputs(info, 2, InputZero, nil, nil, rng)
		require.ErrorIs(t, err, ErrInput)
	})
	t.Run("batch above max_batch_size", func(t *testing.T) {
		_, _, err := resolveInputs(parcelInfo(), 129, InputZero, nil, nil, rng)
		require.ErrorIs(t, err, ErrInput)
	})
	t.Run("file with a wrong width", func(t *testing.T) {
		bad := []infer.Tensor{{Name: "u", DataType: infer.FP32, Shape: infer.Shape{1, 3}, Data: fp32(1, 2, 3)}, file[1]}
		_, _, err := resolveInputs(parcelInfo(), 1, "f.json", bad, nil, rng)
		require.ErrorIs(t, err, ErrInput)
	})
	t.Run("file missing an input", func(t *testing.T) {
		_, _, err := resolveInputs(parcelInfo(), 1, "f.json", file[:1], nil, rng)
		require.ErrorIs(t, err, ErrInput)
	})
	t.Run("no config: variable first dims are the batch", func(t *testing.T) {
		info := parcelInfo()
		info.MaxBatchSize = -1
		got, notes, err := resolveInputs(info, 2, InputZero, nil, nil, rng)
		require.NoError(t, err)
		require.NotEmpty(t, notes)
		require.Equal(t, infer.Shape{2, 2}, got[0].Shape)
	})
}

func TestParseShape(t *testing.T) {
	name, dims, err := ParseShape("in:put:1,2,3")
	require.NoError(t, err)
	require.Equal(t, "in:put", name)
	require.Equal(t, infer.Shape{1, 2, 3}, dims)
	for _, bad := range []string{"x", ":1", "x:", "x:1,-2", "x:a"} {
		_, _, err := ParseShape(bad)
		require.ErrorIs(t, err, ErrInput, bad)
	}
}

func TestEncodeJSONRoundTrip(t *testing.T) {
	in := []infer.Tensor{
		{Name: "f", DataType: infer.FP32, Shape: infer.Shape{1, 3}, Data: fp32(0.1, -2, 3e-8)},
		{Name: "i", DataType: infer.Int16, Shape: infer.Shape{2}, Data: []byte{0xff, 0xff, 7, 0}},
		{Name: "s", DataType: infer.Bytes, Shape: infer.Shape{2}, Data: bytesElems("a\"b", "é")},
		{Name: "b", DataType: infer.Bool, Shape: infer.Shape{1}, Data: []byte{1}},
	}
	body, err := encodeJSON(in)
	require.NoError(t, err)
	back, err := ParseRequest(body)
	require.NoError(t, err)
	require.Equal(t, in, back, "the JSON body decodes to the same tensors")

	_, err = encodeJSON([]infer.Tensor{{Name: "h", DataType: infer.FP16, Shape: infer.Shape{1}, Data: []byte{0, 0}}})
	require.Error(t, err)
}

func TestEncodeBinary(t *testing.T) {
	in := []infer.Tensor{
		{Name: "f", DataType: infer.FP32, Shape: infer.Shape{1, 2}, Data: fp32(1, 2)},
		{Name: "g", DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: fp32(3)},
	}
	body, hl, err := encodeBinary(in)
	require.NoError(t, err)
	var head struct {
		Inputs []struct {
			Name       string `json:"name"`
			Parameters struct {
				BinaryDataSize int `json:"binary_data_size"`
			} `json:"parameters"`
		} `json:"inputs"`
		Parameters map[string]any `json:"parameters"`
	}
	require.NoError(t, json.Unmarshal(body[:hl], &head))
	require.Equal(t, 8, head.Inputs[0].Parameters.BinaryDataSize)
	require.Equal(t, 4, head.Inputs[1].Parameters.BinaryDataSize)
	require.Equal(t, true, head.Parameters["binary_data_output"])
	require.Equal(t, fp32(1, 2, 3), body[hl:])
}

func TestHalfConversions(t *testing.T) {
	tests := []struct {
		f    float32
		half uint16
		bf   uint16
	}{
		{0, 0, 0},
		{1, 0x3c00, 0x3f80},
		{-2, 0xc000, 0xc000},
		{0.5, 0x3800, 0x3f00},
		{65504, 0x7bff, 0x4780}, // BF16 rounds 0x477fe000 up
		{1e6, 0x7c00, 0x4974},   // overflows FP16 to +Inf
		{float32(math.Inf(-1)), 0xfc00, 0xff80},
		{5.960464477539063e-08, 0x0001, 0x3380}, // smallest FP16 subnormal
	}
	for _, tt := range tests {
		require.Equal(t, tt.half, float32ToHalf(tt.f), "half(%g)", tt.f)
		require.Equal(t, tt.bf, float32ToBF16(tt.f), "bf16(%g)", tt.f)
	}
}

func FuzzParseRequest(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "..", "examples", "requests", "parcel_eta.json")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"inputs":[{"name":"a","shape":[2,1],"datatype":"BYTES","data":[["x"],["yy"]]}]}`))
	f.Add([]byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"FP16","data":[1.5]}]}`))
	f.Add([]byte(`{"inputs":[{"name":"a","shape":[2],"datatype":"INT32","data":[[[[1]]],2]}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ts, err := ParseRequest(raw)
		if err != nil {
			return
		}
		for _, tt := range ts {
			if err := tt.CheckSize(); err != nil {
				t.Fatalf("accepted input %q whose data does not fit its shape: %v", tt.Name, err)
			}
			if len(tt.Shape) > 0 && tt.Shape[0] > 0 {
				if _, err := Tile(tt, 3); err != nil {
					t.Fatalf("accepted input %q cannot be tiled: %v", tt.Name, err)
				}
			}
		}
	})
}
