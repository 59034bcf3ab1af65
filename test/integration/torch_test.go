package integration_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// torchReference is scripts/make_torch_models.py's record of PyTorch's
// outputs for the test models in testdata/torch_models.
type torchReference struct {
	TSAddSub struct {
		Inputs  map[string][][]float64 `json:"inputs"`
		Outputs map[string][][]float64 `json:"outputs"`
	} `json:"ts_addsub"`
	SDMLP struct {
		Commit       string                 `json:"commit"`
		OtherCommit  string                 `json:"other_commit"`
		Inputs       map[string][][]float64 `json:"inputs"`
		Outputs      map[string][][]float64 `json:"outputs"`
		OtherOutputs map[string][][]float64 `json:"other_outputs"`
	} `json:"sd_mlp"`
}

func loadTorchReference(t *testing.T) torchReference {
	t.Helper()
	var ref torchReference
	if err := json.Unmarshal(readFile(t, "test/integration/testdata/torch_reference.json"), &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// copyTorchRepo copies the PyTorch test models into a fresh repository,
// so tests can add versions.
func copyTorchRepo(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join(repoDir, "test/integration/testdata/torch_models")
	if out, err := exec.Command("cp", "-r", src+"/.", dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return dst
}

// copyVersion copies a folder of testdata/torch_extra (or any folder under
// the module root) into model/<version>.
func copyVersion(t *testing.T, from, repo, model, version string) {
	t.Helper()
	dst := filepath.Join(repo, model, version)
	if out, err := exec.Command("cp", "-r", filepath.Join(repoDir, from), dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
}

// inferRows sends FP32 inputs of shape [rows, cols] over HTTP/JSON and
// returns the response.
func inferRows(t *testing.T, base, model, version string, inputs map[string][][]float64) (int, v2Response, []byte) {
	t.Helper()
	type tensor struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int     `json:"shape"`
		Data     []float64 `json:"data"`
	}
	var body struct {
		Inputs []tensor `json:"inputs"`
	}
	for name, rows := range inputs {
		tn := tensor{Name: name, Datatype: "FP32", Shape: []int{len(rows), len(rows[0])}}
		for _, r := range rows {
			tn.Data = append(tn.Data, r...)
		}
		body.Inputs = append(body.Inputs, tn)
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	url := base + "/v2/models/" + model
	if version != "" {
		url += "/versions/" + version
	}
	code, _, resp := do(t, http.MethodPost, url+"/infer", b, nil)
	if code != http.StatusOK {
		return code, v2Response{}, resp
	}
	return code, decodeV2(t, resp), resp
}

// outputDiff is the largest |got - want| over the named outputs.
func outputDiff(t *testing.T, r v2Response, want map[string][][]float64) float64 {
	t.Helper()
	worst := 0.0
	for name, rows := range want {
		var flat []float64
		for _, row := range rows {
			flat = append(flat, row...)
		}
		found := false
		for _, o := range r.Outputs {
			if o.Name == name {
				found = true
				if len(o.Data) != len(flat) {
					t.Fatalf("output %s: %d values, want %d", name, len(o.Data), len(flat))
				}
				worst = max(worst, maxAbsDiff(o.Data, flat))
			}
		}
		if !found {
			t.Fatalf("output %s missing from %+v", name, r.Outputs)
		}
	}
	return worst
}

func TestTorchScriptModel(t *testing.T) {
	t.Parallel()
	ref := loadTorchReference(t)
	s := startServer(t, "--model-repository", copyTorchRepo(t), "--model-control-mode", "explicit", "--load-model", "ts_addsub")
	base := "http://" + s.http

	t.Run("http", func(t *testing.T) {
		code, r, raw := inferRows(t, base, "ts_addsub", "", ref.TSAddSub.Inputs)
		if code != http.StatusOK {
			t.Fatalf("infer = %d %s", code, raw)
		}
		if d := outputDiff(t, r, ref.TSAddSub.Outputs); d > 1e-6 {
			t.Errorf("max |sluice - pytorch| = %g", d)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))
		flat := func(rows [][]float64) []float32 {
			var out []float32
			for _, r := range rows {
				for _, v := range r {
					out = append(out, float32(v))
				}
			}
			return out
		}
		in := ref.TSAddSub.Inputs
		rows := int64(len(in["INPUT__0"]))
		resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName: "ts_addsub",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{rows, 4}, Contents: &inferencepb.InferTensorContents{Fp32Contents: flat(in["INPUT__0"])}},
				{Name: "INPUT__1", Datatype: "FP32", Shape: []int64{rows, 4}, Contents: &inferencepb.InferTensorContents{Fp32Contents: flat(in["INPUT__1"])}},
			},
			Outputs: []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT__1"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetOutputs()) != 1 || resp.GetOutputs()[0].GetName() != "OUTPUT__1" {
			t.Fatalf("outputs = %v, want only OUTPUT__1", resp.GetOutputs())
		}
		got := resp.GetRawOutputContents()
		want := flat(ref.TSAddSub.Outputs["OUTPUT__1"])
		if len(got) != 1 || len(got[0]) != 4*len(want) {
			t.Fatalf("raw output contents = %d buffers, want one of %d bytes", len(got), 4*len(want))
		}
		for i, w := range want {
			if g := float32FromLE(got[0][4*i:]); g != w {
				t.Fatalf("OUTPUT__1[%d] = %v, want %v", i, g, w)
			}
		}
	})

	t.Run("wrong datatype", func(t *testing.T) {
		body := `{"inputs":[{"name":"INPUT__0","datatype":"INT32","shape":[1,4],"data":[1,2,3,4]},` +
			`{"name":"INPUT__1","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}`
		code, _, resp := do(t, http.MethodPost, base+"/v2/models/ts_addsub/infer", []byte(body), nil)
		if code != http.StatusBadRequest {
			t.Fatalf("INT32 into an FP32 input = %d %s, want 400", code, resp)
		}
	})
}

