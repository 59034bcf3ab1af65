package modelconfig

import (
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// ToInfer maps a configuration data type to the protocol's; TYPE_STRING
// becomes BYTES. Unknown types map to infer.Invalid.
func ToInfer(t inferencepb.DataType) infer.DataType {
	switch t {
	case inferencepb.DataType_TYPE_BOOL:
		return infer.Bool
	case inferencepb.DataType_TYPE_UINT8:
		return infer.Uint8
	case inferencepb.DataType_TYPE_UINT16:
		return infer.Uint16
	case inferencepb.DataType_TYPE_UINT32:
		return infer.Uint32
	case inferencepb.DataType_TYPE_UINT64:
		return infer.Uint64
	case inferencepb.DataType_TYPE_INT8:
		return infer.Int8
	case inferencepb.DataType_TYPE_INT16:
		return infer.Int16
	case inferencepb.DataType_TYPE_INT32:
		return infer.Int32
	case inferencepb.DataType_TYPE_INT64:
		return infer.Int64
	case inferencepb.DataType_TYPE_FP16:
		return infer.FP16
	case inferencepb.DataType_TYPE_FP32:
		return infer.FP32
	case inferencepb.DataType_TYPE_FP64:
		return infer.FP64
	case inferencepb.DataType_TYPE_STRING:
		return infer.Bytes
	case inferencepb.DataType_TYPE_BF16:
		return infer.BF16
	default:
		return infer.Invalid
	}
}

// FromInfer maps a protocol data type to the configuration's; BYTES becomes
// TYPE_STRING. Unknown types map to TYPE_INVALID.
func FromInfer(d infer.DataType) inferencepb.DataType {
	switch d {
	case infer.Bool:
		return inferencepb.DataType_TYPE_BOOL
	case infer.Uint8:
		return inferencepb.DataType_TYPE_UINT8
	case infer.Uint16:
		return inferencepb.DataType_TYPE_UINT16
	case infer.Uint32:
		return inferencepb.DataType_TYPE_UINT32
	case infer.Uint64:
		return inferencepb.DataType_TYPE_UINT64
	case infer.Int8:
		return inferencepb.DataType_TYPE_INT8
	case infer.Int16:
		return inferencepb.DataType_TYPE_INT16
	case infer.Int32:
		return inferencepb.DataType_TYPE_INT32
	case infer.Int64:
		return inferencepb.DataType_TYPE_INT64
	case infer.FP16:
		return inferencepb.DataType_TYPE_FP16
	case infer.FP32:
		return inferencepb.DataType_TYPE_FP32
	case infer.FP64:
		return inferencepb.DataType_TYPE_FP64
	case infer.Bytes:
		return inferencepb.DataType_TYPE_STRING
	case infer.BF16:
		return inferencepb.DataType_TYPE_BF16
	default:
		return inferencepb.DataType_TYPE_INVALID
	}
}
