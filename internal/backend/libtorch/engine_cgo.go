//go:build cgo

package libtorch

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include "csrc/sluice_torch.h"

typedef struct {
	int32_t (*abi)(void);
	const char *(*version)(void);
	void *(*load)(const char *, const st_options *, char *, size_t);
	int32_t (*num_args)(void *);
	const char *(*arg_name)(void *, int32_t);
	const char *(*arg_type)(void *, int32_t);
	const char *(*return_type)(void *);
	void *(*forward)(void *, const st_tensor *, int32_t, char *, size_t);
	int32_t (*out_count)(void *);
	int32_t (*out_tensor)(void *, int32_t, int32_t *, int32_t *, const int64_t **, const void **, size_t *);
	void (*out_free)(void *);
	void (*free_model)(void *);
} st_api;

// st_open fills api from the library at path; it returns NULL or dlerror's
// message. The library stays open for the life of the process.
static const char *st_open(const char *path, st_api *api) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) return dlerror();
#define ST_SYM(field, name) \
	*(void **)(&api->field) = dlsym(h, name); \
	if (api->field == NULL) return dlerror();
	ST_SYM(abi, "st_abi")
	ST_SYM(version, "st_version")
	ST_SYM(load, "st_load")
	ST_SYM(num_args, "st_num_args")
	ST_SYM(arg_name, "st_arg_name")
	ST_SYM(arg_type, "st_arg_type")
	ST_SYM(return_type, "st_return_type")
	ST_SYM(forward, "st_forward")
	ST_SYM(out_count, "st_out_count")
	ST_SYM(out_tensor, "st_out_tensor")
	ST_SYM(out_free, "st_out_free")
	ST_SYM(free_model, "st_free")
#undef ST_SYM
	return NULL;
}

static int32_t call_abi(st_api *a) { return a->abi(); }
static const char *call_version(st_api *a) { return a->version(); }
static void *call_load(st_api *a, const char *p, const st_options *o, char *e, size_t n) { return a->load(p, o, e, n); }
static int32_t call_num_args(st_api *a, void *m) { return a->num_args(m); }
static const char *call_arg_name(st_api *a, void *m, int32_t i) { return a->arg_name(m, i); }
static const char *call_arg_type(st_api *a, void *m, int32_t i) { return a->arg_type(m, i); }
static const char *call_return_type(st_api *a, void *m) { return a->return_type(m); }
static void *call_forward(st_api *a, void *m, const st_tensor *t, int32_t n, char *e, size_t l) { return a->forward(m, t, n, e, l); }
static int32_t call_out_count(st_api *a, void *o) { return a->out_count(o); }
static int32_t call_out_tensor(st_api *a, void *o, int32_t i, int32_t *dt, int32_t *nd, const int64_t **s, const void **d, size_t *nb) {
	return a->out_tensor(o, i, dt, nd, s, d, nb);
}
static void call_out_free(st_api *a, void *o) { a->out_free(o); }
static void call_free(st_api *a, void *m) { a->free_model(m); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/sluice-ml/sluice/internal/infer"
)

// errLen is the size of the shim's error message buffers.
const errLen = 1024

// cLibrary is the opened shim. Its function table lives in C memory.
type cLibrary struct {
	api *C.st_api
	ver string
}

var (
	openMu sync.Mutex // protects opened
	opened = map[string]*cLibrary{}
)

