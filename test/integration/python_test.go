package integration_test

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// pyRepo is the repository of Triton-style Python models.
const pyRepo = "test/integration/testdata/python_models"

// pyWorkers returns the pids of the python workers the server runs for
// model: its child processes running sluice_worker.py with --model model.
func pyWorkers(t *testing.T, s *server, model string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ")".
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(s.cmd.Process.Pid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasSuffix(a, "sluice_worker.py") }) {
			if i := slices.Index(args, "--model"); i >= 0 && i+1 < len(args) && args[i+1] == model {
				pids = append(pids, pid)
			}
		}
	}
	slices.Sort(pids)
	return pids
}

// pyGone reports whether none of pids exists any more.
func pyGone(pids []int) bool {
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil || !strings.Contains(err.Error(), "no such process") {
			return false
		}
	}
	return true
}

// pyWait polls cond until it holds or d passes.
func pyWait(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	harness.WaitFor(t, d, 20*time.Millisecond, what, func() (bool, string) { return cond(), "not yet" })
}

// pyInfer posts a KServe v2 JSON request and returns the status and body.
func pyInfer(ctx context.Context, client *http.Client, base, model string, inputs []map[string]any) (int, []byte, error) {
	body, err := json.Marshal(map[string]any{"inputs": inputs})
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/models/"+model+"/infer", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes(), err
}

