package kservewire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// problemError is what the tests' ErrorFunc builds: everything a Decoder
// passed it.
type problemError struct {
	problem Problem
	cause   error
	msg     string
}

func (e *problemError) Error() string { return e.msg }
func (e *problemError) Unwrap() error { return e.cause }

func record(p Problem, cause error, format string, args ...any) error {
	return &problemError{problem: p, cause: cause, msg: fmt.Sprintf(format, args...)}
}

var (
	reqDec  = NewDecoder(Request, record)
	respDec = NewDecoder(Response, record)
)

// le returns the little-endian wire bytes of vals, a slice of one
// fixed-size type.
func le(vals any) []byte {
	b, err := binary.Append(nil, binary.LittleEndian, vals)
	if err != nil {
		panic(err)
	}
	return b
}

func tensor(dt string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferResponse_InferOutputTensor {
	return &pb.ModelInferResponse_InferOutputTensor{Name: "x", Datatype: dt, Shape: shape, Contents: c}
}

func ints(v ...int32) *pb.InferTensorContents   { return &pb.InferTensorContents{IntContents: v} }
func uints(v ...uint32) *pb.InferTensorContents { return &pb.InferTensorContents{UintContents: v} }

func TestDecodeTyped(t *testing.T) {
	tests := []struct {
		datatype string
		shape    []int64
		contents *pb.InferTensorContents
		want     []byte
	}{
		{"BOOL", []int64{3}, &pb.InferTensorContents{BoolContents: []bool{true, false, true}}, []byte{1, 0, 1}},
		{"INT8", []int64{1, 3}, ints(-128, 0, 127), le([]int8{-128, 0, 127})},
		{"INT16", []int64{3}, ints(-32768, 1, 32767), le([]int16{-32768, 1, 32767})},
		{"INT32", []int64{2, 1}, ints(math.MinInt32, math.MaxInt32), le([]int32{math.MinInt32, math.MaxInt32})},
		{"INT64", []int64{2}, &pb.InferTensorContents{Int64Contents: []int64{math.MinInt64, 5}}, le([]int64{math.MinInt64, 5})},
		{"UINT8", []int64{2}, uints(0, 255), []byte{0, 255}},
		{"UINT16", []int64{2}, uints(1, 65535), le([]uint16{1, 65535})},
		{"UINT32", []int64{1}, uints(math.MaxUint32), le([]uint32{math.MaxUint32})},
		{"UINT64", []int64{2}, &pb.InferTensorContents{Uint64Contents: []uint64{math.MaxUint64, 7}}, le([]uint64{math.MaxUint64, 7})},
		{"FP32", []int64{2}, &pb.InferTensorContents{Fp32Contents: []float32{1.5, -2}}, le([]float32{1.5, -2})},
		{"FP64", []int64{1}, &pb.InferTensorContents{Fp64Contents: []float64{3.25}}, le([]float64{3.25})},
		{"BYTES", []int64{2}, &pb.InferTensorContents{BytesContents: [][]byte{[]byte("ab"), {}}}, []byte{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0}},
		{"INT32", []int64{0, 4}, nil, []byte{}},
		{"FP16", []int64{3, 0}, nil, []byte{}},
	}
	for _, tc := range tests {
		t.Run(tc.datatype+fmt.Sprint(tc.shape), func(t *testing.T) {
			for _, d := range []*Decoder{reqDec, respDec} {
				got, err := d.Decode(tensor(tc.datatype, tc.shape, tc.contents), nil, 0)
				require.NoError(t, err)
				require.Equal(t, "x", got.Name)
				require.Equal(t, tc.datatype, got.DataType.String())
				require.Equal(t, infer.Shape(tc.shape), got.Shape)
				require.Equal(t, tc.want, got.Data)
				require.NotNil(t, got.Data, "an empty tensor has empty, not missing, data")
				require.NoError(t, got.CheckSize())
			}
		})
	}
}

func TestDecodeRawAliases(t *testing.T) {
	msg := &pb.ModelInferResponse{
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "a", Datatype: "FP16", Shape: []int64{2}, Parameters: map[string]*pb.InferParameter{
				"p": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "v"}},
			}},
			{Name: "b", Datatype: "BYTES", Shape: []int64{1}},
			{Name: "c", Datatype: "INT32", Shape: []int64{0}},
		},
		RawOutputContents: [][]byte{{1, 2, 3, 4}, {1, 0, 0, 0, 'q'}, nil},
	}
	for i, o := range msg.GetOutputs() {
		got, err := respDec.Decode(o, msg.GetRawOutputContents(), i)
		require.NoError(t, err)
		require.Equal(t, o.GetName(), got.Name)
		require.Equal(t, msg.GetRawOutputContents()[i], got.Data)
		if len(got.Data) > 0 {
			require.Same(t, &msg.GetRawOutputContents()[i][0], &got.Data[0], "raw data is not copied")
		}
		if len(got.Shape) > 0 {
			require.Same(t, &o.GetShape()[0], &got.Shape[0], "the shape is not copied")
		}
	}
	got, err := respDec.Decode(msg.GetOutputs()[0], msg.GetRawOutputContents(), 0)
	require.NoError(t, err)
	require.Equal(t, infer.Parameters{"p": "v"}, got.Parameters)
}

