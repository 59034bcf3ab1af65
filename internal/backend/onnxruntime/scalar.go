//go:build cgo

package onnxruntime

import (
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Rank-0 (scalar) tensors. onnxruntime_go refuses tensor shapes without
// dimensions, but its Scalar values are rank-0 tensors to ONNX Runtime:
// an input whose shape is [] is passed as one, and an output the model
// declares rank-0 is preallocated as one, so that a model with scalar
// tensors serves (Triton's qa/L0_scalar_io: a config's dims [1] over the
// model's []). FP16, BF16 and BYTES scalars have no Scalar type and stay
// refused.

// scalarOf makes the rank-0 value of one element of type T from its
// little-endian bytes.
func scalarOf[T ort.TensorData](data []byte) (ort.Value, error) {
	var v T
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), data)
	return ort.NewScalar(v)
}

// newScalarValue is newValue for a tensor of shape []; ok is false for a
// data type that has no scalar value.
func newScalarValue(t *infer.Tensor) (v ort.Value, ok bool, err error) {
	switch t.DataType {
	case infer.FP32:
		v, err = scalarOf[float32](t.Data)
	case infer.FP64:
		v, err = scalarOf[float64](t.Data)
	case infer.Int8:
		v, err = scalarOf[int8](t.Data)
	case infer.Int16:
		v, err = scalarOf[int16](t.Data)
	case infer.Int32:
		v, err = scalarOf[int32](t.Data)
	case infer.Int64:
		v, err = scalarOf[int64](t.Data)
	case infer.Uint8:
		v, err = scalarOf[uint8](t.Data)
	case infer.Uint16:
		v, err = scalarOf[uint16](t.Data)
	case infer.Uint32:
		v, err = scalarOf[uint32](t.Data)
	case infer.Uint64:
		v, err = scalarOf[uint64](t.Data)
	case infer.Bool:
		v, err = scalarOf[bool](normalizeBool(t.Data))
	default:
		return nil, false, nil
	}
	return v, true, err
}

// newEmptyScalar preallocates a rank-0 output of dt; nil for a data type
// that has no scalar value.
func newEmptyScalar(dt infer.DataType) (ort.Value, error) {
	v, _, err := newScalarValue(&infer.Tensor{DataType: dt, Data: make([]byte, max(dt.Size(), 1))})
	return v, err
}

// scalarBytes returns a rank-0 output's element as bytes, and its data
// type; ok is false when v is no scalar.
func scalarBytes(v ort.Value) (dt infer.DataType, data []byte, ok bool) {
	switch x := v.(type) {
	case *ort.Scalar[float32]:
		return infer.FP32, elemBytes(x.GetData()), true
	case *ort.Scalar[float64]:
		return infer.FP64, elemBytes(x.GetData()), true
	case *ort.Scalar[int8]:
		return infer.Int8, elemBytes(x.GetData()), true
	case *ort.Scalar[int16]:
		return infer.Int16, elemBytes(x.GetData()), true
	case *ort.Scalar[int32]:
		return infer.Int32, elemBytes(x.GetData()), true
	case *ort.Scalar[int64]:
		return infer.Int64, elemBytes(x.GetData()), true
	case *ort.Scalar[uint8]:
		return infer.Uint8, elemBytes(x.GetData()), true
	case *ort.Scalar[uint16]:
		return infer.Uint16, elemBytes(x.GetData()), true
	case *ort.Scalar[uint32]:
		return infer.Uint32, elemBytes(x.GetData()), true
	case *ort.Scalar[uint64]:
		return infer.Uint64, elemBytes(x.GetData()), true
	case *ort.Scalar[bool]:
		return infer.Bool, elemBytes(x.GetData()), true
	}
	return infer.Invalid, nil, false
}

// elemBytes copies one element's bytes.
func elemBytes[T any](v T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v))...)
}
