package grpcapi

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// le builds little-endian wire bytes from values of one fixed-size type.
func le[T any](vals ...T) []byte {
	var b []byte
	for _, v := range vals {
		b, _ = binary.Append(b, binary.LittleEndian, v)
	}
	return b
}

func byteElems(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = infer.AppendBytesElement(b, []byte(e))
	}
	return b
}

// datatypeCases cover every data type with typed contents (where the
// protocol allows them) and the wire bytes they must become.
var datatypeCases = []struct {
	datatype string
	shape    []int64
	contents *pb.InferTensorContents // nil: raw only
	want     []byte
}{
	{"BOOL", []int64{3}, &pb.InferTensorContents{BoolContents: []bool{true, false, true}}, []byte{1, 0, 1}},
	{"INT8", []int64{1, 3}, &pb.InferTensorContents{IntContents: []int32{-128, 0, 127}}, le[int8](-128, 0, 127)},
	{"INT16", []int64{3}, &pb.InferTensorContents{IntContents: []int32{-32768, 1, 32767}}, le[int16](-32768, 1, 32767)},
	{"INT32", []int64{2, 1}, &pb.InferTensorContents{IntContents: []int32{math.MinInt32, math.MaxInt32}}, le[int32](math.MinInt32, math.MaxInt32)},
	{"INT64", []int64{2}, &pb.InferTensorContents{Int64Contents: []int64{math.MinInt64, 5}}, le[int64](math.MinInt64, 5)},
	{"UINT8", []int64{2}, &pb.InferTensorContents{UintContents: []uint32{0, 255}}, []byte{0, 255}},
	{"UINT16", []int64{2}, &pb.InferTensorContents{UintContents: []uint32{1, 65535}}, le[uint16](1, 65535)},
	{"UINT32", []int64{1}, &pb.InferTensorContents{UintContents: []uint32{math.MaxUint32}}, le[uint32](math.MaxUint32)},
	{"UINT64", []int64{2}, &pb.InferTensorContents{Uint64Contents: []uint64{math.MaxUint64, 7}}, le[uint64](math.MaxUint64, 7)},
	{"FP32", []int64{2}, &pb.InferTensorContents{Fp32Contents: []float32{1.5, -2}}, le[float32](1.5, -2)},
	{"FP64", []int64{1}, &pb.InferTensorContents{Fp64Contents: []float64{3.25}}, le[float64](3.25)},
	{"BYTES", []int64{2}, &pb.InferTensorContents{BytesContents: [][]byte{[]byte("ab"), {}}}, byteElems("ab", "")},
	{"FP16", []int64{2}, nil, le[uint16](0x3c00, 0xc000)},
	{"BF16", []int64{2}, nil, le[uint16](0x3f80, 0xc000)},
	{"INT32", []int64{0, 4}, &pb.InferTensorContents{}, []byte{}},
}

func TestDecodeTyped(t *testing.T) {
	for _, tc := range datatypeCases {
		if tc.contents == nil {
			continue
		}
		t.Run(tc.datatype, func(t *testing.T) {
			req := &pb.ModelInferRequest{
				ModelName: "m",
				Inputs: []*pb.ModelInferRequest_InferInputTensor{
					{Name: "x", Datatype: tc.datatype, Shape: tc.shape, Contents: tc.contents},
				},
			}
			got, err := DecodeInferRequest(req)
			require.NoError(t, err)
			require.Len(t, got.Inputs, 1)
			in := got.Inputs[0]
			require.Equal(t, tc.datatype, in.DataType.String())
			require.Equal(t, infer.Shape(tc.shape), in.Shape)
			require.Equal(t, tc.want, in.Data)
			require.NoError(t, in.CheckSize())
		})
	}
}

func TestDecodeRaw(t *testing.T) {
	req := &pb.ModelInferRequest{ModelName: "m", Id: "r1", ModelVersion: "2"}
	for i, tc := range datatypeCases {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{
			Name: "in" + string(rune('a'+i)), Datatype: tc.datatype, Shape: tc.shape,
		})
		req.RawInputContents = append(req.RawInputContents, tc.want)
	}
	got, err := DecodeInferRequest(req)
	require.NoError(t, err)
	require.Equal(t, "r1", got.ID)
	require.Equal(t, "m", got.Model)
	require.Equal(t, "2", got.Version)
	require.Len(t, got.Inputs, len(datatypeCases))
	for i, tc := range datatypeCases {
		in := got.Inputs[i]
		require.Equal(t, tc.datatype, in.DataType.String(), "input %d", i)
		require.Equal(t, tc.want, in.Data, "input %d", i)
		require.NoError(t, in.CheckSize(), "input %d", i)
	}
}

