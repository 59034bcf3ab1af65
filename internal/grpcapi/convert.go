package grpcapi

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/shm"
)

// requests decodes the inputs and parameters of ModelInferRequests; its
// problems are KindInvalid errors with this package's reasons.
var requests = kservewire.NewDecoder(kservewire.Request, invalidWire)

// invalidWire is the kservewire.ErrorFunc of requests.
func invalidWire(p kservewire.Problem, cause error, format string, args ...any) error {
	e := invalidf(wireReason(p), format, args...)
	e.Err = cause
	return e
}

// wireReason returns the reason code of a problem kservewire found.
func wireReason(p kservewire.Problem) string {
	switch p {
	case kservewire.BadDatatype:
		return reasonInvalidDatatype
	case kservewire.BadShape:
		return reasonInvalidShape
	case kservewire.BadSize:
		return reasonSizeMismatch
	case kservewire.MixedContents:
		return reasonMixedRawAndTyped
	case kservewire.WrongContents:
		return reasonContentsMismatch
	case kservewire.RawOnly:
		return reasonRawOnlyDatatype
	case kservewire.OutOfRange:
		return reasonValueOutOfRange
	case kservewire.BadParameter:
		return reasonInvalidParameter
	default:
		return reasonInternal
	}
}

// withTritonSizeWords appends Triton's words to the error of a raw input
// whose size disagrees with its shape, as its clients and QA match on them
// (qa/L0_input_validation/input_validation_test.py): "input byte size
// mismatch for input 'X' for model 'M'. Expected 32, got 40"; for BYTES,
// "expected 16 string elements for inference input 'X' for model 'M', got
// 14" or, with too many, "unexpected number of string elements 17 for
// inference input 'X' for model 'M', expecting 16" (Triton stops counting
// one past the expected number). Other errors are returned unchanged.
func withTritonSizeWords(err error, model string, in *pb.ModelInferRequest_InferInputTensor, data []byte) error {
	var ie *apierr.Error
	if !errors.As(err, &ie) || ie.Reason != reasonSizeMismatch {
		return err
	}
	dt, ok := infer.ParseDataType(in.GetDatatype())
	if !ok {
		return err
	}
	n, serr := infer.Shape(in.GetShape()).Elements()
	if serr != nil {
		return err
	}
	var words string
	if dt == infer.Bytes {
		count, cerr := infer.CountBytesElements(data)
		switch {
		case cerr != nil:
			return err
		case count < n:
			words = fmt.Sprintf("expected %d string elements for inference input '%s' for model '%s', got %d", n, in.GetName(), model, count)
		case count > n:
			words = fmt.Sprintf("unexpected number of string elements %d for inference input '%s' for model '%s', expecting %d", n+1, in.GetName(), model, n)
		default:
			return err
		}
	} else {
		words = fmt.Sprintf("input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d", in.GetName(), model, int64(n)*int64(dt.Size()), len(data))
	}
	ie.Msg += " (" + words + ")"
	return ie
}

// DecodeInferRequest converts a ModelInferRequest into an infer.Request.
// Every input's data ends up in the wire layout of package infer, taken
// either from the typed contents or from raw_input_contents (never both),
// and its size is checked against its shape. Errors are *apierr.Error of
// KindInvalid naming the offending tensor.
//
// The returned tensors may alias the byte slices of req.
func DecodeInferRequest(req *pb.ModelInferRequest) (*infer.Request, error) {
	if req.GetModelName() == "" {
		return nil, invalidf(reasonMissingModelName, "model_name is empty")
	}
	params, err := requests.Params("request", "", req.GetParameters())
	if err != nil {
		return nil, err
	}
	inputs := req.GetInputs()
	raw := req.GetRawInputContents()
	// Inputs in a shared-memory region have no raw entry: the entries
	// belong, in order, to the other inputs.
	var dataInputs []*pb.ModelInferRequest_InferInputTensor
	for _, in := range inputs {
		if !inSharedMemory(in) {
			dataInputs = append(dataInputs, in)
		}
	}
	if len(raw) > 0 && len(raw) != len(dataInputs) {
		if len(raw) < len(dataInputs) {
			return nil, invalidf(reasonRawInputCount,
				"input '%s': no raw content: raw_input_contents has %d entries for %d inputs",
				dataInputs[len(raw)].GetName(), len(raw), len(dataInputs))
		}
		return nil, invalidf(reasonRawInputCount,
			"raw_input_contents has %d entries for %d inputs", len(raw), len(dataInputs))
	}
	rawIdx := 0

	out := &infer.Request{
		ID:         req.GetId(),
		Model:      req.GetModelName(),
		Version:    req.GetModelVersion(),
		Parameters: params,
		Inputs:     make([]infer.Tensor, len(inputs)),
	}
	var seen map[string]struct{} // many inputs only; few are compared in turn
	if len(inputs) > smallSet {
		seen = make(map[string]struct{}, len(inputs))
	}
	ndims := 0
	for _, in := range inputs {
		ndims += len(in.GetShape())
	}
	// Unlike the data, the shapes are not shared with req: they are
	// copied, all into one array, each capped so it cannot grow into the
	// next.
	dims := make([]int64, ndims)
	for i, in := range inputs {
		name := in.GetName()
		if name == "" {
			return nil, invalidf(reasonInvalidInput, "input #%d has no name", i)
		}
		if duplicateInput(inputs[:i], seen, name) {
			return nil, invalidf(reasonDuplicateInput, "input '%s': appears more than once", name)
		}

		var t infer.Tensor
		if inSharedMemory(in) {
			t, err = sharedMemoryInput(in)
		} else {
			t, err = requests.Decode(in, raw, rawIdx)
			if err != nil && rawIdx < len(raw) {
				err = withTritonSizeWords(err, req.GetModelName(), in, raw[rawIdx])
			}
			rawIdx++
		}
		if err != nil {
			return nil, err
		}
		k := len(t.Shape)
		shape := infer.Shape(dims[:k:k])
		copy(shape, t.Shape)
		dims = dims[k:]
		t.Shape = shape
		out.Inputs[i] = t
	}

	if reqOut := req.GetOutputs(); len(reqOut) > 0 {
		out.Outputs = make([]infer.RequestedOutput, len(reqOut))
		for i, o := range reqOut {
			if o.GetName() == "" {
				return nil, invalidf(reasonInvalidInput, "requested output #%d has no name", i)
			}
			p, err := requests.Params("output", o.GetName(), o.GetParameters())
			if err != nil {
				return nil, err
			}
			out.Outputs[i] = infer.RequestedOutput{Name: o.GetName(), Parameters: p}
		}
	}
	return out, nil
}