// pyOutputs decodes a v2 JSON answer's outputs by name (numbers or strings).
func pyOutputs(t *testing.T, body []byte) map[string][]any {
	t.Helper()
	var r struct {
		Outputs []struct {
			Name string `json:"name"`
			Data []any  `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	out := map[string][]any{}
	for _, o := range r.Outputs {
		out[o.Name] = o.Data
	}
	return out
}

func TestPythonModelsHTTPAndGRPC(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", pyRepo)
	base := "http://" + s.http
	ctx := t.Context()

	t.Run("add_sub over HTTP", func(t *testing.T) {
		for _, c := range []struct{ model, dt string }{{"add_sub_fp32", "FP32"}, {"add_sub_int32", "INT32"}} {
			code, body, err := pyInfer(ctx, http.DefaultClient, base, c.model, []map[string]any{
				{"name": "INPUT0", "datatype": c.dt, "shape": []int{4}, "data": []int{1, 2, 3, 4}},
				{"name": "INPUT1", "datatype": c.dt, "shape": []int{4}, "data": []int{10, 20, 30, 40}},
			})
			if err != nil || code != http.StatusOK {
				t.Fatalf("%s: %d %s %v", c.model, code, body, err)
			}
			outs := pyOutputs(t, body)
			if got := fmt.Sprint(outs["OUTPUT0"]); got != "[11 22 33 44]" {
				t.Errorf("%s OUTPUT0 = %s", c.model, got)
			}
			if got := fmt.Sprint(outs["OUTPUT1"]); got != "[-9 -18 -27 -36]" {
				t.Errorf("%s OUTPUT1 = %s", c.model, got)
			}
		}
	})

	t.Run("bytes over HTTP", func(t *testing.T) {
		code, body, err := pyInfer(ctx, http.DefaultClient, base, "bytes_echo", []map[string]any{
			{"name": "TEXT", "datatype": "BYTES", "shape": []int{3}, "data": []string{"hello", "", "sluice"}},
		})
		if err != nil || code != http.StatusOK {
			t.Fatalf("bytes_echo: %d %s %v", code, body, err)
		}
		outs := pyOutputs(t, body)
		if got := fmt.Sprint(outs["UPPER"]); got != "[HELLO  SLUICE]" {
			t.Errorf("UPPER = %s", got)
		}
		if got := fmt.Sprint(outs["LENGTH"]); got != "[5 0 6]" {
			t.Errorf("LENGTH = %s", got)
		}
	})

	t.Run("metadata", func(t *testing.T) {
		code, _, body := do(t, http.MethodGet, base+"/v2/models/add_sub_int32", nil, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"platform":"python"`) || !strings.Contains(string(body), `"datatype":"INT32"`) {
			t.Errorf("metadata = %d %s", code, body)
		}
	})

	client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))
	t.Run("add_sub over gRPC", func(t *testing.T) {
		raw := func(vals ...int32) []byte {
			var b []byte
			for _, v := range vals {
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			}
			return b
		}
		resp, err := client.ModelInfer(ctx, &inferencepb.ModelInferRequest{
			ModelName: "add_sub_int32",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{4}},
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{4}},
			},
			RawInputContents: [][]byte{raw(5, 6, 7, 8), raw(1, 1, 1, 1)},
		})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]int32{}
		for i, o := range resp.GetOutputs() {
			b := resp.GetRawOutputContents()[i]
			for j := 0; j+4 <= len(b); j += 4 {
				got[o.GetName()] = append(got[o.GetName()], int32(binary.LittleEndian.Uint32(b[j:])))
			}
		}
		if !slices.Equal(got["OUTPUT0"], []int32{6, 7, 8, 9}) || !slices.Equal(got["OUTPUT1"], []int32{4, 5, 6, 7}) {
			t.Errorf("outputs = %v", got)
		}
		// FP32 with typed contents.
		resp, err = client.ModelInfer(ctx, &inferencepb.ModelInferRequest{
			ModelName: "add_sub_fp32",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}, Contents: &inferencepb.InferTensorContents{Fp32Contents: []float32{0.5, 1, 2, 3}}},
				{Name: "INPUT1", Datatype: "FP32", Shape: []int64{4}, Contents: &inferencepb.InferTensorContents{Fp32Contents: []float32{0.25, 1, 1, 1}}},
			},
			Outputs: []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetOutputs()) != 1 || resp.GetOutputs()[0].GetName() != "OUTPUT1" {
			t.Fatalf("outputs = %v, want OUTPUT1 only", resp.GetOutputs())
		}
		b := resp.GetRawOutputContents()[0]
		var f []float32
		for j := 0; j+4 <= len(b); j += 4 {
			f = append(f, math.Float32frombits(binary.LittleEndian.Uint32(b[j:])))
		}
		if !slices.Equal(f, []float32{0.25, 0, 1, 2}) {
			t.Errorf("OUTPUT1 = %v", f)
		}
	})

	t.Run("bytes over gRPC", func(t *testing.T) {
		resp, err := client.ModelInfer(ctx, &inferencepb.ModelInferRequest{
			ModelName: "bytes_echo",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "TEXT", Datatype: "BYTES", Shape: []int64{2}, Contents: &inferencepb.InferTensorContents{BytesContents: [][]byte{[]byte("a\x00b"), []byte("xyz")}}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range resp.GetOutputs() {
			if o.GetName() != "UPPER" {
				continue
			}
			var got []string
			b := resp.GetRawOutputContents()[i]
			for len(b) >= 4 {
				n := binary.LittleEndian.Uint32(b)
				got = append(got, string(b[4:4+n]))
				b = b[4+n:]
			}
			if !slices.Equal(got, []string{"A\x00B", "XYZ"}) {
				t.Errorf("UPPER = %q", got)
			}
		}
	})
}

// pyLoad drives batcher from workers goroutines until stop is closed, the
// deadline passes or each has sent max requests. It returns the count of
// successes and the failures' status and reason.
type pyResult struct {
	ok       atomic.Int64
	mu       sync.Mutex // protects failures
	failures []string
}

func (r *pyResult) fail(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, s)
}

func (r *pyResult) failed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failures)
}

func pyLoad(base, model string, workers, perWorker int, stop <-chan struct{}, check func(v float64, body []byte) error) (*pyResult, func()) {
	res := &pyResult{}
	// One idle connection per worker, as a client pool sized for its
	// concurrency keeps: with the default two, the other workers open a
	// connection per request and thousands in TIME_WAIT can use up the
	// ephemeral ports under a long load.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = workers
	client := &http.Client{Timeout: 20 * time.Second, Transport: tr}
	var wg sync.WaitGroup
	deadline := time.Now().Add(90 * time.Second)
	for w := range workers {
		wg.Go(func() {
			for n := 0; n < perWorker && time.Now().Before(deadline); n++ {
				select {
				case <-stop:
					return
				default:
				}
				v := float64(w*1000 + n%1000 + 1)
				code, body, err := pyInfer(context.Background(), client, base, model, []map[string]any{
					{"name": "INPUT0", "datatype": "FP32", "shape": []int{1, 2}, "data": []float64{v, -v}},
				})
				switch {
				case err != nil:
					res.fail(err.Error())
				case code != http.StatusOK:
					var e struct {
						Reason string `json:"reason"`
					}
					_ = json.Unmarshal(body, &e)
					res.fail(fmt.Sprintf("%d %s", code, e.Reason))
				case check != nil && check(v, body) != nil:
					res.fail(check(v, body).Error())
				default:
					res.ok.Add(1)
				}
			}
		})
	}
	return res, func() { wg.Wait(); tr.CloseIdleConnections() }
}

