package onnxruntime

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

// viewAs returns b's bytes as a []T. It aliases b when b's address suits
// T's alignment and copies into fresh, aligned memory when it does not
// (a tensor that follows a JSON header in a binary request body usually
// starts at an odd offset). Bytes past the last whole element are ignored.
func viewAs[T any](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	n := len(b) / size
	if n == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
	}
	out := make([]T, n)
	copy(asBytes(out), b)
	return out
}

// asBytes returns the memory of s as bytes, without copying. The result
// keeps s's backing array alive.
func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// alignedBytes returns b when its address is a multiple of align (at most
// 8), else a copy in 8-byte aligned memory.
func alignedBytes(b []byte, align uintptr) []byte {
	if len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%align == 0 {
		return b
	}
	out := asBytes(make([]uint64, (len(b)+7)/8))[:len(b)]
	copy(out, b)
	return out
}

// normalizeBool returns b when every byte is 0 or 1, else a copy where each
// non-zero byte becomes 1. ONNX Runtime reads BOOL as C++ bool, which must
// hold 0 or 1, while the wire format lets clients send any non-zero byte
// for true.
func normalizeBool(b []byte) []byte {
	clean := true
	for _, c := range b {
		if c > 1 {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c != 0 {
			out[i] = 1
		}
	}
	return out
}

// bytesToStrings splits a BYTES tensor into the strings ONNX Runtime takes.
// ONNX Runtime copies strings through C, which ends them at the first NUL,
// so an element holding a NUL byte is refused rather than truncated.
func bytesToStrings(name string, data []byte) ([]string, error) {
	elems, err := infer.SplitBytes(data)
	if err != nil {
		return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalidSize, "input '%s': %v", name, err)
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if bytes.IndexByte(e, 0) >= 0 {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalidBytes,
				"input '%s': BYTES element %d holds a NUL byte, which ONNX Runtime string tensors cannot carry", name, i)
		}
		out[i] = string(e)
	}
	return out, nil
}

// stringsToBytes encodes strings in the BYTES wire layout.
func stringsToBytes(ss []string) []byte {
	n := 0
	for _, s := range ss {
		n += 4 + len(s)
	}
	out := make([]byte, 0, n)
	for _, s := range ss {
		out = infer.AppendBytesElement(out, []byte(s))
	}
	return out
}

// checkOutputBytes verifies that a fixed-size output holds every element
// its shape asks for. onnxruntime_go v1.27.0 sizes its copy of an ONNX
// Runtime-allocated FP16 or BF16 output at one byte per element (and then
// fails the run), which is why Execute allocates those outputs itself when
// it can; this check makes sure a short buffer can never pass for a result.
func checkOutputBytes(name string, dt infer.DataType, shape infer.Shape, data []byte) error {
	n, err := shape.Elements()
	if err != nil {
		return fmt.Errorf("output '%s': %w", name, err)
	}
	if want := n * dt.Size(); len(data) != want {
		return fmt.Errorf("output '%s': %s data of shape %s has %d bytes, want %d", name, dt, shape, len(data), want)
	}
	return nil
}

// guessOutputShape predicts a concrete output shape from its signature when
// the only variable dimension is the leading batch dimension. It reports
// false when the shape cannot be predicted.
func guessOutputShape(spec infer.Shape, batch int64) (infer.Shape, bool) {
	if len(spec) == 0 {
		return nil, false
	}
	out := spec.Clone()
	for i, d := range out {
		switch {
		case d >= 0:
		case i == 0 && batch >= 0:
			out[0] = batch
		default:
			return nil, false
		}
	}
	return out, true
}

// batchSize returns the leading dimension shared by every input whose
// signature leaves it variable, or -1 when there is none or they disagree.
func batchSize(specs []infer.TensorSpec, inputs []*infer.Tensor) int64 {
	batch := int64(-1)
	for i, s := range specs {
		if len(s.Shape) == 0 || s.Shape[0] >= 0 || len(inputs[i].Shape) == 0 {
			continue
		}
		switch b := inputs[i].Shape[0]; {
		case batch < 0:
			batch = b
		case batch != b:
			return -1
		}
	}
	return batch
}
