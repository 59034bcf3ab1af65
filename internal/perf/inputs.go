package perf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
)

// Input data sources besides a file.
const (
	// InputRandom fills inputs with random values.
	InputRandom = "random"
	// InputZero fills inputs with zeros.
	InputZero = "zero"
)

// maxRequestFileBytes bounds an --input-data file.
const maxRequestFileBytes = 256 << 20

// ErrInput reports input data that cannot be used for the model.
var ErrInput = errors.New("invalid input data")

// ParseShape parses a --shape value, NAME:D1,D2,..., into the input name and
// its dimensions (without the batch dimension for a batching model).
func ParseShape(s string) (string, infer.Shape, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return "", nil, fmt.Errorf("%w: shape %q: want NAME:D1,D2 (comma-separated dims)", ErrInput, s)
	}
	name := s[:i]
	var dims infer.Shape
	for d := range strings.SplitSeq(s[i+1:], ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64)
		if err != nil || n < 0 {
			return "", nil, fmt.Errorf("%w: shape %q: dimension %q is not a non-negative whole number", ErrInput, s, d)
		}
		dims = append(dims, n)
	}
	return name, dims, nil
}

// ReadRequestFile reads a KServe v2 JSON inference request body and returns
// its inputs in the wire layout (data may be flat or nested arrays).
func ReadRequestFile(path string) ([]infer.Tensor, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read input data: %w", err)
	}
	if st.Size() > maxRequestFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInput, path, maxRequestFileBytes)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read input data: %w", err)
	}
	ts, err := ParseRequest(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, nil
}

