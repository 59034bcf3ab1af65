// Package shm implements Triton's system shared-memory extension
// (docs/protocol/extension_shared_memory.md in Triton's server
// repository): clients register POSIX shared-memory objects (/dev/shm/KEY)
// as named regions, then name a region, an offset and a byte size in an
// inference request instead of sending tensor data; outputs are written
// into a region instead of the response body.
//
// A region keeps its object open, never mapped: reads and writes are
// pread and pwrite on the descriptor. The object belongs to the client,
// who may shrink it (ftruncate) at any time; a mapping of a shrunk object
// faults (SIGBUS) and would kill the process, while pread of the missing
// bytes only comes back short. A region whose object no longer holds its
// registered bytes answers every access with ErrRegionInvalid (reason
// ReasonRegionInvalid) and its Status says so; the process lives. pread
// and pwrite on tmpfs copy the same page-cache pages a client's mapping
// shows, so both see each other's bytes as a mapping would.
//
// A request holds the regions it names (a Lease) from reading its inputs
// until its outputs are written. Unregistering a region in use only marks
// it: it stays listed and usable until the last request holding it ends,
// then goes, as in Triton (qa/L0_shared_memory TestSharedMemoryUnregister).
//
// Client shared memory can be switched off (Options.Disabled, the
// --allow-client-shm flag): register and unregister are refused with
// Triton's words, status lists nothing.
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
)

// Dir is where POSIX shared-memory objects live on Linux.
const Dir = "/dev/shm"

// MaxRegions bounds how many regions can be registered at once.
const MaxRegions = 4096

// ReservedPrefix starts the keys of the regions Triton's Python backend
// creates for itself (kTritonSharedMemoryRegionPrefix); a client may not
// register them.
const ReservedPrefix = "triton_python_backend_shm_region_"

// DisabledMessage is Triton's answer to register and unregister when
// client shared memory is off.
const DisabledMessage = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."

// Errors callers map to status codes.
var (
	ErrNotFound = errors.New("shared memory region not found")
	ErrExists   = errors.New("shared memory region already registered")
	ErrInvalid  = errors.New("invalid shared memory request")
	// ErrRegionInvalid: the region's object shrank below the bytes it
	// was registered with.
	ErrRegionInvalid = errors.New("shared memory region no longer valid")
	// ErrDisabled: client shared memory is switched off.
	ErrDisabled = errors.New("client shared memory disabled")
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
	// Invalid says why the region can no longer be used (its object
	// shrank below offset + byte_size); empty while it is valid. A Sluice
	// field: Triton's status has no such thing.
	Invalid string `json:"invalid,omitempty"`
}

// region is one registered region. Registry.mu protects refs and doomed;
// f is only closed once no Lease holds the region.
type region struct {
	Status
	f      *os.File
	refs   int  // leases holding it
	doomed bool // unregistered while held: goes when refs drops to 0
}

// end is where the region ends in its object.
func (rg *region) end() uint64 { return rg.Offset + rg.ByteSize }

// check returns ErrRegionInvalid when the object no longer holds the
// region's bytes.
func (rg *region) check() error {
	st, err := rg.f.Stat()
	if err != nil {
		return errf(ErrRegionInvalid, "shared memory region '%s' is no longer valid: %v", rg.Name, err)
	}
	if size := st.Size(); size < 0 || uint64(size) < rg.end() {
		return rg.shrunk(size)
	}
	return nil
}

func (rg *region) shrunk(size int64) error {
	return errf(ErrRegionInvalid, "shared memory region '%s' is no longer valid: its key '%s' holds %d bytes, fewer than its offset %d + byte_size %d; unregister it and register it again",
		rg.Name, rg.Key, size, rg.Offset, rg.ByteSize)
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
	// Disabled refuses client shared memory: register and unregister
	// answer DisabledMessage, status lists nothing (Triton's
	// --allow-client-shm=false).
	Disabled bool
}

// Registry holds the registered regions. The zero value is not usable;
// use New. Its methods are safe for concurrent use.
type Registry struct {
	dir      string
	maxRead  uint64
	disabled bool
	mu       sync.Mutex // protects regions and every region's refs and doomed
	regions  map[string]*region
}

// New returns an empty registry over Dir.
func New(opts Options) *Registry { return newIn(Dir, opts) }

