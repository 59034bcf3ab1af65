package shm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// A client's key never names a file outside the shared-memory folder.
func FuzzKeyPath(f *testing.F) {
	for _, s := range []string{"/input", "input", "/../etc/passwd", "..", ".", "/a/b", "", "/", "a\x00b"} {
		f.Add(s)
	}
	r := newIn("/dev/shm", Options{})
	f.Fuzz(func(t *testing.T, key string) {
		p, err := r.path("n", key)
		if err != nil {
			return
		}
		if strings.HasPrefix(strings.TrimLeft(key, "/"), ReservedPrefix) {
			t.Fatalf("key %q with Triton's reserved prefix accepted", key)
		}
		if filepath.Dir(p) != "/dev/shm" || strings.Contains(strings.TrimPrefix(p, "/dev/shm/"), "/") {
			t.Fatalf("key %q maps to %q", key, p)
		}
	})
}

// Shared-memory parameters come from clients: whatever they hold, reading
// inputs and taking outputs answers an error or stays within the region.
func FuzzRequestParams(f *testing.F) {
	f.Add("r", int64(16), int64(0), []byte{1, 4})
	f.Add("r", int64(-1), int64(1<<62), []byte{2, 2})
	f.Add("", int64(0), int64(0), []byte{})
	f.Add("r", int64(64), int64(1), []byte{0})
	dir := f.TempDir()
	r := newIn(dir, Options{})
	if err := os.WriteFile(filepath.Join(dir, "obj"), make([]byte, 64), 0o600); err != nil {
		f.Fatal(err)
	}
	if err := r.Register("r", "/obj", 0, 64); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = r.Close() })
	f.Fuzz(func(t *testing.T, region string, size, offset int64, shape []byte) {
		var s infer.Shape
		for _, d := range shape {
			s = append(s, int64(d%8))
		}
		req := &infer.Request{
			Inputs:  []infer.Tensor{{Name: "x", DataType: infer.FP32, Shape: s, Parameters: infer.Parameters{ParamRegion: region, ParamByteSize: size, ParamOffset: offset}}},
			Outputs: []infer.RequestedOutput{{Name: "y", Parameters: infer.Parameters{ParamRegion: region, ParamByteSize: size, ParamOffset: offset}}},
		}
		lease, err := r.Acquire(req)
		if err != nil {
			return
		}
		defer lease.Release()
		if err := req.Inputs[0].CheckSize(); err != nil {
			t.Fatalf("accepted input does not fit its shape: %v", err)
		}
		resp := &infer.Response{Outputs: []infer.Tensor{{Name: "y", DataType: infer.Uint8, Shape: infer.Shape{4}, Data: []byte{1, 2, 3, 4}}}}
		_ = lease.WriteOutputs(resp)
	})
}

// The region/offset/size arithmetic: a region registered at any offset
// and byte size of an object of any size, the object then resized to
// any size (a client's ftruncate), read and written at any offset and
// size. Nothing panics or faults; an accepted read returns exactly the
// bytes asked for from inside the region and the object, an accepted
// write lands there; everything else is an error of a known kind.
func FuzzRegionBounds(f *testing.F) {
	f.Add(uint16(64), uint64(0), uint64(64), uint16(0), uint64(0), uint64(64))
	f.Add(uint16(4200), uint64(4096), uint64(64), uint16(4100), uint64(1), uint64(64))
	f.Add(uint16(64), uint64(32), uint64(32), uint16(64), uint64(1<<63), uint64(1<<63))
	f.Add(uint16(64), uint64(0), uint64(64), uint16(64), uint64(32), ^uint64(0)-31)
	dir := f.TempDir()
	obj := filepath.Join(dir, "obj")
	f.Fuzz(func(t *testing.T, objSize uint16, regOff, regSize uint64, newSize uint16, off, size uint64) {
		require := func(ok bool, format string, args ...any) {
			t.Helper()
			if !ok {
				t.Fatalf(format, args...)
			}
		}
		content := make([]byte, objSize)
		for i := range content {
			content[i] = byte(i)
		}
		if err := os.WriteFile(obj, content, 0o600); err != nil {
			t.Fatal(err)
		}
		r := newIn(dir, Options{})
		defer r.Close()
		err := r.Register("r", "/obj", regOff, regSize)
		end := regOff + regSize
		fits := regSize > 0 && end >= regOff && end <= uint64(objSize)
		require((err == nil) == fits, "register offset %d size %d of %d bytes: %v", regOff, regSize, objSize, err)
		if err != nil {
			return
		}
		if err := os.Truncate(obj, int64(newSize)); err != nil {
			t.Fatal(err)
		}
		valid := end <= uint64(newSize)
		st, err := r.Status("r")
		require(err == nil && len(st) == 1 && (st[0].Invalid == "") == valid, "status after resize to %d: %+v %v", newSize, st, err)
		if size > 1<<20 {
			size = 1<<20 + size%7 // keep allocations small; the arithmetic cases stay
		}
		inBounds := off < regSize && size <= regSize-off
		got, err := r.Read("r", off, size)
		switch {
		case err == nil:
			require(inBounds && valid && uint64(len(got)) == size, "read off %d size %d accepted (region %d@%d, object %d)", off, size, regSize, regOff, newSize)
			for i, b := range got {
				require(b == byte(regOff+off+uint64(i)), "read byte %d is %d", i, b)
			}
		case !inBounds:
			require(errors.Is(err, ErrInvalid), "out of bounds read: %v", err)
		default:
			require(!valid && errors.Is(err, ErrRegionInvalid), "read of a valid region refused: %v", err)
		}
		data := []byte{0xAA}
		err = r.Write("r", off, size, data)
		switch {
		case err == nil:
			require(inBounds && valid && size >= 1, "write off %d size %d accepted (region %d@%d, object %d)", off, size, regSize, regOff, newSize)
			b, rerr := os.ReadFile(obj)
			require(rerr == nil && uint64(len(b)) == uint64(newSize) && b[regOff+off] == 0xAA, "the write did not land at %d or grew the object", regOff+off)
		case size < 1:
			require(errors.Is(err, ErrInvalid), "a write of 1 byte into 0: %v", err)
		case !inBounds:
			require(errors.Is(err, ErrInvalid), "out of bounds write: %v", err)
		default:
			require(!valid && errors.Is(err, ErrRegionInvalid), "write to a valid region refused: %v", err)
		}
	})
}