// ParseRequest decodes a KServe v2 JSON inference request body into its
// inputs in the wire layout.
func ParseRequest(raw []byte) ([]infer.Tensor, error) {
	var body struct {
		Inputs []struct {
			Name     string          `json:"name"`
			Shape    []int64         `json:"shape"`
			Datatype string          `json:"datatype"`
			Data     json.RawMessage `json:"data"`
		} `json:"inputs"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("%w: decode request JSON: %w", ErrInput, err)
	}
	if len(body.Inputs) == 0 {
		return nil, fmt.Errorf("%w: the request has no inputs", ErrInput)
	}
	out := make([]infer.Tensor, 0, len(body.Inputs))
	seen := map[string]bool{}
	for _, in := range body.Inputs {
		if in.Name == "" || seen[in.Name] {
			return nil, fmt.Errorf("%w: input names must be present and unique (%q)", ErrInput, in.Name)
		}
		seen[in.Name] = true
		dt, ok := infer.ParseDataType(in.Datatype)
		if !ok {
			return nil, fmt.Errorf("%w: input %q: unknown datatype %q", ErrInput, in.Name, in.Datatype)
		}
		shape := infer.Shape(in.Shape)
		n, err := shape.Elements()
		if err != nil {
			return nil, fmt.Errorf("%w: input %q: %w", ErrInput, in.Name, err)
		}
		dec := json.NewDecoder(bytes.NewReader(in.Data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%w: input %q: decode data: %w", ErrInput, in.Name, err)
		}
		var flat []any
		if err := flatten(v, &flat, 0); err != nil {
			return nil, fmt.Errorf("%w: input %q: %w", ErrInput, in.Name, err)
		}
		if len(flat) != n {
			return nil, fmt.Errorf("%w: input %q: shape %s needs %d elements, data has %d", ErrInput, in.Name, shape, n, len(flat))
		}
		data, err := wireFromJSON(dt, flat)
		if err != nil {
			return nil, fmt.Errorf("%w: input %q: %w", ErrInput, in.Name, err)
		}
		out = append(out, infer.Tensor{Name: in.Name, DataType: dt, Shape: shape, Data: data})
	}
	return out, nil
}

const maxNesting = 32

func flatten(v any, out *[]any, depth int) error {
	if depth > maxNesting {
		return errors.New("data is nested too deeply")
	}
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			if err := flatten(e, out, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	*out = append(*out, v)
	return nil
}

// wireFromJSON converts decoded JSON elements into the wire layout.
func wireFromJSON(dt infer.DataType, vals []any) ([]byte, error) {
	out := make([]byte, 0, len(vals)*max(dt.Size(), 8))
	for i, v := range vals {
		switch dt {
		case infer.Bytes:
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("element %d: BYTES data must be strings", i)
			}
			out = infer.AppendBytesElement(out, []byte(s))
		case infer.Bool:
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("element %d: BOOL data must be true or false", i)
			}
			out = append(out, boolByte(b))
		default:
			num, ok := v.(json.Number)
			if !ok {
				return nil, fmt.Errorf("element %d: %s data must be numbers", i, dt)
			}
			var err error
			if out, err = appendNumber(out, dt, num); err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
		}
	}
	return out, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// appendNumber appends one number element by the KServe JSON tensor
// encoding's rules (kservewire.AppendNumber), the ones the server applies.
func appendNumber(out []byte, dt infer.DataType, num json.Number) ([]byte, error) {
	n, err := kservewire.ParseNumber([]byte(num))
	if err == nil {
		out, err = kservewire.AppendNumber(out, dt, &n)
	}
	if err == nil {
		return out, nil
	}
	switch dt {
	case infer.FP32, infer.FP64, infer.FP16, infer.BF16:
		return nil, fmt.Errorf("%q is not a number", num)
	case infer.Bool, infer.Bytes, infer.Invalid:
		return nil, fmt.Errorf("datatype %s is not supported", dt)
	default:
		return nil, fmt.Errorf("%q is not a %s", num, dt)
	}
}

func appendUint(out []byte, size int, u uint64) []byte {
	le := binary.LittleEndian
	switch size {
	case 1:
		return append(out, byte(u))
	case 2:
		return le.AppendUint16(out, uint16(u))
	case 4:
		return le.AppendUint32(out, uint32(u))
	default:
		return le.AppendUint64(out, u)
	}
}

// float32ToBF16 rounds f to bfloat16 (round to nearest even).
func float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f { // NaN stays NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// float32ToHalf converts f to IEEE 754 binary16, rounding to nearest and
// flushing values below the smallest subnormal to zero.
func float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case (b>>23)&0xff == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		half := uint32(1) << (shift - 1)
		return sign | uint16((mant+half)>>shift)
	default:
		h := sign | uint16(exp)<<10 | uint16(mant>>13)
		if mant&0x1000 != 0 { // round half up; carries into the exponent correctly
			h++
		}
		return h
	}
}

// rowsOf splits a tensor's data along its first dimension.
func rowsOf(t infer.Tensor) ([][]byte, error) {
	if len(t.Shape) == 0 || t.Shape[0] <= 0 {
		return nil, fmt.Errorf("%w: input %q of shape %s has no rows to tile", ErrInput, t.Name, t.Shape)
	}
	rows := int(t.Shape[0])
	per, err := t.Shape[1:].Elements()
	if err != nil {
		return nil, fmt.Errorf("%w: input %q: %w", ErrInput, t.Name, err)
	}
	out := make([][]byte, rows)
	if t.DataType != infer.Bytes {
		size := per * t.DataType.Size()
		if len(t.Data) != rows*size {
			return nil, fmt.Errorf("%w: input %q: %d bytes do not fill shape %s", ErrInput, t.Name, len(t.Data), t.Shape)
		}
		for r := range rows {
			out[r] = t.Data[r*size : (r+1)*size]
		}
		return out, nil
	}
	rest := t.Data
	for r := range rows {
		start := len(t.Data) - len(rest)
		for range per {
			if len(rest) < 4 {
				return nil, fmt.Errorf("%w: input %q: BYTES data ends early", ErrInput, t.Name)
			}
			l := binary.LittleEndian.Uint32(rest)
			if uint64(l) > uint64(len(rest)-4) {
				return nil, fmt.Errorf("%w: input %q: BYTES element overruns the data", ErrInput, t.Name)
			}
			rest = rest[4+l:]
		}
		out[r] = t.Data[start : len(t.Data)-len(rest)]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: input %q: BYTES data is longer than shape %s", ErrInput, t.Name, t.Shape)
	}
	return out, nil
}

// Tile returns t with its first dimension set to batch, cycling through its
// rows: row i of the result is row i mod rows of t. t is not modified.
func Tile(t infer.Tensor, batch int) (infer.Tensor, error) {
	if batch <= 0 {
		return infer.Tensor{}, fmt.Errorf("%w: batch size %d", ErrInput, batch)
	}
	if len(t.Shape) > 0 && t.Shape[0] == int64(batch) {
		return t, nil
	}
	rows, err := rowsOf(t)
	if err != nil {
		return infer.Tensor{}, err
	}
	var data []byte
	for i := range batch {
		data = append(data, rows[i%len(rows)]...)
	}
	shape := t.Shape.Clone()
	shape[0] = int64(batch)
	return infer.Tensor{Name: t.Name, DataType: t.DataType, Shape: shape, Data: data}, nil
}

// generate makes a tensor of the given shape filled with zeros or random
// values (floats in [0, 1), integers in [0, 100), random booleans, BYTES of
// 8 random lowercase letters).
func generate(name string, dt infer.DataType, shape infer.Shape, random bool, rng *rand.Rand) (infer.Tensor, error) {
	n, err := shape.Elements()
	if err != nil {
		return infer.Tensor{}, fmt.Errorf("%w: input %q: %w", ErrInput, name, err)
	}
	const maxElements = 64 << 20
	if n > maxElements {
		return infer.Tensor{}, fmt.Errorf("%w: input %q: %d elements is too many", ErrInput, name, n)
	}
	t := infer.Tensor{Name: name, DataType: dt, Shape: shape.Clone()}
	if dt == infer.Bytes {
		for range n {
			elem := []byte{'0'}
			if random {
				elem = make([]byte, 8)
				for j := range elem {
					elem[j] = byte('a' + rng.IntN(26))
				}
			}
			t.Data = infer.AppendBytesElement(t.Data, elem)
		}
		return t, nil
	}
	if dt.Size() == 0 {
		return infer.Tensor{}, fmt.Errorf("%w: input %q: datatype %s", ErrInput, name, dt)
	}
	t.Data = make([]byte, 0, n*dt.Size())
	if !random {
		t.Data = t.Data[:n*dt.Size()]
		return t, nil
	}
	le := binary.LittleEndian
	for range n {
		switch dt {
		case infer.FP32:
			t.Data = le.AppendUint32(t.Data, math.Float32bits(rng.Float32()))
		case infer.FP64:
			t.Data = le.AppendUint64(t.Data, math.Float64bits(rng.Float64()))
		case infer.FP16:
			t.Data = le.AppendUint16(t.Data, float32ToHalf(rng.Float32()))
		case infer.BF16:
			t.Data = le.AppendUint16(t.Data, float32ToBF16(rng.Float32()))
		case infer.Bool:
			t.Data = append(t.Data, byte(rng.IntN(2)))
		default:
			t.Data = appendUint(t.Data, dt.Size(), uint64(rng.IntN(100)))
		}
	}
	return t, nil
}
