package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

// makeObject creates a shared-memory object of size bytes in /dev/shm (as
// a client's shm_open + ftruncate would) and removes it at the end.
func makeObject(t *testing.T, size int) (key string, path string) {
	t.Helper()
	name := fmt.Sprintf("sluice-test-%d-%s", os.Getpid(), filepath.Base(t.TempDir()))
	path = filepath.Join(Dir, name)
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(size)))
	require.NoError(t, f.Close())
	t.Cleanup(func() { _ = os.Remove(path) })
	return "/" + name, path
}

// Modelled on Triton's L0_shared_memory (qa/L0_shared_memory/
// shared_memory_test.py): register, status, a duplicate name refused,
// unregister one and all; invalid regions refused at registration.
func TestRegisterStatusUnregister(t *testing.T) {
	key, _ := makeObject(t, 64)
	r := New(Options{})
	t.Cleanup(func() { _ = r.Close() })
	require.NoError(t, r.Register("in", key, 0, 32))
	require.NoError(t, r.Register("out", key, 32, 32))
	err := r.Register("in", key, 0, 8)
	require.ErrorIs(t, err, ErrExists)
	require.ErrorContains(t, err, "shared memory region 'in' already in manager")

	st, err := r.Status("")
	require.NoError(t, err)
	require.Equal(t, []Status{{Name: "in", Key: key, Offset: 0, ByteSize: 32}, {Name: "out", Key: key, Offset: 32, ByteSize: 32}}, st)
	st, err = r.Status("out")
	require.NoError(t, err)
	require.Len(t, st, 1)
	_, err = r.Status("nope")
	require.ErrorIs(t, err, ErrNotFound)

	require.NoError(t, r.Unregister("in"))
	require.NoError(t, r.Unregister("in"), "an unknown name is no error, as in Triton")
	st, _ = r.Status("")
	require.Len(t, st, 1)
	require.NoError(t, r.Unregister(""))
	st, _ = r.Status("")
	require.Empty(t, st)

	for _, tc := range []struct {
		name, key    string
		offset, size uint64
		want         string
	}{
		{"a", key, 0, 65, "exceeds the 64 bytes"},
		// Triton's wording (QA L0_shared_memory test_register_out_of_bound
		// matches "failed to register shared memory region.*invalid args").
		{"a", key, 0, 65, "failed to register shared memory region 'a': invalid args"},
		{"a", key, 64, 1, "failed to register shared memory region 'a': invalid args"},
		{"a", key, 65, 0, "failed to register shared memory region 'a': invalid args"},
		{"a", key, 60, 8, "exceeds the 64 bytes"},
		{"a", key, 0, 0, "byte_size must be > 0"},
		{"a", "/no-such-object-here", 0, 8, "Unable to open shared memory region: '/no-such-object-here'"},
		{"a", "/../etc/passwd", 0, 8, "must be one name"},
		// Triton's words (QA L0_shared_memory test_register_invalid_shm_key,
		// test_register_reserved_names).
		{"my_test_shm_name", "/", 0, 8, "cannot register shared memory region 'my_test_shm_name' - invalid shm key '/'"},
		{"my_test_shm_name", "///", 0, 8, "cannot register shared memory region 'my_test_shm_name' - invalid shm key '///'"},
		{"my_test_shm_name", "triton_python_backend_shm_region__k", 0, 8, "cannot register shared memory region 'my_test_shm_name' with key 'triton_python_backend_shm_region__k' as the key contains the reserved prefix 'triton_python_backend_shm_region_'"},
		{"my_test_shm_name", "///triton_python_backend_shm_region__k", 0, 8, "with key '///triton_python_backend_shm_region__k' as the key contains the reserved prefix"},
		{"a", "..", 0, 8, "must be one name"},
		{"", key, 0, 8, "name is empty"},
		{"a", key, 1 << 63, 1 << 63, "too large"},
	} {
		require.ErrorContains(t, r.Register(tc.name, tc.key, tc.offset, tc.size), tc.want, "%+v", tc)
	}
}

func TestReadWriteBounds(t *testing.T) {
	key, path := makeObject(t, 4096+16)
	r := New(Options{})
	t.Cleanup(func() { _ = r.Close() })
	// An offset that is not page aligned works (the mapping starts at 0).
	require.NoError(t, r.Register("x", key, 4096+3, 8))
	require.NoError(t, r.Write("x", 2, 6, []byte{1, 2, 3}))
	got, err := r.Read("x", 0, 8)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 0, 1, 2, 3, 0, 0, 0}, got)
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3}, file[4096+5:4096+8], "writes reach the shared object")

	_, err = r.Read("x", 4, 5)
	require.ErrorContains(t, err, "Invalid offset + byte size for shared memory region: 'x'")
	_, err = r.Read("x", 1<<63, 1<<63)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, r.Write("x", 0, 2, []byte{1, 2, 3}), "needs 3 bytes but shared memory region 'x' was given 2")
	_, err = r.Read("y", 0, 1)
	require.ErrorContains(t, err, "Unable to find shared memory region: 'y'")
}

