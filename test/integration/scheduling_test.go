package integration_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// statsBody is the statistics extension's answer.
type statsBody struct {
	ModelStats []struct {
		Name           string `json:"name"`
		Version        string `json:"version"`
		InferenceCount uint64 `json:"inference_count"`
		ExecutionCount uint64 `json:"execution_count"`
		InferenceStats map[string]struct {
			Count uint64 `json:"count"`
			Ns    uint64 `json:"ns"`
		} `json:"inference_stats"`
		BatchStats []struct {
			BatchSize    uint64 `json:"batch_size"`
			ComputeInfer struct {
				Count uint64 `json:"count"`
			} `json:"compute_infer"`
		} `json:"batch_stats"`
	} `json:"model_stats"`
}

func modelStats(t *testing.T, base, model string) statsBody {
	t.Helper()
	code, _, body := do(t, http.MethodGet, base+"/v2/models/"+model+"/versions/1/stats", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("stats of %s = %d %s", model, code, body)
	}
	var st statsBody
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.ModelStats) != 1 {
		t.Fatalf("stats of %s: %s", model, body)
	}
	return st
}

// copyModel copies examples/models/<name> into repo and appends extra to
// its config.pbtxt.
func copyModel(t *testing.T, repo, name, extra string) {
	t.Helper()
	cmd := exec.Command("cp", "-r", filepath.Join(repoDir, "examples/models", name), repo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	cfg := filepath.Join(repo, name, "config.pbtxt")
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, cfg, append(data, []byte("\n"+extra+"\n")...))
}