func TestDecodeProblems(t *testing.T) {
	tests := []struct {
		name    string
		tensor  *pb.ModelInferResponse_InferOutputTensor
		raw     [][]byte
		problem Problem
		msg     string // as a Request decoder says it
		sizeErr bool   // the cause is an infer.ErrSize
	}{
		{
			name:   "unknown datatype",
			tensor: tensor("FP33", []int64{1}, nil), problem: BadDatatype,
			msg: `input 'x': unknown datatype "FP33"`,
		},
		{
			name:   "negative dimension",
			tensor: tensor("FP32", []int64{-1}, nil), problem: BadShape,
			msg: "input 'x': shape [-1] has a negative dimension",
		},
		{
			name:   "too many elements",
			tensor: tensor("FP32", []int64{1 << 40, 1 << 40}, nil), problem: BadShape,
			msg: "input 'x': shape [1099511627776,1099511627776] holds more than 2147483648 elements",
		},
		{
			name: "parameter without a value",
			tensor: &pb.ModelInferResponse_InferOutputTensor{
				Name: "x", Datatype: "FP32", Shape: []int64{0},
				Parameters: map[string]*pb.InferParameter{"p": {}},
			},
			problem: BadParameter, msg: "input 'x': parameter 'p' has no value",
		},
		{
			name:   "typed contents in a raw message",
			tensor: tensor("FP32", []int64{1}, &pb.InferTensorContents{Fp32Contents: []float32{1}, BoolContents: []bool{true}}),
			raw:    [][]byte{make([]byte, 4)}, problem: MixedContents,
			msg: "input 'x': has typed contents (bool_contents, fp32_contents) while the request uses raw_input_contents",
		},
		{
			name:   "raw size short",
			tensor: tensor("FP32", []int64{2, 2}, nil), raw: [][]byte{make([]byte, 15)}, problem: BadSize,
			msg: "input 'x': raw content is 15 bytes but shape [2,2] of FP32 needs 16",
		},
		{
			name:   "huge shape with little raw data",
			tensor: tensor("FP64", []int64{1 << 30, 2}, nil), raw: [][]byte{make([]byte, 8)}, problem: BadSize,
			msg: "input 'x': raw content is 8 bytes but shape [1073741824,2] of FP64 needs 17179869184",
		},
		{
			name:   "raw BYTES count",
			tensor: tensor("BYTES", []int64{2}, nil), raw: [][]byte{{3, 0, 0, 0, 'o', 'n', 'e'}}, problem: BadSize,
			msg: "input 'x': raw content holds 1 BYTES elements but shape [2] needs 2",
		},
		{
			name:   "raw BYTES overrun",
			tensor: tensor("BYTES", []int64{1}, nil), raw: [][]byte{{200, 0, 0, 0, 'a'}}, problem: BadSize,
			msg: "input 'x': raw BYTES content", sizeErr: true,
		},
		{
			name:   "typed field of another datatype",
			tensor: tensor("FP32", []int64{1}, &pb.InferTensorContents{Int64Contents: []int64{1}}), problem: WrongContents,
			msg: "input 'x': datatype FP32 takes fp32_contents, got int64_contents",
		},
		{
			name:   "FP16 in typed contents",
			tensor: tensor("FP16", []int64{1}, uints(1)), problem: RawOnly,
			msg: "input 'x': FP16 data must travel in raw_input_contents, got uint_contents",
		},
		{
			name:   "BF16 without raw contents",
			tensor: tensor("BF16", []int64{2}, nil), problem: RawOnly,
			msg: "input 'x': BF16 data must travel in raw_input_contents",
		},
		{
			name:   "typed count",
			tensor: tensor("FP32", []int64{1 << 30}, &pb.InferTensorContents{Fp32Contents: []float32{1}}), problem: BadSize,
			msg: "input 'x': fp32_contents has 1 elements but shape [1073741824] needs 1073741824",
		},
		{
			name:   "missing typed data",
			tensor: tensor("INT64", []int64{3}, nil), problem: BadSize,
			msg: "input 'x': int64_contents has 0 elements but shape [3] needs 3",
		},
		{
			name:   "INT8 above range",
			tensor: tensor("INT8", []int64{2}, ints(1, 128)), problem: OutOfRange,
			msg: "input 'x': element 1 value 128 is out of range for INT8",
		},
		{
			name:   "INT8 below range",
			tensor: tensor("INT8", []int64{1}, ints(-129)), problem: OutOfRange,
			msg: "input 'x': element 0 value -129 is out of range for INT8",
		},
		{
			name:   "INT16 below range",
			tensor: tensor("INT16", []int64{1}, ints(-32769)), problem: OutOfRange,
			msg: "input 'x': element 0 value -32769 is out of range for INT16",
		},
		{
			name:   "UINT8 above range",
			tensor: tensor("UINT8", []int64{1}, uints(256)), problem: OutOfRange,
			msg: "input 'x': element 0 value 256 is out of range for UINT8",
		},
		{
			name:   "UINT16 above range",
			tensor: tensor("UINT16", []int64{2}, uints(0, 65536)), problem: OutOfRange,
			msg: "input 'x': element 1 value 65536 is out of range for UINT16",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outputWording := strings.NewReplacer("input", "output", "request", "response")
			for _, c := range []struct {
				d   *Decoder
				msg string
			}{{reqDec, tt.msg}, {respDec, outputWording.Replace(tt.msg)}} {
				got, err := c.d.Decode(tt.tensor, tt.raw, 0)
				require.Error(t, err)
				require.Zero(t, got)
				pe, ok := errors.AsType[*problemError](err)
				require.True(t, ok, "error %v not built by the ErrorFunc", err)
				require.Equal(t, tt.problem, pe.problem)
				require.Equal(t, c.msg, pe.msg)
				require.Equal(t, tt.sizeErr, errors.Is(err, infer.ErrSize), "cause: %v", pe.cause)
				if !tt.sizeErr {
					require.NoError(t, pe.cause)
				}
			}
		})
	}
}

func TestDirectionString(t *testing.T) {
	require.Equal(t, "request", Request.String())
	require.Equal(t, "response", Response.String())
}

// BenchmarkDecode measures one tensor of a typical gateway call, a row of
// 8 FP32 features, in both layouts.
func BenchmarkDecode(b *testing.B) {
	raw := [][]byte{le([]float32{1, 2, 3, 4, 5, 6, 7, 8})}
	typed := &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4, 5, 6, 7, 8}}
	for _, bc := range []struct {
		name string
		t    Tensor
		raw  [][]byte
	}{
		{"raw", tensor("FP32", []int64{1, 8}, nil), raw},
		{"typed", tensor("FP32", []int64{1, 8}, typed), nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := respDec.Decode(bc.t, bc.raw, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
