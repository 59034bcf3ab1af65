package onnxruntime

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

func TestBytesStrings(t *testing.T) {
	tests := []struct {
		name    string
		strs    []string
		wire    []byte
		wantErr string // reason
	}{
		{
			name: "two elements", strs: []string{"ab", ""},
			wire: []byte{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0},
		},
		{name: "empty tensor", strs: []string{}, wire: []byte{}},
		{
			name: "utf-8 kept byte for byte", strs: []string{"é\xff"},
			wire: []byte{3, 0, 0, 0, 0xc3, 0xa9, 0xff},
		},
		{name: "truncated prefix", wire: []byte{1, 0}, wantErr: "invalid_size"},
		{name: "element overruns", wire: []byte{9, 0, 0, 0, 'a'}, wantErr: "invalid_size"},
		{name: "NUL refused", wire: []byte{3, 0, 0, 0, 'a', 0, 'b'}, wantErr: "invalid_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bytesToStrings("x", tc.wire)
			if tc.wantErr != "" {
				var ie *apierr.Error
				require.True(t, errors.As(err, &ie), "want *apierr.Error, got %v", err)
				require.Equal(t, tc.wantErr, ie.Reason)
				require.Equal(t, apierr.KindInvalid, ie.Kind)
				require.Contains(t, ie.Error(), "input 'x'")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.strs, got)
			require.Equal(t, tc.wire, stringsToBytes(tc.strs))
		})
	}
}

func TestNormalizeBool(t *testing.T) {
	clean := []byte{0, 1, 1, 0}
	got := normalizeBool(clean)
	require.Equal(t, clean, got)
	require.Same(t, &clean[0], &got[0], "clean input must not be copied")

	dirty := []byte{0, 2, 255, 1}
	got = normalizeBool(dirty)
	require.Equal(t, []byte{0, 1, 1, 1}, got)
	require.Equal(t, []byte{0, 2, 255, 1}, dirty, "the caller's bytes must not change")
}

func TestViewAsAlignment(t *testing.T) {
	backing := make([]byte, 4*4+1)
	for i, v := range []float32{1.5, -2, 3.25, 1e-3} {
		binary.LittleEndian.PutUint32(backing[1+4*i:], math.Float32bits(v))
	}
	want := []float32{1.5, -2, 3.25, 1e-3}

	unaligned := backing[1:]
	got := viewAs[float32](unaligned)
	require.Equal(t, want, got)
	require.Zero(t, uintptr(unsafe.Pointer(&got[0]))%4)
	got[0] = 99 // a copy: the caller's bytes stay untouched
	require.Equal(t, float32(1.5), math.Float32frombits(binary.LittleEndian.Uint32(unaligned)))

	aligned := make([]byte, 16)
	copy(aligned, unaligned)
	view := viewAs[float32](aligned)
	require.Equal(t, want, view)
	require.Equal(t, unsafe.Pointer(&aligned[0]), unsafe.Pointer(&view[0]), "aligned data must be shared, not copied")

	require.Nil(t, viewAs[float64](nil))
}

func TestAlignedBytesFP16(t *testing.T) {
	// FP16 1.0 is 0x3c00 and -2.0 is 0xc000, little-endian.
	wire := []byte{0, 0x00, 0x3c, 0x00, 0xc0}
	odd := wire[1:]
	got := alignedBytes(odd, 2)
	require.Equal(t, odd, got)
	require.Zero(t, uintptr(unsafe.Pointer(&got[0]))%2)
	require.Equal(t, uint16(0x3c00), binary.LittleEndian.Uint16(got))
	require.Equal(t, uint16(0xc000), binary.LittleEndian.Uint16(got[2:]))

	even := make([]byte, 4)
	require.Equal(t, unsafe.Pointer(&even[0]), unsafe.Pointer(&alignedBytes(even, 2)[0]))
}

func TestAsBytesRoundTrip(t *testing.T) {
	in := []int32{1, -1, 1 << 30}
	b := asBytes(in)
	require.Equal(t, []byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0x40}, b)
	require.Equal(t, in, viewAs[int32](b))
	require.Equal(t, []byte{}, asBytes([]int32(nil)))
}

func TestCheckOutputBytes(t *testing.T) {
	shape := infer.Shape{2, 3}
	require.NoError(t, checkOutputBytes("y", infer.FP16, shape, make([]byte, 12)))
	require.NoError(t, checkOutputBytes("y", infer.BF16, infer.Shape{0, 3}, nil))
	// What onnxruntime_go v1.27.0 returns for an FP16 output it allocated:
	// one byte per element.
	err := checkOutputBytes("y", infer.FP16, shape, make([]byte, 6))
	require.ErrorContains(t, err, "output 'y': FP16 data of shape [2,3] has 6 bytes, want 12")
}

func TestGuessOutputShape(t *testing.T) {
	tests := []struct {
		name  string
		spec  infer.Shape
		batch int64
		want  infer.Shape
		ok    bool
	}{
		{name: "static", spec: infer.Shape{2, 3}, batch: -1, want: infer.Shape{2, 3}, ok: true},
		{name: "batch", spec: infer.Shape{-1, 3}, batch: 5, want: infer.Shape{5, 3}, ok: true},
		{name: "unknown batch", spec: infer.Shape{-1, 3}, batch: -1},
		{name: "inner variable", spec: infer.Shape{-1, -1}, batch: 5},
		{name: "scalar", spec: infer.Shape{}, batch: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := guessOutputShape(tc.spec, tc.batch)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestBatchSize(t *testing.T) {
	specs := []infer.TensorSpec{{Shape: infer.Shape{-1, 4}}, {Shape: infer.Shape{-1, 2}}, {Shape: infer.Shape{3}}}
	in := func(shapes ...infer.Shape) []*infer.Tensor {
		out := make([]*infer.Tensor, len(shapes))
		for i, s := range shapes {
			out[i] = &infer.Tensor{Shape: s}
		}
		return out
	}
	require.Equal(t, int64(7), batchSize(specs, in(infer.Shape{7, 4}, infer.Shape{7, 2}, infer.Shape{3})))
	require.Equal(t, int64(-1), batchSize(specs, in(infer.Shape{7, 4}, infer.Shape{6, 2}, infer.Shape{3})))
	require.Equal(t, int64(-1), batchSize(specs[2:], in(infer.Shape{3})))
}

// FuzzBytesStrings feeds arbitrary BYTES wire data through the conversion
// the backend applies to client input: it must never panic, and whatever
// it accepts must encode back to the same bytes.
func FuzzBytesStrings(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 'h', 'i'})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 'x'})
	f.Add([]byte{255, 255, 255, 255})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, wire []byte) {
		ss, err := bytesToStrings("x", wire)
		if err != nil {
			return
		}
		if got := stringsToBytes(ss); string(got) != string(wire) {
			t.Fatalf("round trip changed the data: %x -> %q -> %x", wire, ss, got)
		}
	})
}
