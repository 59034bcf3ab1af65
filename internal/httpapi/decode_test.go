package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
)

func le16(v ...uint16) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	return b
}

func le32(v ...uint32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func le64(v ...uint64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

func f32s(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func oneInput(dt, shape, data string) string {
	return `{"inputs":[{"name":"X","datatype":"` + dt + `","shape":` + shape + `,"data":` + data + `}]}`
}

func TestDecodeDataTypes(t *testing.T) {
	neg := func(v int64) uint64 { return uint64(v) }
	for _, tc := range []struct {
		name string
		body string
		want []byte
	}{
		{"BOOL", oneInput("BOOL", "[3]", "[true,false,true]"), []byte{1, 0, 1}},
		{"INT8 limits", oneInput("INT8", "[2]", "[-128,127]"), []byte{0x80, 0x7f}},
		{"UINT8 limits", oneInput("UINT8", "[2]", "[0,255]"), []byte{0, 255}},
		{"INT16", oneInput("INT16", "[2]", "[-32768,32767]"), le16(0x8000, 0x7fff)},
		{"UINT16", oneInput("UINT16", "[1]", "[65535]"), le16(0xffff)},
		{"INT32", oneInput("INT32", "[3]", "[-2147483648,0,2147483647]"), le32(0x80000000, 0, 0x7fffffff)},
		{"UINT32", oneInput("UINT32", "[1]", "[4294967295]"), le32(0xffffffff)},
		{"INT64", oneInput("INT64", "[2]", "[-9223372036854775808,9223372036854775807]"), le64(neg(math.MinInt64), math.MaxInt64)},
		{"UINT64", oneInput("UINT64", "[1]", "[18446744073709551615]"), le64(math.MaxUint64)},
		{"integral float in INT32", oneInput("INT32", "[3]", "[1.0,-2e2,-0.0]"), le32(1, uint32(0xffffff38), 0)},
		{"negative zero in UINT8", oneInput("UINT8", "[1]", "[-0]"), []byte{0}},
		{"FP32", oneInput("FP32", "[3]", "[1.5,-0.25,3e38]"), f32s(1.5, -0.25, 3e38)},
		{"FP32 rounds", oneInput("FP32", "[1]", "[0.1]"), f32s(0.1)},
		{"FP32 underflow is zero", oneInput("FP32", "[1]", "[1e-50]"), f32s(0)},
		{"FP64", oneInput("FP64", "[2]", "[0.1,-1e300]"), le64(math.Float64bits(0.1), math.Float64bits(-1e300))},
		{"FP16", oneInput("FP16", "[4]", "[1,-2,65504,0.1]"), le16(0x3c00, 0xc000, 0x7bff, 0x2e66)},
		{"FP16 subnormal", oneInput("FP16", "[1]", "[5.960464477539063e-8]"), le16(0x0001)},
		{"BF16", oneInput("BF16", "[3]", "[1,-2,0.333333333]"), le16(0x3f80, 0xc000, 0x3eab)},
		{
			"BYTES", oneInput("BYTES", "[3]", `["ab","","\u00e9\n\"\ud83d\ude00"]`),
			append(append(append(le32(2), "ab"...), le32(0)...), append(le32(8), "é\n\"😀"...)...),
		},
		{"BYTES lone surrogate", oneInput("BYTES", "[1]", `["\ud800x"]`), append(le32(4), "\uFFFDx"...)},
		{"nested", oneInput("INT32", "[2,2]", "[[1,2],[3,4]]"), le32(1, 2, 3, 4)},
		{"deep nested", oneInput("INT8", "[2,1,2]", "[[[1,2]],[[3,4]]]"), []byte{1, 2, 3, 4}},
		{"flat for 2-d", oneInput("INT8", "[2,2]", "[1,2,3,4]"), []byte{1, 2, 3, 4}},
		{"empty", oneInput("FP32", "[0]", "[]"), []byte{}},
		{"empty nested", oneInput("FP32", "[2,0]", "[[],[]]"), []byte{}},
		{"whitespace", " {\n\"inputs\" : [ { \"name\" : \"X\" , \"datatype\":\"INT8\", \"shape\" : [ 2 ] , \"data\" : [ [ 1 ] , [ 2 ] ] } ] } \n", []byte{1, 2}},
		{"data before datatype", `{"inputs":[{"data":[1,2],"name":"X","shape":[2],"datatype":"UINT16"}]}`, le16(1, 2)},
		{"unknown keys skipped", `{"x":{"y":[1,{"z":null}]},"inputs":[{"name":"X","extra":[true],"datatype":"INT8","shape":[1],"data":[7]}]}`, []byte{7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := decodeInferJSON([]byte(tc.body))
			require.NoError(t, err)
			require.Len(t, b.req.Inputs, 1)
			require.Equal(t, tc.want, b.req.Inputs[0].Data)
			require.NoError(t, b.req.Inputs[0].CheckSize())
		})
	}
}

func TestDecodeRequestFields(t *testing.T) {
	body := `{"id":"abc\u0041","parameters":{"s":"v","b":true,"i":-3,"u":18446744073709551615,"f":0.5,"binary_data_output":true},
		"inputs":[{"name":"X","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":1,"p":"q"}}],
		"outputs":[{"name":"A"},{"name":"B","parameters":{"binary_data":false}}]}`
	b, err := decodeInferJSON([]byte(body))
	require.NoError(t, err)
	require.Equal(t, "abcA", b.req.ID)
	require.Equal(t, infer.Parameters{"s": "v", "b": true, "i": int64(-3), "u": uint64(math.MaxUint64), "f": 0.5}, b.req.Parameters)
	require.True(t, b.binaryOutput)
	require.Equal(t, []int64{1}, b.binarySize)
	require.Nil(t, b.req.Inputs[0].Data)
	require.Equal(t, infer.Parameters{"p": "q"}, b.req.Inputs[0].Parameters)
	require.Equal(t, []infer.RequestedOutput{{Name: "A"}, {Name: "B"}}, b.req.Outputs)
	require.Equal(t, []int8{-1, 0}, b.outputBinary)
	require.True(t, b.wantsBinary("A"))
	require.False(t, b.wantsBinary("B"))
	require.True(t, b.wantsBinary("C"), "unrequested outputs follow the request default")
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		reason string
		want   string
	}{
		{"not an object", `[1]`, reasonInvalidJSON, "byte offset 0"},
		{"trailing data", `{"inputs":[]} x`, reasonInvalidJSON, "after the top-level value"},
		{"trailing comma", oneInput("INT8", "[2]", "[1,2,]"), reasonInvalidJSON, "a value after ','"},
		{"leading comma", oneInput("INT8", "[2]", "[,1]"), reasonInvalidJSON, "unexpected ','"},
		{"bad literal", oneInput("BOOL", "[1]", "[tru]"), reasonInvalidJSON, "expected a value"},
		{"bad number", oneInput("FP32", "[1]", "[1.]"), reasonInvalidJSON, "after the decimal point"},
		{"leading zero", oneInput("INT32", "[1]", "[01]"), reasonInvalidJSON, "after an array element"},
		{"control char in string", "{\"id\":\"a\x01\",\"inputs\":[]}", reasonInvalidJSON, "control character"},
		{"bad escape", `{"id":"\x","inputs":[]}`, reasonInvalidJSON, "invalid escape"},
		{"id not string", `{"id":5,"inputs":[]}`, reasonInvalidRequest, `"id"`},
		{"duplicate inputs key", `{"inputs":[],"inputs":[]}`, reasonInvalidRequest, `"inputs" more than once`},
		{"duplicate data", `{"inputs":[{"name":"X","datatype":"INT8","shape":[1],"data":[1],"data":[2]}]}`, reasonInvalidRequest, "input 'X'"},
		{"missing name", `{"inputs":[{"datatype":"INT8","shape":[1],"data":[1]}]}`, reasonInvalidInput, "input #0"},
		{"missing datatype", `{"inputs":[{"name":"X","shape":[1],"data":[1]}]}`, reasonInvalidDatatype, "input 'X'"},
		{"missing shape", `{"inputs":[{"name":"X","datatype":"INT8","data":[1]}]}`, reasonInvalidShape, "input 'X'"},
		{"missing data", `{"inputs":[{"name":"X","datatype":"INT8","shape":[1]}]}`, reasonInvalidInput, "input 'X' has no \"data\""},
		{"data and binary", `{"inputs":[{"name":"X","datatype":"INT8","shape":[1],"data":[1],"parameters":{"binary_data_size":1}}]}`, reasonInvalidInput, "both"},
		{"data not array", oneInput("INT8", "[1]", "1"), reasonInvalidInput, `"data" must be an array`},
		{"negative dim", oneInput("INT8", "[-1]", "[]"), reasonInvalidShape, "negative"},
		{"fractional dim", oneInput("INT8", "[1.5]", "[1]"), reasonInvalidShape, "1.5"},
		{"too many elements", oneInput("INT8", "[4294967296,4294967296]", "[1]"), reasonInvalidShape, "input 'X'"},
		{"INT8 overflow", oneInput("INT8", "[1]", "[128]"), reasonValueOutOfRange, "input 'X': element 0: 128 is out of range for INT8"},
		{"INT8 underflow", oneInput("INT8", "[2]", "[0,-129]"), reasonValueOutOfRange, "element 1: -129"},
		{"UINT negative", oneInput("UINT32", "[1]", "[-1]"), reasonValueOutOfRange, "-1 is out of range for UINT32"},
		{"UINT64 overflow", oneInput("UINT64", "[1]", "[18446744073709551616]"), reasonValueOutOfRange, "UINT64"},
		{"INT64 overflow", oneInput("INT64", "[1]", "[9223372036854775808]"), reasonValueOutOfRange, "INT64"},
		{"fraction in INT", oneInput("INT16", "[1]", "[2.5]"), reasonContentsMismatch, "2.5 is not an integer"},
		{"big float in INT32", oneInput("INT32", "[1]", "[3e9]"), reasonValueOutOfRange, "3e9"},
		{"FP32 overflow", oneInput("FP32", "[1]", "[1e39]"), reasonValueOutOfRange, "FP32"},
		{"FP16 overflow", oneInput("FP16", "[1]", "[65520]"), reasonValueOutOfRange, "65520 is out of range for FP16"},
		{"BF16 overflow", oneInput("BF16", "[1]", "[1e39]"), reasonValueOutOfRange, "BF16"},
		{"number in BOOL", oneInput("BOOL", "[1]", "[1]"), reasonContentsMismatch, "expected true or false for BOOL, got a number"},
		{"number in BYTES", oneInput("BYTES", "[1]", "[1]"), reasonContentsMismatch, "expected a string for BYTES"},
		{"null in FP32", oneInput("FP32", "[1]", "[null]"), reasonContentsMismatch, "got null"},
		{"object in FP32", oneInput("FP32", "[1]", `[{"a":1}]`), reasonContentsMismatch, "got an object"},
		{"ragged", oneInput("INT8", "[2,2]", "[[1,2],[3]]"), reasonRaggedData, "lengths 2 and 1"},
		{"mixed levels", oneInput("INT8", "[2]", "[1,[2]]"), reasonRaggedData, "input 'X'"},
		{"mixed levels 2", oneInput("INT8", "[2]", "[[1],2]"), reasonRaggedData, "input 'X'"},
		{"mixed levels after empty", oneInput("INT8", "[1]", "[[[]],[1]]"), reasonRaggedData, "input 'X'"},
		{"too few", oneInput("INT8", "[3]", "[1,2]"), reasonSizeMismatch, "input 'X': shape [3] needs 3 elements, got 2"},
		{"too many", oneInput("INT8", "[1]", "[1,2]"), reasonSizeMismatch, "needs 1 elements, got more"},
		{"too deep", oneInput("INT8", "[1]", strings.Repeat("[", 100)+"1"+strings.Repeat("]", 100)), reasonInvalidJSON, "JSON nesting depth exceeds maximum allowed limit (100)"},
		{"too deep elsewhere", `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"inputs":[]}`, reasonInvalidJSON, "JSON nesting depth exceeds maximum allowed limit (100)"},
		{"bad binary_data_size", `{"inputs":[{"name":"X","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":-1}}]}`, reasonInvalidParameter, "input 'X'"},
		{"bad binary_data_output", `{"parameters":{"binary_data_output":1},"inputs":[]}`, reasonInvalidParameter, "binary_data_output"},
		{"bad binary_data", `{"inputs":[],"outputs":[{"name":"Y","parameters":{"binary_data":"yes"}}]}`, reasonInvalidParameter, "output 'Y'"},
		{"nested parameter", `{"parameters":{"x":[1]},"inputs":[]}`, reasonInvalidParameter, `"x"`},
		{"duplicate output", `{"inputs":[],"outputs":[{"name":"Y"},{"name":"Y"}]}`, reasonDuplicateOutput, "output 'Y'"},
		{"output without name", `{"inputs":[],"outputs":[{}]}`, reasonInvalidRequest, "output #0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeInferJSON([]byte(tc.body))
			var ie *apierr.Error
			require.True(t, errors.As(err, &ie), "error %v", err)
			require.Equal(t, tc.reason, ie.Reason, "error: %v", err)
			require.Contains(t, ie.Error(), tc.want)
		})
	}
}

// TestDecodeJSONNestingDepthTritonLimit follows Triton's QA L0_http
// test_json_recursion_depth_limit: a "data" array nested 50 deep (shape
// [1,1]) is read, one nested 120 deep is refused with Triton's words, for
// BYTES and INT64 alike; Triton's limit takes 99 arrays and refuses 100.
func TestDecodeJSONNestingDepthTritonLimit(t *testing.T) {
	nested := func(depth int, v string) string {
		return strings.Repeat("[", depth) + v + strings.Repeat("]", depth)
	}
	for _, tc := range []struct {
		dt, value string
		depth     int
		ok        bool
	}{
		{"BYTES", `"hello"`, 120, false},
		{"BYTES", `"hello"`, 50, true},
		{"INT64", "123", 120, false},
		{"INT64", "123", 50, true},
		{"INT64", "123", 99, true},
		{"INT64", "123", 100, false},
	} {
		t.Run(tc.dt+"/"+strconv.Itoa(tc.depth), func(t *testing.T) {
			b, err := decodeInferJSON([]byte(oneInput(tc.dt, "[1,1]", nested(tc.depth, tc.value))))
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, infer.Shape{1, 1}, b.req.Inputs[0].Shape)
				require.NotEmpty(t, b.req.Inputs[0].Data)
				return
			}
			ie, ok := errors.AsType[*apierr.Error](err)
			require.True(t, ok, "error %v", err)
			require.Equal(t, reasonInvalidJSON, ie.Reason)
			require.Contains(t, ie.Error(), "JSON nesting depth exceeds maximum allowed limit (100)")
		})
	}
}

