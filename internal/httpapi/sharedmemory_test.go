package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/shm"
)

// shmObject creates a POSIX shared-memory object of size bytes, as a
// client's shm_open and ftruncate would, and removes it at the end.
func shmObject(t *testing.T, size int) (key, path string) {
	t.Helper()
	name := fmt.Sprintf("sluice-httpapi-%d-%s", os.Getpid(), filepath.Base(t.TempDir()))
	path = filepath.Join(shm.Dir, name)
	require.NoError(t, os.WriteFile(path, make([]byte, size), 0o600))
	t.Cleanup(func() { _ = os.Remove(path) })
	return "/" + name, path
}

// Triton's system shared-memory extension over HTTP
// (docs/protocol/extension_shared_memory.md), modelled on
// qa/L0_shared_memory/shared_memory_test.py: register input and output
// regions, infer with the input read from and the output written to
// them, status, unregister; CUDA shared memory is refused clearly.
func TestSharedMemoryHTTP(t *testing.T) {
	reg := shm.New(shm.Options{})
	t.Cleanup(func() { _ = reg.Close() })
	h := New(newFakeModels(), Options{SharedMemory: reg}, nil, prometheus.NewRegistry())
	key, path := shmObject(t, 64)

	post := func(target, body string) int { // the status code
		return do(t, h, http.MethodPost, target, []byte(body), nil).Code
	}
	require.Equal(t, http.StatusOK, post("/v2/systemsharedmemory/region/input0/register", fmt.Sprintf(`{"key":%q,"offset":0,"byte_size":16}`, key)))
	require.Equal(t, http.StatusOK, post("/v2/systemsharedmemory/region/output0/register", fmt.Sprintf(`{"key":%q,"offset":32,"byte_size":32}`, key)))
	requireError(t, do(t, h, http.MethodPost, "/v2/systemsharedmemory/region/input0/register", fmt.Appendf(nil, `{"key":%q,"offset":0,"byte_size":16}`, key), nil),
		http.StatusConflict, "shared_memory_exists", "shared memory region 'input0' already in manager")
	requireError(t, do(t, h, http.MethodPost, "/v2/systemsharedmemory/region/big/register", fmt.Appendf(nil, `{"key":%q,"offset":60,"byte_size":16}`, key), nil),
		http.StatusBadRequest, shm.ReasonInvalid, "exceeds the 64 bytes")
	requireError(t, do(t, h, http.MethodPost, "/v2/systemsharedmemory/region/nokey/register", []byte(`{"byte_size":16}`), nil),
		http.StatusBadRequest, "invalid_request", `"key" is required`)
	requireError(t, do(t, h, http.MethodPost, "/v2/systemsharedmemory/region/huge/register", bytes.Repeat([]byte(" "), maxRegisterBody+1), nil),
		http.StatusBadRequest, reasonBodyTooLarge, "at most 65536 bytes")

	rec := do(t, h, http.MethodGet, "/v2/systemsharedmemory/status", nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, fmt.Sprintf(`[{"name":"input0","key":%q,"offset":0,"byte_size":16},{"name":"output0","key":%q,"offset":32,"byte_size":32}]`, key, key), rec.Body.String())
	requireError(t, do(t, h, http.MethodGet, "/v2/systemsharedmemory/region/nope/status", nil, nil), http.StatusNotFound, "shared_memory_not_found", "'nope'")

	// The client writes IN = [1.5, -2, 3, 4] into the input region.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	for i, v := range []float32{1.5, -2, 3, 4} {
		_, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)), int64(4*i))
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())

	body := `{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"parameters":{"shared_memory_region":"input0","shared_memory_byte_size":16}}],
	  "outputs":[{"name":"OUT","parameters":{"shared_memory_region":"output0","shared_memory_byte_size":16,"shared_memory_offset":8}}]}`
	rec = do(t, h, http.MethodPost, "/v2/models/identity/infer", []byte(body), nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"model_name":"identity","model_version":"1","outputs":[{"name":"OUT","datatype":"FP32","shape":[1,4],
	  "parameters":{"shared_memory_region":"output0","shared_memory_byte_size":16,"shared_memory_offset":8}}]}`, rec.Body.String(),
		"no data in the body, no id (the request had none)")
	region, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, region[0:16], region[32+8:32+8+16], "the output was written at its offset in the output region")

	for _, tc := range []struct{ body, want string }{
		{
			`{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"parameters":{"shared_memory_region":"input0","shared_memory_byte_size":16,"shared_memory_offset":4}}]}`,
			"input 'IN': Invalid offset + byte size for shared memory region: 'input0'",
		},
		{
			`{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"parameters":{"shared_memory_region":"input0","shared_memory_byte_size":12}}]}`,
			"input 'IN': shared memory byte_size 12 does not fit shape [1,4]",
		},
		{
			`{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"parameters":{"shared_memory_region":"gone","shared_memory_byte_size":16}}]}`,
			"input 'IN': Unable to find shared memory region: 'gone'",
		},
		{
			`{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}],"outputs":[{"name":"OUT","parameters":{"shared_memory_region":"output0","shared_memory_byte_size":8}}]}`,
			"output 'OUT': the output needs 16 bytes but shared memory region 'output0' was given 8",
		},
	} {
		requireError(t, do(t, h, http.MethodPost, "/v2/models/identity/infer", []byte(tc.body), nil), http.StatusBadRequest, shm.ReasonInvalid, tc.want)
	}

	require.Equal(t, http.StatusOK, post("/v2/systemsharedmemory/region/input0/unregister", ""))
	rec = do(t, h, http.MethodGet, "/v2/systemsharedmemory/status", nil, nil)
	var st []shm.Status
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
	require.Len(t, st, 1)
	require.Equal(t, http.StatusOK, post("/v2/systemsharedmemory/unregister", ""))
	rec = do(t, h, http.MethodGet, "/v2/systemsharedmemory/status", nil, nil)
	require.JSONEq(t, `[]`, rec.Body.String())

	// CUDA: register is refused (no GPU); status lists nothing and
	// unregister has nothing to do, as on a CPU-only Triton, so that
	// tritonclient's simple_http_shm_client runs.
	requireError(t, do(t, h, http.MethodPost, "/v2/cudasharedmemory/region/c/register", []byte(`{}`), nil),
		http.StatusBadRequest, "cuda_shared_memory_unsupported", "CUDA shared memory is not supported on this server")
	rec = do(t, h, http.MethodGet, "/v2/cudasharedmemory/status", nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `[]`, rec.Body.String())
	requireError(t, do(t, h, http.MethodGet, "/v2/cudasharedmemory/region/c/status", nil, nil), http.StatusNotFound, "shared_memory_not_found", "Unable to find cuda shared memory region: 'c'")
	require.Equal(t, http.StatusOK, post("/v2/cudasharedmemory/unregister", ""))
	require.Equal(t, http.StatusOK, post("/v2/cudasharedmemory/region/c/unregister", ""))
}

// Issue 22: a client that shrinks its object (ftruncate) after
// registering it gets 400 shared_memory_region_invalid for inputs and
// outputs, the region shows invalid in the status, and the handler lives
// (a mapped region faulted with SIGBUS and killed the process).
func TestSharedMemoryShrunkObjectHTTP(t *testing.T) {
	reg := shm.New(shm.Options{})
	t.Cleanup(func() { _ = reg.Close() })
	h := New(newFakeModels(), Options{SharedMemory: reg}, nil, prometheus.NewRegistry())
	key, path := shmObject(t, 64)
	for _, b := range []string{`{"key":%q,"offset":0,"byte_size":16}`, `{"key":%q,"offset":32,"byte_size":32}`} {
		name := map[bool]string{true: "input0", false: "output0"}[strings.Contains(b, `"offset":0`)]
		rec := do(t, h, http.MethodPost, "/v2/systemsharedmemory/region/"+name+"/register", fmt.Appendf(nil, b, key), nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	require.NoError(t, os.Truncate(path, 0))

	in := `{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"parameters":{"shared_memory_region":"input0","shared_memory_byte_size":16}}]}`
	requireError(t, do(t, h, http.MethodPost, "/v2/models/identity/infer", []byte(in), nil), http.StatusBadRequest, shm.ReasonRegionInvalid,
		"input 'IN': shared memory region 'input0' is no longer valid: its key '"+key+"' holds 0 bytes, fewer than its offset 0 + byte_size 16")
	out := `{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}],"outputs":[{"name":"OUT","parameters":{"shared_memory_region":"output0","shared_memory_byte_size":16}}]}`
	requireError(t, do(t, h, http.MethodPost, "/v2/models/identity/infer", []byte(out), nil), http.StatusBadRequest, shm.ReasonRegionInvalid,
		"output 'OUT': shared memory region 'output0' is no longer valid")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "a write to a shrunk region does not grow the object back")

	rec := do(t, h, http.MethodGet, "/v2/systemsharedmemory/status", nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	var st []shm.Status
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
	require.Len(t, st, 2)
	for _, s := range st {
		require.Contains(t, s.Invalid, "is no longer valid", s.Name)
	}
	// Grown back, the region is valid again.
	require.NoError(t, os.Truncate(path, 64))
	rec = do(t, h, http.MethodPost, "/v2/models/identity/infer", []byte(in), nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// Triton's --allow-client-shm=false (qa/L0_shared_memory
// test_client_shm_disabled_by_default): register and unregister are
// refused with Triton's words, status lists nothing.
func TestSharedMemoryDisabledHTTP(t *testing.T) {
	reg := shm.New(shm.Options{Disabled: true})
	h := New(newFakeModels(), Options{SharedMemory: reg}, nil, prometheus.NewRegistry())
	key, _ := shmObject(t, 64)
	for _, target := range []string{
		"/v2/systemsharedmemory/region/dummy_data/register", "/v2/systemsharedmemory/region/dummy_data/unregister",
		"/v2/systemsharedmemory/unregister", "/v2/cudasharedmemory/region/c/register", "/v2/cudasharedmemory/unregister",
	} {
		requireError(t, do(t, h, http.MethodPost, target, fmt.Appendf(nil, `{"key":%q,"byte_size":8}`, key), nil),
			http.StatusBadRequest, shm.ReasonDisabled, "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")
	}
	for _, target := range []string{"/v2/systemsharedmemory/status", "/v2/cudasharedmemory/status"} {
		rec := do(t, h, http.MethodGet, target, nil, nil)
		require.Equal(t, http.StatusOK, rec.Code, target)
		require.JSONEq(t, `[]`, rec.Body.String(), target)
	}
}

// Triton's QA TestSharedMemoryUnregister
// (test_unregister_shm_during_inference_single_req_http): unregister all
// while an inference uses the regions answers 200, the regions stay
// listed, the inference still writes its output into its region, and
// once it has answered the regions are gone without another unregister.
func TestSharedMemoryUnregisterDuringInferenceHTTP(t *testing.T) {
	reg := shm.New(shm.Options{})
	t.Cleanup(func() { _ = reg.Close() })
	inside, release := make(chan struct{}), make(chan struct{})
	models := newFakeModels()
	models.infer = func(_ context.Context, req *infer.Request) (*infer.Response, error) {
		close(inside)
		<-release
		in := req.Inputs[0]
		return &infer.Response{Model: req.Model, Outputs: []infer.Tensor{{Name: "OUT", DataType: in.DataType, Shape: in.Shape, Data: in.Data}}}, nil
	}
	h := New(models, Options{SharedMemory: reg}, nil, prometheus.NewRegistry())
	key, path := shmObject(t, 64)
	require.NoError(t, os.WriteFile(path, append(bytes.Repeat([]byte{7}, 16), make([]byte, 48)...), 0o600))
	for name, off := range map[string]int{"input0_data": 0, "output0_data": 32} {
		rec := do(t, h, http.MethodPost, "/v2/systemsharedmemory/region/"+name+"/register", fmt.Appendf(nil, `{"key":%q,"offset":%d,"byte_size":16}`, key, off), nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	status := func() string {
		return do(t, h, http.MethodGet, "/v2/systemsharedmemory/status", nil, nil).Body.String()
	}

	done := make(chan int)
	go func() {
		body := `{"inputs":[{"name":"IN","datatype":"UINT8","shape":[16],"parameters":{"shared_memory_region":"input0_data","shared_memory_byte_size":16}}],
		  "outputs":[{"name":"OUT","parameters":{"shared_memory_region":"output0_data","shared_memory_byte_size":16}}]}`
		done <- do(t, h, http.MethodPost, "/v2/models/identity/infer", []byte(body), nil).Code
	}()
	<-inside
	require.Equal(t, http.StatusOK, do(t, h, http.MethodPost, "/v2/systemsharedmemory/unregister", nil, nil).Code)
	require.Contains(t, status(), `"input0_data"`, "in use: still registered")
	require.Contains(t, status(), `"output0_data"`)
	close(release)
	require.Equal(t, http.StatusOK, <-done)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{7}, 16), got[32:48], "the output reached its region")
	require.JSONEq(t, `[]`, status(), "gone once the inference answered")
}
