package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

func TestFP16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := fp16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		back, ok := float64ToFP16(float64(f))
		if math.IsInf(float64(f), 0) {
			require.False(t, ok, "%#04x", h)
			continue
		}
		require.True(t, ok, "%#04x", h)
		require.Equal(t, uint16(h), back, "%#04x -> %v", h, f)
	}
}

func TestBF16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := bf16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		back, ok := float64ToBF16(float64(f))
		if math.IsInf(float64(f), 0) {
			require.False(t, ok, "%#04x", h)
			continue
		}
		require.True(t, ok)
		require.Equal(t, uint16(h), back, "%#04x -> %v", h, f)
	}
}

// nearest is the reference rounding: the positive finite value of the
// format closest to f, ties to the even bit pattern, by search over every
// pattern (they are ordered by value). ok is false past the largest value
// plus half a step, where IEEE rounding overflows to infinity.
func nearest(f float64, widen func(uint16) float32, maxFinite uint16) (uint16, bool) {
	vals := func(i int) float64 { return float64(widen(uint16(i))) }
	i := sort.Search(int(maxFinite)+1, func(i int) bool { return vals(i) >= f })
	if i > int(maxFinite) {
		top := vals(int(maxFinite))
		step := top - vals(int(maxFinite)-1)
		if f >= top+step/2 {
			return 0, false
		}
		return maxFinite, true
	}
	if i == 0 || vals(i) == f {
		return uint16(i), true
	}
	lo, hi := vals(i-1), vals(i)
	switch {
	case f-lo < hi-f:
		return uint16(i - 1), true
	case f-lo > hi-f:
		return uint16(i), true
	case i%2 == 0:
		return uint16(i), true
	default:
		return uint16(i - 1), true
	}
}

func TestNarrowFloatRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name      string
		conv      func(float64) (uint16, bool)
		widen     func(uint16) float32
		maxFinite uint16
		// Random values are m * 2^e with m in [0,1) and e in [minExp,maxExp]:
		// from below the smallest subnormal to past the largest value.
		minExp, maxExp int
	}{
		{"FP16", float64ToFP16, fp16ToFloat32, 0x7bff, -27, 17},
		{"BF16", float64ToBF16, bf16ToFloat32, 0x7f7f, -136, 129},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(f float64) {
				want, wantOK := nearest(f, tc.widen, tc.maxFinite)
				got, ok := tc.conv(f)
				require.Equal(t, wantOK, ok, "%v", f)
				if ok {
					require.Equal(t, want, got, "%v", f)
				}
				neg, ok := tc.conv(-f)
				require.Equal(t, wantOK, ok)
				if ok {
					require.Equal(t, want|0x8000, neg, "-%v", f)
				}
			}
			for range 20000 {
				// Spread over the whole exponent range, subnormals included.
				check(math.Ldexp(rng.Float64(), tc.minExp+rng.IntN(tc.maxExp-tc.minExp+1)))
			}
			// Exact ties between neighbours, which must go to even.
			for range 2000 {
				h := uint16(rng.IntN(int(tc.maxFinite)))
				lo, hi := float64(tc.widen(h)), float64(tc.widen(h+1))
				check((lo + hi) / 2)
			}
		})
	}
}

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

func finiteElement(dt infer.DataType, b []byte) bool {
	switch dt {
	case infer.FP16:
		return finite(float64(fp16ToFloat32(binary.LittleEndian.Uint16(b))))
	case infer.BF16:
		return finite(float64(bf16ToFloat32(binary.LittleEndian.Uint16(b))))
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
			{Name: "Q", DataType: infer.Bytes, Shape: infer.Shape{2}, Data: append(append(le32(2), 0xff, 'a'), append(le32(1), '\n')...)},
			{Name: "R", DataType: infer.Int64, Shape: infer.Shape{1}, Data: le64(1 << 40), Parameters: infer.Parameters{"k": uint64(3)}},
		},
	}
	js, err := appendInferResponse(nil, resp, []bool{false, false, true})
	require.NoError(t, err)
	require.Equal(t, `{"model_name":"m","model_version":"2","id":"r\"1","parameters":{"a":-1,"b":true,"s":"x"},"outputs":[`+
		`{"name":"P","datatype":"FP32","shape":[3],"data":[0.1,1e-07,-2]},`+
		`{"name":"Q","datatype":"BYTES","shape":[2],"data":["\ufffda","\n"]},`+
		`{"name":"R","datatype":"INT64","shape":[1],"parameters":{"binary_data_size":8,"k":3}}]}`, string(js))

	t.Run("inconsistent output is an internal error", func(t *testing.T) {
		bad := &infer.Response{Outputs: []infer.Tensor{{Name: "Z", DataType: infer.FP32, Shape: infer.Shape{2}, Data: f32s(1)}}}
		_, err := appendInferResponse(nil, bad, []bool{false})
		require.ErrorContains(t, err, "output 'Z'")
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