// TestDecodeMatchesEncodingJSON checks the scanner against encoding/json on
// the values both understand: every number the scanner parses into FP64
// equals what encoding/json reads.
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	data := `[0, -0, 1e-320, 2.2250738585072014e-308, 1.7976931348623157e308, 123456789012345678901234567890, 0.1, -3.14159e-5, 5e-324]`
	b, err := decodeInferJSON([]byte(oneInput("FP64", "[9]", data)))
	require.NoError(t, err)
	var want []float64
	require.NoError(t, json.Unmarshal([]byte(data), &want))
	got := b.req.Inputs[0].Data
	for i, w := range want {
		require.Equal(t, math.Float64bits(w), binary.LittleEndian.Uint64(got[8*i:]), "element %d", i)
	}
}

// TestDecodeBoundedAllocation makes sure a shape claim alone cannot make the
// decoder allocate: a tiny body claiming 2^31 elements is refused quickly
// and cheaply.
func TestDecodeBoundedAllocation(t *testing.T) {
	body := []byte(oneInput("FP64", "[2147483648]", "[1,2,3]"))
	allocs := testing.AllocsPerRun(10, func() {
		_, err := decodeInferJSON(body)
		require.Error(t, err)
	})
	require.Less(t, allocs, 20.0)
	var ms1, ms2 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	_, _ = decodeInferJSON([]byte(oneInput("FP64", "[1073741824]", "[1,2,3]")))
	runtime.ReadMemStats(&ms2)
	grew := ms2.TotalAlloc - ms1.TotalAlloc
	require.Less(t, grew, uint64(1<<20), "allocated %d bytes for a 3-element body", grew)
}

