package kserve

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/sluice-ml/sluice/internal/infer"
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
			Parameters: encodeParams(t.Parameters),
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
				Parameters: encodeParams(o.Parameters),
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
		Parameters:       encodeParams(req.Parameters),
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

// encodeParams converts parameters for the protocol. Values of types the
// protocol cannot carry are sent as their string form.
func encodeParams(in infer.Parameters) map[string]*pb.InferParameter {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]*pb.InferParameter, len(in))
	for k, v := range in {
		p := &pb.InferParameter{}
		switch x := v.(type) {
		case bool:
			p.ParameterChoice = &pb.InferParameter_BoolParam{BoolParam: x}
		case int64:
			p.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: x}
		case int:
			p.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: int64(x)}
		case int32:
			p.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: int64(x)}
		case uint64:
			p.ParameterChoice = &pb.InferParameter_Uint64Param{Uint64Param: x}
		case uint32:
			p.ParameterChoice = &pb.InferParameter_Uint64Param{Uint64Param: uint64(x)}
		case float64:
			p.ParameterChoice = &pb.InferParameter_DoubleParam{DoubleParam: x}
		case float32:
			p.ParameterChoice = &pb.InferParameter_DoubleParam{DoubleParam: float64(x)}
		case string:
			p.ParameterChoice = &pb.InferParameter_StringParam{StringParam: x}
		default:
			p.ParameterChoice = &pb.InferParameter_StringParam{StringParam: fmt.Sprint(x)}
		}
		out[k] = p
	}
	return out
}