// Unregistering while requests copy in and out must be safe: every copy
// either completes or reports the region gone (run with -race).
func TestUnregisterWhileInUse(t *testing.T) {
	key, _ := makeObject(t, 1<<20)
	r := New(Options{})
	t.Cleanup(func() { _ = r.Close() })
	for round := range 20 {
		require.NoError(t, r.Register("busy", key, 0, 1<<20))
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				buf := make([]byte, 1<<20)
				for range 50 {
					var err error
					if w%2 == 0 {
						_, err = r.Read("busy", 0, 1<<20)
					} else {
						err = r.Write("busy", 0, 1<<20, buf)
					}
					if err != nil {
						require.ErrorIs(t, err, ErrNotFound, "round %d", round)
						return
					}
				}
			})
		}
		require.NoError(t, r.Unregister("busy"))
		wg.Wait()
	}
}

func TestRequestInputsAndOutputs(t *testing.T) {
	key, _ := makeObject(t, 64)
	r := New(Options{})
	t.Cleanup(func() { _ = r.Close() })
	require.NoError(t, r.Register("in", key, 0, 32))
	require.NoError(t, r.Register("out", key, 32, 32))
	var vals []byte
	for i := range 4 {
		vals = binary.LittleEndian.AppendUint32(vals, uint32(i+10))
	}
	require.NoError(t, r.Write("in", 8, 16, vals))

	req := &infer.Request{
		Inputs: []infer.Tensor{
			{Name: "A", DataType: infer.Int32, Shape: infer.Shape{1, 4}, Parameters: infer.Parameters{ParamRegion: "in", ParamByteSize: int64(16), ParamOffset: int64(8)}},
			{Name: "B", DataType: infer.Int32, Shape: infer.Shape{1}, Data: []byte{1, 0, 0, 0}},
		},
		Outputs: []infer.RequestedOutput{
			{Name: "Y", Parameters: infer.Parameters{ParamRegion: "out", ParamByteSize: uint64(16)}},
			{Name: "Z"},
		},
	}
	lease, err := r.Acquire(req)
	require.NoError(t, err)
	defer lease.Release()
	require.Equal(t, vals, req.Inputs[0].Data)
	require.Nil(t, req.Inputs[0].Parameters, "the shared-memory parameters do not reach the model")
	require.Equal(t, map[string]Ref{"Y": {Region: "out", Size: 16}}, lease.outs)
	require.Nil(t, req.Outputs[0].Parameters)

	resp := &infer.Response{Outputs: []infer.Tensor{
		{Name: "Y", DataType: infer.Int32, Shape: infer.Shape{1, 4}, Data: vals},
		{Name: "Z", DataType: infer.Int32, Shape: infer.Shape{1}, Data: []byte{1, 0, 0, 0}},
	}}
	require.NoError(t, lease.WriteOutputs(resp))
	require.Nil(t, resp.Outputs[0].Data)
	require.Equal(t, infer.Parameters{ParamRegion: "out", ParamByteSize: int64(16)}, resp.Outputs[0].Parameters)
	require.NotNil(t, resp.Outputs[1].Data)
	got, err := r.Read("out", 0, 16)
	require.NoError(t, err)
	require.Equal(t, vals, got)

	bad := func(p infer.Parameters, shape infer.Shape) error {
		l, err := r.Acquire(&infer.Request{Model: "simple", Inputs: []infer.Tensor{{Name: "A", DataType: infer.Int32, Shape: shape, Parameters: p}}})
		l.Release()
		return err
	}
	for _, tc := range []struct {
		p     infer.Parameters
		shape infer.Shape
		want  string
	}{
		{infer.Parameters{ParamRegion: "in", ParamByteSize: int64(12)}, infer.Shape{4}, "input 'A': shared memory byte_size 12 does not fit shape [4] of INT32"},
		{infer.Parameters{ParamRegion: "in", ParamByteSize: int64(16), ParamOffset: int64(20)}, infer.Shape{4}, "input 'A': Invalid offset + byte size for shared memory region: 'in'"},
		// Triton's wording, which its QA (L0_shared_memory test_too_big_shm,
		// test_infer_offset_out_of_bound, test_infer_byte_size_out_of_bound,
		// test_infer_integer_overflow) and clients match on; test_too_big_shm
		// has had two wordings.
		{infer.Parameters{ParamRegion: "in", ParamByteSize: int64(12)}, infer.Shape{4}, "unexpected total byte size 12 for input 'A', expecting 16"},
		{infer.Parameters{ParamRegion: "in", ParamByteSize: int64(12)}, infer.Shape{4}, "input byte size mismatch for input 'A' for model 'simple'. Expected 16, got 12"},
		{infer.Parameters{ParamRegion: "in", ParamByteSize: int64(16), ParamOffset: int64(32)}, infer.Shape{4}, "input 'A': Invalid offset for shared memory region: 'in'"},
		{infer.Parameters{ParamRegion: "gone", ParamByteSize: int64(16)}, infer.Shape{4}, "input 'A': Unable to find shared memory region: 'gone'"},
		{infer.Parameters{ParamRegion: "in"}, infer.Shape{4}, "input 'A': parameter 'shared_memory_byte_size' is required"},
		{infer.Parameters{ParamRegion: int64(3), ParamByteSize: int64(16)}, infer.Shape{4}, "must be a non-empty string"},
		{infer.Parameters{ParamByteSize: int64(16)}, infer.Shape{4}, "has parameter 'shared_memory_byte_size' but no 'shared_memory_region'"},
		{infer.Parameters{ParamRegion: "in", ParamByteSize: int64(-1)}, infer.Shape{4}, "must be a non-negative integer"},
	} {
		err := bad(tc.p, tc.shape)
		require.ErrorContains(t, err, tc.want)
		ie, ok := errors.AsType[*apierr.Error](err)
		require.True(t, ok)
		require.Equal(t, apierr.KindInvalid, ie.Kind)
		require.Equal(t, ReasonInvalid, ie.Reason)
	}
	_, err = r.Acquire(&infer.Request{Outputs: []infer.RequestedOutput{{Name: "Y", Parameters: infer.Parameters{ParamRegion: "nope", ParamByteSize: int64(4)}}}})
	require.ErrorContains(t, err, "output 'Y': Unable to find shared memory region: 'nope'")
	// QA test_infer_integer_overflow sends such an output over HTTP.
	_, err = r.Acquire(&infer.Request{Outputs: []infer.RequestedOutput{{Name: "Y", Parameters: infer.Parameters{ParamRegion: "out", ParamByteSize: uint64(1<<64 - 8), ParamOffset: int64(8)}}}})
	require.ErrorContains(t, err, "output 'Y': Integer overflow detected: byte_size (18446744073709551608) + offset (8) exceeds maximum value")
	small, err := r.Acquire(&infer.Request{Outputs: []infer.RequestedOutput{{Name: "Y", Parameters: infer.Parameters{ParamRegion: "out", ParamByteSize: int64(16)}}}})
	require.NoError(t, err)
	defer small.Release()
	err = small.WriteOutputs(&infer.Response{Outputs: []infer.Tensor{{Name: "Y", DataType: infer.Int32, Shape: infer.Shape{8}, Data: make([]byte, 32)}}})
	require.ErrorContains(t, err, "output 'Y': the output needs 32 bytes but shared memory region 'out' was given 16")
}

