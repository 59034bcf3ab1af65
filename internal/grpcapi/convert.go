package grpcapi

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// DecodeInferRequest converts a ModelInferRequest into an infer.Request.
// Every input's data ends up in the wire layout of package infer, taken
// either from the typed contents or from raw_input_contents (never both),
// and its size is checked against its shape. Errors are *infer.Error of
// KindInvalid naming the offending tensor.
//
// The returned tensors may alias the byte slices of req.
func DecodeInferRequest(req *pb.ModelInferRequest) (*infer.Request, error) {
	if req.GetModelName() == "" {
		return nil, invalidf(reasonMissingModelName, "model_name is empty")
	}
	params, err := decodeParams("request", req.GetParameters())
	if err != nil {
		return nil, err
	}
	inputs := req.GetInputs()
	raw := req.GetRawInputContents()
	if len(raw) > 0 && len(raw) != len(inputs) {
		if len(raw) < len(inputs) {
			return nil, invalidf(reasonRawInputCount,
				"input '%s': no raw content: raw_input_contents has %d entries for %d inputs",
				inputs[len(raw)].GetName(), len(raw), len(inputs))
		}
		return nil, invalidf(reasonRawInputCount,
			"raw_input_contents has %d entries for %d inputs", len(raw), len(inputs))
	}

	out := &infer.Request{
		ID:         req.GetId(),
		Model:      req.GetModelName(),
		Version:    req.GetModelVersion(),
		Parameters: params,
		Inputs:     make([]infer.Tensor, len(inputs)),
	}
	seen := make(map[string]struct{}, len(inputs))
	for i, in := range inputs {
		name := in.GetName()
		if name == "" {
			return nil, invalidf(reasonInvalidInput, "input #%d has no name", i)
		}
		if _, dup := seen[name]; dup {
			return nil, invalidf(reasonDuplicateInput, "input '%s': appears more than once", name)
		}
		seen[name] = struct{}{}

		t, n, err := decodeHeader(name, in.GetDatatype(), in.GetShape())
		if err != nil {
			return nil, err
		}
		if t.Parameters, err = decodeParams("input '"+name+"'", in.GetParameters()); err != nil {
			return nil, err
		}
		if len(raw) > 0 {
			if fields := setContentFields(in.GetContents()); len(fields) > 0 {
				return nil, invalidf(reasonMixedRawAndTyped,
					"input '%s': has typed contents (%s) while the request uses raw_input_contents",
					name, strings.Join(fields, ", "))
			}
			if err := checkRaw(name, t.DataType, t.Shape, n, raw[i]); err != nil {
				return nil, err
			}
			t.Data = raw[i]
		} else if t.Data, err = decodeContents(name, t.DataType, t.Shape, n, in.GetContents()); err != nil {
			return nil, err
		}
		out.Inputs[i] = t
	}

	if reqOut := req.GetOutputs(); len(reqOut) > 0 {
		out.Outputs = make([]infer.RequestedOutput, len(reqOut))
		for i, o := range reqOut {
			if o.GetName() == "" {
				return nil, invalidf(reasonInvalidInput, "requested output #%d has no name", i)
			}
			p, err := decodeParams("output '"+o.GetName()+"'", o.GetParameters())
			if err != nil {
				return nil, err
			}
			out.Outputs[i] = infer.RequestedOutput{Name: o.GetName(), Parameters: p}
		}
	}
	return out, nil
}

// decodeHeader validates a tensor's datatype and shape and returns the
// tensor without data and its element count.
func decodeHeader(name, datatype string, shape []int64) (infer.Tensor, int, error) {
	dt, ok := infer.ParseDataType(datatype)
	if !ok {
		return infer.Tensor{}, 0, invalidf(reasonInvalidDatatype, "input '%s': unknown datatype %q", name, datatype)
	}
	s := infer.Shape(shape)
	n, err := s.Elements()
	if err != nil {
		return infer.Tensor{}, 0, invalidf(reasonInvalidShape, "input '%s': %v", name, err)
	}
	return infer.Tensor{Name: name, DataType: dt, Shape: s.Clone()}, n, nil
}

