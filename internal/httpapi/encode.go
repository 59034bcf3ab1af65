package httpapi

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonenc"
)

// appendInferResponse appends the JSON of resp to dst. Outputs whose
// isBinary entry is true get a binary_data_size parameter and no "data";
// the caller sends their bytes after the JSON, in output order.
func appendInferResponse(dst []byte, resp *infer.Response, isBinary []bool) ([]byte, error) {
	if len(isBinary) != len(resp.Outputs) {
		return nil, infer.Errorf(infer.KindInternal, reasonInternal, "%d binary flags for %d outputs", len(isBinary), len(resp.Outputs))
	}
	dst = append(dst, `{"model_name":`...)
	dst = jsonenc.AppendString(dst, resp.Model)
	dst = append(dst, `,"model_version":`...)
	dst = jsonenc.AppendString(dst, resp.Version)
	dst = append(dst, `,"id":`...)
	dst = jsonenc.AppendString(dst, resp.ID)
	if len(resp.Parameters) > 0 {
		var err error
		dst = append(dst, `,"parameters":`...)
		if dst, err = appendParams(dst, resp.Parameters, ""); err != nil {
			return nil, err
		}
	}
	dst = append(dst, `,"outputs":[`...)
	for i, bin := range isBinary {
		t := &resp.Outputs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		if err := t.CheckSize(); err != nil {
			return nil, infer.Errorf(infer.KindInternal, reasonInternal, "output '%s': %v", t.Name, err)
		}
		dst = append(dst, `{"name":`...)
		dst = jsonenc.AppendString(dst, t.Name)
		dst = append(dst, `,"datatype":"`...)
		dst = append(dst, t.DataType.String()...)
		dst = append(dst, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, d, 10)
		}
		dst = append(dst, ']')
		if bin || len(t.Parameters) > 0 {
			params := t.Parameters
			if bin {
				params = make(infer.Parameters, len(t.Parameters)+1)
				maps.Copy(params, t.Parameters)
				params[paramBinaryDataSize] = int64(len(t.Data))
			}
			var err error
			dst = append(dst, `,"parameters":`...)
			if dst, err = appendParams(dst, params, t.Name); err != nil {
				return nil, err
			}
		}
		if !bin {
			var err error
			dst = append(dst, `,"data":`...)
			if dst, err = appendTensorData(dst, t); err != nil {
				return nil, err
			}
		}
		dst = append(dst, '}')
	}
	dst = append(dst, "]}"...)
	return dst, nil
}

