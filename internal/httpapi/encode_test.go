package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
)

// randomTensor fills a tensor of dt with random, JSON-representable values.
func randomTensor(rng *rand.Rand, dt infer.DataType) infer.Tensor {
	shape := infer.Shape{int64(rng.IntN(3) + 1), int64(rng.IntN(4))}
	n, _ := shape.Elements()
	var data []byte
	if dt == infer.Bytes {
		data = []byte{}
		for range n {
			var s []rune
			for range rng.IntN(6) {
				switch rng.IntN(4) {
				case 0:
					s = append(s, rune(rng.IntN(0x20))) // control characters
				case 1:
					s = append(s, []rune(`"\/`)[rng.IntN(3)])
				case 2:
					s = append(s, rune(rng.IntN(0x80)))
				default:
					r := rune(rng.IntN(0x10ffff))
					if !utf8.ValidRune(r) {
						r = 'é'
					}
					s = append(s, r)
				}
			}
			data = infer.AppendBytesElement(data, []byte(string(s)))
		}
		return infer.Tensor{Name: "T", DataType: dt, Shape: shape, Data: data}
	}
	size := dt.Size()
	data = make([]byte, n*size)
	for i := 0; i < len(data); i += size {
		for {
			for j := range size {
				data[i+j] = byte(rng.Uint32())
			}
			if dt == infer.Bool {
				data[i] &= 1
			}
			if finiteElement(dt, data[i:i+size]) {
				break
			}
		}
	}
	return infer.Tensor{Name: "T", DataType: dt, Shape: shape, Data: data}
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func finiteElement(dt infer.DataType, b []byte) bool {
	switch dt {
	case infer.FP16:
		return finite(float64(kservewire.FP16ToFloat32(binary.LittleEndian.Uint16(b))))
	case infer.BF16:
		return finite(float64(kservewire.BF16ToFloat32(binary.LittleEndian.Uint16(b))))
	case infer.FP32:
		return finite(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
	case infer.FP64:
		return finite(math.Float64frombits(binary.LittleEndian.Uint64(b)))
	default:
		return true
	}
}

// TestResponseRequestRoundTrip encodes random tensors of every datatype as
// response outputs, feeds each output object back as a request input (the
// two share a schema) and requires the same bytes.
func TestResponseRequestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for dt := infer.Bool; dt <= infer.BF16; dt++ {
		t.Run(dt.String(), func(t *testing.T) {
			for range 200 {
				want := randomTensor(rng, dt)
				resp := &infer.Response{Model: "m", Outputs: []infer.Tensor{want}}
				js, err := appendInferResponse(nil, resp, []bool{false})
				require.NoError(t, err)
				require.True(t, json.Valid(js), "%s", js)
				var parsed struct {
					Outputs []json.RawMessage `json:"outputs"`
				}
				require.NoError(t, json.Unmarshal(js, &parsed))
				req := `{"inputs":[` + string(parsed.Outputs[0]) + `]}`
				b, err := decodeInferJSON([]byte(req))
				require.NoError(t, err, "%s", req)
				got := b.req.Inputs[0]
				require.Equal(t, want.DataType, got.DataType)
				require.Equal(t, want.Shape, got.Shape)
				require.Equal(t, want.Data, got.Data, "%s", req)
			}
		})
	}
}

func TestAppendInferResponse(t *testing.T) {
	resp := &infer.Response{
		ID: "r\"1", Model: "m", Version: "2",
		Parameters: infer.Parameters{"b": true, "a": int64(-1), "s": "x"},
		Outputs: []infer.Tensor{
			{Name: "P", DataType: infer.FP32, Shape: infer.Shape{3}, Data: f32s(0.1, 1e-7, -2)},
			{Name: "Q", DataType: infer.Bytes, Shape: infer.Shape{2}, Data: append(append(le32(3), "\u00e9a"...), append(le32(1), '\n')...)},
			{Name: "R", DataType: infer.Int64, Shape: infer.Shape{1}, Data: le64(1 << 40), Parameters: infer.Parameters{"k": uint64(3)}},
		},
	}
	js, err := appendInferResponse(nil, resp, []bool{false, false, true})
	require.NoError(t, err)
	require.Equal(t, `{"model_name":"m","model_version":"2","id":"r\"1","parameters":{"a":-1,"b":true,"s":"x"},"outputs":[`+
		`{"name":"P","datatype":"FP32","shape":[3],"data":[0.1,1e-07,-2]},`+
		`{"name":"Q","datatype":"BYTES","shape":[2],"data":["éa","\n"]},`+
		`{"name":"R","datatype":"INT64","shape":[1],"parameters":{"binary_data_size":8,"k":3}}]}`, string(js))

	t.Run("inconsistent output is an internal error", func(t *testing.T) {
		bad := &infer.Response{Outputs: []infer.Tensor{{Name: "Z", DataType: infer.FP32, Shape: infer.Shape{2}, Data: f32s(1)}}}
		_, err := appendInferResponse(nil, bad, []bool{false})
		require.ErrorContains(t, err, "output 'Z'")
	})
	// Modelled on qa/L0_string_io/string_client_test.py
	// test_tf_unicode_bytes: a BYTES output that is not UTF-8, asked for as
	// JSON, must reach the client as an error, never as altered strings.
	t.Run("not UTF-8", func(t *testing.T) {
		bad := &infer.Response{Outputs: []infer.Tensor{{
			Name: "S", DataType: infer.Bytes, Shape: infer.Shape{2},
			Data: append(append(le32(2), "ok"...), append(le32(3), 'a', 0xbf, 0xcb)...),
		}}}
		_, err := appendInferResponse(nil, bad, []bool{false})
		require.ErrorContains(t, err, "output 'S': element 1 is not valid UTF-8")
		require.ErrorContains(t, err, "binary")
		_, err = appendInferResponse(nil, bad, []bool{true})
		require.NoError(t, err, "binary output carries any bytes")
	})
	t.Run("infinity", func(t *testing.T) {
		for _, dt := range []infer.DataType{infer.FP16, infer.BF16, infer.FP64} {
			var data []byte
			switch dt {
			case infer.FP16:
				data = le16(0x7c00)
			case infer.BF16:
				data = le16(0xff80)
			default:
				data = le64(math.Float64bits(math.Inf(1)))
			}
			bad := &infer.Response{Outputs: []infer.Tensor{{Name: "Z", DataType: dt, Shape: infer.Shape{1}, Data: data}}}
			_, err := appendInferResponse(nil, bad, []bool{false})
			require.ErrorContains(t, err, "output 'Z': element 0 is")
		}
	})
}
