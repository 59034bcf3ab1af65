package kservewire

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// FuzzDecode feeds arbitrary bytes, as a hostile peer could send them,
// through protobuf decoding of a ModelInferRequest, then its parameters
// and inputs through Params and Decode in both directions. Nothing may
// panic; both directions must agree (they differ only in wording); every
// problem must come through the ErrorFunc; and every accepted tensor must
// hold exactly the data its shape asks for, raw data uncopied.
func FuzzDecode(f *testing.F) {
	in := func(name, dt string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape, Contents: c}
	}
	int64Param := &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 1}}
	for _, seed := range []*pb.ModelInferRequest{
		{
			Parameters:       map[string]*pb.InferParameter{"p": int64Param},
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{in("a", "FP32", []int64{1, 2}, nil), in("b", "BYTES", []int64{1}, nil)},
			RawInputContents: [][]byte{le([]float32{1, 2}), {1, 0, 0, 0, 'x'}},
		},
		{Inputs: []*pb.ModelInferRequest_InferInputTensor{
			in("a", "INT8", []int64{2}, ints(1, -1)),
			in("b", "UINT16", []int64{1}, uints(65535)),
			in("c", "BYTES", []int64{1}, &pb.InferTensorContents{BytesContents: [][]byte{[]byte("z")}}),
			in("d", "BOOL", []int64{1}, &pb.InferTensorContents{BoolContents: []bool{true}}),
		}},
		{
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{in("a", "BYTES", []int64{2}, nil)},
			RawInputContents: [][]byte{{9, 0, 0, 0, 'a'}},
		},
		{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("a", "FP64", []int64{1 << 30, 1 << 30}, nil)}},
	} {
		b, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg pb.ModelInferRequest
		if err := proto.Unmarshal(data, &msg); err != nil {
			return
		}
		if _, err := reqDec.Params("request", "", msg.GetParameters()); err != nil {
			checkProblem(t, err)
		}
		raw := msg.GetRawInputContents()
		if len(raw) > 0 && len(raw) != len(msg.GetInputs()) {
			return // Decode's caller rejects this
		}
		for i, tm := range msg.GetInputs() {
			got, err := reqDec.Decode(tm, raw, i)
			other, errOther := respDec.Decode(tm, raw, i)
			if (err == nil) != (errOther == nil) {
				t.Fatalf("input %d: request direction says %v, response direction %v", i, err, errOther)
			}
			if err != nil {
				if p, q := checkProblem(t, err), checkProblem(t, errOther); p != q {
					t.Fatalf("input %d: problem %d in one direction, %d in the other", i, p, q)
				}
				continue
			}
			if got.Name != tm.GetName() || got.Name != other.Name || len(got.Data) != len(other.Data) {
				t.Fatalf("input %d: directions disagree: %+v and %+v", i, got, other)
			}
			if !got.DataType.Valid() {
				t.Fatalf("input %d accepted with datatype %v", i, got.DataType)
			}
			if err := got.CheckSize(); err != nil {
				t.Fatalf("input %d accepted but its size disagrees with its shape: %v", i, err)
			}
			if len(raw) > 0 && len(got.Data) > 0 && &got.Data[0] != &raw[i][0] {
				t.Fatalf("input %d: raw data was copied", i)
			}
		}
	})
}

// checkProblem fails t unless err was built by the tests' ErrorFunc with a
// known problem, a size problem's cause being an infer.ErrSize.
func checkProblem(t *testing.T, err error) Problem {
	t.Helper()
	pe, ok := errors.AsType[*problemError](err)
	if !ok {
		t.Fatalf("error %v not built by the ErrorFunc", err)
	}
	if pe.problem < BadDatatype || pe.problem > BadParameter {
		t.Fatalf("unknown problem %d: %v", pe.problem, err)
	}
	if pe.cause != nil && (pe.problem != BadSize || !errors.Is(pe.cause, infer.ErrSize)) {
		t.Fatalf("problem %d with cause %v", pe.problem, pe.cause)
	}
	return pe.problem
}
