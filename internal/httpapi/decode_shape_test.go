package httpapi

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

// The decoder keeps the first inputs' shapes in one array of its own;
// each shape must stay separate from the others whatever is done to it.
func TestDecodedShapesAreSeparate(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"inputs":[`)
	const inputs = 7 // 7 × rank 3 = 21 dimensions: more than the shared array holds
	for i := range inputs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"x%d","datatype":"INT32","shape":[1,1,%d],"data":[%s]}`,
			i, i+1, strings.TrimSuffix(strings.Repeat("7,", i+1), ","))
	}
	b.WriteString(`,{"name":"empty","datatype":"INT32","shape":[],"data":[1]}]}`)
	ib, err := decodeInferJSON([]byte(b.String()))
	require.NoError(t, err)
	require.Len(t, ib.req.Inputs, inputs+1)
	for i := range inputs {
		require.Equal(t, infer.Shape{1, 1, int64(i + 1)}, ib.req.Inputs[i].Shape)
		require.Equal(t, len(ib.req.Inputs[i].Shape), cap(ib.req.Inputs[i].Shape), "input %d's shape may not grow into its neighbour", i)
	}
	require.Empty(t, ib.req.Inputs[inputs].Shape)
	// Appending to one shape and changing another leaves the rest alone.
	_ = append(ib.req.Inputs[0].Shape, 99)
	ib.req.Inputs[2].Shape[0] = 5
	for i := range inputs {
		want := infer.Shape{1, 1, int64(i + 1)}
		if i == 2 {
			want[0] = 5
		}
		require.Equal(t, want, ib.req.Inputs[i].Shape)
	}
}

// A JSON-only request body goes back to a pool once decoded, so the
// decoded request must not refer to it: overwriting the body afterwards
// changes nothing.
func TestDecodedJSONRequestOwnsItsMemory(t *testing.T) {
	body := []byte(`{"id":"req-1","parameters":{"p":"str","n":3},"inputs":[` +
		`{"name":"f","datatype":"FP32","shape":[2],"data":[1.5,-2],"parameters":{"k":"v"}},` +
		`{"name":"s","datatype":"BYTES","shape":[2],"data":["ab","c\u00e9"]},` +
		`{"name":"b","datatype":"BOOL","shape":[1],"data":[true]}],` +
		`"outputs":[{"name":"y","parameters":{"binary_data":true,"q":"w"}}]}`)
	ib, err := decodeInferJSON(body)
	require.NoError(t, err)
	want := fmt.Sprintf("%#v %#v %#v", ib.req, ib.binarySize, ib.outputBinary)
	for i := range body {
		body[i] = 'X'
	}
	require.Equal(t, want, fmt.Sprintf("%#v %#v %#v", ib.req, ib.binarySize, ib.outputBinary))
}

// TestDecodeShapeOverflowTritonWording follows Triton's QA L0_http
// test_buffer_size_overflow: a shape whose element count passes int64 and
// one whose FP32 byte size does are refused (400) in Triton's words.
func TestDecodeShapeOverflowTritonWording(t *testing.T) {
	for _, tc := range []struct{ shape, want string }{
		{"[16,1152921504606846978]", "invalid shape for input 'X': shape [16,1152921504606846978] causes total element count to exceed maximum size of 9223372036854775807"},
		{"[4,1152921504606846978]", "byte size overflow for input 'X': element count (4611686018427387912) * data type size (4) exceeds maximum allowed size (9223372036854775807)"},
		{"[4,1073741824]", "input 'X': shape [4,1073741824] holds more than 2147483648 elements"},
	} {
		_, err := decodeInferJSON([]byte(oneInput("FP32", tc.shape, "[1.0]")))
		ie, ok := errors.AsType[*apierr.Error](err)
		require.True(t, ok, "error %v", err)
		require.Equal(t, apierr.KindInvalid, ie.Kind)
		require.Equal(t, reasonInvalidShape, ie.Reason, "error %v", err)
		require.Contains(t, ie.Error(), tc.want)
	}
}
