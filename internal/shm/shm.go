// Package shm implements Triton's system shared-memory extension
// (docs/protocol/extension_shared_memory.md in Triton's server
// repository): clients register POSIX shared-memory objects (/dev/shm/KEY)
// as named regions, then name a region, an offset and a byte size in an
// inference request instead of sending tensor data; outputs are written
// into a region instead of the response body.
//
// A region is mapped once at registration. Reads copy out of it and
// writes copy into it while holding the region's lock, and unregistering
// takes that lock before unmapping, so a region unregistered while a
// request uses it can never be touched after munmap: the request either
// finished its copy or finds the region gone.
//
// CUDA shared memory is not supported: this server runs no GPU.
package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Dir is where POSIX shared-memory objects live on Linux.
const Dir = "/dev/shm"

// MaxRegions bounds how many regions can be registered at once.
const MaxRegions = 4096

// Errors callers map to status codes.
var (
	ErrNotFound = errors.New("shared memory region not found")
	ErrExists   = errors.New("shared memory region already registered")
	ErrInvalid  = errors.New("invalid shared memory request")
)

// shmError is an error of one of the kinds above whose text is only its
// message.
type shmError struct {
	kind error
	msg  string
}

func (e *shmError) Error() string        { return e.msg }
func (e *shmError) Is(target error) bool { return target == e.kind }

func errf(kind error, format string, args ...any) error {
	return &shmError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Status describes one registered region.
type Status struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

type region struct {
	Status
	mu   sync.RWMutex // held for reading by copies, for writing by unmap
	mem  []byte       // the whole mapping, from file offset 0
	data []byte       // mem[offset : offset+byte_size]; nil once unmapped
}

// DefaultMaxRequestBytes bounds the bytes one request reads from regions
// when Options leave it 0 (the default request body limit).
const DefaultMaxRequestBytes = 64 << 20

// Options configure a Registry.
type Options struct {
	// MaxRequestBytes bounds the bytes one request's inputs read from
	// regions, as --max-request-bytes bounds a body: the data is copied
	// out of the region. 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int64
}

// Registry holds the registered regions. The zero value is not usable;
// use New. Its methods are safe for concurrent use.
type Registry struct {
	dir     string
	maxRead uint64
	mu      sync.Mutex // protects regions
	regions map[string]*region
}

// New returns an empty registry over Dir.
func New(opts Options) *Registry { return newIn(Dir, opts) }

// newIn returns a registry whose keys name files in dir (tests).
func newIn(dir string, opts Options) *Registry {
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	return &Registry{dir: dir, maxRead: uint64(opts.MaxRequestBytes), regions: map[string]*region{}}
}

// path turns a shared-memory key ("/name" or "name", as shm_open takes
// it) into its file, refusing anything that is not one plain name.
func (r *Registry) path(key string) (string, error) {
	name := strings.TrimPrefix(key, "/")
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", errf(ErrInvalid, "shared memory key %q must be one name, as shm_open takes it", key)
	}
	return filepath.Join(r.dir, name), nil
}

