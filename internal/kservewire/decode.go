// Package kservewire holds the KServe v2 wire formats of tensors, for
// every end of the protocol.
//
// gRPC: it converts the tensors and parameters of KServe v2 gRPC messages
// (package inferencepb) to and from those of package infer. The server
// (package grpcapi) decodes the inputs of a ModelInferRequest, the client
// (package kserve) the outputs of a ModelInferResponse, and both encode
// parameters with it.
//
// JSON: it is the one implementation of the JSON tensor encoding (json.go):
// AppendJSONData and AppendJSONParams write tensor data and parameters,
// ScanNumber and AppendNumber read a number element by its datatype's
// rules, and ScanFloat32 and ScanInt64 (fastnum.go) read the common FP32
// and INT64 elements in one call, declining whatever the general path must
// decide. The model server's HTTP edge (httpapi), sluice perf and replay
// all use them, so every end rounds, range-checks and formats alike.
//
// It holds the protocol's rules (which typed contents field carries which
// datatype, value ranges, raw sizes against shapes), not either end's
// error vocabulary: a Decoder reports each problem through the ErrorFunc
// its end gave it, which picks the error's kind and reason.
package kservewire

import (
	"encoding/binary"
	"math"
	"strings"

	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Direction says which message a Decoder reads, and so how its messages
// name tensors and raw contents.
type Direction uint8

// The directions.
const (
	// Request is the inputs of a ModelInferRequest, as a server reads them.
	Request Direction = iota
	// Response is the outputs of a ModelInferResponse, as a client reads
	// them.
	Response
)

// String returns "request" or "response".
func (d Direction) String() string {
	if d == Response {
		return "response"
	}
	return "request"
}

// noun names one tensor of the message: "input" or "output".
func (d Direction) noun() string {
	if d == Response {
		return "output"
	}
	return "input"
}

// rawField names the message's raw contents field.
func (d Direction) rawField() string {
	if d == Response {
		return "raw_output_contents"
	}
	return "raw_input_contents"
}

// Problem classifies what a Decoder found wrong, so each end can give it
// its own reason code.
type Problem uint8

// The problems.
const (
	// BadDatatype is an unknown datatype.
	BadDatatype Problem = iota + 1
	// BadShape is a shape with a negative dimension or too many elements.
	BadShape
	// BadSize is data whose size disagrees with the shape, or raw BYTES
	// content that does not parse.
	BadSize
	// MixedContents is typed contents on a tensor of a message that
	// carries raw contents.
	MixedContents
	// WrongContents is typed contents in a field that does not carry the
	// tensor's datatype.
	WrongContents
	// RawOnly is data of a datatype that travels only as raw contents
	// (FP16, BF16) found in, or missing from, the typed contents.
	RawOnly
	// OutOfRange is a typed element outside its datatype's range.
	OutOfRange
	// BadParameter is a parameter without a value.
	BadParameter
)

// ErrorFunc builds the error of one problem a Decoder found; it must not
// return nil. format and args make the message, which names the tensor or
// parameter. String args are names and datatypes as the message carried
// them, or constant field names, so an ErrorFunc of an end that does not
// trust its peer may shorten them. cause, when not nil, is the underlying
// error (from infer.CountBytesElements); the built error should wrap it,
// with its text after the message and ": ", as *apierr.Error does.
type ErrorFunc func(p Problem, cause error, format string, args ...any) error

// Tensor is what the two tensor messages, ModelInferRequest's inputs and
// ModelInferResponse's outputs, have in common.
type Tensor interface {
	GetName() string
	GetDatatype() string
	GetShape() []int64
	GetParameters() map[string]*pb.InferParameter
	GetContents() *pb.InferTensorContents
}

var (
	_ Tensor = (*pb.ModelInferRequest_InferInputTensor)(nil)
	_ Tensor = (*pb.ModelInferResponse_InferOutputTensor)(nil)
)

// Decoder checks and converts the tensors and parameters of one
// direction. It is immutable and safe for concurrent use.
type Decoder struct {
	dir    Direction
	errorf ErrorFunc
}

// NewDecoder returns a Decoder for dir whose errors errorf builds.
func NewDecoder(dir Direction, errorf ErrorFunc) *Decoder {
	return &Decoder{dir: dir, errorf: errorf}
}

// Decode converts the i-th tensor t of a message whose raw contents are
// raw. Its datatype and shape are checked, its parameters decoded, and its
// data, in the wire layout of package infer, is taken from raw[i] when raw
// is not empty and from t's typed contents otherwise; either way its size
// must match the shape, and no shape makes Decode allocate more than the
// data the message holds. The caller checks that raw is empty or has one
// entry per tensor, and checks t's name.
//
// The returned tensor aliases t's shape and raw[i].
func (d *Decoder) Decode(t Tensor, raw [][]byte, i int) (infer.Tensor, error) {
	name := t.GetName()
	dt, ok := infer.ParseDataType(t.GetDatatype())
	if !ok {
		return infer.Tensor{}, d.errorf(BadDatatype, nil, "%s '%s': unknown datatype %q",
			d.dir.noun(), name, t.GetDatatype())
	}
	shape := infer.Shape(t.GetShape())
	n, err := shape.Elements()
	if err != nil {
		return infer.Tensor{}, d.errorf(BadShape, nil, "%s '%s': %v", d.dir.noun(), name, err)
	}
	params, err := d.Params(d.dir.noun(), name, t.GetParameters())
	if err != nil {
		return infer.Tensor{}, err
	}
	out := infer.Tensor{Name: name, DataType: dt, Shape: shape, Parameters: params}
	if len(raw) > 0 {
		if fields := setContentFields(t.GetContents()); len(fields) > 0 {
			return infer.Tensor{}, d.errorf(MixedContents, nil, "%s '%s': has typed contents (%s) while the %s uses %s",
				d.dir.noun(), name, strings.Join(fields, ", "), d.dir.String(), d.dir.rawField())
		}
		if err := d.checkRaw(name, dt, shape, n, raw[i]); err != nil {
			return infer.Tensor{}, err
		}
		out.Data = raw[i]
	} else if out.Data, err = d.contents(name, dt, shape, n, t.GetContents()); err != nil {
		return infer.Tensor{}, err
	}
	return out, nil
}

// checkRaw verifies that raw content holds exactly the elements the shape
// asks for.
func (d *Decoder) checkRaw(name string, dt infer.DataType, shape infer.Shape, n int, data []byte) error {
	if dt == infer.Bytes {
		count, err := infer.CountBytesElements(data)
		if err != nil {
			return d.errorf(BadSize, err, "%s '%s': raw BYTES content", d.dir.noun(), name)
		}
		if count != n {
			return d.errorf(BadSize, nil, "%s '%s': raw content holds %d BYTES elements but shape %s needs %d",
				d.dir.noun(), name, count, shape, n)
		}
		return nil
	}
	if want := int64(n) * int64(dt.Size()); int64(len(data)) != want {
		return d.errorf(BadSize, nil, "%s '%s': raw content is %d bytes but shape %s of %s needs %d",
			d.dir.noun(), name, len(data), shape, dt, want)
	}
	return nil
}

// contentLens returns the length of each InferTensorContents field, in
// field-number order, to find which ones a peer filled.
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
	if c == nil {
		return nil
	}
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

// contents converts typed contents into wire-layout bytes. The element
// count is compared with the shape before anything is allocated, so a huge
// shape with little data costs nothing.
func (d *Decoder) contents(name string, dt infer.DataType, shape infer.Shape, n int, c *pb.InferTensorContents) ([]byte, error) {
	noun := d.dir.noun()
	field := contentField(dt)
	lens := contentLens(c)
	for i, l := range lens {
		if l > 0 && i != field {
			if field < 0 {
				return nil, d.errorf(RawOnly, nil, "%s '%s': %s data must travel in %s, got %s",
					noun, name, dt, d.dir.rawField(), contentFieldNames[i])
			}
			return nil, d.errorf(WrongContents, nil, "%s '%s': datatype %s takes %s, got %s",
				noun, name, dt, contentFieldNames[field], contentFieldNames[i])
		}
	}
	if field < 0 {
		if n == 0 {
			return []byte{}, nil
		}
		return nil, d.errorf(RawOnly, nil, "%s '%s': %s data must travel in %s", noun, name, dt, d.dir.rawField())
	}
	if got := lens[field]; got != n {
		return nil, d.errorf(BadSize, nil, "%s '%s': %s has %d elements but shape %s needs %d",
			noun, name, contentFieldNames[field], got, shape, n)
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
		return d.intContents(name, dt, n, c.GetIntContents())
	case infer.Int64:
		b := make([]byte, 0, n*8)
		for _, v := range c.GetInt64Contents() {
			b = le.AppendUint64(b, uint64(v))
		}
		return b, nil
	case infer.Uint8, infer.Uint16, infer.Uint32:
		return d.uintContents(name, dt, n, c.GetUintContents())
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
		return d.bytesContents(name, c.GetBytesContents())
	default:
		return nil, d.errorf(BadDatatype, nil, "%s '%s': unsupported datatype %s", noun, name, dt)
	}
}

// intContents converts int_contents to INT8, INT16 or INT32 wire bytes,
// checking each value fits.
func (d *Decoder) intContents(name string, dt infer.DataType, n int, vals []int32) ([]byte, error) {
	noun, le := d.dir.noun(), binary.LittleEndian
	lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
	switch dt {
	case infer.Int8:
		lo, hi = math.MinInt8, math.MaxInt8
	case infer.Int16:
		lo, hi = math.MinInt16, math.MaxInt16
	default: // INT32 keeps the full int32 range
	}
	b := make([]byte, 0, n*dt.Size())
	for i, v := range vals {
		if int64(v) < lo || int64(v) > hi {
			return nil, d.errorf(OutOfRange, nil, "%s '%s': element %d value %d is out of range for %s",
				noun, name, i, v, dt)
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
}

// uintContents converts uint_contents to UINT8, UINT16 or UINT32 wire
// bytes, checking each value fits.
func (d *Decoder) uintContents(name string, dt infer.DataType, n int, vals []uint32) ([]byte, error) {
	noun, le := d.dir.noun(), binary.LittleEndian
	hi := uint64(math.MaxUint32)
	switch dt {
	case infer.Uint8:
		hi = math.MaxUint8
	case infer.Uint16:
		hi = math.MaxUint16
	default: // UINT32 keeps the full uint32 range
	}
	b := make([]byte, 0, n*dt.Size())
	for i, v := range vals {
		if uint64(v) > hi {
			return nil, d.errorf(OutOfRange, nil, "%s '%s': element %d value %d is out of range for %s",
				noun, name, i, v, dt)
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
}

// bytesContents converts bytes_contents to BYTES wire bytes: each element
// length-prefixed.
func (d *Decoder) bytesContents(name string, vals [][]byte) ([]byte, error) {
	noun := d.dir.noun()
	size := 0
	for _, e := range vals {
		if uint64(len(e)) > math.MaxUint32 {
			return nil, d.errorf(BadSize, nil, "%s '%s': BYTES element larger than 4 GiB", noun, name)
		}
		size += 4 + len(e)
	}
	b := make([]byte, 0, size)
	for _, e := range vals {
		b = infer.AppendBytesElement(b, e)
	}
	return b, nil
}