func TestPythonDynamicBatching(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", pyRepo, "--model-control-mode", "explicit", "--load-model", "batcher")
	base := "http://" + s.http
	var maxRequests atomic.Int64
	res, wait := pyLoad(base, "batcher", 16, 25, nil, func(v float64, body []byte) error {
		var r v2Response
		if err := json.Unmarshal(body, &r); err != nil {
			return err
		}
		for _, o := range r.Outputs {
			if o.Name == "REQUESTS" && len(o.Data) == 1 {
				for {
					cur := maxRequests.Load()
					if int64(o.Data[0]) <= cur || maxRequests.CompareAndSwap(cur, int64(o.Data[0])) {
						break
					}
				}
			}
			if o.Name == "OUTPUT0" && (len(o.Data) != 2 || o.Data[0] != 2*v || o.Data[1] != -2*v) {
				return fmt.Errorf("OUTPUT0 = %v", o.Data)
			}
		}
		return nil
	})
	wait()
	if f := res.failed(); len(f) > 0 {
		t.Fatalf("%d requests failed; first: %s", len(f), f[0])
	}
	st := modelStats(t, base, "batcher").ModelStats[0]
	var sizes []uint64
	for _, b := range st.BatchStats {
		sizes = append(sizes, b.BatchSize)
	}
	t.Logf("executions: %d for %d inferences, batch sizes %v, most requests in one execute(): %d",
		st.ExecutionCount, st.InferenceCount, sizes, maxRequests.Load())
	if len(sizes) == 0 || sizes[len(sizes)-1] < 2 {
		t.Errorf("batch_stats sizes = %v, want a batch larger than 1", sizes)
	}
	// The batches reached the model as separate requests of one call.
	if maxRequests.Load() < 2 {
		t.Errorf("no execute() call got more than one request")
	}
}

func TestPythonWorkerKillUnderLoad(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", pyRepo, "--model-control-mode", "explicit", "--load-model", "batcher")
	base := "http://" + s.http
	before := pyWorkers(t, s, "batcher")
	if len(before) != 2 {
		t.Fatalf("workers of batcher = %v, want 2", before)
	}
	stop := make(chan struct{})
	// Two clients per batch slot keep both workers busy, so the kill is
	// likely to catch a call in flight.
	res, wait := pyLoad(base, "batcher", 16, 5000, stop, nil)
	pyWait(t, "load running", 30*time.Second, func() bool { return res.ok.Load() > 50 })
	victim := before[0]
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// While it restarts the version stays READY on the other instance, and
	// requests keep succeeding.
	okAtKill := res.ok.Load()
	var after []int
	upTwo := `sluice_model_python_worker_up{model="batcher",version="1"} 2`
	pyWait(t, "worker restarted", 60*time.Second, func() bool {
		after = pyWorkers(t, s, "batcher")
		_, _, m := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
		return len(after) == 2 && !slices.Contains(after, victim) && strings.Contains(string(m), upTwo)
	})
	for _, e := range repoIndex(t, base) {
		if e.Name == "batcher" && (e.State != "READY" || e.Reason != "") {
			t.Errorf("index entry after the restart = %+v, want READY with no reason", e)
		}
	}
	okAtRestart := res.ok.Load()
	pyWait(t, "requests after the restart", 30*time.Second, func() bool { return res.ok.Load() > okAtRestart+50 })
	close(stop)
	wait()
	failures := res.failed()
	t.Logf("%d answers (%d between the kill and the restart), %d failures %v", res.ok.Load(), okAtRestart-okAtKill, len(failures), failures)
	// Only the requests in flight on the killed worker fail: the one call
	// its instance had sent it, of up to max_batch_size requests.
	if len(failures) > 8 {
		t.Errorf("%d requests failed, want only those in flight on the killed worker", len(failures))
	}
	for _, f := range failures {
		if f != "503 worker_crashed" {
			t.Errorf("failure %q, want 503 worker_crashed", f)
		}
	}
	if okAtRestart == okAtKill {
		t.Errorf("no request succeeded while the worker restarted")
	}
	code, _, body := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `sluice_model_python_worker_restarts_total{model="batcher",version="1"} 1`) ||
		!strings.Contains(string(body), upTwo) {
		t.Errorf("metrics lack the restart and the two workers up:\n%s", grepLines(string(body), "python_worker"))
	}
	if !strings.Contains(s.logs.String(), "python worker died") {
		t.Errorf("no log line about the dead worker")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestPythonUnloadStopsWorkers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", pyRepo, "--model-control-mode", "explicit", "--load-model", "batcher", "--load-model", "add_sub_fp32")
	base := "http://" + s.http
	pids := pyWorkers(t, s, "batcher")
	other := pyWorkers(t, s, "add_sub_fp32")
	if len(pids) != 2 || len(other) != 1 {
		t.Fatalf("workers = %v and %v, want 2 and 1", pids, other)
	}
	code, _, body := do(t, http.MethodPost, base+"/v2/repository/models/batcher/unload", []byte(`{}`), nil)
	if code != http.StatusOK {
		t.Fatalf("unload = %d %s", code, body)
	}
	pyWait(t, "workers gone", 30*time.Second, func() bool { return pyGone(pids) })
	if got := pyWorkers(t, s, "add_sub_fp32"); !slices.Equal(got, other) {
		t.Errorf("add_sub_fp32 workers = %v after unloading batcher, want %v", got, other)
	}
	// And loading it again starts new ones.
	code, _, body = do(t, http.MethodPost, base+"/v2/repository/models/batcher/load", []byte(`{}`), nil)
	if code != http.StatusOK {
		t.Fatalf("load = %d %s", code, body)
	}
	if got := pyWorkers(t, s, "batcher"); len(got) != 2 {
		t.Errorf("workers after reload = %v, want 2", got)
	}
}