// newIn returns a registry whose keys name files in dir (tests).
func newIn(dir string, opts Options) *Registry {
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	return &Registry{dir: dir, maxRead: uint64(opts.MaxRequestBytes), disabled: opts.Disabled, regions: map[string]*region{}}
}

// Disabled reports whether client shared memory is switched off.
func (r *Registry) Disabled() bool { return r == nil || r.disabled }

// path turns a shared-memory key ("/name" or "name", as shm_open takes
// it) into its file, refusing anything that is not one plain name and
// Triton's reserved prefix (in Triton's words, which its QA matches:
// test_register_invalid_shm_key, test_register_reserved_names).
func (r *Registry) path(name, key string) (string, error) {
	bare := strings.TrimLeft(key, "/")
	if bare == "" {
		return "", errf(ErrInvalid, "cannot register shared memory region '%s' - invalid shm key '%s'", name, key)
	}
	if strings.HasPrefix(bare, ReservedPrefix) {
		return "", errf(ErrInvalid, "cannot register shared memory region '%s' with key '%s' as the key contains the reserved prefix '%s'", name, key, ReservedPrefix)
	}
	one := strings.TrimPrefix(key, "/")
	if one == "." || one == ".." || strings.ContainsAny(one, "/\x00") {
		return "", errf(ErrInvalid, "cannot register shared memory region '%s' - invalid shm key '%s': it must be one name, as shm_open takes it", name, key)
	}
	return filepath.Join(r.dir, one), nil
}

// Register opens the shared-memory object key and registers byteSize
// bytes at offset of it as region name.
func (r *Registry) Register(name, key string, offset, byteSize uint64) error {
	if r.Disabled() {
		return ErrDisabledError()
	}
	if name == "" {
		return errf(ErrInvalid, "the region name is empty")
	}
	path, err := r.path(name, key)
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
		return errf(ErrInvalid, "Unable to open shared memory region: '%s' (region '%s'): %v", key, name, errors.Unwrap(err))
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return errf(ErrInvalid, "region '%s': %v", name, err)
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return errf(ErrInvalid, "shared memory key '%s' is not a shared memory object", key)
	}
	if uint64(st.Size()) < end {
		_ = f.Close()
		return errf(ErrInvalid, "failed to register shared memory region '%s': invalid args: offset %d + byte_size %d exceeds the %d bytes of shared memory key '%s'", name, offset, byteSize, st.Size(), key)
	}
	r.regions[name] = &region{Status: Status{Name: name, Key: key, Offset: offset, ByteSize: byteSize}, f: f}
	return nil
}

// Unregister unregisters region name, or every region when name is
// empty. An unknown name is not an error, as in Triton. A region a
// request holds stays registered (listed and usable) until the last
// request holding it ends, then goes, as in Triton.
func (r *Registry) Unregister(name string) error {
	if r.Disabled() {
		return ErrDisabledError()
	}
	return r.unregister(name)
}

func (r *Registry) unregister(name string) error {
	r.mu.Lock()
	var gone []*region
	mark := func(rg *region) {
		if rg.refs > 0 {
			rg.doomed = true
			return
		}
		delete(r.regions, rg.Name)
		gone = append(gone, rg)
	}
	if name == "" {
		for _, rg := range r.regions {
			mark(rg)
		}
	} else if rg, ok := r.regions[name]; ok {
		mark(rg)
	}
	r.mu.Unlock()
	var errs []error
	for _, rg := range gone {
		errs = append(errs, rg.f.Close())
	}
	return errors.Join(errs...)
}

// Close unregisters every region. Regions requests still hold are closed
// when those requests end.
func (r *Registry) Close() error { return r.unregister("") }

