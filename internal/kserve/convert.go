package kserve

import (
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// EncodeRequest converts req into a ModelInferRequest whose input data
// travels in raw_input_contents, one entry per input in input order: the
// fast path, since infer.Tensor data already is in the binary layout.
// Nothing is validated; the server does that. The message aliases req's
// shapes and data, so req must not change until the message is sent.
func EncodeRequest(req *infer.Request) *pb.ModelInferRequest {
	var b reqBuf
	return b.encode(req)
}

// reqBuf holds a ModelInferRequest and the storage behind its slices, so a
// pooled reqBuf encodes requests without allocating once it has grown to
// the request's input count.
type reqBuf struct {
	msg     pb.ModelInferRequest
	inputs  []pb.ModelInferRequest_InferInputTensor
	inPtrs  []*pb.ModelInferRequest_InferInputTensor
	raw     [][]byte
	outputs []pb.ModelInferRequest_InferRequestedOutputTensor
	outPtrs []*pb.ModelInferRequest_InferRequestedOutputTensor
}

func (b *reqBuf) encode(req *infer.Request) *pb.ModelInferRequest {
	n := len(req.Inputs)
	if cap(b.inputs) < n {
		b.inputs = make([]pb.ModelInferRequest_InferInputTensor, n)
		b.inPtrs = make([]*pb.ModelInferRequest_InferInputTensor, n)
		b.raw = make([][]byte, n)
	}
	b.inputs, b.inPtrs, b.raw = b.inputs[:n], b.inPtrs[:n], b.raw[:n]
	for i := range req.Inputs {
		t := &req.Inputs[i]
		b.inputs[i] = pb.ModelInferRequest_InferInputTensor{
			Name:       t.Name,
			Datatype:   t.DataType.String(),
			Shape:      t.Shape,
			Parameters: kservewire.EncodeParams(t.Parameters),
		}
		b.inPtrs[i] = &b.inputs[i]
		b.raw[i] = t.Data // a nil entry still goes out, as an empty one
	}

	var outs []*pb.ModelInferRequest_InferRequestedOutputTensor
	if m := len(req.Outputs); m > 0 {
		if cap(b.outputs) < m {
			b.outputs = make([]pb.ModelInferRequest_InferRequestedOutputTensor, m)
			b.outPtrs = make([]*pb.ModelInferRequest_InferRequestedOutputTensor, m)
		}
		b.outputs, b.outPtrs = b.outputs[:m], b.outPtrs[:m]
		for i, o := range req.Outputs {
			b.outputs[i] = pb.ModelInferRequest_InferRequestedOutputTensor{
				Name:       o.Name,
				Parameters: kservewire.EncodeParams(o.Parameters),
			}
			b.outPtrs[i] = &b.outputs[i]
		}
		outs = b.outPtrs
	}

	var raw [][]byte
	if n > 0 {
		raw = b.raw
	}
	b.msg = pb.ModelInferRequest{
		ModelName:        req.Model,
		ModelVersion:     req.Version,
		Id:               req.ID,
		Parameters:       kservewire.EncodeParams(req.Parameters),
		Inputs:           b.inPtrs,
		Outputs:          outs,
		RawInputContents: raw,
	}
	return &b.msg
}

// reset drops every reference to the last request, so a pooled reqBuf does
// not keep tensor data alive.
func (b *reqBuf) reset() {
	b.msg = pb.ModelInferRequest{}
	clear(b.inputs)
	clear(b.inPtrs)
	clear(b.raw)
	clear(b.outputs)
	clear(b.outPtrs)
}

// responses decodes the outputs and parameters of ModelInferResponses.
var responses = kservewire.NewDecoder(kservewire.Response, badWire)

// badWire is the kservewire.ErrorFunc of responses: every problem is a bad
// response, and one of size wraps infer.ErrSize.
func badWire(p kservewire.Problem, cause error, format string, args ...any) error {
	e := badResponsef(format, args...)
	if cause == nil && p == kservewire.BadSize {
		cause = infer.ErrSize
	}
	e.Err = cause
	return e
}

// DecodeResponse converts a ModelInferResponse into an infer.Response.
// Output data is taken from raw_output_contents (what Sluice and, by
// default, Triton send) or from each output's typed contents (what other
// KServe v2 servers may send), never a mix, and checked against the
// output's datatype and shape: the response came from the network, so
// nothing in it is trusted and no shape makes DecodeResponse allocate more
// than the data it holds. Errors are *apierr.Error of KindInternal with
// reason ReasonBadResponse, naming the offending output.
//
// The returned tensors alias resp's shapes and raw contents.
func DecodeResponse(resp *pb.ModelInferResponse) (*infer.Response, error) {
	params, err := responses.Params("response", "", resp.GetParameters())
	if err != nil {
		return nil, err
	}
	outputs := resp.GetOutputs()
	raw := resp.GetRawOutputContents()
	if len(raw) > 0 && len(raw) != len(outputs) {
		return nil, badResponsef("raw_output_contents has %d entries for %d outputs", len(raw), len(outputs))
	}
	if err := checkNames(outputs); err != nil {
		return nil, err
	}
	out := &infer.Response{
		ID:         resp.GetId(),
		Model:      resp.GetModelName(),
		Version:    resp.GetModelVersion(),
		Parameters: params,
		Outputs:    make([]infer.Tensor, len(outputs)),
	}
	for i, o := range outputs {
		t, err := responses.Decode(o, raw, i)
		if err != nil {
			return nil, err
		}
		out.Outputs[i] = t
	}
	return out, nil
}

// checkNames rejects outputs without a name or with a repeated one.
func checkNames(outputs []*pb.ModelInferResponse_InferOutputTensor) error {
	const small = 16 // below this, comparing pairs beats building a map
	var seen map[string]struct{}
	if len(outputs) > small {
		seen = make(map[string]struct{}, len(outputs))
	}
	for i, o := range outputs {
		name := o.GetName()
		if name == "" {
			return badResponsef("output #%d has no name", i)
		}
		dup := false
		if seen != nil {
			_, dup = seen[name]
			seen[name] = struct{}{}
		} else {
			for _, p := range outputs[:i] {
				if p.GetName() == name {
					dup = true
					break
				}
			}
		}
		if dup {
			return badResponsef("output '%s' appears more than once", shorten(name))
		}
	}
	return nil
}

// badResponsef builds the error of a response that does not hold together.
// Names quoted in format with '%s' are shortened, since they came from the
// network.
func badResponsef(format string, args ...any) *apierr.Error {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = shorten(s)
		}
	}
	return apierr.Errorf(apierr.KindInternal, ReasonBadResponse, format, args...)
}

// shorten cuts a name from the network to a length fit for a message.
func shorten(s string) string { return apierr.Truncate(s, 64) }
