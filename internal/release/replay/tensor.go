package replay

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// maxDataDepth bounds the nesting of a JSON tensor's data arrays.
const maxDataDepth = 32

// walkData calls visit for every scalar of a JSON array, nested arrays
// flattened row-major. Scalars are json.Number, string, bool or nil. The
// array must be the whole of data.
func walkData(data []byte, visit func(v any) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return errors.New("data is not a JSON array")
	}
	depth := 1
	for depth > 0 {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("data: %w", err)
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '[':
				if depth++; depth > maxDataDepth {
					return fmt.Errorf("data nests arrays deeper than %d", maxDataDepth)
				}
			case ']':
				depth--
			default:
				return errors.New("data holds an object")
			}
		default:
			if err := visit(v); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data has trailing content after its array")
	}
	return nil
}

// toInferTensor converts a recorded tensor (KServe v2 JSON form) to the
// binary layout of infer.Tensor. The element count must match the shape.
// FP16 and BF16 are not supported (the gateway records neither); null
// elements of FP32 and FP64 tensors, which the recording writes for
// non-finite values, become NaN. Parameters are not carried over.
func toInferTensor(t *record.Tensor) (infer.Tensor, error) {
	dt, ok := infer.ParseDataType(t.DataType)
	if !ok {
		return infer.Tensor{}, fmt.Errorf("input %q: unknown datatype %q", t.Name, t.DataType)
	}
	if dt == infer.FP16 || dt == infer.BF16 {
		return infer.Tensor{}, fmt.Errorf("input %q: datatype %s cannot be replayed from JSON", t.Name, dt)
	}
	shape := infer.Shape(t.Shape).Clone()
	n, err := shape.Elements()
	if err != nil {
		return infer.Tensor{}, fmt.Errorf("input %q: %w", t.Name, err)
	}
	out := infer.Tensor{Name: t.Name, DataType: dt, Shape: shape}
	if size := dt.Size(); size > 0 {
		// The data cannot hold more elements than it has bytes, so this
		// bounds the allocation by the record's size, whatever the shape.
		out.Data = make([]byte, 0, min(n, len(t.Data))*size)
	}
	count := 0
	err = walkData(t.Data, func(v any) error {
		if count++; count > n {
			return fmt.Errorf("data holds more than the %d elements of shape %s", n, shape)
		}
		var err error
		out.Data, err = appendElement(out.Data, dt, v)
		if err != nil {
			return fmt.Errorf("element %d: %w", count-1, err)
		}
		return nil
	})
	if err != nil {
		return infer.Tensor{}, fmt.Errorf("input %q: %w", t.Name, err)
	}
	if count != n {
		return infer.Tensor{}, fmt.Errorf("input %q: data holds %d elements, shape %s needs %d", t.Name, count, shape, n)
	}
	return out, nil
}

// appendElement appends one JSON scalar as an element of type dt. Numbers
// follow the KServe JSON tensor encoding (kservewire.AppendNumber), as the
// server would read them; a recording adds two forms of its own: null for
// a non-finite FP32 or FP64 value (replayed as NaN), and 0 or 1 for a
// BOOL.
func appendElement(b []byte, dt infer.DataType, v any) ([]byte, error) {
	switch dt {
	case infer.Bytes:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%v is not a string", v)
		}
		return infer.AppendBytesElement(b, []byte(s)), nil
	case infer.Bool:
		switch x := v.(type) {
		case bool:
			if x {
				return append(b, 1), nil
			}
			return append(b, 0), nil
		case json.Number:
			switch x {
			case "0":
				return append(b, 0), nil
			case "1":
				return append(b, 1), nil
			}
		}
		return nil, fmt.Errorf("%v is not a boolean", v)
	case infer.FP32, infer.FP64:
		if v == nil {
			if dt == infer.FP32 {
				return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(math.NaN()))), nil
			}
			return binary.LittleEndian.AppendUint64(b, math.Float64bits(math.NaN())), nil
		}
	case infer.Int8, infer.Int16, infer.Int32, infer.Int64,
		infer.Uint8, infer.Uint16, infer.Uint32, infer.Uint64:
	default:
		return nil, fmt.Errorf("datatype %s is not supported", dt)
	}
	num, ok := v.(json.Number)
	if !ok {
		return nil, fmt.Errorf("%v is not a number", v)
	}
	n, err := kservewire.ParseNumber([]byte(num))
	if err == nil {
		var out []byte
		if out, err = kservewire.AppendNumber(b, dt, &n); err == nil {
			return out, nil
		}
	}
	bits := 8 * dt.Size()
	switch dt {
	case infer.FP32, infer.FP64:
		return nil, fmt.Errorf("%s is not a %s number", num, dt)
	case infer.Uint8, infer.Uint16, infer.Uint32, infer.Uint64:
		return nil, fmt.Errorf("%s is not an unsigned %d-bit integer", num, bits)
	default:
		return nil, fmt.Errorf("%s is not a %d-bit integer", num, bits)
	}
}