// checkRaw verifies that raw content holds exactly the elements the shape
// asks for.
func checkRaw(name string, dt infer.DataType, shape infer.Shape, n int, data []byte) error {
	if dt == infer.Bytes {
		count, err := infer.CountBytesElements(data)
		if err != nil {
			return invalidf(reasonSizeMismatch, "input '%s': raw BYTES content: %v", name, err)
		}
		if count != n {
			return invalidf(reasonSizeMismatch,
				"input '%s': raw content holds %d BYTES elements but shape %s needs %d", name, count, shape, n)
		}
		return nil
	}
	if want := int64(n) * int64(dt.Size()); int64(len(data)) != want {
		return invalidf(reasonSizeMismatch,
			"input '%s': raw content is %d bytes but shape %s of %s needs %d", name, len(data), shape, dt, want)
	}
	return nil
}

// contentLens returns the length of each InferTensorContents field, in
// field-number order, to find which ones a client filled.
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
// element count is compared with the shape before anything is allocated,
// so a huge shape with little data costs nothing.
func decodeContents(name string, dt infer.DataType, shape infer.Shape, n int, c *pb.InferTensorContents) ([]byte, error) {
	field := contentField(dt)
	lens := contentLens(c)
	for i, l := range lens {
		if l > 0 && i != field {
			if field < 0 {
				return nil, invalidf(reasonRawOnlyDatatype,
					"input '%s': %s data must travel in raw_input_contents, got %s", name, dt, contentFieldNames[i])
			}
			return nil, invalidf(reasonContentsMismatch,
				"input '%s': datatype %s takes %s, got %s", name, dt, contentFieldNames[field], contentFieldNames[i])
		}
	}
	if field < 0 {
		if n == 0 {
			return []byte{}, nil
		}
		return nil, invalidf(reasonRawOnlyDatatype,
			"input '%s': %s data must travel in raw_input_contents", name, dt)
	}
	if got := lens[field]; got != n {
		return nil, invalidf(reasonSizeMismatch,
			"input '%s': %s has %d elements but shape %s needs %d", name, contentFieldNames[field], got, shape, n)
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
				return nil, invalidf(reasonValueOutOfRange,
					"input '%s': element %d value %d is out of range for %s", name, i, v, dt)
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
				return nil, invalidf(reasonValueOutOfRange,
					"input '%s': element %d value %d is out of range for %s", name, i, v, dt)
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
				return nil, invalidf(reasonSizeMismatch, "input '%s': BYTES element larger than 4 GiB", name)
			}
			size += 4 + len(e)
		}
		b := make([]byte, 0, size)
		for _, e := range c.GetBytesContents() {
			b = infer.AppendBytesElement(b, e)
		}
		return b, nil
	default:
		return nil, invalidf(reasonInvalidDatatype, "input '%s': unsupported datatype %s", name, dt)
	}
}

// decodeParams converts protocol parameters. where names the owner for
// error messages, e.g. "input 'x'".
func decodeParams(where string, in map[string]*pb.InferParameter) (infer.Parameters, error) {
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
			return nil, invalidf(reasonInvalidParameter, "%s: parameter '%s' has no value", where, k)
		}
	}
	return out, nil
}

// encodeParams converts parameters for a response. Values of types the
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

// EncodeInferResponse converts an infer.Response into a ModelInferResponse.
// Like Triton, every output's data travels in raw_output_contents, one
// entry per output in output order. The response aliases resp's data.
func EncodeInferResponse(resp *infer.Response) *pb.ModelInferResponse {
	out := &pb.ModelInferResponse{
		ModelName:         resp.Model,
		ModelVersion:      resp.Version,
		Id:                resp.ID,
		Parameters:        encodeParams(resp.Parameters),
		Outputs:           make([]*pb.ModelInferResponse_InferOutputTensor, len(resp.Outputs)),
		RawOutputContents: make([][]byte, len(resp.Outputs)),
	}
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		out.Outputs[i] = &pb.ModelInferResponse_InferOutputTensor{
			Name:       t.Name,
			Datatype:   t.DataType.String(),
			Shape:      t.Shape,
			Parameters: encodeParams(t.Parameters),
		}
		data := t.Data
		if data == nil {
			data = []byte{}
		}
		out.RawOutputContents[i] = data
	}
	return out
}