func TestAttachBinary(t *testing.T) {
	js := `{"inputs":[{"name":"A","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}},
		{"name":"B","datatype":"INT8","shape":[2],"data":[1,2]},
		{"name":"C","datatype":"FP16","shape":[1],"parameters":{"binary_data_size":2}}]}`
	bin := append(append(append(le32(1), 'x'), append(le32(2), "yz"...)...), 0x00, 0x3c)
	body := append([]byte(js), bin...)
	b, err := decodeInferBody(body, len(js))
	require.NoError(t, err)
	require.Equal(t, bin[:11], b.req.Inputs[0].Data)
	require.Equal(t, []byte{1, 2}, b.req.Inputs[1].Data)
	require.Equal(t, []byte{0x00, 0x3c}, b.req.Inputs[2].Data)
	for _, in := range b.req.Inputs {
		require.NoError(t, in.CheckSize())
	}

	for _, tc := range []struct {
		name string
		bin  []byte
		want string
	}{
		{"short", bin[:12], "input 'C': binary_data_size is 2 but only 1 bytes of binary data remain"},
		{"long", append(append([]byte(nil), bin...), 9), "add up to 13"},
		{
			"bytes overrun", append(append(append(le32(1), 'x'), append(le32(9), "yz"...)...), 0x00, 0x3c),
			"input 'A': tensor data size does not match its shape: BYTES element of 9 bytes overruns the buffer",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeInferBody(append([]byte(js), tc.bin...), len(js))
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("bytes element count", func(t *testing.T) {
		js := `{"inputs":[{"name":"A","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":5}}]}`
		_, err := decodeInferBody(append([]byte(js), append(le32(1), 'x')...), len(js))
		require.ErrorContains(t, err, "input 'A': binary data holds 1 BYTES elements but shape [2] needs 2")
	})
}

func TestDecodeRawBody(t *testing.T) {
	md := func(dt infer.DataType, shape ...int64) *modelrepo.Metadata {
		return &modelrepo.Metadata{Name: "m", Inputs: []infer.TensorSpec{{Name: "X", DataType: dt, Shape: shape}}}
	}
	for _, tc := range []struct {
		name     string
		md       *modelrepo.Metadata
		batching bool
		body     []byte
		want     infer.Shape
		err      string
	}{
		{"batching", md(infer.FP32, -1, 2), true, f32s(1, 2), infer.Shape{1, 2}, ""},
		{"fixed", md(infer.Int8, 3), false, []byte{1, 2, 3}, infer.Shape{3}, ""},
		{"variable from size", md(infer.FP32, -1, -1), true, f32s(1, 2, 3), infer.Shape{1, 3}, ""},
		{"wrong size", md(infer.FP32, -1, 2), true, f32s(1), nil, "input 'X'"},
		{"not whole elements", md(infer.FP32, -1, -1), true, []byte{1, 2, 3}, nil, "whole number"},
		{"two variable dims", md(infer.FP32, -1, -1), false, f32s(1), nil, "more than one variable dimension"},
		// Triton's wording, which its QA (L0_http test_multi_variable_dimensions) matches on.
		{
			"two variable dims, Triton's words", md(infer.FP32, -1, -1), false, f32s(1), nil,
			"The shape of the raw input 'X' can not be deduced because there are more than one variable-sized dimension",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := decodeRawBody(tc.md, tc.batching, tc.body)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, b.req.Inputs[0].Shape)
			require.Equal(t, tc.body, b.req.Inputs[0].Data)
			require.True(t, b.binaryOutput)
		})
	}
}