// TestTorchScriptEngines: a TorchScript model answers the same in-process
// through libtorch (the shim make deps builds; without it this fails) and
// on the Python worker (the shim's path pointing nowhere), and the load log
// names the engine that runs it.
func TestTorchScriptEngines(t *testing.T) {
	t.Parallel()
	ref := loadTorchReference(t)
	for _, tc := range []struct {
		name, engine string
		args         []string
	}{
		{"in-process", "engine=libtorch", nil},
		{"python worker", "engine=python-worker", []string{"--backend-config", "pytorch,library=" + filepath.Join(t.TempDir(), "missing.so")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--model-repository", copyTorchRepo(t), "--model-control-mode", "explicit", "--load-model", "ts_addsub"}, tc.args...)
			s := startServer(t, args...)
			if tc.args == nil && strings.Contains(s.logs.String(), "run in the Python worker") {
				t.Fatalf("the server cannot run TorchScript in-process (make deps installs libtorch-dev and builds the shim); logs:\n%s", s.logs)
			}
			code, r, raw := inferRows(t, "http://"+s.http, "ts_addsub", "", ref.TSAddSub.Inputs)
			if code != http.StatusOK {
				t.Fatalf("infer = %d %s", code, raw)
			}
			if d := outputDiff(t, r, ref.TSAddSub.Outputs); d > 1e-6 {
				t.Errorf("max |sluice - pytorch| = %g", d)
			}
			if !strings.Contains(s.logs.String(), tc.engine) {
				t.Errorf("load log does not say %s; logs:\n%s", tc.engine, s.logs)
			}
		})
	}
}