func TestDecodeParametersAndOutputs(t *testing.T) {
	req := &pb.ModelInferRequest{
		ModelName: "m",
		Parameters: map[string]*pb.InferParameter{
			"b": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
			"i": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -3}},
			"s": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "x"}},
			"d": {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 0.5}},
			"u": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: math.MaxUint64}},
		},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: "x", Datatype: "FP32", Shape: []int64{1},
			Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}},
			Parameters: map[string]*pb.InferParameter{
				"tp": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "v"}},
			},
		}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "y", Parameters: map[string]*pb.InferParameter{
				"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 2}},
			}},
		},
	}
	got, err := DecodeInferRequest(req)
	require.NoError(t, err)
	require.Equal(t, infer.Parameters{"b": true, "i": int64(-3), "s": "x", "d": 0.5, "u": uint64(math.MaxUint64)}, got.Parameters)
	require.Equal(t, infer.Parameters{"tp": "v"}, got.Inputs[0].Parameters)
	require.Equal(t, []infer.RequestedOutput{{Name: "y", Parameters: infer.Parameters{"classification": int64(2)}}}, got.Outputs)

	// Back out again through a response.
	resp := EncodeInferResponse(&infer.Response{ID: "1", Model: "m", Version: "3", Parameters: got.Parameters})
	again, err := requests.Params("response", "", resp.GetParameters())
	require.NoError(t, err)
	require.Equal(t, got.Parameters, again)
}

func TestEncodeInferResponse(t *testing.T) {
	resp := &infer.Response{
		ID: "id7", Model: "m", Version: "2",
		Outputs: []infer.Tensor{
			{Name: "a", DataType: infer.FP32, Shape: infer.Shape{1, 2}, Data: le[float32](1, 2)},
			{Name: "b", DataType: infer.Bytes, Shape: infer.Shape{1}, Data: byteElems("hi")},
			{Name: "empty", DataType: infer.Int64, Shape: infer.Shape{0}},
		},
	}
	got := EncodeInferResponse(resp)
	require.Equal(t, "id7", got.GetId())
	require.Equal(t, "m", got.GetModelName())
	require.Equal(t, "2", got.GetModelVersion())
	require.Len(t, got.GetOutputs(), 3)
	require.Len(t, got.GetRawOutputContents(), 3, "one raw entry per output, even an empty one")
	require.Equal(t, "FP32", got.GetOutputs()[0].GetDatatype())
	require.Equal(t, []int64{1, 2}, got.GetOutputs()[0].GetShape())
	require.Equal(t, le[float32](1, 2), got.GetRawOutputContents()[0])
	require.Equal(t, "BYTES", got.GetOutputs()[1].GetDatatype())
	require.Equal(t, byteElems("hi"), got.GetRawOutputContents()[1])
	require.Empty(t, got.GetRawOutputContents()[2])
	require.Nil(t, got.GetOutputs()[0].GetContents(), "outputs travel raw, like Triton")
}

