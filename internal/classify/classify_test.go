package classify

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

func fp32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func strs(t *testing.T, tt infer.Tensor) []string {
	t.Helper()
	els, err := infer.SplitBytes(tt.Data)
	require.NoError(t, err)
	out := make([]string, len(els))
	for i, e := range els {
		out[i] = string(e)
	}
	return out
}

// The example of Triton's classification extension document: for
// [1, 5, 10, 4] the top-2 classes are indices 2 and 1.
func TestTopKDocumentExample(t *testing.T) {
	in := infer.Tensor{Name: "OUT", DataType: infer.FP32, Shape: infer.Shape{1, 4}, Data: fp32(1, 5, 10, 4)}
	got, err := TopK(in, 2, true, []string{"zero", "one", "two"})
	require.NoError(t, err)
	require.Equal(t, infer.Bytes, got.DataType)
	require.Equal(t, infer.Shape{1, 2}, got.Shape)
	require.Equal(t, []string{"10.000000:2:two", "5.000000:1:one"}, strs(t, got))
}

func TestTopKRowsTypesAndClamp(t *testing.T) {
	i32 := func(vs ...int32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	// Two rows, k larger than a row: each row whole, highest first, ties
	// by the lower index, negative integers compared as signed.
	in := infer.Tensor{Name: "y", DataType: infer.Int32, Shape: infer.Shape{2, 3}, Data: i32(-5, 7, 7, 3, -1, 2)}
	got, err := TopK(in, 5, true, nil)
	require.NoError(t, err)
	require.Equal(t, infer.Shape{2, 3}, got.Shape)
	require.Equal(t, []string{"7:1", "7:2", "-5:0", "3:0", "2:2", "-1:1"}, strs(t, got))

	// Not batched: the whole tensor is one row; shape [k].
	got, err = TopK(infer.Tensor{Name: "y", DataType: infer.Int32, Shape: infer.Shape{2, 2}, Data: i32(1, 9, 4, 2)}, 1, false, nil)
	require.NoError(t, err)
	require.Equal(t, infer.Shape{1}, got.Shape)
	require.Equal(t, []string{"9:1"}, strs(t, got))

	// FP16 (0x3c00 = 1, 0xc000 = -2, 0x3800 = 0.5) and NaN ordered last.
	h := func(vs ...uint16) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint16(b, v)
		}
		return b
	}
	got, err = TopK(infer.Tensor{Name: "h", DataType: infer.FP16, Shape: infer.Shape{4}, Data: h(0xc000, 0x7e00, 0x3800, 0x3c00)}, 4, false, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"1.000000:3", "0.500000:2", "-2.000000:0", "NaN:1"}, strs(t, got))

	// uint64 above 2^53 keeps its digits.
	got, err = TopK(infer.Tensor{Name: "u", DataType: infer.Uint64, Shape: infer.Shape{1}, Data: binary.LittleEndian.AppendUint64(nil, 1<<63+1)}, 1, false, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"9223372036854775809:0"}, strs(t, got))
}

func TestTopKRefuses(t *testing.T) {
	_, err := TopK(infer.Tensor{Name: "s", DataType: infer.Bytes, Shape: infer.Shape{1}, Data: infer.AppendBytesElement(nil, []byte("a"))}, 1, false, nil)
	require.ErrorContains(t, err, "output 's': cannot classify BYTES data")
	_, err = TopK(infer.Tensor{Name: "y", DataType: infer.FP32, Shape: infer.Shape{2}, Data: fp32(1)}, 1, false, nil)
	require.ErrorContains(t, err, "output 'y'")
	_, err = TopK(infer.Tensor{Name: "y", DataType: infer.FP32, Shape: infer.Shape{1}, Data: fp32(1)}, 0, false, nil)
	require.ErrorContains(t, err, "count must be >= 1")
	// qa/L0_parameters test_classification_output_tensor_too_large: an
	// output of 1,000,001 elements is refused in Triton's words; one of
	// 1,000,000 is classified.
	_, err = TopK(infer.Tensor{Name: "big", DataType: infer.FP32, Shape: infer.Shape{1, MaxElements + 1}, Data: make([]byte, 4*(MaxElements+1))}, 5, true, nil)
	require.ErrorContains(t, err, "output 'big': classification output tensor too large")
	got, err := TopK(infer.Tensor{Name: "max", DataType: infer.FP32, Shape: infer.Shape{1, MaxElements}, Data: make([]byte, 4*MaxElements)}, 5, true, nil)
	require.NoError(t, err)
	require.Equal(t, infer.Shape{1, 5}, got.Shape)
}

func TestTopKEmptyBatch(t *testing.T) {
	got, err := TopK(infer.Tensor{Name: "y", DataType: infer.FP32, Shape: infer.Shape{0, 3}, Data: nil}, 2, true, nil)
	require.NoError(t, err)
	require.Equal(t, infer.Shape{0, 0}, got.Shape)
	require.Empty(t, got.Data)
}
