package kserve

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

func TestEncodeRequestDecodesOnTheServer(t *testing.T) {
	req := &infer.Request{
		ID:         "r",
		Model:      "m",
		Version:    "3",
		Parameters: infer.Parameters{"priority": int64(2), "tag": "x", "flag": true, "ratio": 0.5, "big": uint64(1 << 63)},
		Inputs: []infer.Tensor{
			{Name: "a", DataType: infer.FP32, Shape: infer.Shape{1, 2}, Data: fp32Bytes(1, 2), Parameters: infer.Parameters{"p": "q"}},
			{Name: "b", DataType: infer.Bytes, Shape: infer.Shape{1}, Data: bytesElems("x")},
			{Name: "empty", DataType: infer.Int64, Shape: infer.Shape{0}},
		},
		Outputs: []infer.RequestedOutput{{Name: "y", Parameters: infer.Parameters{"classification": int64(3)}}},
	}
	msg := EncodeRequest(req)
	require.Len(t, msg.GetRawInputContents(), 3)
	for _, in := range msg.GetInputs() {
		require.Nil(t, in.GetContents(), "raw contents only")
	}

	// Through the wire format and the server's own decoder.
	wire, err := proto.Marshal(msg)
	require.NoError(t, err)
	var back pb.ModelInferRequest
	require.NoError(t, proto.Unmarshal(wire, &back))
	got, err := grpcapi.DecodeInferRequest(&back)
	require.NoError(t, err)
	require.Equal(t, req.ID, got.ID)
	require.Equal(t, req.Model, got.Model)
	require.Equal(t, req.Version, got.Version)
	require.Equal(t, req.Parameters, got.Parameters)
	require.Equal(t, req.Outputs, got.Outputs)
	require.Len(t, got.Inputs, 3)
	for i, want := range req.Inputs {
		g := got.Inputs[i]
		require.Equal(t, want.Name, g.Name)
		require.Equal(t, want.DataType, g.DataType)
		require.Equal(t, want.Shape, g.Shape)
		require.Equal(t, len(want.Data), len(g.Data))
		if len(want.Data) > 0 {
			require.Equal(t, want.Data, g.Data)
		}
		require.Equal(t, want.Parameters, g.Parameters)
	}
}

func TestReqBufReuse(t *testing.T) {
	var b reqBuf
	big := &infer.Request{
		Model: "m",
		Inputs: []infer.Tensor{
			{Name: "a", DataType: infer.Int64, Shape: infer.Shape{1}, Data: int64Bytes(1)},
			{Name: "b", DataType: infer.Int64, Shape: infer.Shape{1}, Data: int64Bytes(2)},
			{Name: "c", DataType: infer.Int64, Shape: infer.Shape{1}, Data: int64Bytes(3)},
		},
		Outputs: []infer.RequestedOutput{{Name: "y"}},
	}
	msg := b.encode(big)
	require.Len(t, msg.GetInputs(), 3)
	require.Len(t, msg.GetOutputs(), 1)
	b.reset()
	for _, r := range b.raw[:cap(b.raw)] {
		require.Nil(t, r, "reset must drop tensor data")
	}

	small := &infer.Request{Model: "n", Inputs: []infer.Tensor{
		{Name: "z", DataType: infer.Int64, Shape: infer.Shape{1}, Data: int64Bytes(9)},
	}}
	msg = b.encode(small)
	require.Equal(t, "n", msg.GetModelName())
	require.Len(t, msg.GetInputs(), 1)
	require.Equal(t, "z", msg.GetInputs()[0].GetName())
	require.Equal(t, [][]byte{int64Bytes(9)}, msg.GetRawInputContents())
	require.Empty(t, msg.GetOutputs(), "no leftover requested outputs")

	none := b.encode(&infer.Request{Model: "n"})
	require.Empty(t, none.GetInputs())
	require.Nil(t, none.GetRawInputContents())

	// Once grown, encoding a request without parameters allocates nothing.
	allocs := testing.AllocsPerRun(100, func() {
		b.encode(big)
		b.reset()
	})
	require.Zero(t, allocs)
}

