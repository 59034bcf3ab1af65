// Package classify implements Triton's classification extension: instead
// of an output tensor, the top k of its elements (per batch row) as BYTES
// strings "value:index" or "value:index:label".
//
// Semantics follow Triton's protocol document
// (docs/protocol/extension_classification.md): the k highest-valued
// elements compared in the tensor's own data type, the index into the
// row, the label from the output's label_filename when it has a line for
// that index. A k larger than a row yields the whole row.
package classify

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Supported reports whether outputs of type dt can be classified: every
// numeric type (not BYTES, not BOOL).
func Supported(dt infer.DataType) bool {
	return dt.Valid() && dt != infer.Bytes && dt != infer.Bool
}

// MaxElements bounds the output a classification sorts, as Triton does
// (qa/L0_parameters test_classification_output_tensor_too_large refuses
// 1,000,001 elements with "classification output tensor too large").
const MaxElements = 1_000_000

// TopK classifies t: with batched, each row along the first dimension on
// its own (result shape [rows, k]), else the whole tensor (shape [k]).
// labels[i] names class i; an index past labels has no label.
func TopK(t infer.Tensor, k int, batched bool, labels []string) (infer.Tensor, error) {
	if k < 1 {
		return infer.Tensor{}, fmt.Errorf("classification count must be >= 1, got %d", k)
	}
	if !Supported(t.DataType) {
		return infer.Tensor{}, fmt.Errorf("output '%s': cannot classify %s data", t.Name, t.DataType)
	}
	if err := t.CheckSize(); err != nil {
		return infer.Tensor{}, fmt.Errorf("output '%s': %w", t.Name, err)
	}
	n, _ := t.Shape.Elements() // CheckSize checked the shape
	if n > MaxElements {
		return infer.Tensor{}, fmt.Errorf("output '%s': classification output tensor too large: %d elements, at most %d", t.Name, n, MaxElements)
	}
	rows := 1
	if batched {
		if len(t.Shape) == 0 {
			return infer.Tensor{}, fmt.Errorf("output '%s': a batched output needs a batch dimension", t.Name)
		}
		rows = int(t.Shape[0])
	}
	per := 0
	if rows > 0 {
		per = n / rows
	}
	k = min(k, per)
	size := t.DataType.Size()
	idx := make([]int, per)
	vals := make([]float64, per)
	var data []byte
	for r := range rows {
		row := t.Data[r*per*size : (r+1)*per*size]
		for i := range per {
			idx[i] = i
			vals[i] = value(t.DataType, row[i*size:(i+1)*size])
		}
		// Highest first; NaN lowest; ties by the lower index.
		slices.SortStableFunc(idx, func(a, b int) int {
			va, vb := vals[a], vals[b]
			switch {
			case math.IsNaN(va) && math.IsNaN(vb):
				return 0
			case math.IsNaN(va):
				return 1
			case math.IsNaN(vb):
				return -1
			}
			return cmp.Compare(vb, va)
		})
		for _, i := range idx[:k] {
			s := format(t.DataType, row[i*size:(i+1)*size]) + ":" + strconv.Itoa(i)
			if i < len(labels) && labels[i] != "" {
				s += ":" + labels[i]
			}
			data = infer.AppendBytesElement(data, []byte(s))
		}
	}
	shape := infer.Shape{int64(k)}
	if batched {
		shape = infer.Shape{int64(rows), int64(k)}
	}
	if data == nil {
		data = []byte{}
	}
	return infer.Tensor{Name: t.Name, DataType: infer.Bytes, Shape: shape, Data: data}, nil
}

// value reads one little-endian element as a float64 for ordering. 64-bit
// integers beyond 2^53 lose precision in the comparison only, never in
// the formatted value.
func value(dt infer.DataType, b []byte) float64 {
	switch dt {
	case infer.Uint8:
		return float64(b[0])
	case infer.Int8:
		return float64(int8(b[0]))
	case infer.Uint16:
		return float64(binary.LittleEndian.Uint16(b))
	case infer.Int16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case infer.Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case infer.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case infer.Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case infer.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case infer.FP16:
		return half(binary.LittleEndian.Uint16(b))
	case infer.BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case infer.FP32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case infer.FP64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	default:
		return math.NaN()
	}
}

// format writes one element as Triton does: integers in decimal, floats
// with six digits after the point (C++'s std::to_string).
func format(dt infer.DataType, b []byte) string {
	switch dt {
	case infer.Uint64:
		return strconv.FormatUint(binary.LittleEndian.Uint64(b), 10)
	case infer.Int64:
		return strconv.FormatInt(int64(binary.LittleEndian.Uint64(b)), 10)
	case infer.FP16, infer.BF16, infer.FP32, infer.FP64:
		return strconv.FormatFloat(value(dt, b), 'f', 6, 64)
	default:
		return strconv.FormatInt(int64(value(dt, b)), 10)
	}
}

// half converts IEEE 754 binary16 bits to a float64.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0: // zero or subnormal
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}