// The data is copied out of the region, so one request reads at most
// what a body may carry (--max-request-bytes); past it the request is
// refused as a too large body would be.
func TestReadLimit(t *testing.T) {
	key, _ := makeObject(t, 64)
	r := New(Options{MaxRequestBytes: 24})
	t.Cleanup(func() { _ = r.Close() })
	require.NoError(t, r.Register("in", key, 0, 64))
	in := func(name string) infer.Tensor {
		return infer.Tensor{Name: name, DataType: infer.Uint8, Shape: infer.Shape{16}, Parameters: infer.Parameters{ParamRegion: "in", ParamByteSize: int64(16)}}
	}
	l, err := r.Acquire(&infer.Request{Inputs: []infer.Tensor{in("a")}})
	require.NoError(t, err)
	l.Release()
	_, err = r.Acquire(&infer.Request{Inputs: []infer.Tensor{in("a"), in("b")}})
	ie, ok := errors.AsType[*apierr.Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.KindResourceExhausted, ie.Kind)
	require.Equal(t, "body_too_large", ie.Reason)
	require.Contains(t, ie.Msg, "input 'b': the request's inputs read more than 24 bytes from shared memory")
}

// Triton's semantics for a region unregistered while a request uses it
// (qa/L0_shared_memory TestSharedMemoryUnregister:
// test_unregister_shm_during_inference_single_req_*,
// test_unregister_shm_during_inference_multiple_req_*,
// test_unregister_shm_after_inference_*): unregister succeeds, the
// region stays listed and usable (a second request may still take it)
// until the last request holding it ends, then it is gone without another
// unregister. A region nobody holds goes at once.
func TestUnregisterDuringInference(t *testing.T) {
	key, _ := makeObject(t, 64)
	r := New(Options{})
	t.Cleanup(func() { _ = r.Close() })
	require.NoError(t, r.Register("input0_data", key, 0, 16))
	require.NoError(t, r.Register("output0_data", key, 32, 16))
	require.NoError(t, r.Register("idle", key, 48, 16))
	req := func() *infer.Request {
		return &infer.Request{
			Inputs:  []infer.Tensor{{Name: "INPUT0", DataType: infer.Int32, Shape: infer.Shape{1, 4}, Parameters: infer.Parameters{ParamRegion: "input0_data", ParamByteSize: int64(16)}}},
			Outputs: []infer.RequestedOutput{{Name: "OUTPUT0", Parameters: infer.Parameters{ParamRegion: "output0_data", ParamByteSize: int64(16)}}},
		}
	}
	names := func() []string {
		st, err := r.Status("")
		require.NoError(t, err)
		var out []string
		for _, s := range st {
			out = append(out, s.Name)
		}
		return out
	}
	first, err := r.Acquire(req())
	require.NoError(t, err)

	require.NoError(t, r.Unregister(""), "unregister all while a request holds two regions")
	require.Equal(t, []string{"input0_data", "output0_data"}, names(), "the held regions stay listed; the idle one is gone")
	second, err := r.Acquire(req())
	require.NoError(t, err, "a region awaiting unregister is still usable")
	require.Error(t, r.Register("input0_data", key, 0, 16), "its name is still taken")

	resp := &infer.Response{Outputs: []infer.Tensor{{Name: "OUTPUT0", DataType: infer.Int32, Shape: infer.Shape{1, 4}, Data: make([]byte, 16)}}}
	require.NoError(t, first.WriteOutputs(resp), "the output of a request started before unregister is written")
	first.Release()
	first.Release() // twice is harmless
	require.Equal(t, []string{"input0_data", "output0_data"}, names(), "the second request still holds them")
	second.Release()
	require.Empty(t, names(), "gone once the last request ended")
	_, err = r.Status("input0_data")
	require.ErrorContains(t, err, "Unable to find system shared memory region: 'input0_data'")

	// After inference: unregister removes at once.
	require.NoError(t, r.Register("input0_data", key, 0, 16))
	require.NoError(t, r.Register("output0_data", key, 32, 16))
	l, err := r.Acquire(req())
	require.NoError(t, err)
	l.Release()
	require.Equal(t, []string{"input0_data", "output0_data"}, names())
	require.NoError(t, r.Unregister(""))
	require.Empty(t, names())
}

