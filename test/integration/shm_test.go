package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// Issue 22 item 1: a client that registers a system shared-memory region
// and then shrinks the object (ftruncate to 0) must not kill the server.
// With the region mapped, the next inference reading it faulted (SIGBUS
// in shm.(*Registry).Read) and the whole process died; now that request
// gets 400 shared_memory_region_invalid, the region shows invalid in the
// status, the process lives, and other clients' inferences answer 200
// throughout.
func TestSharedMemoryShrunkObject(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", tritonRepo(t), "--allow-client-shm")
	base := "http://" + s.http
	client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))

	name := fmt.Sprintf("sluice-it-shrink-%d-%s", os.Getpid(), filepath.Base(t.TempDir()))
	path := filepath.Join("/dev/shm", name)
	if err := os.WriteFile(path, append(f32le(4, 3, 2, 1), make([]byte, 4096-16)...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	for _, r := range []struct {
		region string
		offset int
	}{{"in", 0}, {"out", 2048}} {
		body := fmt.Sprintf(`{"key":"/%s","offset":%d,"byte_size":2048}`, name, r.offset)
		if code, _, b := do(t, http.MethodPost, base+"/v2/systemsharedmemory/region/"+r.region+"/register", []byte(body), nil); code != http.StatusOK {
			t.Fatalf("register %s = %d %s", r.region, code, b)
		}
	}
	shmIn := []byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"shared_memory_region":"in","shared_memory_byte_size":16}}]}`)
	shmOut := []byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}],
	  "outputs":[{"name":"y","parameters":{"shared_memory_region":"out","shared_memory_byte_size":16}}]}`)
	if code, _, b := do(t, http.MethodPost, base+"/v2/models/classifier/infer", shmIn, nil); code != http.StatusOK {
		t.Fatalf("infer from the intact region = %d %s", code, b)
	}

	// Other clients infer without shared memory all along.
	var sent, failed atomic.Int64
	var firstFailure atomic.Value
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	plain := []byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}`)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/models/classifier/infer", bytes.NewReader(plain))
				resp, err := http.DefaultClient.Do(req)
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, b))
				}
			}
		})
	}
	stopLegit := func() { cancel(); wg.Wait() }
	defer stopLegit()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		harness.WaitFor(t, 60*time.Second, 10*time.Millisecond, what, func() (bool, string) { return cond(), "not yet" })
	}
	waitFor("the other clients' first answers", func() bool { return sent.Load() >= 8 })

	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // more than once: the first did not leave the process half-broken
		code, _, b := do(t, http.MethodPost, base+"/v2/models/classifier/infer", shmIn, nil)
		var e struct{ Error, Reason string }
		_ = json.Unmarshal(b, &e)
		if code != http.StatusBadRequest || e.Reason != "shared_memory_region_invalid" || !strings.Contains(e.Error, "shared memory region 'in' is no longer valid") {
			t.Fatalf("infer %d from the shrunk region = %d %s, want 400 shared_memory_region_invalid", i, code, b)
		}
	}
	code, _, b := do(t, http.MethodPost, base+"/v2/models/classifier/infer", shmOut, nil)
	if code != http.StatusBadRequest || !bytes.Contains(b, []byte(`"reason":"shared_memory_region_invalid"`)) || !bytes.Contains(b, []byte("output 'y'")) {
		t.Fatalf("infer into the shrunk region = %d %s, want 400 shared_memory_region_invalid", code, b)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the object after a refused output write: %v %v, want 0 bytes (not grown back)", fi, err)
	}
	_, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
		ModelName: "classifier",
		Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Parameters: map[string]*inferencepb.InferParameter{
			"shared_memory_region":    {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "in"}},
			"shared_memory_byte_size": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 16}},
		}}},
	})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "is no longer valid") {
		t.Fatalf("gRPC infer from the shrunk region = %v, want InvalidArgument", err)
	}

	code, _, b = do(t, http.MethodGet, base+"/v2/systemsharedmemory/status", nil, nil)
	var regions []struct{ Name, Invalid string }
	if err := json.Unmarshal(b, &regions); code != http.StatusOK || err != nil || len(regions) != 2 {
		t.Fatalf("status = %d %s", code, b)
	}
	for _, r := range regions {
		if !strings.Contains(r.Invalid, "is no longer valid") {
			t.Errorf("status of region %s = %s, want it invalid", r.Name, b)
		}
	}

	// The process lives and the other clients kept being answered.
	select {
	case <-s.done:
		t.Fatalf("sluice exited (%v); logs:\n%s", s.waitErr, s.logs)
	default:
	}
	after := sent.Load()
	waitFor("more answers to the other clients", func() bool { return sent.Load() >= after+20 })
	stopLegit()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d other inferences failed during the attack; first: %v", failed.Load(), sent.Load(), firstFailure.Load())
	}
	if code, _, _ := do(t, http.MethodGet, base+"/v2/health/live", nil, nil); code != http.StatusOK {
		t.Fatalf("live = %d", code)
	}
	if strings.Contains(s.logs.String(), "SIGBUS") || strings.Contains(s.logs.String(), "fatal error") {
		t.Fatalf("fault in the logs:\n%s", s.logs)
	}
}

// Client shared memory is off unless --allow-client-shm, as in Triton
// (qa/L0_shared_memory test_client_shm_disabled_by_default): register
// refused with Triton's words, status lists nothing.
func TestSharedMemoryOffByDefault(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", tritonRepo(t))
	base := "http://" + s.http
	code, _, b := do(t, http.MethodPost, base+"/v2/systemsharedmemory/region/dummy_data/register", []byte(`{"key":"/dummy_data","byte_size":8}`), nil)
	if code != http.StatusBadRequest || !bytes.Contains(b, []byte("Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")) ||
		!bytes.Contains(b, []byte(`"reason":"shared_memory_disabled"`)) {
		t.Fatalf("register = %d %s", code, b)
	}
	if code, _, b := do(t, http.MethodGet, base+"/v2/systemsharedmemory/status", nil, nil); code != http.StatusOK || string(bytes.TrimSpace(b)) != "[]" {
		t.Fatalf("status = %d %s", code, b)
	}
}
