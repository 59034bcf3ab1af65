package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// reference is a generator-recorded PyTorch input and output batch.
type reference struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	Inputs  []struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int64   `json:"shape"`
		Data     []float64 `json:"data"`
	} `json:"inputs"`
	Outputs []struct {
		Name  string    `json:"name"`
		Shape []int64   `json:"shape"`
		Data  []float64 `json:"data"`
	} `json:"outputs"`
}

func loadReference(t *testing.T, version string) (reference, []byte) {
	t.Helper()
	var ref reference
	if err := json.Unmarshal(readFile(t, "examples/reference/parcel_eta_v"+version+".json"), &ref); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"id": "ref-" + version, "inputs": ref.Inputs})
	if err != nil {
		t.Fatal(err)
	}
	return ref, body
}

// matchReference returns the largest absolute difference between a response
// and the reference outputs.
func matchReference(t *testing.T, ref reference, r v2Response) float64 {
	t.Helper()
	worst := 0.0
	for _, want := range ref.Outputs {
		found := false
		for _, got := range r.Outputs {
			if got.Name == want.Name {
				found = true
				if len(got.Data) != len(want.Data) {
					t.Fatalf("output %s: %d values, want %d", want.Name, len(got.Data), len(want.Data))
				}
				worst = max(worst, maxAbsDiff(got.Data, want.Data))
			}
		}
		if !found {
			t.Fatalf("output %s missing", want.Name)
		}
	}
	return worst
}

// setVersionPolicy loads model with its served config but the given
// version_policy JSON, through the repository API.
func setVersionPolicy(t *testing.T, base, model string, policy any) (int, []byte) {
	t.Helper()
	code, _, body := do(t, http.MethodGet, base+"/v2/models/"+model+"/config", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET config = %d %s", code, body)
	}
	var cfg map[string]any
	if err := json.Unmarshal(body, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["version_policy"] = policy
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := json.Marshal(map[string]any{"parameters": map[string]any{"config": string(cfgJSON)}})
	if err != nil {
		t.Fatal(err)
	}
	code, _, body = do(t, http.MethodPost, base+"/v2/repository/models/"+model+"/load", req, nil)
	return code, body
}

func TestParcelETAMatchesPyTorch(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", "examples/models", "--model-control-mode", "explicit", "--load-model", "*")
	base := "http://" + s.http
	if code, body := setVersionPolicy(t, base, "parcel_eta", map[string]any{"all": map[string]any{}}); code != http.StatusOK {
		t.Fatalf("load parcel_eta with all versions = %d %s", code, body)
	}
	for _, v := range []string{"1", "2"} {
		ref, body := loadReference(t, v)
		code, _, resp := do(t, http.MethodPost, base+"/v2/models/parcel_eta/versions/"+v+"/infer", body, nil)
		if code != http.StatusOK {
			t.Fatalf("v%s infer = %d %s", v, code, resp)
		}
		r := decodeV2(t, resp)
		if r.ModelVersion != v {
			t.Errorf("model_version = %q, want %q", r.ModelVersion, v)
		}
		if d := matchReference(t, ref, r); d > 1e-5 {
			t.Errorf("v%s: max |sluice - pytorch| = %g, want <= 1e-5", v, d)
		}
	}
	// The two versions really differ, so the comparison above means something.
	r1, _ := loadReference(t, "1")
	r2, _ := loadReference(t, "2")
	if maxAbsDiff(r1.Outputs[0].Data, r2.Outputs[0].Data) < 1e-3 {
		t.Fatal("reference outputs of v1 and v2 are the same; the reload tests could not tell versions apart")
	}
}

func TestDigitsAccuracyThroughServer(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", "examples/models")
	var set struct {
		Labels []int       `json:"labels"`
		Images [][]float64 `json:"images"`
	}
	if err := json.Unmarshal(readFile(t, "examples/reference/digits_test.json"), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Images) < 300 || len(set.Images) != len(set.Labels) {
		t.Fatalf("held-out set: %d images, %d labels", len(set.Images), len(set.Labels))
	}
	correct := 0
	const batch = 64
	for lo := 0; lo < len(set.Images); lo += batch {
		hi := min(lo+batch, len(set.Images))
		var flat []float64
		for _, img := range set.Images[lo:hi] {
			flat = append(flat, img...)
		}
		body, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{
			"name": "input", "datatype": "FP32", "shape": []int{hi - lo, 1, 8, 8}, "data": flat,
		}}})
		code, _, resp := do(t, http.MethodPost, "http://"+s.http+"/v2/models/digits/infer", body, nil)
		if code != http.StatusOK {
			t.Fatalf("infer = %d %s", code, resp)
		}
		logits := decodeV2(t, resp).Outputs[0].Data
		for i := range hi - lo {
			best := 0
			for c := range 10 {
				if logits[i*10+c] > logits[i*10+best] {
					best = c
				}
			}
			if best == set.Labels[lo+i] {
				correct++
			}
		}
	}
	acc := float64(correct) / float64(len(set.Labels))
	t.Logf("digits accuracy through the server: %.4f (%d/%d)", acc, correct, len(set.Labels))
	if acc < 0.95 {
		t.Fatalf("accuracy %.4f < 0.95", acc)
	}
}