// A raw body (Inference-Header-Content-Length: 0) for a BYTES input is
// the element itself, without a length prefix, as Triton reads it
// (binary tensor data extension; modelled on qa/L0_http/http_test.py's
// raw binary cases with a BYTES model).
func TestDecodeRawBodyBytes(t *testing.T) {
	md := func(shape ...int64) *modelrepo.Metadata {
		return &modelrepo.Metadata{Name: "m", Inputs: []infer.TensorSpec{{Name: "X", DataType: infer.Bytes, Shape: shape}}}
	}
	for _, tc := range []struct {
		name     string
		md       *modelrepo.Metadata
		batching bool
		want     infer.Shape
	}{
		{"batching", md(-1, 1), true, infer.Shape{1, 1}},
		{"fixed one", md(1), false, infer.Shape{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := decodeRawBody(tc.md, tc.batching, []byte("hello raw"))
			require.NoError(t, err)
			require.Equal(t, tc.want, b.req.Inputs[0].Shape)
			require.Equal(t, append(le32(9), "hello raw"...), b.req.Inputs[0].Data)
			require.True(t, b.binaryOutput)
		})
	}
	_, err := decodeRawBody(md(2), false, []byte("ab"))
	require.ErrorContains(t, err, "For BYTE datatype raw input 'X', the model must have input shape [1]: a raw binary body is one BYTES element, but input 'X' has shape [2]")
	// A variable dimension is refused, as Triton refuses it
	// (qa/L0_http/http_test.py test_byte_too_many_elements: dims [-1],
	// 400 with these words); only dims [1] take a raw BYTES body.
	for _, c := range []struct {
		md       *modelrepo.Metadata
		batching bool
	}{{md(-1), false}, {md(-1, -1), true}, {md(-1, 1), false}} {
		_, err = decodeRawBody(c.md, c.batching, []byte("427"))
		var ie *apierr.Error
		require.ErrorAs(t, err, &ie, "%v", c.md.Inputs[0].Shape)
		require.Equal(t, apierr.KindInvalid, ie.Kind)
		require.Equal(t, reasonRawInput, ie.Reason)
		require.ErrorContains(t, err, "For BYTE datatype raw input 'X', the model must have input shape [1]")
	}
	b, err := decodeRawBody(md(1), false, nil)
	require.NoError(t, err, "an empty body is one empty string")
	require.Equal(t, le32(0), b.req.Inputs[0].Data)
}

