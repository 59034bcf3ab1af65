package shm

import (
	"os"
	"slices"
	"syscall"
	"testing"
)

// BenchmarkRead1MiB measures what reading a 1 MiB input costs: through
// the registry (fstat, then pread into a fresh buffer: the region can
// never fault) against copying out of a mapping of the same object (what
// the registry did before, which a client's ftruncate turned into a
// SIGBUS that killed the process).
//
//	go test -run '^$' -bench Read1MiB -benchmem ./internal/shm/
func BenchmarkRead1MiB(b *testing.B) {
	const size = 1 << 20
	f, err := os.CreateTemp(Dir, "sluice-bench-")
	if err != nil {
		b.Skip("no ", Dir, ": ", err)
	}
	b.Cleanup(func() { _ = os.Remove(f.Name()); _ = f.Close() })
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	b.Run("pread", func(b *testing.B) {
		r := New(Options{})
		b.Cleanup(func() { _ = r.Close() })
		if err := r.Register("in", f.Name()[len(Dir):], 0, size); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for b.Loop() {
			if _, err := r.Read("in", 0, size); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mmap", func(b *testing.B) {
		mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = syscall.Munmap(mem) })
		b.SetBytes(size)
		for b.Loop() {
			_ = slices.Clone(mem)
		}
	})
}