func TestPythonReloadUnderLoad(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	dir := filepath.Join(repo, "batcher")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoDir, pyRepo, "batcher"))); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(dir, "1", "model.py"))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "poll", "--repository-poll-secs", "1")
	base := "http://" + s.http
	old := pyWorkers(t, s, "batcher")
	var doubled, tripled atomic.Int64
	stop := make(chan struct{})
	res, wait := pyLoad(base, "batcher", 6, 20000, stop, func(v float64, body []byte) error {
		var r v2Response
		if err := json.Unmarshal(body, &r); err != nil {
			return err
		}
		for _, o := range r.Outputs {
			if o.Name != "OUTPUT0" {
				continue
			}
			switch {
			case len(o.Data) == 2 && o.Data[0] == 2*v && o.Data[1] == -2*v:
				doubled.Add(1)
			case len(o.Data) == 2 && o.Data[0] == 3*v && o.Data[1] == -3*v:
				tripled.Add(1)
			default:
				return fmt.Errorf("OUTPUT0 = %v for input %v", o.Data, v)
			}
		}
		return nil
	})
	pyWait(t, "load running", 30*time.Second, func() bool { return res.ok.Load() > 50 })
	// The new model.py triples instead of doubling. Written beside and
	// renamed, as a deploy would.
	changed := strings.Replace(string(src), "x * 2", "x * 3", 1)
	if changed == string(src) {
		t.Fatal("model.py no longer holds x * 2")
	}
	tmp := filepath.Join(dir, "model.py.tmp")
	if err := os.WriteFile(tmp, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "1", "model.py")); err != nil {
		t.Fatal(err)
	}
	pyWait(t, "new workers", 60*time.Second, func() bool {
		now := pyWorkers(t, s, "batcher")
		return len(now) == 2 && !slices.ContainsFunc(now, func(p int) bool { return slices.Contains(old, p) })
	})
	at := res.ok.Load()
	pyWait(t, "answers from the new model", 30*time.Second, func() bool { return res.ok.Load() > at+100 })
	close(stop)
	wait()
	failures := res.failed()
	t.Logf("%d answers, %d failures, old workers %v gone: %v", res.ok.Load(), len(failures), old, pyGone(old))
	if len(failures) > 0 {
		t.Fatalf("%d requests failed during the reload; first: %s", len(failures), failures[0])
	}
	if !pyGone(old) {
		t.Errorf("the old version's workers %v are still running", old)
	}
	t.Logf("answers from the old model.py: %d, from the new: %d", doubled.Load(), tripled.Load())
	if doubled.Load() == 0 || tripled.Load() == 0 {
		t.Errorf("both model.py files should have answered")
	}
}