// Status lists region name, or every region (sorted by name) when name
// is empty; a region whose object shrank carries Invalid. With client
// shared memory disabled it lists nothing, as Triton does.
func (r *Registry) Status(name string) ([]Status, error) {
	var list []*region
	r.mu.Lock()
	if name != "" {
		rg, ok := r.regions[name]
		if !ok {
			r.mu.Unlock()
			return nil, errf(ErrNotFound, "Unable to find system shared memory region: '%s'", name)
		}
		list = append(list, rg)
	} else {
		for _, rg := range r.regions {
			list = append(list, rg)
		}
	}
	// The regions stay open while held: fstat them under the lock.
	out := make([]Status, 0, len(list))
	for _, rg := range list {
		st := rg.Status
		if err := rg.check(); err != nil {
			st.Invalid = err.Error()
		}
		out = append(out, st)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// acquire finds region name and holds it; the caller must release it.
func (r *Registry) acquire(name string) (*region, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rg, ok := r.regions[name]
	if !ok {
		return nil, errf(ErrNotFound, "Unable to find shared memory region: '%s'", name)
	}
	rg.refs++
	return rg, nil
}

// release drops one hold of rg, closing it when it was unregistered and
// this was the last.
func (r *Registry) release(rg *region) {
	r.mu.Lock()
	rg.refs--
	last := rg.refs == 0 && rg.doomed
	if last && r.regions[rg.Name] == rg {
		delete(r.regions, rg.Name)
	}
	r.mu.Unlock()
	if last {
		_ = rg.f.Close()
	}
}

// bounds checks offset and size against the region's byte size, in
// Triton's words (qa/L0_shared_memory test_infer_offset_out_of_bound,
// test_infer_byte_size_out_of_bound, test_infer_integer_overflow).
func bounds(name string, byteSize, offset, size uint64) error {
	if offset >= byteSize {
		return errf(ErrInvalid, "Invalid offset for shared memory region: '%s' (offset %d, its byte_size %d)", name, offset, byteSize)
	}
	if size > ^uint64(0)-offset {
		return errf(ErrInvalid, "Integer overflow detected: byte_size (%d) + offset (%d) exceeds maximum value (%d) for region '%s'", size, offset, ^uint64(0), name)
	}
	if offset+size > byteSize {
		return errf(ErrInvalid, "Invalid offset + byte size for shared memory region: '%s' (offset %d + byte_size %d > its byte_size %d)", name, offset, size, byteSize)
	}
	return nil
}

// read copies size bytes at offset of a held region. A region whose
// object shrank is refused whole, even where the bytes asked for remain;
// a short read means it shrank after the check.
func (rg *region) read(offset, size uint64) ([]byte, error) {
	if err := bounds(rg.Name, rg.ByteSize, offset, size); err != nil {
		return nil, err
	}
	if err := rg.check(); err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := rg.f.ReadAt(buf, int64(rg.Offset+offset))
	if uint64(n) < size {
		if cerr := rg.check(); cerr != nil {
			return nil, cerr
		}
		return nil, errf(ErrRegionInvalid, "shared memory region '%s' is no longer valid: read %d of %d bytes: %v", rg.Name, n, size, err)
	}
	return buf, nil
}

// write copies data to offset of a held region; at most size bytes may be
// written there (the byte size the request gave). An object that shrank
// is refused rather than grown back.
func (rg *region) write(offset, size uint64, data []byte) error {
	if uint64(len(data)) > size {
		return errf(ErrInvalid, "the output needs %d bytes but shared memory region '%s' was given %d for it", len(data), rg.Name, size)
	}
	if err := bounds(rg.Name, rg.ByteSize, offset, size); err != nil {
		return err
	}
	if err := rg.check(); err != nil {
		return err
	}
	if _, err := rg.f.WriteAt(data, int64(rg.Offset+offset)); err != nil {
		return errf(ErrRegionInvalid, "shared memory region '%s' is no longer valid: write: %v", rg.Name, err)
	}
	return nil
}

// Read copies size bytes at offset of region name.
func (r *Registry) Read(name string, offset, size uint64) ([]byte, error) {
	rg, err := r.acquire(name)
	if err != nil {
		return nil, err
	}
	defer r.release(rg)
	return rg.read(offset, size)
}

// Write copies data to offset of region name; at most size bytes may be
// written there (the byte size the request gave).
func (r *Registry) Write(name string, offset, size uint64, data []byte) error {
	rg, err := r.acquire(name)
	if err != nil {
		return err
	}
	defer r.release(rg)
	return rg.write(offset, size, data)
}

// ErrDisabledError is the error register and unregister return while
// client shared memory is disabled, for the endpoints outside the
// registry (CUDA) that answer the same.
func ErrDisabledError() error { return errf(ErrDisabled, "%s", DisabledMessage) }