func TestDecodeResponseTypedContents(t *testing.T) {
	resp := &pb.ModelInferResponse{
		ModelName:    "m",
		ModelVersion: "2",
		Id:           "id",
		Parameters:   map[string]*pb.InferParameter{"p": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 4}}},
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "fp32", Datatype: "FP32", Shape: []int64{2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{0.25, -1}}},
			{Name: "i64", Datatype: "INT64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Int64Contents: []int64{-5}}},
			{Name: "i8", Datatype: "INT8", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{-128, 127}}},
			{Name: "u16", Datatype: "UINT16", Shape: []int64{1}, Contents: &pb.InferTensorContents{UintContents: []uint32{65535}}},
			{Name: "bool", Datatype: "BOOL", Shape: []int64{3}, Contents: &pb.InferTensorContents{BoolContents: []bool{true, false, true}}},
			{Name: "fp64", Datatype: "FP64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp64Contents: []float64{1}}},
			{Name: "bytes", Datatype: "BYTES", Shape: []int64{2}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("ab"), {}}}},
			{Name: "fp16-empty", Datatype: "FP16", Shape: []int64{0, 3}},
			{Name: "u64", Datatype: "UINT64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Uint64Contents: []uint64{1 << 63}}},
		},
	}
	got, err := DecodeResponse(resp)
	require.NoError(t, err)
	require.Equal(t, "id", got.ID)
	require.Equal(t, "m", got.Model)
	require.Equal(t, "2", got.Version)
	require.Equal(t, infer.Parameters{"p": int64(4)}, got.Parameters)
	want := map[string][]byte{
		"fp32":       fp32Bytes(0.25, -1),
		"i64":        int64Bytes(-5),
		"i8":         {0x80, 0x7f},
		"u16":        {0xff, 0xff},
		"bool":       {1, 0, 1},
		"fp64":       {0, 0, 0, 0, 0, 0, 0xf0, 0x3f},
		"bytes":      bytesElems("ab", ""),
		"fp16-empty": {},
		"u64":        {0, 0, 0, 0, 0, 0, 0, 0x80},
	}
	require.Len(t, got.Outputs, len(want))
	for _, o := range got.Outputs {
		require.Equal(t, want[o.Name], o.Data, o.Name)
		require.NoError(t, o.CheckSize(), o.Name)
	}
}

func TestDecodeResponseRaw(t *testing.T) {
	resp := &pb.ModelInferResponse{
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "a", Datatype: "FP16", Shape: []int64{2}},
			{Name: "b", Datatype: "BYTES", Shape: []int64{1}},
			{Name: "c", Datatype: "INT32", Shape: []int64{0}},
		},
		RawOutputContents: [][]byte{{1, 2, 3, 4}, bytesElems("q"), nil},
	}
	got, err := DecodeResponse(resp)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3, 4}, got.Outputs[0].Data)
	require.Equal(t, bytesElems("q"), got.Outputs[1].Data)
	require.Empty(t, got.Outputs[2].Data)
}