// A Python model sees each request's parameters, and the headers the
// forward patterns pick, as the JSON string request.parameters()
// returns, over HTTP and gRPC; the server's own parameters (priority,
// timeout, sequence_*) stay out. Its configuration comes from
// auto_complete_config: the model folder has no config.pbtxt. Modelled on
// qa/L0_parameters/parameters_test.py (test_http_parameter,
// test_grpc_parameter with test.sh's TEST_HEADER=test_headers flags).
func TestPythonRequestParameters(t *testing.T) {
	t.Parallel()
	// The backend's own test model (its folder holds broken models too:
	// only this one is loaded).
	s := startServerCmd(t, "model-server", "--model-repository", "internal/backend/python/testdata/models",
		"--model-control-mode", "explicit", "--load-model", "params",
		"--http-header-forward-pattern", "my_header.*", "--grpc-header-forward-pattern", "my_header.*")
	base := "http://" + s.http
	paramsOf := func(t *testing.T, raw string) map[string]any {
		t.Helper()
		var got map[string]any
		if err := json.Unmarshal([]byte(raw), &got); err != nil {
			t.Fatalf("parameters() = %q: %v", raw, err)
		}
		return got
	}

	t.Run("config from auto_complete_config", func(t *testing.T) {
		code, _, body := do(t, http.MethodGet, base+"/v2/models/params/config", nil, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"name":"INPUT0"`) || !strings.Contains(string(body), `"name":"PARAMS"`) ||
			!strings.Contains(string(body), `"max_batch_size":0`) {
			t.Errorf("config = %d %s", code, body)
		}
	})

	t.Run("HTTP", func(t *testing.T) {
		req := []byte(`{"parameters":{"key1":"value1","key2":2,"key3":123.123,"key4":true,"priority":0},
			"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":[1]}]}`)
		code, _, body := do(t, http.MethodPost, base+"/v2/models/params/infer", req,
			map[string]string{"Content-Type": "application/json", "my_header_1": "my_value_1", "other_header": "x"})
		if code != http.StatusOK {
			t.Fatalf("infer = %d %s", code, body)
		}
		outs := pyOutputs(t, body)
		got := paramsOf(t, fmt.Sprint(outs["PARAMS"][0]))
		want := map[string]any{"key1": "value1", "key2": 2.0, "key3": 123.123, "key4": true, "my_header_1": "my_value_1"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("parameters() = %v, want %v", got, want)
		}
	})

	t.Run("HTTP without parameters", func(t *testing.T) {
		code, body, err := pyInfer(t.Context(), http.DefaultClient, base, "params", []map[string]any{
			{"name": "INPUT0", "datatype": "FP32", "shape": []int{1}, "data": []float32{1}},
		})
		if err != nil || code != http.StatusOK {
			t.Fatalf("infer = %d %s %v", code, body, err)
		}
		if got := fmt.Sprint(pyOutputs(t, body)["PARAMS"][0]); got != "{}" {
			t.Errorf("parameters() = %s, want {}", got)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))
		ctx := metadata.AppendToOutgoingContext(t.Context(), "my_header_2", "my_value_2", "other_header", "x")
		resp, err := client.ModelInfer(ctx, &inferencepb.ModelInferRequest{
			ModelName: "params",
			Parameters: map[string]*inferencepb.InferParameter{
				"key1":    {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "value1"}},
				"key2":    {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: -2}},
				"key3":    {ParameterChoice: &inferencepb.InferParameter_DoubleParam{DoubleParam: 321.321}},
				"key4":    {ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: false}},
				"timeout": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 10_000_000}},
			},
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}, Contents: &inferencepb.InferTensorContents{Fp32Contents: []float32{1}}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		raw := resp.GetRawOutputContents()[0]
		if len(raw) < 4 {
			t.Fatalf("PARAMS = %q", raw)
		}
		got := paramsOf(t, string(raw[4:]))
		want := map[string]any{"key1": "value1", "key2": -2.0, "key3": 321.321, "key4": false, "my_header_2": "my_value_2"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("parameters() = %v, want %v", got, want)
		}
	})
}