// Triton's --allow-client-shm=false (qa/L0_shared_memory
// test_client_shm_disabled_by_default): register and unregister refused
// with Triton's words, status empty, requests naming a region find none.
func TestDisabled(t *testing.T) {
	key, _ := makeObject(t, 64)
	r := New(Options{Disabled: true})
	require.True(t, r.Disabled())
	err := r.Register("dummy_data", key, 0, 8)
	require.ErrorIs(t, err, ErrDisabled)
	require.EqualError(t, err, DisabledMessage)
	require.ErrorIs(t, r.Unregister("dummy_data"), ErrDisabled)
	st, err := r.Status("")
	require.NoError(t, err)
	require.Empty(t, st)
	_, err = r.Acquire(&infer.Request{Inputs: []infer.Tensor{{Name: "A", DataType: infer.Uint8, Shape: infer.Shape{8}, Parameters: infer.Parameters{ParamRegion: "dummy_data", ParamByteSize: int64(8)}}}})
	require.ErrorContains(t, err, "Unable to find shared memory region: 'dummy_data'")
}

// A region whose object shrank (the client's ftruncate) refuses reads
// and writes with ErrRegionInvalid and shows Invalid in the status, and
// works again once the object is grown back. With the region mapped, the
// read faulted (SIGBUS) and killed the process.
func TestShrunkObject(t *testing.T) {
	key, path := makeObject(t, 8192)
	r := New(Options{})
	t.Cleanup(func() { _ = r.Close() })
	require.NoError(t, r.Register("x", key, 4096, 4096))
	require.NoError(t, os.Truncate(path, 0))
	_, err := r.Read("x", 0, 4096)
	require.ErrorIs(t, err, ErrRegionInvalid)
	require.ErrorContains(t, err, "shared memory region 'x' is no longer valid: its key '"+key+"' holds 0 bytes, fewer than its offset 4096 + byte_size 4096")
	require.ErrorIs(t, r.Write("x", 0, 8, []byte{1}), ErrRegionInvalid)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "the refused write did not grow the object")
	st, err := r.Status("x")
	require.NoError(t, err)
	require.Contains(t, st[0].Invalid, "is no longer valid")
	require.NoError(t, os.Truncate(path, 4096+100))
	_, err = r.Read("x", 0, 8)
	require.ErrorIs(t, err, ErrRegionInvalid, "still short of the registered end")
	require.NoError(t, os.Truncate(path, 8192))
	got, err := r.Read("x", 0, 8)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 8), got)
	st, _ = r.Status("x")
	require.Empty(t, st[0].Invalid)
}