// TestTorchBatchesSplitPerRequest: concurrent requests to a TorchScript
// model with dynamic batching reach the built-in as one execute(requests)
// call, run as one forward() and each caller gets its own rows back.
func TestTorchBatchesSplitPerRequest(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", copyTorchRepo(t), "--model-control-mode", "explicit", "--load-model", "ts_addsub")
	base := "http://" + s.http
	const clients, perClient, rounds = 16, 10, 5
	client := &http.Client{Timeout: 30 * time.Second}
	batched := func() bool {
		for _, b := range modelStats(t, base, "ts_addsub").ModelStats[0].BatchStats {
			if b.BatchSize > 1 && b.ComputeInfer.Count > 0 {
				return true
			}
		}
		return false
	}
	for round := 0; round < rounds && (round == 0 || !batched()); round++ {
		var wg sync.WaitGroup
		errs := make(chan string, clients*perClient)
		for c := range clients {
			wg.Go(func() {
				for i := range perClient {
					id := float64(1000*round + 100*c + i)
					body := `{"inputs":[{"name":"INPUT__0","datatype":"FP32","shape":[1,4],"data":[` +
						strings.Repeat(strconv.FormatFloat(id, 'f', -1, 64)+",", 3) + strconv.FormatFloat(id, 'f', -1, 64) + `]},` +
						`{"name":"INPUT__1","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}`
					resp, err := client.Post(base+"/v2/models/ts_addsub/infer", "application/json", strings.NewReader(body))
					if err != nil {
						errs <- err.Error()
						continue
					}
					var r v2Response
					err = json.NewDecoder(resp.Body).Decode(&r)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || err != nil {
						errs <- fmt.Sprintf("infer = %d, decode %v", resp.StatusCode, err)
						continue
					}
					for _, o := range r.Outputs {
						want := []float64{id + 1, id + 2, id + 3, id + 4}
						if o.Name == "OUTPUT__1" {
							want = []float64{id - 1, id - 2, id - 3, id - 4}
						}
						if maxAbsDiff(o.Data, want) != 0 {
							errs <- fmt.Sprintf("%s for input %v = %v, want %v", o.Name, id, o.Data, want)
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
		if t.Failed() {
			t.FailNow()
		}
	}
	if !batched() {
		t.Fatalf("no batch larger than 1 after %d rounds of %d concurrent clients: %+v", rounds, clients, modelStats(t, base, "ts_addsub"))
	}
}

// TestTorchExampleModels serves the example repository's PyTorch copies of
// parcel_eta (TorchScript and state_dict) and compares them with PyTorch.
func TestTorchExampleModels(t *testing.T) {
	t.Parallel()
	var ref reference
	if err := json.Unmarshal(readFile(t, "examples/reference/parcel_eta_torch.json"), &ref); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"inputs": ref.Inputs})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--model-repository", "examples/models", "--model-control-mode", "explicit",
		"--load-model", "parcel_eta_ts", "--load-model", "parcel_eta_torch")
	for _, model := range []string{"parcel_eta_ts", "parcel_eta_torch"} {
		t.Run(model, func(t *testing.T) {
			code, _, resp := do(t, http.MethodPost, "http://"+s.http+"/v2/models/"+model+"/infer", body, nil)
			if code != http.StatusOK {
				t.Fatalf("infer = %d %s", code, resp)
			}
			if d := matchReference(t, ref, decodeV2(t, resp)); d > 1e-5 {
				t.Errorf("max |sluice - pytorch| = %g, want <= 1e-5", d)
			}
		})
	}
}

// TestTorchStateDictCommitPin: with the expected commit pinned, the
// matching version loads and serves; a new version from another commit is
// refused with model_git_mismatch and the old version keeps serving.
func TestTorchStateDictCommitPin(t *testing.T) {
	t.Parallel()
	ref := loadTorchReference(t)
	repo := copyTorchRepo(t)
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "sd_mlp",
		"--model-git-commit", "sd_mlp="+ref.SDMLP.Commit)
	base := "http://" + s.http

	code, r, raw := inferRows(t, base, "sd_mlp", "", ref.SDMLP.Inputs)
	if code != http.StatusOK {
		t.Fatalf("infer = %d %s", code, raw)
	}
	if r.ModelVersion != "1" || outputDiff(t, r, ref.SDMLP.Outputs) > 1e-6 {
		t.Fatalf("version %q answered %+v, want version 1 matching PyTorch", r.ModelVersion, r.Outputs)
	}

	copyVersion(t, "test/integration/testdata/torch_extra/sd_mlp_other_commit", repo, "sd_mlp", "2")
	code, _, resp := do(t, http.MethodPost, base+"/v2/repository/models/sd_mlp/load", nil, nil)
	if code == http.StatusOK {
		t.Fatalf("load of version 2 from commit %s succeeded: %s", ref.SDMLP.OtherCommit, resp)
	}
	var eb errorBody
	if err := json.Unmarshal(resp, &eb); err != nil {
		t.Fatalf("load error body %q: %v", resp, err)
	}
	if eb.Reason != "model_git_mismatch" || !strings.Contains(eb.Error, ref.SDMLP.OtherCommit) {
		t.Errorf("load error = %+v, want reason model_git_mismatch naming commit %s", eb, ref.SDMLP.OtherCommit)
	}

	code, r, raw = inferRows(t, base, "sd_mlp", "", ref.SDMLP.Inputs)
	if code != http.StatusOK {
		t.Fatalf("after the refused load, infer = %d %s", code, raw)
	}
	if r.ModelVersion != "1" || outputDiff(t, r, ref.SDMLP.Outputs) > 1e-6 {
		t.Fatalf("after the refused load, version %q answered %+v", r.ModelVersion, r.Outputs)
	}
	var v1Ready, v2Refused bool
	for _, e := range repoIndex(t, base) {
		if e.Name == "sd_mlp" && e.Version == "1" && e.State == "READY" {
			v1Ready = true
		}
		if e.Name == "sd_mlp" && e.Version == "2" && e.State != "READY" && strings.Contains(e.Reason, "model_git_mismatch") {
			v2Refused = true
		}
	}
	if !v1Ready || !v2Refused {
		t.Fatalf("index %+v: want sd_mlp v1 READY and v2 refused with model_git_mismatch", repoIndex(t, base))
	}
}

// TestTorchStateDictLoadsNewVersion: without a pin, a new version with new
// weights swaps in and answers with them.
func TestTorchStateDictLoadsNewVersion(t *testing.T) {
	t.Parallel()
	ref := loadTorchReference(t)
	repo := copyTorchRepo(t)
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "sd_mlp")
	base := "http://" + s.http
	copyVersion(t, "test/integration/testdata/torch_extra/sd_mlp_other_commit", repo, "sd_mlp", "2")
	if code, _, resp := do(t, http.MethodPost, base+"/v2/repository/models/sd_mlp/load", nil, nil); code != http.StatusOK {
		t.Fatalf("load version 2 = %d %s", code, resp)
	}
	code, r, raw := inferRows(t, base, "sd_mlp", "", ref.SDMLP.Inputs)
	if code != http.StatusOK {
		t.Fatalf("infer = %d %s", code, raw)
	}
	if r.ModelVersion != "2" || outputDiff(t, r, ref.SDMLP.OtherOutputs) > 1e-6 {
		t.Fatalf("version %q answered %+v, want version 2's weights", r.ModelVersion, r.Outputs)
	}
}

// TestTorchFullPickleRefused: a model.pth holding torch.save(model) is
// refused with a reason that says what to save instead; the old version
// keeps serving.
func TestTorchFullPickleRefused(t *testing.T) {
	t.Parallel()
	ref := loadTorchReference(t)
	repo := copyTorchRepo(t)
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "sd_mlp")
	base := "http://" + s.http
	copyVersion(t, "test/integration/testdata/torch_extra/sd_mlp_pickled", repo, "sd_mlp", "2")
	code, _, resp := do(t, http.MethodPost, base+"/v2/repository/models/sd_mlp/load", nil, nil)
	if code == http.StatusOK {
		t.Fatalf("load of a pickled model succeeded: %s", resp)
	}
	const want = "model.pth holds a pickled model object, not a state_dict: save model.state_dict()"
	var eb errorBody
	if err := json.Unmarshal(resp, &eb); err != nil || eb.Reason == "" || !strings.Contains(eb.Error, want) {
		t.Errorf("load error body %s: want a reason and an error containing %q", resp, want)
	}
	reasonShown := false
	for _, e := range repoIndex(t, base) {
		if e.Name == "sd_mlp" && e.Version == "2" && strings.Contains(e.Reason, want) {
			reasonShown = true
		}
	}
	if !reasonShown {
		t.Errorf("index %+v lacks version 2's reason %q", repoIndex(t, base), want)
	}
	code, r, raw := inferRows(t, base, "sd_mlp", "", ref.SDMLP.Inputs)
	if code != http.StatusOK || r.ModelVersion != "1" || outputDiff(t, r, ref.SDMLP.Outputs) > 1e-6 {
		t.Fatalf("after the refused load, infer = %d version %q %s", code, r.ModelVersion, raw)
	}
}