// openLibrary opens the shim at path once per process.
func openLibrary(path string) (engine, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if l, ok := opened[path]; ok {
		return l, nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	api := (*C.st_api)(C.calloc(1, C.size_t(unsafe.Sizeof(C.st_api{}))))
	if msg := C.st_open(cpath, api); msg != nil {
		C.free(unsafe.Pointer(api))
		return nil, fmt.Errorf("open %s: %s", path, C.GoString(msg))
	}
	if abi := C.call_abi(api); abi != C.SLUICE_TORCH_ABI {
		C.free(unsafe.Pointer(api))
		return nil, fmt.Errorf("%s has interface version %d, this server wants %d: rebuild it with scripts/build-torch-shim.sh", path, abi, C.SLUICE_TORCH_ABI)
	}
	l := &cLibrary{api: api, ver: C.GoString(C.call_version(api))}
	opened[path] = l
	return l, nil
}

func (l *cLibrary) version() string { return l.ver }

func (l *cLibrary) load(path string, o loadSettings) (module, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	opts := C.st_options{
		optimized_execution: cBool(o.optimized),
		inference_mode:      cBool(o.inference),
		intra_op_threads:    C.int32_t(o.intraThreads),
		inter_op_threads:    C.int32_t(o.interThreads),
		jit_executor:        C.int32_t(o.jitExecutor),
		jit_profiling:       C.int32_t(o.jitProfiling),
	}
	errBuf := (*C.char)(C.calloc(errLen, 1))
	defer C.free(unsafe.Pointer(errBuf))
	h := C.call_load(l.api, cpath, &opts, errBuf, errLen)
	if h == nil {
		return nil, errors.New(C.GoString(errBuf))
	}
	m := &cModule{lib: l, h: h}
	n := int(C.call_num_args(l.api, h))
	for i := range n {
		m.argNames = append(m.argNames, C.GoString(C.call_arg_name(l.api, h, C.int32_t(i))))
		m.argTypes = append(m.argTypes, C.GoString(C.call_arg_type(l.api, h, C.int32_t(i))))
	}
	m.ret = C.GoString(C.call_return_type(l.api, h))
	return m, nil
}

func cBool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// cModule is one loaded TorchScript module.
type cModule struct {
	lib                *cLibrary
	h                  unsafe.Pointer
	argNames, argTypes []string
	ret                string
}

func (m *cModule) args() (names, types []string) { return m.argNames, m.argTypes }
func (m *cModule) returns() string               { return m.ret }

func (m *cModule) free() { C.call_free(m.lib.api, m.h) }

// forward runs the module on inputs, in forward()'s argument order, and
// returns its flattened result with Go copies of the data. Inputs are
// handed over without copying unless their bytes are misaligned for their
// element type.
func (m *cModule) forward(inputs []*infer.Tensor) ([]rawTensor, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	ts := make([]C.st_tensor, len(inputs))
	for i, t := range inputs {
		ts[i].dtype = C.int32_t(t.DataType)
		ts[i].ndim = C.int32_t(len(t.Shape))
		if len(t.Shape) > 0 {
			pin.Pin(&t.Shape[0])
			ts[i].shape = (*C.int64_t)(unsafe.Pointer(&t.Shape[0]))
		}
		data := aligned(t.Data, t.DataType.Size())
		if len(data) > 0 {
			pin.Pin(&data[0])
			ts[i].data = unsafe.Pointer(&data[0])
		}
	}
	var first *C.st_tensor
	if len(ts) > 0 {
		first = &ts[0]
	}
	errBuf := (*C.char)(C.calloc(errLen, 1))
	defer C.free(unsafe.Pointer(errBuf))
	out := C.call_forward(m.lib.api, m.h, first, C.int32_t(len(ts)), errBuf, errLen)
	runtime.KeepAlive(inputs)
	if out == nil {
		return nil, errors.New(C.GoString(errBuf))
	}
	defer C.call_out_free(m.lib.api, out)
	n := int(C.call_out_count(m.lib.api, out))
	res := make([]rawTensor, n)
	for i := range n {
		var (
			dt, nd C.int32_t
			shape  *C.int64_t
			data   unsafe.Pointer
			nbytes C.size_t
		)
		C.call_out_tensor(m.lib.api, out, C.int32_t(i), &dt, &nd, &shape, &data, &nbytes) //nolint:gocritic // dupSubExpr: in cgo's generated pointer checks, not this line
		r := rawTensor{dataType: infer.DataType(dt)}
		if nd > 0 {
			r.shape = make(infer.Shape, int(nd))
			copy(r.shape, unsafe.Slice((*int64)(unsafe.Pointer(shape)), int(nd)))
		} else {
			r.shape = infer.Shape{}
		}
		r.data = make([]byte, int(nbytes))
		if nbytes > 0 {
			copy(r.data, unsafe.Slice((*byte)(data), int(nbytes)))
		}
		res[i] = r
	}
	return res, nil
}

// aligned returns b, or a copy of it in memory aligned for elements of
// size bytes when b's start is not.
func aligned(b []byte, size int) []byte {
	if len(b) == 0 || size <= 1 || uintptr(unsafe.Pointer(&b[0]))%uintptr(size) == 0 {
		return b
	}
	words := make([]uint64, (len(b)+7)/8)
	c := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(b))
	copy(c, b)
	return c
}