func TestDecodeResponseRejects(t *testing.T) {
	out := func(name, dt string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferResponse_InferOutputTensor {
		return &pb.ModelInferResponse_InferOutputTensor{Name: name, Datatype: dt, Shape: shape, Contents: c}
	}
	manyOutputs := make([]*pb.ModelInferResponse_InferOutputTensor, 20)
	for i := range manyOutputs {
		manyOutputs[i] = out("o"+strings.Repeat("x", i%19), "INT8", []int64{0}, nil)
	}
	tests := []struct {
		name     string
		resp     *pb.ModelInferResponse
		msg      string
		sizeErrr bool // wraps infer.ErrSize
	}{
		{
			name: "raw size short",
			resp: &pb.ModelInferResponse{
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{out("y", "FP32", []int64{2, 2}, nil)},
				RawOutputContents: [][]byte{make([]byte, 15)},
			},
			msg: "raw content is 15 bytes but shape [2,2] of FP32 needs 16", sizeErrr: true,
		},
		{
			name: "raw size long",
			resp: &pb.ModelInferResponse{
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{out("y", "INT64", []int64{1}, nil)},
				RawOutputContents: [][]byte{make([]byte, 9)},
			},
			msg: "needs 8", sizeErrr: true,
		},
		{
			name: "raw BYTES element count",
			resp: &pb.ModelInferResponse{
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{out("y", "BYTES", []int64{2}, nil)},
				RawOutputContents: [][]byte{bytesElems("one")},
			},
			msg: "holds 1 BYTES elements but shape [2] needs 2", sizeErrr: true,
		},
		{
			name: "raw BYTES overrun",
			resp: &pb.ModelInferResponse{
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{out("y", "BYTES", []int64{1}, nil)},
				RawOutputContents: [][]byte{{200, 0, 0, 0, 'a'}},
			},
			msg: "overruns", sizeErrr: true,
		},
		{
			name: "huge shape with little data",
			resp: &pb.ModelInferResponse{
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{out("y", "FP64", []int64{1 << 30, 2}, nil)},
				RawOutputContents: [][]byte{make([]byte, 8)},
			},
			msg: "needs 17179869184", sizeErrr: true,
		},
		{
			name: "typed count",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out("y", "FP32", []int64{1 << 30}, &pb.InferTensorContents{Fp32Contents: []float32{1}}),
			}},
			msg: "fp32_contents has 1 elements but shape [1073741824] needs 1073741824", sizeErrr: true,
		},
		{
			name: "raw count",
			resp: &pb.ModelInferResponse{
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{out("y", "FP32", []int64{1}, nil), out("z", "FP32", []int64{1}, nil)},
				RawOutputContents: [][]byte{make([]byte, 4)},
			},
			msg: "raw_output_contents has 1 entries for 2 outputs",
		},
		{
			name: "raw and typed",
			resp: &pb.ModelInferResponse{
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{out("y", "FP32", []int64{1}, &pb.InferTensorContents{Fp32Contents: []float32{1}})},
				RawOutputContents: [][]byte{make([]byte, 4)},
			},
			msg: "has typed contents (fp32_contents)",
		},
		{
			name: "typed field of another datatype",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out("y", "FP32", []int64{1}, &pb.InferTensorContents{Int64Contents: []int64{1}}),
			}},
			msg: "datatype FP32 takes fp32_contents, got int64_contents",
		},
		{
			name: "FP16 in typed contents",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out("y", "FP16", []int64{1}, &pb.InferTensorContents{UintContents: []uint32{1}}),
			}},
			msg: "must travel in raw_output_contents",
		},
		{
			name: "missing data",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out("y", "FP32", []int64{3}, nil),
			}},
			msg: "has 0 elements but shape [3] needs 3", sizeErrr: true,
		},
		{
			name: "INT8 out of range",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out("y", "INT8", []int64{1}, &pb.InferTensorContents{IntContents: []int32{128}}),
			}},
			msg: "out of range for INT8",
		},
		{
			name: "UINT8 out of range",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out("y", "UINT8", []int64{1}, &pb.InferTensorContents{UintContents: []uint32{256}}),
			}},
			msg: "out of range for UINT8",
		},
		{
			name: "unknown datatype",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("y", "FP33", []int64{1}, nil)}},
			msg:  `unknown datatype "FP33"`,
		},
		{
			name: "negative dimension",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("y", "FP32", []int64{-1}, nil)}},
			msg:  "negative dimension",
		},
		{
			name: "too many elements",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("y", "FP32", []int64{1 << 40, 1 << 40}, nil)}},
			msg:  "holds more than",
		},
		{
			name: "no name",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("", "FP32", []int64{0}, nil)}},
			msg:  "output #0 has no name",
		},
		{
			name: "duplicate name",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out("y", "FP32", []int64{0}, nil), out("y", "FP32", []int64{0}, nil),
			}},
			msg: "output 'y' appears more than once",
		},
		{
			name: "duplicate name among many",
			resp: &pb.ModelInferResponse{Outputs: manyOutputs},
			msg:  "appears more than once",
		},
		{
			name: "parameter without a value",
			resp: &pb.ModelInferResponse{Parameters: map[string]*pb.InferParameter{"p": {}}},
			msg:  "response: parameter 'p' has no value",
		},
		{
			name: "output parameter without a value",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{{
				Name: "y", Datatype: "FP32", Shape: []int64{0}, Parameters: map[string]*pb.InferParameter{"p": nil},
			}}},
			msg: "output 'y': parameter 'p' has no value",
		},
		{
			name: "long hostile name is shortened",
			resp: &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				out(strings.Repeat("n", 10000), "FP33", []int64{1}, nil),
			}},
			msg: strings.Repeat("n", 64) + "…",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeResponse(tt.resp)
			require.Error(t, err)
			require.Nil(t, got)
			require.Contains(t, err.Error(), tt.msg)
			require.Less(t, len(err.Error()), 1000)
			ie, ok := errors.AsType[*apierr.Error](err)
			require.True(t, ok)
			require.Equal(t, apierr.KindInternal, ie.Kind)
			require.Equal(t, ReasonBadResponse, ie.Reason)
			require.Equal(t, tt.sizeErrr, errors.Is(err, infer.ErrSize), "wraps ErrSize: %v", err)
		})
	}
}

func TestServerReason(t *testing.T) {
	withInfo := func(reason string) *status.Status {
		st, err := status.New(codes.Internal, "x").WithDetails(&errdetails.ErrorInfo{Reason: reason})
		require.NoError(t, err)
		return st
	}
	require.Equal(t, "tensor_size_mismatch", apierr.StatusReason(withInfo("tensor_size_mismatch")))
	require.Equal(t, "queue_full", apierr.StatusReason(withInfo("QUEUE_FULL")))
	require.Empty(t, apierr.StatusReason(withInfo("")))
	require.Empty(t, apierr.StatusReason(withInfo("has space")))
	require.Empty(t, apierr.StatusReason(withInfo(strings.Repeat("a", 65))))
	require.Empty(t, apierr.StatusReason(status.New(codes.Internal, "no details")))

	e := newRPCError("h:1", "ModelInfer", status.New(codes.Unavailable, strings.Repeat("é", 1000)), false)
	require.Less(t, len(e.Error()), apierr.MaxMessageLen+100)
	require.True(t, strings.HasSuffix(e.Error(), "…"))
	require.Equal(t, ReasonUnavailable, e.Err.Reason)

	// A code outside the known range still yields an internal error.
	e = newRPCError("h:1", "ModelInfer", status.New(codes.Code(99), "odd"), false)
	require.Equal(t, apierr.KindInternal, e.Err.Kind)
	require.Equal(t, ReasonError, e.Err.Reason)
}
