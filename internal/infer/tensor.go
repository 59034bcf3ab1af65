package infer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxElements bounds the element count of any one tensor. A shape that asks
// for more is rejected before any memory is allocated for it.
const MaxElements = 1 << 31

// Shape is a tensor shape. -1 marks a variable dimension in a signature;
// the shape of a concrete tensor never holds -1.
type Shape []int64

// String formats s as "[2,128]".
func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// Elements returns the number of elements a concrete shape holds. It fails
// on negative dimensions and on counts above MaxElements.
func (s Shape) Elements() (int, error) {
	n := int64(1)
	for _, d := range s {
		if d < 0 {
			return 0, fmt.Errorf("shape %s has a negative dimension", s)
		}
		if d != 0 && n > MaxElements/d {
			return 0, fmt.Errorf("shape %s holds more than %d elements", s, int64(MaxElements))
		}
		n *= d
	}
	return int(n), nil
}

// Matches reports whether the concrete shape s fits pattern p, where -1 in
// p matches any size.
func (s Shape) Matches(p Shape) bool {
	if len(s) != len(p) {
		return false
	}
	for i := range s {
		if p[i] >= 0 && p[i] != s[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy of s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Tensor is one named input or output. Data uses the wire layout described
// in the package documentation.
type Tensor struct {
	Name       string
	DataType   DataType
	Shape      Shape
	Data       []byte
	Parameters Parameters
}

// ErrSize reports tensor data whose byte size disagrees with its shape.
var ErrSize = errors.New("tensor data size does not match its shape")

// CheckSize verifies that t.Data holds exactly the elements t.Shape asks for.
// For BYTES it walks the length prefixes.
func (t *Tensor) CheckSize() error {
	n, err := t.Shape.Elements()
	if err != nil {
		return err
	}
	if t.DataType == Bytes {
		count, err := CountBytesElements(t.Data)
		if err != nil {
			return err
		}
		if count != n {
			return fmt.Errorf("%w: shape %s needs %d BYTES elements, got %d", ErrSize, t.Shape, n, count)
		}
		return nil
	}
	if want := n * t.DataType.Size(); len(t.Data) != want {
		return fmt.Errorf("%w: shape %s of %s needs %d bytes, got %d", ErrSize, t.Shape, t.DataType, want, len(t.Data))
	}
	return nil
}

// CountBytesElements counts the length-prefixed elements in a BYTES buffer.
func CountBytesElements(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if len(b) < 4 {
			return 0, fmt.Errorf("%w: truncated BYTES length prefix", ErrSize)
		}
		l := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return 0, fmt.Errorf("%w: BYTES element of %d bytes overruns the buffer", ErrSize, l)
		}
		b = b[l:]
		n++
	}
	return n, nil
}

// SplitBytes returns the elements of a BYTES buffer. The returned slices
// alias b.
func SplitBytes(b []byte) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: truncated BYTES length prefix", ErrSize)
		}
		l := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: BYTES element of %d bytes overruns the buffer", ErrSize, l)
		}
		out = append(out, b[:l])
		b = b[l:]
	}
	return out, nil
}

// AppendBytesElement appends one length-prefixed BYTES element to dst.
func AppendBytesElement(dst, elem []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(elem)))
	return append(dst, elem...)
}
