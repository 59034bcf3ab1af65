package shm

import (
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
		p, err := r.path(key)
		if err != nil {
			return
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
		if err := r.ReadInputs(req); err == nil {
			if err := req.Inputs[0].CheckSize(); err != nil {
				t.Fatalf("accepted input does not fit its shape: %v", err)
			}
		}
		refs, err := r.TakeOutputs(req)
		if err != nil {
			return
		}
		resp := &infer.Response{Outputs: []infer.Tensor{{Name: "y", DataType: infer.Uint8, Shape: infer.Shape{4}, Data: []byte{1, 2, 3, 4}}}}
		_ = r.WriteOutputs(resp, refs)
	})
}
