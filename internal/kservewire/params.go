package kservewire

import (
	"fmt"

	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Params converts protocol parameters. owner and name say whose they are
// in error messages: ("request", "") reads "request: parameter …",
// ("input", "x") reads "input 'x': parameter …". A parameter without a
// value is a BadParameter problem.
func (d *Decoder) Params(owner, name string, in map[string]*pb.InferParameter) (infer.Parameters, error) {
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
				return nil, d.errorf(BadParameter, nil, "%s '%s': parameter '%s' has no value", owner, name, k)
			}
			return nil, d.errorf(BadParameter, nil, "%s: parameter '%s' has no value", owner, k)
		}
	}
	return out, nil
}

// EncodeParams converts parameters for the protocol. Values of types the
// protocol cannot carry are sent as their string form; int and int32 go
// as int64, uint32 as uint64 and float32 as double.
func EncodeParams(in infer.Parameters) map[string]*pb.InferParameter {
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