// inSharedMemory reports whether an input names a shared-memory region.
func inSharedMemory(in *pb.ModelInferRequest_InferInputTensor) bool {
	_, ok := in.GetParameters()[shm.ParamRegion]
	return ok
}

// sharedMemoryInput decodes an input whose data is in a shared-memory
// region (read later): its name, type, shape and parameters only.
func sharedMemoryInput(in *pb.ModelInferRequest_InferInputTensor) (infer.Tensor, error) {
	name := in.GetName()
	dt, ok := infer.ParseDataType(in.GetDatatype())
	if !ok {
		return infer.Tensor{}, invalidf(reasonInvalidDatatype, "input '%s': unknown datatype %q", name, in.GetDatatype())
	}
	shape := infer.Shape(in.GetShape())
	if _, err := shape.Elements(); err != nil {
		return infer.Tensor{}, invalidf(reasonInvalidShape, "input '%s': %v", name, err)
	}
	if c := in.GetContents(); c != nil && proto.Size(c) > 0 {
		return infer.Tensor{}, invalidf(reasonInvalidInput, "input '%s' has contents and a shared memory region", name)
	}
	params, err := requests.Params("input", name, in.GetParameters())
	if err != nil {
		return infer.Tensor{}, err
	}
	return infer.Tensor{Name: name, DataType: dt, Shape: shape, Parameters: params}, nil
}

// smallSet is the number of inputs up to which duplicate names are found
// by comparing, not hashing.
const smallSet = 8

// duplicateInput reports whether name was among the earlier inputs: seen
// holds their names when there are many, else earlier is searched.
func duplicateInput(earlier []*pb.ModelInferRequest_InferInputTensor, seen map[string]struct{}, name string) bool {
	if seen != nil {
		if _, dup := seen[name]; dup {
			return true
		}
		seen[name] = struct{}{}
		return false
	}
	for _, e := range earlier {
		if e.GetName() == name {
			return true
		}
	}
	return false
}

// EncodeInferResponse converts an infer.Response into a ModelInferResponse.
// Like Triton, every output's data travels in raw_output_contents, one
// entry per output in output order. The response aliases resp's data.
func EncodeInferResponse(resp *infer.Response) *pb.ModelInferResponse {
	out := &pb.ModelInferResponse{
		ModelName:         resp.Model,
		ModelVersion:      resp.Version,
		Id:                resp.ID,
		Parameters:        kservewire.EncodeParams(resp.Parameters),
		Outputs:           make([]*pb.ModelInferResponse_InferOutputTensor, len(resp.Outputs)),
		RawOutputContents: make([][]byte, len(resp.Outputs)),
	}
	// The output messages in one allocation; each is used only through
	// its pointer, never copied.
	tensors := make([]pb.ModelInferResponse_InferOutputTensor, len(resp.Outputs))
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		o := &tensors[i]
		o.Name = t.Name
		o.Datatype = t.DataType.String()
		o.Shape = t.Shape
		o.Parameters = kservewire.EncodeParams(t.Parameters)
		out.Outputs[i] = o
		// An output written to a shared-memory region has no data here; its
		// entry stays, empty, so entries keep matching outputs by index.
		data := t.Data
		if data == nil {
			data = []byte{}
		}
		out.RawOutputContents[i] = data
	}
	return out
}