// outputValues returns a numeric or BOOL output's elements as float64
// (BOOL as 0 and 1), the form records keep. ok is false for BYTES, FP16
// and BF16 outputs, which a recording leaves out, as the gateway does.
func outputValues(t *infer.Tensor) (vals []float64, ok bool) {
	size := t.DataType.Size()
	if size == 0 || t.DataType == infer.FP16 || t.DataType == infer.BF16 {
		return nil, false
	}
	le := binary.LittleEndian
	n := len(t.Data) / size
	out := make([]float64, n)
	for i := range n {
		d := t.Data[i*size : (i+1)*size]
		switch t.DataType {
		case infer.Bool:
			if d[0] != 0 {
				out[i] = 1
			}
		case infer.Uint8:
			out[i] = float64(d[0])
		case infer.Uint16:
			out[i] = float64(le.Uint16(d))
		case infer.Uint32:
			out[i] = float64(le.Uint32(d))
		case infer.Uint64:
			out[i] = float64(le.Uint64(d))
		case infer.Int8:
			out[i] = float64(int8(d[0]))
		case infer.Int16:
			out[i] = float64(int16(le.Uint16(d)))
		case infer.Int32:
			out[i] = float64(int32(le.Uint32(d)))
		case infer.Int64:
			out[i] = float64(int64(le.Uint64(d)))
		case infer.FP32:
			out[i] = float64(math.Float32frombits(le.Uint32(d)))
		case infer.FP64:
			out[i] = math.Float64frombits(le.Uint64(d))
		default:
			return nil, false
		}
	}
	return out, true
}

// outputMap converts a response's outputs to a record's output map.
func outputMap(ts []infer.Tensor) map[string][]float64 {
	out := make(map[string][]float64, len(ts))
	for i := range ts {
		if v, ok := outputValues(&ts[i]); ok {
			out[ts[i].Name] = v
		}
	}
	return out
}

// jsonValues flattens a JSON output's data to float64: numbers (FP32 data
// rounded to float32 first, so a value read from JSON equals the one the
// binary protocol carries), booleans as 0 and 1, null as NaN. ok is false
// when the data holds strings (a BYTES output, which records leave out).
func jsonValues(data []byte, datatype string, limit int) (vals []float64, ok bool, err error) {
	bits := 64
	if datatype == "FP32" {
		bits = 32
	}
	ok = true
	err = walkData(data, func(v any) error {
		if len(vals) >= limit {
			return fmt.Errorf("data holds more than %d elements", limit)
		}
		switch x := v.(type) {
		case nil:
			vals = append(vals, math.NaN())
		case bool:
			if x {
				vals = append(vals, 1)
			} else {
				vals = append(vals, 0)
			}
		case json.Number:
			f, err := strconv.ParseFloat(string(x), bits)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return fmt.Errorf("%s is not a number", x)
			}
			vals = append(vals, f)
		case string:
			ok = false
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return nil, false, nil
	}
	return vals, true, nil
}
