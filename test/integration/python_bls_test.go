package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonBLS serves a Python model that calls other models with
// Business Logic Scripting (the backend's own bls test model, written as
// Triton's bls example is) next to the Python add_sub model it calls, all
// real worker processes: exec() and async_exec() answer with the callee's
// outputs, the callee's statistics count the calls, an unknown callee
// comes back as the response's error, and a call to itself is refused
// instead of waiting for its own busy instance. Before, every BLS request
// failed with "not supported".
func TestPythonBLS(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	for dst, src := range map[string]string{
		"bls":          filepath.Join(repoDir, "internal/backend/python/testdata/models/bls"),
		"add_sub_fp32": filepath.Join(repoDir, pyRepo, "add_sub_fp32"),
	} {
		if err := os.CopyFS(filepath.Join(repo, dst), os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "--model-repository", repo)
	base := "http://" + s.http
	call := func(t *testing.T, model string, async bool) (int, []byte) {
		t.Helper()
		body := fmt.Sprintf(`{"parameters":{"async":%v},"inputs":[
			{"name":"MODEL_NAME","datatype":"BYTES","shape":[1],"data":[%q]},
			{"name":"INPUT0","datatype":"FP32","shape":[4],"data":[1,2,3,4]},
			{"name":"INPUT1","datatype":"FP32","shape":[4],"data":[10,20,30,40]}]}`, async, model)
		code, _, resp := do(t, http.MethodPost, base+"/v2/models/bls/infer", []byte(body), map[string]string{"Content-Type": "application/json"})
		return code, resp
	}
	for _, async := range []bool{false, true} {
		code, body := call(t, "add_sub_fp32", async)
		if code != http.StatusOK {
			t.Fatalf("async=%v: %d %s", async, code, body)
		}
		outs := pyOutputs(t, body)
		if got := fmt.Sprint(outs["OUTPUT0"], outs["OUTPUT1"]); got != "[11 22 33 44] [-9 -18 -27 -36]" {
			t.Errorf("async=%v: outputs %s", async, got)
		}
	}
	code, _, body := do(t, http.MethodGet, base+"/v2/models/add_sub_fp32/stats", nil, nil)
	var st struct {
		ModelStats []struct {
			InferenceCount int `json:"inference_count"`
		} `json:"model_stats"`
	}
	if err := json.Unmarshal(body, &st); code != http.StatusOK || err != nil || len(st.ModelStats) != 1 || st.ModelStats[0].InferenceCount != 3 {
		t.Errorf("callee stats = %d %s, want inference_count 3 (one exec, two async_exec)", code, body)
	}

	code, body = call(t, "nope", false)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "BLS: Request for unknown model: 'nope' is not found") {
		t.Errorf("unknown callee = %d %s", code, body)
	}
	code, body = call(t, "bls", false)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "to model 'bls' refused: it would wait for itself") {
		t.Errorf("self call = %d %s", code, body)
	}
}

// TestPythonCustomMetrics serves a Python model that defines a counter, a
// gauge and a histogram with pb_utils.MetricFamily (the backend's own
// custom_metrics test model) and reads them on the metrics port with the
// model's labels. Before, MetricFamily raised "not supported" at load.
func TestPythonCustomMetrics(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	if err := os.CopyFS(filepath.Join(repo, "custom_metrics"), os.DirFS(filepath.Join(repoDir, "internal/backend/python/testdata/models/custom_metrics"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "custom_metrics", "config.pbtxt"), []byte(`backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--model-repository", repo)
	for _, x := range []int{2, 20} {
		code, body, err := pyInfer(t.Context(), http.DefaultClient, "http://"+s.http, "custom_metrics", []map[string]any{
			{"name": "INPUT0", "datatype": "FP32", "shape": []int{1}, "data": []int{x}},
		})
		if err != nil || code != http.StatusOK {
			t.Fatalf("infer = %d %s %v", code, body, err)
		}
	}
	_, _, body := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
	// A first load runs no automatic warm-up (as Triton), so only the two
	// requests count.
	for _, want := range []string{
		`requests_seen{kind="test",model="custom_metrics",version="1"} 2`,
		`last_input{kind="test",model="custom_metrics",version="1"} 20`,
		`input_values_bucket{kind="test",model="custom_metrics",version="1",le="10"} 1`,
		`input_values_count{kind="test",model="custom_metrics",version="1"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestPythonBLSDecoupled serves a Python model that makes decoupled BLS
// requests (the backend's bls_decoupled test model, written as Triton's
// bls_decoupled example is) to the decoupled Python model square, all real
// worker processes: exec(decoupled=True) and two async_exec(decoupled=True)
// at once iterate over every response square sends, its final flag alone
// coming as a last response without outputs. Before, exec(decoupled=True)
// raised "not supported".
func TestPythonBLSDecoupled(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	for _, m := range []string{"bls_decoupled", "square"} {
		if err := os.CopyFS(filepath.Join(repo, m), os.DirFS(filepath.Join(repoDir, "internal/backend/python/testdata/models", m))); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "--model-repository", repo)
	for _, c := range []struct {
		model string
		n     int
		async bool
		code  int
		want  string // SUM RESPONSES EMPTY, or part of the error
	}{
		{"square", 4, false, http.StatusOK, "[16] [5] [1]"},
		{"square", 3, true, http.StatusOK, "[18] [8] [2]"},
		{"square", 0, false, http.StatusOK, "[0] [1] [1]"},
		{"nope", 1, false, http.StatusBadRequest, "BLS: Request for unknown model: 'nope' is not found (after 1 responses)"},
	} {
		body := fmt.Sprintf(`{"parameters":{"async":%v},"inputs":[
			{"name":"MODEL_NAME","datatype":"BYTES","shape":[1],"data":[%q]},
			{"name":"IN","datatype":"INT32","shape":[1],"data":[%d]}]}`, c.async, c.model, c.n)
		code, _, resp := do(t, http.MethodPost, "http://"+s.http+"/v2/models/bls_decoupled/infer", []byte(body), map[string]string{"Content-Type": "application/json"})
		got := string(resp)
		if code == http.StatusOK {
			outs := pyOutputs(t, resp)
			got = fmt.Sprint(outs["SUM"], outs["RESPONSES"], outs["EMPTY"])
		}
		if code != c.code || !strings.Contains(got, c.want) {
			t.Errorf("%s(%d) async=%v = %d %s, want %d %s", c.model, c.n, c.async, code, got, c.code, c.want)
		}
	}
}
