//go:build cgo

package onnxruntime

import (
	"fmt"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/sluice-ml/sluice/internal/infer"
)

// fromORTType maps an ONNX element type to its KServe v2 data type.
func fromORTType(t ort.TensorElementDataType) (infer.DataType, error) {
	switch t {
	case ort.TensorElementDataTypeFloat:
		return infer.FP32, nil
	case ort.TensorElementDataTypeFloat16:
		return infer.FP16, nil
	case ort.TensorElementDataTypeBFloat16:
		return infer.BF16, nil
	case ort.TensorElementDataTypeDouble:
		return infer.FP64, nil
	case ort.TensorElementDataTypeInt8:
		return infer.Int8, nil
	case ort.TensorElementDataTypeInt16:
		return infer.Int16, nil
	case ort.TensorElementDataTypeInt32:
		return infer.Int32, nil
	case ort.TensorElementDataTypeInt64:
		return infer.Int64, nil
	case ort.TensorElementDataTypeUint8:
		return infer.Uint8, nil
	case ort.TensorElementDataTypeUint16:
		return infer.Uint16, nil
	case ort.TensorElementDataTypeUint32:
		return infer.Uint32, nil
	case ort.TensorElementDataTypeUint64:
		return infer.Uint64, nil
	case ort.TensorElementDataTypeBool:
		return infer.Bool, nil
	case ort.TensorElementDataTypeString:
		return infer.Bytes, nil
	}
	return infer.Invalid, fmt.Errorf("element type %s has no KServe v2 data type", t)
}

// toORTType maps a fixed-size KServe v2 data type to its ONNX element
// type; BYTES and invalid types map to Undefined.
func toORTType(dt infer.DataType) ort.TensorElementDataType {
	switch dt {
	case infer.FP32:
		return ort.TensorElementDataTypeFloat
	case infer.FP16:
		return ort.TensorElementDataTypeFloat16
	case infer.BF16:
		return ort.TensorElementDataTypeBFloat16
	case infer.FP64:
		return ort.TensorElementDataTypeDouble
	case infer.Int8:
		return ort.TensorElementDataTypeInt8
	case infer.Int16:
		return ort.TensorElementDataTypeInt16
	case infer.Int32:
		return ort.TensorElementDataTypeInt32
	case infer.Int64:
		return ort.TensorElementDataTypeInt64
	case infer.Uint8:
		return ort.TensorElementDataTypeUint8
	case infer.Uint16:
		return ort.TensorElementDataTypeUint16
	case infer.Uint32:
		return ort.TensorElementDataTypeUint32
	case infer.Uint64:
		return ort.TensorElementDataTypeUint64
	case infer.Bool:
		return ort.TensorElementDataTypeBool
	default:
		return ort.TensorElementDataTypeUndefined
	}
}

// ortCustomType is the ONNX element type of data passed as raw bytes.
func ortCustomType(dt infer.DataType) ort.TensorElementDataType {
	switch dt {
	case infer.FP16:
		return ort.TensorElementDataTypeFloat16
	case infer.BF16:
		return ort.TensorElementDataTypeBFloat16
	case infer.Bool:
		return ort.TensorElementDataTypeBool
	default: // other types travel as typed Go slices, not raw bytes
		return ort.TensorElementDataTypeUndefined
	}
}

// specFromInfo turns ONNX Runtime's description of an input or output into
// a TensorSpec; kind is "input" or "output" for the error message.
func specFromInfo(kind string, info ort.InputOutputInfo) (infer.TensorSpec, error) {
	if info.OrtValueType != ort.ONNXTypeTensor {
		return infer.TensorSpec{}, fmt.Errorf("%s '%s' is a %s; only tensor inputs and outputs are supported",
			kind, info.Name, valueKind(info.OrtValueType))
	}
	dt, err := fromORTType(info.DataType)
	if err != nil {
		return infer.TensorSpec{}, fmt.Errorf("%s '%s': %w", kind, info.Name, err)
	}
	shape := make(infer.Shape, len(info.Dimensions))
	for i, d := range info.Dimensions {
		if d < 0 {
			d = -1 // symbolic and unknown dimensions alike
		}
		shape[i] = d
	}
	return infer.TensorSpec{Name: info.Name, DataType: dt, Shape: shape}, nil
}

func valueKind(t ort.ONNXType) string {
	switch t {
	case ort.ONNXTypeSequence:
		return "sequence"
	case ort.ONNXTypeMap:
		return "map"
	case ort.ONNXTypeSparseTensor:
		return "sparse tensor"
	case ort.ONNXTypeOptional:
		return "optional value"
	case ort.ONNXTypeOpaque:
		return "opaque value"
	}
	return "value of unknown type"
}