// TestRepoCheckPythonModels: `sluice repo check` accepts the PyTorch test
// models and reports a broken model.py and a state_dict that does not fit
// its class at file:line:col.
func TestRepoCheckPythonModels(t *testing.T) {
	t.Parallel()
	run := func(dir string) (string, int) {
		cmd := exec.Command(binPath, "repo", "check", "--backend-config", "onnxruntime,library="+ortLib, dir)
		cmd.Dir = repoDir
		out, err := cmd.CombinedOutput()
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := run("test/integration/testdata/torch_models"); code != 0 {
		t.Fatalf("repo check of the PyTorch test models exited %d:\n%s", code, out)
	}
	out, code := run("test/integration/testdata/torch-broken-repo")
	if code == 0 {
		t.Fatalf("repo check of the broken repository exited 0:\n%s", out)
	}
	for _, want := range []string{
		`(?m)^test/integration/testdata/torch-broken-repo/py_syntax/1/model\.py:9:34: syntax error: '\(' was never closed$`,
		`(?m)^test/integration/testdata/torch-broken-repo/sd_mismatch/1/model\.py:6:1: class MLP's parameters do not match model\.pth: ` +
			`missing keys \[head\.weight, head\.bias\]; unexpected keys \[output\.weight, output\.bias\]$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("repo check output lacks a line matching %s:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(repoDir, "test/integration/testdata/torch-broken-repo/py_syntax/1/__pycache__")); err == nil {
		t.Errorf("repo check left a __pycache__ in the model folder")
	}
}

// float32FromLE reads a little-endian FP32.
func float32FromLE(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