// DecodeResponse converts a ModelInferResponse into an infer.Response.
// Output data is taken from raw_output_contents (what Sluice and, by
// default, Triton send) or from each output's typed contents (what other
// KServe v2 servers may send), never a mix, and checked against the
// output's datatype and shape: the response came from the network, so
// nothing in it is trusted and no shape makes DecodeResponse allocate more
// than the data it holds. Errors are *infer.Error of KindInternal with
// reason ReasonBadResponse, naming the offending output.
//
// The returned tensors alias resp's shapes and raw contents.
func DecodeResponse(resp *pb.ModelInferResponse) (*infer.Response, error) {
	params, err := decodeParams("response", "", resp.GetParameters())
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
		name := o.GetName()
		dt, ok := infer.ParseDataType(o.GetDatatype())
		if !ok {
			return nil, badResponsef("output '%s': unknown datatype %q", name, shorten(o.GetDatatype()))
		}
		shape := infer.Shape(o.GetShape())
		n, err := shape.Elements()
		if err != nil {
			return nil, badResponsef("output '%s': %v", name, err)
		}
		t := infer.Tensor{Name: name, DataType: dt, Shape: shape}
		if t.Parameters, err = decodeParams("output", name, o.GetParameters()); err != nil {
			return nil, err
		}
		if len(raw) > 0 {
			if fields := setContentFields(o.GetContents()); len(fields) > 0 {
				return nil, badResponsef("output '%s': has typed contents (%s) while the response uses raw_output_contents",
					name, strings.Join(fields, ", "))
			}
			if err := checkRaw(name, dt, shape, n, raw[i]); err != nil {
				return nil, err
			}
			t.Data = raw[i]
		} else if t.Data, err = decodeContents(name, dt, shape, n, o.GetContents()); err != nil {
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

// checkRaw verifies that raw content holds exactly the elements the shape
// asks for.
func checkRaw(name string, dt infer.DataType, shape infer.Shape, n int, data []byte) error {
	if dt == infer.Bytes {
		count, err := infer.CountBytesElements(data)
		if err != nil {
			return &infer.Error{
				Kind: infer.KindInternal, Reason: ReasonBadResponse,
				Msg: fmt.Sprintf("output '%s': raw BYTES content", shorten(name)), Err: err,
			}
		}
		if count != n {
			return badSizef("output '%s': raw content holds %d BYTES elements but shape %s needs %d", name, count, shape, n)
		}
		return nil
	}
	if want := int64(n) * int64(dt.Size()); int64(len(data)) != want {
		return badSizef("output '%s': raw content is %d bytes but shape %s of %s needs %d", name, len(data), shape, dt, want)
	}
	return nil
}

// contentLens returns the length of each InferTensorContents field, in
// field-number order.
func contentLens(c *pb.InferTensorContents) [8]int {
	return [8]int{
		len(c.GetBoolContents()), len(c.GetIntContents()), len(c.GetInt64Contents()),
		len(c.GetUintContents()), len(c.GetUint64Contents()), len(c.GetFp32Contents()),
		len(c.GetFp64Contents()), len(c.GetBytesContents()),
	}
}

var contentFieldNames = [8]string{
	"bool_contents", "int_contents", "int64_contents", "uint_contents",
	"uint64_contents", "fp32_contents", "fp64_contents", "bytes_contents",
}

// setContentFields names the non-empty fields of c.
func setContentFields(c *pb.InferTensorContents) []string {
	if c == nil {
		return nil
	}
	var names []string
	for i, l := range contentLens(c) {
		if l > 0 {
			names = append(names, contentFieldNames[i])
		}
	}
	return names
}

// contentField returns the index into contentFieldNames that carries dt,
// or -1 when dt can only travel raw.
func contentField(dt infer.DataType) int {
	switch dt {
	case infer.Bool:
		return 0
	case infer.Int8, infer.Int16, infer.Int32:
		return 1
	case infer.Int64:
		return 2
	case infer.Uint8, infer.Uint16, infer.Uint32:
		return 3
	case infer.Uint64:
		return 4
	case infer.FP32:
		return 5
	case infer.FP64:
		return 6
	case infer.Bytes:
		return 7
	default: // FP16, BF16: raw only
		return -1
	}
}

// decodeContents converts typed contents into wire-layout bytes. The
// element count is compared with the shape before anything is allocated.
func decodeContents(name string, dt infer.DataType, shape infer.Shape, n int, c *pb.InferTensorContents) ([]byte, error) {
	field := contentField(dt)
	lens := contentLens(c)
	for i, l := range lens {
		if l > 0 && i != field {
			if field < 0 {
				return nil, badResponsef("output '%s': %s data must travel in raw_output_contents, got %s",
					name, dt, contentFieldNames[i])
			}
			return nil, badResponsef("output '%s': datatype %s takes %s, got %s",
				name, dt, contentFieldNames[field], contentFieldNames[i])
		}
	}
	if field < 0 {
		if n == 0 {
			return []byte{}, nil
		}
		return nil, badResponsef("output '%s': %s data must travel in raw_output_contents", name, dt)
	}
	if got := lens[field]; got != n {
		return nil, badSizef("output '%s': %s has %d elements but shape %s needs %d",
			name, contentFieldNames[field], got, shape, n)
	}

	le := binary.LittleEndian
	switch dt {
	case infer.Bool:
		b := make([]byte, n)
		for i, v := range c.GetBoolContents() {
			if v {
				b[i] = 1
			}
		}
		return b, nil
	case infer.Int8, infer.Int16, infer.Int32:
		lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
		switch dt {
		case infer.Int8:
			lo, hi = math.MinInt8, math.MaxInt8
		case infer.Int16:
			lo, hi = math.MinInt16, math.MaxInt16
		default: // INT32 keeps the full int32 range
		}
		b := make([]byte, 0, n*dt.Size())
		for i, v := range c.GetIntContents() {
			if int64(v) < lo || int64(v) > hi {
				return nil, badResponsef("output '%s': element %d value %d is out of range for %s", name, i, v, dt)
			}
			switch dt {
			case infer.Int8:
				b = append(b, byte(int8(v)))
			case infer.Int16:
				b = le.AppendUint16(b, uint16(int16(v)))
			default:
				b = le.AppendUint32(b, uint32(v))
			}
		}
		return b, nil
	case infer.Int64:
		b := make([]byte, 0, n*8)
		for _, v := range c.GetInt64Contents() {
			b = le.AppendUint64(b, uint64(v))
		}
		return b, nil
	case infer.Uint8, infer.Uint16, infer.Uint32:
		hi := uint64(math.MaxUint32)
		switch dt {
		case infer.Uint8:
			hi = math.MaxUint8
		case infer.Uint16:
			hi = math.MaxUint16
		default: // UINT32 keeps the full uint32 range
		}
		b := make([]byte, 0, n*dt.Size())
		for i, v := range c.GetUintContents() {
			if uint64(v) > hi {
				return nil, badResponsef("output '%s': element %d value %d is out of range for %s", name, i, v, dt)
			}
			switch dt {
			case infer.Uint8:
				b = append(b, byte(v))
			case infer.Uint16:
				b = le.AppendUint16(b, uint16(v))
			default:
				b = le.AppendUint32(b, v)
			}
		}
		return b, nil
	case infer.Uint64:
		b := make([]byte, 0, n*8)
		for _, v := range c.GetUint64Contents() {
			b = le.AppendUint64(b, v)
		}
		return b, nil
	case infer.FP32:
		b := make([]byte, 0, n*4)
		for _, v := range c.GetFp32Contents() {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
		return b, nil
	case infer.FP64:
		b := make([]byte, 0, n*8)
		for _, v := range c.GetFp64Contents() {
			b = le.AppendUint64(b, math.Float64bits(v))
		}
		return b, nil
	case infer.Bytes:
		size := 0
		for _, e := range c.GetBytesContents() {
			if uint64(len(e)) > math.MaxUint32 {
				return nil, badResponsef("output '%s': BYTES element larger than 4 GiB", name)
			}
			size += 4 + len(e)
		}
		b := make([]byte, 0, size)
		for _, e := range c.GetBytesContents() {
			b = infer.AppendBytesElement(b, e)
		}
		return b, nil
	default:
		return nil, badResponsef("output '%s': unsupported datatype %s", name, dt)
	}
}

// decodeParams converts protocol parameters. owner and name say whose they
// are in error messages: ("response", "") or ("output", "y").
func decodeParams(owner, name string, in map[string]*pb.InferParameter) (infer.Parameters, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(infer.Parameters, len(in))
	for k, p := range in {
		switch v := p.GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			out[k] = v.BoolParam
		case *pb.InferParameter_Int64Param:
			out[k] = v.Int64Param
		case *pb.InferParameter_StringParam:
			out[k] = v.StringParam
		case *pb.InferParameter_DoubleParam:
			out[k] = v.DoubleParam
		case *pb.InferParameter_Uint64Param:
			out[k] = v.Uint64Param
		default:
			if name != "" {
				owner += " '" + name + "'"
			}
			return nil, badResponsef("%s: parameter '%s' has no value", owner, k)
		}
	}
	return out, nil
}

// badResponsef builds the error of a response that does not hold together.
// Names quoted in format with '%s' are shortened, since they came from the
// network.
func badResponsef(format string, args ...any) *infer.Error {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = shorten(s)
		}
	}
	return infer.Errorf(infer.KindInternal, ReasonBadResponse, format, args...)
}

// badSizef is badResponsef for data whose size disagrees with its shape;
// the error wraps infer.ErrSize.
func badSizef(format string, args ...any) *infer.Error {
	e := badResponsef(format, args...)
	e.Err = infer.ErrSize
	return e
}

// shorten cuts a name from the network to a length fit for a message.
func shorten(s string) string { return truncateTo(s, 64) }