func TestDecodeErrors(t *testing.T) {
	input := func(name, dt string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape, Contents: c}
	}
	ints := func(v ...int32) *pb.InferTensorContents { return &pb.InferTensorContents{IntContents: v} }
	tests := []struct {
		name   string
		req    *pb.ModelInferRequest
		reason string
		msg    string
	}{
		{"no model", &pb.ModelInferRequest{}, reasonMissingModelName, "model_name"},
		{"unknown datatype", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			input("INPUT0", "FLOAT32", []int64{1}, nil),
		}}, reasonInvalidDatatype, `input 'INPUT0': unknown datatype "FLOAT32"`},
		{"negative dim", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			input("INPUT0", "INT32", []int64{-1, 2}, nil),
		}}, reasonInvalidShape, "input 'INPUT0'"},
		{"huge shape", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			input("INPUT0", "INT32", []int64{1 << 40, 1 << 40}, ints(1)),
		}}, reasonInvalidShape, "input 'INPUT0'"},
		{
			"typed count", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "INT32", []int64{1, 4}, ints(1, 2, 3)),
			}}, reasonSizeMismatch,
			"input 'INPUT0': int_contents has 3 elements but shape [1,4] needs 4",
		},
		// Raw sizes that disagree with the shape carry Triton's words too
		// (qa/L0_input_validation/input_validation_test.py
		// test_input_shape_validation, test_input_string_shape_validation).
		{
			"raw size", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "FP32", []int64{1, 8}, nil),
			}, RawInputContents: [][]byte{make([]byte, 40)}}, reasonSizeMismatch,
			"input 'INPUT0': raw content is 40 bytes but shape [1,8] of FP32 needs 32 (input byte size mismatch for input 'INPUT0' for model 'm'. Expected 32, got 40)",
		},
		{
			"raw strings, too few", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "BYTES", []int64{1, 3}, nil),
			}, RawInputContents: [][]byte{{1, 0, 0, 0, 'a', 1, 0, 0, 0, 'b'}}}, reasonSizeMismatch,
			"(expected 3 string elements for inference input 'INPUT0' for model 'm', got 2)",
		},
		{
			"raw strings, too many", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "BYTES", []int64{1}, nil),
			}, RawInputContents: [][]byte{{1, 0, 0, 0, 'a', 1, 0, 0, 0, 'b', 0, 0, 0, 0}}}, reasonSizeMismatch,
			"(unexpected number of string elements 2 for inference input 'INPUT0' for model 'm', expecting 1)",
		},
		{"no data", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			input("INPUT0", "FP32", []int64{2}, nil),
		}}, reasonSizeMismatch, "input 'INPUT0': fp32_contents has 0 elements"},
		{
			"wrong field", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "FP32", []int64{1}, ints(1)),
			}}, reasonContentsMismatch,
			"input 'INPUT0': datatype FP32 takes fp32_contents, got int_contents",
		},
		{
			"int8 range", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "INT8", []int64{2}, ints(1, 128)),
			}}, reasonValueOutOfRange,
			"input 'INPUT0': element 1 value 128 is out of range for INT8",
		},
		{"int16 range", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			input("INPUT0", "INT16", []int64{1}, ints(-32769)),
		}}, reasonValueOutOfRange, "input 'INPUT0'"},
		{"uint8 range", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			input("INPUT0", "UINT8", []int64{1}, &pb.InferTensorContents{UintContents: []uint32{256}}),
		}}, reasonValueOutOfRange, "input 'INPUT0'"},
		{
			"fp16 typed", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "FP16", []int64{1}, &pb.InferTensorContents{Fp32Contents: []float32{1}}),
			}}, reasonRawOnlyDatatype,
			"input 'INPUT0': FP16 data must travel in raw_input_contents",
		},
		{
			"duplicate", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
				input("INPUT0", "INT32", []int64{1}, ints(1)), input("INPUT0", "INT32", []int64{1}, ints(1)),
			}},
			reasonDuplicateInput, "input 'INPUT0'",
		},
		{
			"raw size", &pb.ModelInferRequest{
				ModelName:        "m",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{input("INPUT0", "INT32", []int64{1, 16}, nil)},
				RawInputContents: [][]byte{make([]byte, 60)},
			}, reasonSizeMismatch,
			"input 'INPUT0': raw content is 60 bytes but shape [1,16] of INT32 needs 64",
		},
		{
			"raw bytes count", &pb.ModelInferRequest{
				ModelName:        "m",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{input("TEXT", "BYTES", []int64{3}, nil)},
				RawInputContents: [][]byte{byteElems("a", "b")},
			}, reasonSizeMismatch,
			"input 'TEXT': raw content holds 2 BYTES elements but shape [3] needs 3",
		},
		{"raw bytes truncated", &pb.ModelInferRequest{
			ModelName:        "m",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{input("TEXT", "BYTES", []int64{1}, nil)},
			RawInputContents: [][]byte{{9, 0, 0, 0, 'a'}},
		}, reasonSizeMismatch, "input 'TEXT'"},
		{
			"raw too few", &pb.ModelInferRequest{
				ModelName: "m",
				Inputs: []*pb.ModelInferRequest_InferInputTensor{
					input("INPUT0", "INT32", []int64{1}, nil), input("INPUT1", "INT32", []int64{1}, nil),
				},
				RawInputContents: [][]byte{le[int32](1)},
			}, reasonRawInputCount,
			"input 'INPUT1': no raw content: raw_input_contents has 1 entries for 2 inputs",
		},
		{
			"raw too many", &pb.ModelInferRequest{
				ModelName:        "m",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{input("INPUT0", "INT32", []int64{1}, nil)},
				RawInputContents: [][]byte{le[int32](1), le[int32](2)},
			}, reasonRawInputCount,
			"raw_input_contents has 2 entries for 1 inputs",
		},
		{
			"mixed", &pb.ModelInferRequest{
				ModelName: "m",
				Inputs: []*pb.ModelInferRequest_InferInputTensor{
					input("INPUT0", "INT32", []int64{1}, nil), input("INPUT1", "INT32", []int64{1}, ints(1)),
				},
				RawInputContents: [][]byte{le[int32](1), le[int32](2)},
			}, reasonMixedRawAndTyped,
			"input 'INPUT1': has typed contents (int_contents) while the request uses raw_input_contents",
		},
		{
			"empty param", &pb.ModelInferRequest{ModelName: "m", Parameters: map[string]*pb.InferParameter{"p": {}}},
			reasonInvalidParameter, "parameter 'p' has no value",
		},
		{"unnamed output", &pb.ModelInferRequest{
			ModelName: "m",
			Outputs:   []*pb.ModelInferRequest_InferRequestedOutputTensor{{}},
		}, reasonInvalidInput, "requested output #0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeInferRequest(tc.req)
			var ie *apierr.Error
			require.True(t, errors.As(err, &ie), "want *apierr.Error, got %v", err)
			require.Equal(t, apierr.KindInvalid, ie.Kind)
			require.Equal(t, tc.reason, ie.Reason)
			require.Contains(t, ie.Error(), tc.msg)
		})
	}
}
