package shm

import (
	"path/filepath"
	"strings"
	"testing"
)

// A client's key never names a file outside the shared-memory folder.
func FuzzKeyPath(f *testing.F) {
	for _, s := range []string{"/input", "input", "/../etc/passwd", "..", ".", "/a/b", "", "/", "a\x00b"} {
		f.Add(s)
	}
	r := newIn("/dev/shm")
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