func argmax(v []float64) int {
	best := 0
	for i := range v {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

// TestEnsembleDigitsPipeline sends the held-out digits as raw 0..16 pixels
// to the digits_pipeline ensemble (digits_preprocess, then digits) and
// checks it predicts what digits predicts on the scaled images.
func TestEnsembleDigitsPipeline(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", "examples/models")
	base := "http://" + s.http
	var set struct {
		Labels []int       `json:"labels"`
		Images [][]float64 `json:"images"`
	}
	if err := json.Unmarshal(readFile(t, "examples/reference/digits_test.json"), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Images) < 300 {
		t.Fatalf("held-out set has %d images", len(set.Images))
	}
	infer := func(model string, input map[string]any) []float64 {
		body, _ := json.Marshal(map[string]any{"inputs": []any{input}})
		code, _, resp := do(t, http.MethodPost, base+"/v2/models/"+model+"/infer", body, nil)
		if code != http.StatusOK {
			t.Fatalf("infer %s = %d %s", model, code, resp)
		}
		r := decodeV2(t, resp)
		if len(r.Outputs) != 1 || r.Outputs[0].Name != "logits" || r.Outputs[0].Datatype != "FP32" {
			t.Fatalf("infer %s: outputs %s", model, resp)
		}
		return r.Outputs[0].Data
	}
	const batch = 64
	correct, requests := 0, 0
	worst := 0.0
	for lo := 0; lo < len(set.Images); lo += batch {
		hi := min(lo+batch, len(set.Images))
		var pixels []int
		var scaled []float64
		for _, img := range set.Images[lo:hi] {
			for _, v := range img {
				p := int(math.Round(v * 16))
				if p < 0 || p > 16 || float64(p)/16 != v {
					t.Fatalf("image value %v is not a 0..16 pixel over 16", v)
				}
				pixels = append(pixels, p)
			}
			scaled = append(scaled, img...)
		}
		n := hi - lo
		viaEnsemble := infer("digits_pipeline", map[string]any{"name": "pixels", "datatype": "UINT8", "shape": []int{n, 64}, "data": pixels})
		direct := infer("digits", map[string]any{"name": "input", "datatype": "FP32", "shape": []int{n, 1, 8, 8}, "data": scaled})
		requests++
		if len(viaEnsemble) != n*10 || len(direct) != n*10 {
			t.Fatalf("logits: %d via the ensemble, %d direct, want %d", len(viaEnsemble), len(direct), n*10)
		}
		for i := range n {
			e, d := argmax(viaEnsemble[i*10:(i+1)*10]), argmax(direct[i*10:(i+1)*10])
			if e != d {
				t.Fatalf("image %d: the ensemble predicts %d, digits %d", lo+i, e, d)
			}
			if e == set.Labels[lo+i] {
				correct++
			}
		}
		worst = max(worst, maxAbsDiff(viaEnsemble, direct))
	}
	acc := float64(correct) / float64(len(set.Labels))
	t.Logf("digits_pipeline accuracy: %.4f (%d/%d), largest logit difference to digits: %g", acc, correct, len(set.Labels), worst)
	if acc < 0.95 {
		t.Fatalf("accuracy %.4f < 0.95", acc)
	}
	if worst > 1e-5 {
		t.Errorf("logits via the ensemble differ from digits' by %g", worst)
	}

	// The example request works as shipped.
	code, _, body := do(t, http.MethodPost, base+"/v2/models/digits_pipeline/infer", readFile(t, "examples/requests/digits_pipeline.json"), nil)
	if code != http.StatusOK {
		t.Fatalf("examples/requests/digits_pipeline.json = %d %s", code, body)
	}
	if got := argmax(decodeV2(t, body).Outputs[0].Data); got != set.Labels[0] {
		t.Errorf("examples/requests/digits_pipeline.json predicts %d, label %d", got, set.Labels[0])
	}
	requests++

	st := modelStats(t, base, "digits_pipeline").ModelStats[0]
	if st.InferenceStats["success"].Count != uint64(requests) {
		t.Errorf("digits_pipeline success count %d, want %d", st.InferenceStats["success"].Count, requests)
	}
	if pre := modelStats(t, base, "digits_preprocess").ModelStats[0]; pre.InferenceCount != uint64(len(set.Images)+1) {
		t.Errorf("digits_preprocess inference_count %d, want %d (every image went through it)", pre.InferenceCount, len(set.Images)+1)
	}

	// Bad input is refused with the ensemble's own validation.
	code, _, body = do(t, http.MethodPost, base+"/v2/models/digits_pipeline/infer",
		[]byte(`{"inputs":[{"name":"pixels","datatype":"FP32","shape":[1,64],"data":`+zeros(64)+`}]}`), nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "invalid_datatype") {
		t.Errorf("FP32 pixels = %d %s, want 400 invalid_datatype", code, body)
	}
}

// TestResponseCacheSkipsExecution sends the same request twice to a model
// with response_cache enabled: the second is answered from the cache, which
// the statistics show.
func TestResponseCacheSkipsExecution(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	copyModel(t, repo, "simple", "response_cache { enable: true }")
	s := startServer(t, "--model-repository", repo, "--cache-size", "1048576")
	base := "http://" + s.http
	var outputs []string
	for range 2 {
		code, _, body := do(t, http.MethodPost, base+"/v2/models/simple/infer", readFile(t, "examples/requests/simple.json"), nil)
		if code != http.StatusOK {
			t.Fatalf("infer = %d %s", code, body)
		}
		r := decodeV2(t, body)
		b, _ := json.Marshal(r.Outputs)
		outputs = append(outputs, string(b))
	}
	if outputs[0] != outputs[1] {
		t.Errorf("the cached answer differs:\n%s\n%s", outputs[0], outputs[1])
	}
	st := modelStats(t, base, "simple").ModelStats[0]
	is := st.InferenceStats
	if is["cache_hit"].Count != 1 || is["cache_miss"].Count != 1 {
		t.Errorf("cache_hit %+v, cache_miss %+v; want one each", is["cache_hit"], is["cache_miss"])
	}
	if st.ExecutionCount != 1 || st.InferenceCount != 1 {
		t.Errorf("execution_count %d, inference_count %d; want 1 and 1 (the hit executed nothing)", st.ExecutionCount, st.InferenceCount)
	}
	if is["success"].Count != 2 || is["compute_infer"].Count != 1 {
		t.Errorf("success %d, compute_infer %d; want 2 and 1", is["success"].Count, is["compute_infer"].Count)
	}
	code, _, body := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("metrics = %d", code)
	}
	for _, want := range []string{
		`sluice_model_cache_hits_total{model="simple",version="1"} 1`,
		`sluice_model_cache_misses_total{model="simple",version="1"} 1`,
		`sluice_cache_evictions_total 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(string(body), "\nsluice_cache_bytes ") || strings.Contains(string(body), "\nsluice_cache_bytes 0\n") {
		t.Errorf("/metrics should show a non-zero sluice_cache_bytes")
	}
}

// TestStatisticsAddUp sends requests of batch sizes 1 to 3 at once to a
// model with dynamic batching and checks Triton's counters agree.
func TestStatisticsAddUp(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	copyModel(t, repo, "simple", "dynamic_batching { max_queue_delay_microseconds: 50000 }")
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http

	const clients = 24
	want := uint64(0)
	var wg sync.WaitGroup
	errs := make(chan string, clients)
	client := &http.Client{}
	for i := range clients {
		n := i%3 + 1
		want += uint64(n)
		wg.Go(func() {
			var in0, in1 []int
			for j := range 16 * n {
				in0 = append(in0, i*100+j)
				in1 = append(in1, j)
			}
			body, _ := json.Marshal(map[string]any{"inputs": []any{
				map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{n, 16}, "data": in0},
				map[string]any{"name": "INPUT1", "datatype": "INT32", "shape": []int{n, 16}, "data": in1},
			}})
			resp, err := client.Post(base+"/v2/models/simple/infer", "application/json", strings.NewReader(string(body)))
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			var r v2Response
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
				errs <- fmt.Sprintf("status %d, decode %v", resp.StatusCode, err)
				return
			}
			for _, o := range r.Outputs {
				if o.Name != "OUTPUT0" {
					continue
				}
				for j, v := range o.Data {
					if int(v) != in0[j]+in1[j] {
						errs <- fmt.Sprintf("request %d: OUTPUT0[%d] = %v, want %d", i, j, v, in0[j]+in1[j])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	st := modelStats(t, base, "simple").ModelStats[0]
	var rows, execs uint64
	sizes := map[uint64]uint64{}
	for _, b := range st.BatchStats {
		rows += b.BatchSize * b.ComputeInfer.Count
		execs += b.ComputeInfer.Count
		sizes[b.BatchSize] = b.ComputeInfer.Count
	}
	t.Logf("inference_count %d, execution_count %d, executions by batch size %v", st.InferenceCount, st.ExecutionCount, sizes)
	if st.InferenceCount != want {
		t.Errorf("inference_count %d, want the sum of the batch sizes %d", st.InferenceCount, want)
	}
	if rows != want {
		t.Errorf("sum over batch_stats of batch_size × executions = %d, want %d", rows, want)
	}
	if st.ExecutionCount != execs {
		t.Errorf("execution_count %d, want the sum of batch_stats executions %d", st.ExecutionCount, execs)
	}
	if st.InferenceStats["success"].Count != clients || st.InferenceStats["queue"].Count != clients {
		t.Errorf("success %d, queue %d; want %d each", st.InferenceStats["success"].Count, st.InferenceStats["queue"].Count, clients)
	}
	if st.ExecutionCount >= clients {
		t.Errorf("execution_count %d: requests sent together should have been batched", st.ExecutionCount)
	}
}
