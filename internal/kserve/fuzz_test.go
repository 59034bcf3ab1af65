package kserve

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// FuzzDecodeResponse feeds arbitrary bytes, as a hostile server could send
// them, through protobuf decoding and DecodeResponse. It must never panic,
// every tensor it accepts must hold exactly the data its shape asks for,
// and a size mismatch must be reported as such.
func FuzzDecodeResponse(f *testing.F) {
	seeds := []*pb.ModelInferResponse{
		{
			ModelName: "m",
			Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				{Name: "a", Datatype: "FP32", Shape: []int64{1, 2}},
				{Name: "b", Datatype: "BYTES", Shape: []int64{1}},
			},
			RawOutputContents: [][]byte{fp32Bytes(1, 2), bytesElems("x")},
		},
		{
			Outputs: []*pb.ModelInferResponse_InferOutputTensor{
				{Name: "a", Datatype: "INT8", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{1, -1}}},
				{Name: "b", Datatype: "BOOL", Shape: []int64{1}, Contents: &pb.InferTensorContents{BoolContents: []bool{true}}},
				{Name: "c", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("z")}}},
			},
		},
		{
			Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "a", Datatype: "FP32", Shape: []int64{2}}},
			RawOutputContents: [][]byte{make([]byte, 7)},
		},
		{
			Outputs: []*pb.ModelInferResponse_InferOutputTensor{{Name: "a", Datatype: "FP64", Shape: []int64{1 << 30, 1 << 30}}},
		},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg pb.ModelInferResponse
		if err := proto.Unmarshal(data, &msg); err != nil {
			return
		}
		resp, err := DecodeResponse(&msg)
		if err != nil {
			if ie, ok := errors.AsType[*apierr.Error](err); !ok || ie.Reason != ReasonBadResponse {
				t.Fatalf("error %v is not a bad-response *apierr.Error", err)
			}
			return
		}
		if len(resp.Outputs) != len(msg.GetOutputs()) {
			t.Fatalf("%d outputs decoded from %d", len(resp.Outputs), len(msg.GetOutputs()))
		}
		for i := range resp.Outputs {
			o := &resp.Outputs[i]
			if err := o.CheckSize(); err != nil {
				t.Fatalf("accepted output '%s' whose size disagrees with its shape: %v", o.Name, err)
			}
			if !o.DataType.Valid() {
				t.Fatalf("accepted output '%s' with datatype %v", o.Name, o.DataType)
			}
		}
		// A raw entry of the wrong size must be rejected, with ErrSize.
		if raw := msg.GetRawOutputContents(); len(raw) > 0 && resp.Outputs[0].DataType != infer.Bytes {
			raw[0] = append(raw[0], 0)
			if _, err := DecodeResponse(&msg); !errors.Is(err, infer.ErrSize) {
				t.Fatalf("one byte too many in output 0: got %v, want a size error", err)
			}
		}
	})
}
