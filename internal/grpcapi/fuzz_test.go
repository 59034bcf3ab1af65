package grpcapi

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// FuzzDecodeModelInfer feeds arbitrary bytes through the protobuf decoder
// and DecodeInferRequest: nothing may panic, failures must be KindInvalid
// domain errors, and every accepted tensor must hold exactly the data its
// shape asks for.
func FuzzDecodeModelInfer(f *testing.F) {
	for _, tc := range datatypeCases {
		typed := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "x", Datatype: tc.datatype, Shape: tc.shape, Contents: tc.contents},
		}}
		raw := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "x", Datatype: tc.datatype, Shape: tc.shape},
		}, RawInputContents: [][]byte{tc.want}}
		for _, m := range []proto.Message{typed, raw} {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &pb.ModelInferRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			return
		}
		got, err := DecodeInferRequest(req)
		if err != nil {
			var ie *apierr.Error
			if !errors.As(err, &ie) || ie.Kind != apierr.KindInvalid || ie.Reason == "" {
				t.Fatalf("want a KindInvalid *apierr.Error with a reason, got %#v", err)
			}
			return
		}
		if len(got.Inputs) != len(req.GetInputs()) {
			t.Fatalf("%d inputs decoded from %d", len(got.Inputs), len(req.GetInputs()))
		}
		for i := range got.Inputs {
			if err := got.Inputs[i].CheckSize(); err != nil {
				t.Fatalf("input %d accepted but CheckSize: %v", i, err)
			}
		}
		// The echo of an accepted request encodes without trouble.
		resp := EncodeInferResponse(&infer.Response{Model: got.Model, Outputs: got.Inputs, Parameters: got.Parameters})
		if len(resp.GetRawOutputContents()) != len(got.Inputs) {
			t.Fatalf("%d raw outputs for %d tensors", len(resp.GetRawOutputContents()), len(got.Inputs))
		}
	})
}