// appendTensorData appends t's elements as a flat JSON array. t's size has
// been checked.
func appendTensorData(dst []byte, t *infer.Tensor) ([]byte, error) {
	dst = append(dst, '[')
	b := t.Data
	le := binary.LittleEndian
	sep := func(i int) {
		if i > 0 {
			dst = append(dst, ',')
		}
	}
	switch t.DataType {
	case infer.Bool:
		for i, v := range b {
			sep(i)
			if v != 0 {
				dst = append(dst, "true"...)
			} else {
				dst = append(dst, "false"...)
			}
		}
	case infer.Uint8:
		for i, v := range b {
			sep(i)
			dst = strconv.AppendUint(dst, uint64(v), 10)
		}
	case infer.Int8:
		for i, v := range b {
			sep(i)
			dst = strconv.AppendInt(dst, int64(int8(v)), 10)
		}
	case infer.Uint16:
		for i := 0; i < len(b); i += 2 {
			sep(i)
			dst = strconv.AppendUint(dst, uint64(le.Uint16(b[i:])), 10)
		}
	case infer.Int16:
		for i := 0; i < len(b); i += 2 {
			sep(i)
			dst = strconv.AppendInt(dst, int64(int16(le.Uint16(b[i:]))), 10)
		}
	case infer.Uint32:
		for i := 0; i < len(b); i += 4 {
			sep(i)
			dst = strconv.AppendUint(dst, uint64(le.Uint32(b[i:])), 10)
		}
	case infer.Int32:
		for i := 0; i < len(b); i += 4 {
			sep(i)
			dst = strconv.AppendInt(dst, int64(int32(le.Uint32(b[i:]))), 10)
		}
	case infer.Uint64:
		for i := 0; i < len(b); i += 8 {
			sep(i)
			dst = strconv.AppendUint(dst, le.Uint64(b[i:]), 10)
		}
	case infer.Int64:
		for i := 0; i < len(b); i += 8 {
			sep(i)
			dst = strconv.AppendInt(dst, int64(le.Uint64(b[i:])), 10)
		}
	case infer.FP16, infer.BF16:
		widen := fp16ToFloat32
		if t.DataType == infer.BF16 {
			widen = bf16ToFloat32
		}
		for i := 0; i < len(b); i += 2 {
			f := widen(le.Uint16(b[i:]))
			if !finite(float64(f)) {
				return nil, unrepresentable(t.Name, i/2, float64(f))
			}
			sep(i)
			dst = appendFloat(dst, float64(f), 32)
		}
	case infer.FP32:
		for i := 0; i < len(b); i += 4 {
			f := math.Float32frombits(le.Uint32(b[i:]))
			if !finite(float64(f)) {
				return nil, unrepresentable(t.Name, i/4, float64(f))
			}
			sep(i)
			dst = appendFloat(dst, float64(f), 32)
		}
	case infer.FP64:
		for i := 0; i < len(b); i += 8 {
			f := math.Float64frombits(le.Uint64(b[i:]))
			if !finite(f) {
				return nil, unrepresentable(t.Name, i/8, f)
			}
			sep(i)
			dst = appendFloat(dst, f, 64)
		}
	case infer.Bytes:
		for i := 0; len(b) > 0; i++ {
			// The size check has walked these prefixes already.
			n := le.Uint32(b)
			sep(i)
			dst = jsonenc.AppendString(dst, b[4:4+n])
			b = b[4+n:]
		}
	default:
		return nil, infer.Errorf(infer.KindInternal, reasonInternal, "output '%s' has invalid datatype %s", t.Name, t.DataType)
	}
	return append(dst, ']'), nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// unrepresentable reports a NaN or infinity, which JSON cannot carry.
func unrepresentable(name string, idx int, f float64) error {
	return infer.Errorf(infer.KindUnsupported, reasonUnrepresentable,
		"output '%s': element %d is %v, which JSON cannot represent; request binary output (parameter binary_data_output or binary_data)", name, idx, f)
}

// appendFloat appends the shortest text that reads back as the same value
// at the given bit size: plain notation for ordinary magnitudes, exponent
// notation for very small or large ones.
func appendFloat(dst []byte, f float64, bits int) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(dst, f, format, -1, bits)
}

// appendParams appends a parameters object with sorted keys. owner is the
// output's name for errors ("" for the response).
func appendParams(dst []byte, p infer.Parameters, owner string) ([]byte, error) {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonenc.AppendString(dst, k)
		dst = append(dst, ':')
		switch v := p[k].(type) {
		case string:
			dst = jsonenc.AppendString(dst, v)
		case bool:
			dst = strconv.AppendBool(dst, v)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		case int:
			dst = strconv.AppendInt(dst, int64(v), 10)
		case int32:
			dst = strconv.AppendInt(dst, int64(v), 10)
		case uint64:
			dst = strconv.AppendUint(dst, v, 10)
		case uint32:
			dst = strconv.AppendUint(dst, uint64(v), 10)
		case float64:
			if !finite(v) {
				return nil, paramError(owner, k, v)
			}
			dst = appendFloat(dst, v, 64)
		case float32:
			if !finite(float64(v)) {
				return nil, paramError(owner, k, v)
			}
			dst = appendFloat(dst, float64(v), 32)
		default:
			dst = jsonenc.AppendString(dst, fmt.Sprint(v))
		}
	}
	return append(dst, '}'), nil
}

func paramError(owner, key string, v any) error {
	where := "response"
	if owner != "" {
		where = "output '" + owner + "'"
	}
	return infer.Errorf(infer.KindInternal, reasonUnrepresentable, "%s: parameter %q is %v, which JSON cannot represent", where, key, v)
}
