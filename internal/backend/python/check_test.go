package python

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/tier"
)

// torchTestdata is the integration tests' PyTorch models, written by
// scripts/make_torch_models.py.
var torchTestdata = filepath.Join("..", "..", "..", "test", "integration", "testdata")

// checkNeedTorch fails the test when Debian's python3-torch is missing: the
// PyTorch checks cannot run without it.
func checkNeedTorch(t *testing.T) {
	t.Helper()
	out, err := exec.Command(DefaultInterpreter, "-c", "import torch, numpy").CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot import torch and numpy (scripts/setup.sh installs python3-torch and python3-numpy): %v\n%s", DefaultInterpreter, err, out)
	}
}

func checkBackend(t *testing.T, opts Options) *Backend {
	t.Helper()
	b := New(opts, nil, nil)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	return b
}

func checkReadConfig(t *testing.T, modelDir string) *inferencepb.ModelConfig {
	t.Helper()
	path := filepath.Join(modelDir, "config.pbtxt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := modelconfig.Parse(path, data)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	modelconfig.ApplyDefaults(cfg, filepath.Base(modelDir))
	return cfg
}

func checkLocated(ps []backend.Problem) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s:%d:%d: %s", filepath.Base(p.File), p.Line, p.Col, p.Msg))
	}
	return out
}

func TestCheckVersion(t *testing.T) {
	checkNeedTorch(t)
	b := checkBackend(t, Options{})
	noClass := t.TempDir()
	checkWriteFile(t, filepath.Join(noClass, "config.pbtxt"), `name: "noclass" backend: "python"
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]`)
	checkWriteFile(t, filepath.Join(noClass, "1", "model.py"), "class Model:\n    pass\n")
	refused := t.TempDir()
	checkWriteFile(t, filepath.Join(refused, "config.pbtxt"), `name: "refused" backend: "python"
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]`)
	checkWriteFile(t, filepath.Join(refused, "1", "model.py"), `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.load_model(model_name="other")

    def execute(self, requests):
        sender = requests[0].get_response_sender()
        r = pb_utils.InferenceRequest(model_name="m", requested_output_names=["y"], inputs=[]).exec()
        for x in pb_utils.InferenceRequest(model_name="m", inputs=[]).exec(decoupled=True):
            pass
        return [r]
`)

	tests := []struct {
		name  string
		dir   string
		check backend.VersionChecker
		want  []string // regexps, one per problem, in order
	}{
		{name: "torchscript", dir: filepath.Join(torchTestdata, "torch_models", "ts_addsub"), check: b.PyTorch()},
		{name: "state_dict", dir: filepath.Join(torchTestdata, "torch_models", "sd_mlp"), check: b.PyTorch()},
		{
			name: "syntax error", dir: filepath.Join(torchTestdata, "torch-broken-repo", "py_syntax"), check: b,
			want: []string{`^model\.py:9:34: syntax error: '\(' was never closed$`},
		},
		{
			name: "state_dict keys", dir: filepath.Join(torchTestdata, "torch-broken-repo", "sd_mismatch"), check: b.PyTorch(),
			want: []string{`^model\.py:6:1: class MLP's parameters do not match model\.pth: missing keys \[head\.weight, head\.bias\]; unexpected keys \[output\.weight, output\.bias\]$`},
		},
		{
			// The server refuses these when the model makes them; BLS's
			// exec(), also decoupled (Triton's bls_decoupled example), it
			// serves.
			name: "refused calls", dir: refused, check: b,
			want: []string{
				`^model\.py:6:9: the model loading API \(load_model\) is not supported`,
				`^model\.py:9:18: get_response_sender\(\) needs a decoupled model`,
			},
		},
		{
			name: "no TritonPythonModel", dir: noClass, check: b,
			want: []string{`^model\.py:1:1: defines no class TritonPythonModel`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			got := checkLocated(tt.check.CheckVersion(ctx, filepath.Join(tt.dir, "1"), checkReadConfig(t, tt.dir)))
			if len(got) != len(tt.want) {
				t.Fatalf("problems = %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, re := range tt.want {
				if !regexp.MustCompile(re).MatchString(got[i]) {
					t.Errorf("problem %d = %q, want it to match %q", i, got[i], re)
				}
			}
		})
	}
}

func TestCheckVersionWithoutInterpreter(t *testing.T) {
	b := checkBackend(t, Options{Interpreter: filepath.Join(t.TempDir(), "no-python")})
	dir := filepath.Join(torchTestdata, "torch_models", "sd_mlp")
	got := b.PyTorch().CheckVersion(t.Context(), filepath.Join(dir, "1"), checkReadConfig(t, dir))
	if len(got) != 1 || !strings.Contains(got[0].Msg, "no-python") || !strings.Contains(got[0].Msg, "python3-torch") {
		t.Fatalf("problems = %+v, want one naming the missing interpreter and python3-torch", got)
	}
}

// TestTorchBuiltins runs the Python tests of the built-in PyTorch models
// and of sluice_check.py (testdata/torch/test_builtins.py) with Debian's
// interpreter and torch.
func TestTorchBuiltins(t *testing.T) {
	tier.Skip(t, "drill") // a Python test suite: about 20 s of torch
	checkNeedTorch(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, DefaultInterpreter, "-B", "-m", "unittest", "discover", "-s", filepath.Join("testdata", "torch"), "-v")
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python tests failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\nOK") {
		t.Fatalf("python tests did not report OK:\n%s", out)
	}
}

func checkWriteFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