func TestDecodeManyTensors(t *testing.T) {
	var ins, outs []string
	for i := range 20 {
		ins = append(ins, `{"name":"I`+strconv.Itoa(i)+`","datatype":"INT8","shape":[1],"data":[1]}`)
		bin := "false"
		if i%2 == 0 {
			bin = "true"
		}
		outs = append(outs, `{"name":"O`+strconv.Itoa(i)+`","parameters":{"binary_data":`+bin+`}}`)
	}
	body := `{"inputs":[` + strings.Join(ins, ",") + `],"outputs":[` + strings.Join(outs, ",") + `]}`
	b, err := decodeInferJSON([]byte(body))
	require.NoError(t, err)
	require.Len(t, b.req.Inputs, 20)
	resp := []infer.Tensor{{Name: "O3"}, {Name: "O4"}, {Name: "unrequested"}}
	require.Equal(t, []bool{false, true, false}, b.binaryOutputs(nil, resp))

	dupIn := `{"inputs":[` + strings.Join(append(ins, ins[3]), ",") + `]}`
	_, err = decodeInferJSON([]byte(dupIn))
	require.ErrorContains(t, err, "input 'I3' appears more than once")
	dupOut := `{"inputs":[],"outputs":[` + strings.Join(append(outs, outs[15]), ",") + `]}`
	_, err = decodeInferJSON([]byte(dupOut))
	require.ErrorContains(t, err, "output 'O15' already exists in request", "newer Triton's wording (QA L0_http test_duplicate_output_names)")
	require.ErrorContains(t, err, "Duplicate output name 'O15' is not allowed in a request", "older Triton's wording")
}