// TestReloadUnderLoad swaps parcel_eta v2 -> v1 -> v2 -> v1 while 8 clients
// send requests without pause: no request may fail, and every answer must
// match exactly one version's reference outputs.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", "examples/models", "--model-control-mode", "explicit", "--load-model", "parcel_eta")
	base := "http://" + s.http
	refs := map[string]reference{}
	var body []byte
	for _, v := range []string{"1", "2"} {
		refs[v], _ = loadReference(t, v)
	}
	// Both references share their inputs (same seed), so one body serves both.
	_, body = loadReference(t, "2")
	var r1in, r2in []byte
	r1in, _ = json.Marshal(refs["1"].Inputs)
	r2in, _ = json.Marshal(refs["2"].Inputs)
	if string(r1in) != string(r2in) {
		t.Fatal("reference inputs of v1 and v2 differ; regenerate with scripts/make_models.py")
	}

	var (
		stop     atomic.Bool
		failures atomic.Int64
		seen     sync.Map // version -> count
		wg       sync.WaitGroup
		firstErr atomic.Value
	)
	// An idle connection per worker (the default keeps two): no
	// connection churn, which under a long load can use up the ephemeral
	// ports.
	const workers = 8
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = workers
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	deadline := time.Now().Add(60 * time.Second)
	for range workers {
		wg.Go(func() {
			for n := 0; n < 20000 && !stop.Load() && time.Now().Before(deadline); n++ {
				resp, err := client.Post(base+"/v2/models/parcel_eta/infer", "application/json", strings.NewReader(string(body)))
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				var r v2Response
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d, decode %v", resp.StatusCode, err))
					continue
				}
				ref, ok := refs[r.ModelVersion]
				if !ok || matchReference(t, ref, r) > 1e-5 {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, "answer of version "+r.ModelVersion+" does not match that version's outputs")
					continue
				}
				c, _ := seen.LoadOrStore(r.ModelVersion, new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
			}
		})
	}
	for _, v := range []int{1, 2, 1} {
		time.Sleep(400 * time.Millisecond)
		if code, b := setVersionPolicy(t, base, "parcel_eta", map[string]any{"specific": map[string]any{"versions": []int{v}}}); code != http.StatusOK {
			t.Errorf("swap to v%d = %d %s", v, code, b)
		}
	}
	time.Sleep(400 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	counts := map[string]int64{}
	seen.Range(func(k, v any) bool { counts[k.(string)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("answers by version: %v, failures: %d", counts, failures.Load())
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d requests failed during reloads; first: %v", f, firstErr.Load())
	}
	if counts["1"] == 0 || counts["2"] == 0 {
		t.Fatalf("answers by version %v: both versions should have served", counts)
	}
}

// copyRepo copies examples/models/parcel_eta into a fresh repository.
func copyRepo(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	cmd := exec.Command("cp", "-r", filepath.Join(repoDir, "examples/models/parcel_eta"), dst)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return dst
}

type indexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

func repoIndex(t *testing.T, base string) []indexEntry {
	t.Helper()
	code, _, body := do(t, http.MethodPost, base+"/v2/repository/index", []byte(`{}`), nil)
	if code != http.StatusOK {
		t.Fatalf("index = %d %s", code, body)
	}
	var idx []indexEntry
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestBrokenVersionKeepsOldServing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		break3     func(t *testing.T, model string)
		wantReason string // substring of v3's (or the model's) index reason
	}{
		{
			name: "corrupt model file",
			break3: func(t *testing.T, model string) {
				t.Helper()
				mustWrite(t, filepath.Join(model, "3", "model.onnx"), []byte("this is not an onnx model"))
			},
			wantReason: "model.onnx",
		},
		{
			name: "checksum mismatch",
			break3: func(t *testing.T, model string) {
				t.Helper()
				onnx, err := os.ReadFile(filepath.Join(model, "2", "model.onnx"))
				if err != nil {
					t.Fatal(err)
				}
				mustWrite(t, filepath.Join(model, "3", "model.onnx"), onnx)
				mustWrite(t, filepath.Join(model, "3", "SHA256SUMS"), []byte(strings.Repeat("ab", 32)+"  model.onnx\n"))
			},
			wantReason: "checksum",
		},
		{
			name: "bad config",
			break3: func(t *testing.T, model string) {
				t.Helper()
				onnx, err := os.ReadFile(filepath.Join(model, "2", "model.onnx"))
				if err != nil {
					t.Fatal(err)
				}
				mustWrite(t, filepath.Join(model, "3", "model.onnx"), onnx)
				cfg, err := os.ReadFile(filepath.Join(model, "config.pbtxt"))
				if err != nil {
					t.Fatal(err)
				}
				bad := strings.Replace(string(cfg), "dims: [ 128 ]", "dims: [ 127 ]", 1)
				bad = strings.Replace(bad, "dims: [128]", "dims: [127]", 1)
				if bad == string(cfg) {
					t.Fatalf("could not find user_features dims in config.pbtxt:\n%s", cfg)
				}
				mustWrite(t, filepath.Join(model, "config.pbtxt"), []byte(bad))
			},
			wantReason: "user_features",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			repo := copyRepo(t)
			model := filepath.Join(repo, "parcel_eta")
			s := startServer(t, "--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "parcel_eta")
			base := "http://" + s.http
			ref, body := loadReference(t, "2")

			tc.break3(t, model)
			code, _, resp := do(t, http.MethodPost, base+"/v2/repository/models/parcel_eta/load", nil, nil)
			if code == http.StatusOK {
				t.Fatalf("load of broken v3 succeeded: %s", resp)
			}
			var eb errorBody
			if err := json.Unmarshal(resp, &eb); err != nil || eb.Reason == "" || eb.Error == "" {
				t.Errorf("load error body %q lacks error/reason", resp)
			}

			code, _, resp = do(t, http.MethodPost, base+"/v2/models/parcel_eta/infer", body, nil)
			if code != http.StatusOK {
				t.Fatalf("after failed load, infer = %d %s", code, resp)
			}
			r := decodeV2(t, resp)
			if r.ModelVersion != "2" || matchReference(t, ref, r) > 1e-5 {
				t.Fatalf("after failed load, answered by version %q", r.ModelVersion)
			}
			var v2Ready, reasonShown bool
			for _, e := range repoIndex(t, base) {
				if e.Name == "parcel_eta" && e.Version == "2" && e.State == "READY" {
					v2Ready = true
				}
				if e.Name == "parcel_eta" && e.State != "READY" && strings.Contains(e.Reason, tc.wantReason) {
					reasonShown = true
				}
			}
			if !v2Ready || !reasonShown {
				t.Fatalf("index %+v: want v2 READY and the failure's reason containing %q", repoIndex(t, base), tc.wantReason)
			}
		})
	}
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
