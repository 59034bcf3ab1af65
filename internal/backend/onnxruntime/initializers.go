package onnxruntime

import (
	"errors"
	"os"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-ml/sluice/internal/infer"
)

// maxGraphScanBytes bounds the model files scanned for initializer-backed
// inputs; larger files are not scanned (their such inputs stay unknown).
const maxGraphScanBytes = 1 << 30

// initializerInputs returns the graph inputs of an ONNX model file that
// an initializer backs: ONNX Runtime leaves them out of the session's
// inputs (they are overridable initializers), but a request may still
// give them. Triton lists them as inputs a config may mark optional. The
// file is read with protowire (field numbers of ONNX's public onnx.proto:
// ModelProto.graph 7; GraphProto.initializer 5, input 11; TensorProto.name
// 8; ValueInfoProto name 1, type 2; TypeProto.tensor_type 1;
// TypeProto.Tensor elem_type 1, shape 2; TensorShapeProto.dim 1;
// Dimension dim_value 1).
func initializerInputs(path string) ([]infer.TensorSpec, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxGraphScanBytes {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseInitializerInputs(data)
}

var errBadProto = errors.New("malformed ONNX protobuf")

// fields calls fn for each field of a protobuf message.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadProto
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errBadProto
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

func parseInitializerInputs(model []byte) ([]infer.TensorSpec, error) {
	var graph []byte
	if err := fields(model, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num == 7 && typ == protowire.BytesType {
			graph = v
		}
		return nil
	}); err != nil {
		return nil, err
	}
	inits := map[string]bool{}
	var inputs [][]byte
	if err := fields(graph, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 5:
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num == 8 && typ == protowire.BytesType {
					inits[string(v)] = true
				}
				return nil
			})
		case 11:
			inputs = append(inputs, v)
		default: // the graph's other fields
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out []infer.TensorSpec
	for _, vi := range inputs {
		spec, err := valueInfo(vi)
		if err != nil {
			return nil, err
		}
		if inits[spec.Name] && spec.DataType.Valid() && spec.Shape != nil {
			spec.Optional = true
			out = append(out, spec)
		}
	}
	return out, nil
}

// valueInfo reads a ValueInfoProto of a tensor.
func valueInfo(b []byte) (infer.TensorSpec, error) {
	var spec infer.TensorSpec
	var elem uint64
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			spec.Name = string(v)
		case num == 2 && typ == protowire.BytesType:
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
					switch {
					case num == 1 && typ == protowire.VarintType:
						elem = x
					case num == 2 && typ == protowire.BytesType:
						spec.Shape = infer.Shape{}
						return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
							if num != 1 || typ != protowire.BytesType {
								return nil
							}
							d := int64(-1)
							err := fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
								if num == 1 && typ == protowire.VarintType && int64(x) >= 0 {
									d = int64(x)
								}
								return nil
							})
							spec.Shape = append(spec.Shape, d)
							return err
						})
					}
					return nil
				})
			})
		}
		return nil
	})
	if err != nil {
		return spec, err
	}
	spec.DataType = onnxElemTypes[elem] // Invalid when not a supported tensor type
	return spec, nil
}

// onnxElemTypes maps ONNX's TensorProto.DataType to protocol types.
var onnxElemTypes = map[uint64]infer.DataType{
	1: infer.FP32, 2: infer.Uint8, 3: infer.Int8, 4: infer.Uint16, 5: infer.Int16,
	6: infer.Int32, 7: infer.Int64, 8: infer.Bytes, 9: infer.Bool, 10: infer.FP16,
	11: infer.FP64, 12: infer.Uint32, 13: infer.Uint64, 16: infer.BF16,
}