// Register maps byteSize bytes at offset of the shared-memory object key
// as region name.
func (r *Registry) Register(name, key string, offset, byteSize uint64) error {
	if name == "" {
		return errf(ErrInvalid, "the region name is empty")
	}
	path, err := r.path(key)
	if err != nil {
		return err
	}
	if byteSize == 0 {
		return errf(ErrInvalid, "failed to register shared memory region '%s': invalid args: byte_size must be > 0", name)
	}
	end := offset + byteSize
	if end < offset || end > 1<<40 {
		return errf(ErrInvalid, "failed to register shared memory region '%s': invalid args: offset %d + byte_size %d is too large", name, offset, byteSize)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.regions[name]; ok {
		return errf(ErrExists, "shared memory region '%s' already in manager", name)
	}
	if len(r.regions) >= MaxRegions {
		return errf(ErrInvalid, "%d shared memory regions are registered already, the most this server holds", MaxRegions)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return errf(ErrInvalid, "unable to open shared memory key '%s' for region '%s': %v", key, name, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errf(ErrInvalid, "region '%s': %v", name, err)
	}
	if !st.Mode().IsRegular() {
		return errf(ErrInvalid, "shared memory key '%s' is not a shared memory object", key)
	}
	if uint64(st.Size()) < end {
		return errf(ErrInvalid, "failed to register shared memory region '%s': invalid args: offset %d + byte_size %d exceeds the %d bytes of shared memory key '%s'", name, offset, byteSize, st.Size(), key)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(end), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return errf(ErrInvalid, "region '%s': mmap: %v", name, err)
	}
	r.regions[name] = &region{
		Status: Status{Name: name, Key: key, Offset: offset, ByteSize: byteSize},
		mem:    mem,
		data:   mem[offset:end:end],
	}
	return nil
}

// Unregister unmaps region name, or every region when name is empty. An
// unknown name is not an error, as in Triton. It waits for copies in
// progress on the region to finish.
func (r *Registry) Unregister(name string) error {
	r.mu.Lock()
	var gone []*region
	if name == "" {
		for _, rg := range r.regions {
			gone = append(gone, rg)
		}
		clear(r.regions)
	} else if rg, ok := r.regions[name]; ok {
		gone = append(gone, rg)
		delete(r.regions, name)
	}
	r.mu.Unlock()
	var errs []error
	for _, rg := range gone {
		rg.mu.Lock()
		if rg.data != nil {
			errs = append(errs, syscall.Munmap(rg.mem))
			rg.mem, rg.data = nil, nil
		}
		rg.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Close unregisters every region.
func (r *Registry) Close() error { return r.Unregister("") }

// Status lists region name, or every region (sorted by name) when name
// is empty.
func (r *Registry) Status(name string) ([]Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name != "" {
		rg, ok := r.regions[name]
		if !ok {
			return nil, errf(ErrNotFound, "unable to find system shared memory region: '%s'", name)
		}
		return []Status{rg.Status}, nil
	}
	out := make([]Status, 0, len(r.regions))
	for _, rg := range r.regions {
		out = append(out, rg.Status)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// lookup returns a region and holds it for reading; the caller must call
// rg.mu.RUnlock.
func (r *Registry) lookup(name string, offset, size uint64) (*region, error) {
	r.mu.Lock()
	rg, ok := r.regions[name]
	r.mu.Unlock()
	if !ok {
		return nil, errf(ErrNotFound, "unable to find shared memory region: '%s'", name)
	}
	rg.mu.RLock()
	if rg.data == nil {
		rg.mu.RUnlock()
		return nil, errf(ErrNotFound, "unable to find shared memory region: '%s'", name)
	}
	if offset >= uint64(len(rg.data)) {
		rg.mu.RUnlock()
		return nil, errf(ErrInvalid, "Invalid offset for shared memory region: '%s' (offset %d, its %d bytes)", name, offset, len(rg.data))
	}
	if end := offset + size; end < offset || end > uint64(len(rg.data)) {
		rg.mu.RUnlock()
		return nil, errf(ErrInvalid, "invalid offset + byte size for shared memory region: '%s' (offset %d + byte_size %d > its %d bytes)", name, offset, size, len(rg.data))
	}
	return rg, nil
}

// Read copies size bytes at offset of region name.
func (r *Registry) Read(name string, offset, size uint64) ([]byte, error) {
	rg, err := r.lookup(name, offset, size)
	if err != nil {
		return nil, err
	}
	defer rg.mu.RUnlock()
	return slices.Clone(rg.data[offset : offset+size]), nil
}

// Write copies data to offset of region name; at most size bytes may be
// written there (the byte size the request gave).
func (r *Registry) Write(name string, offset, size uint64, data []byte) error {
	if uint64(len(data)) > size {
		return errf(ErrInvalid, "the output needs %d bytes but shared memory region '%s' was given %d for it", len(data), name, size)
	}
	rg, err := r.lookup(name, offset, size)
	if err != nil {
		return err
	}
	defer rg.mu.RUnlock()
	copy(rg.data[offset:], data)
	return nil
}
