package python

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

var (
	_ backend.VersionChecker = (*Backend)(nil)
	_ backend.VersionChecker = (*PyTorch)(nil)
)

// checkScript is the worker folder's offline checker (see its docstring).
const checkScript = "sluice_check.py"

// checkTimeout bounds one version's check: importing torch, building the
// module and one warm-up batch.
const checkTimeout = 2 * time.Minute

// maxCheckOutput bounds what a check may print.
const maxCheckOutput = 1 << 20

// CheckVersion checks a Python-backend version offline: model.py compiles
// (a syntax error is reported at its line and column) and defines
// TritonPythonModel with an execute method. The file is parsed, not run.
func (b *Backend) CheckVersion(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) []backend.Problem {
	return b.check(ctx, "python", versionDir, cfg)
}

// CheckVersion checks a PyTorch version offline, in a Python subprocess:
// a TorchScript model.pt must load and its forward() fit the configured
// inputs; a state_dict version's model_config.json fields must be typed
// right, model.py must compile and define model_class, model.pth must be
// a state_dict whose keys and shapes match the class's parameters,
// input_shape must match the config and a warm-up batch's outputs the
// configured outputs. A folder holding neither format is left to
// ConfigSignature, which reports the missing files.
func (p *PyTorch) CheckVersion(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) []backend.Problem {
	t, err := pytorchTarget(versionDir, cfg.GetDefaultModelFilename())
	if err != nil {
		return nil
	}
	kind := "torchscript"
	if t.builtin == builtinStateDict {
		kind = "state_dict"
	}
	return p.b.check(ctx, kind, versionDir, cfg)
}

// checkRequest is sluice_check.py's input.
type checkRequest struct {
	Kind        string          `json:"kind"`
	VersionDir  string          `json:"version_dir"`
	ModelConfig json.RawMessage `json:"model_config"`
}

// checkAnswer is sluice_check.py's output.
type checkAnswer struct {
	Problems []struct {
		File string `json:"file"`
		Line int    `json:"line"`
		Col  int    `json:"col"`
		Msg  string `json:"msg"`
	} `json:"problems"`
}

// check runs sluice_check.py on one version folder.
func (b *Backend) check(ctx context.Context, kind, versionDir string, cfg *inferencepb.ModelConfig) []backend.Problem {
	fail := func(format string, args ...any) []backend.Problem {
		return []backend.Problem{{File: versionDir, Msg: fmt.Sprintf(format, args...)}}
	}
	if _, err := os.Stat(b.opts.Interpreter); err != nil {
		return fail("cannot check the model: python interpreter %s: %v (install python3, python3-numpy and, for PyTorch models, python3-torch)", b.opts.Interpreter, err)
	}
	cfgJSON, err := modelconfig.MarshalJSON(cfg)
	if err != nil {
		return fail("cannot check the model: %v", err)
	}
	var ans checkAnswer
	if err := b.runScript(ctx, checkScript, checkTimeout, checkRequest{Kind: kind, VersionDir: versionDir, ModelConfig: cfgJSON}, &ans); err != nil {
		return fail("check model: %v", err)
	}
	out := make([]backend.Problem, 0, len(ans.Problems))
	for _, p := range ans.Problems {
		out = append(out, backend.Problem{File: p.File, Line: p.Line, Col: p.Col, Msg: p.Msg})
	}
	return out
}

// runScript runs one of the worker folder's short-lived scripts (the
// checker, auto_complete_config) with req as JSON on its stdin, decodes
// its JSON answer into ans, and stops it after timeout.
func (b *Backend) runScript(ctx context.Context, script string, timeout time.Duration, req, ans any) error {
	dir, err := b.workerDir()
	if err != nil {
		return err
	}
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	//nolint:gosec // G204: the interpreter is the operator's backend setting
	cmd := exec.CommandContext(ctx, b.opts.Interpreter, "-B", filepath.Join(dir, script))
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = checkEnv(os.Environ())
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = maxCheckOutput, maxCheckOutput
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second // a grandchild holding the pipes must not hang the caller
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped after %s: %w", timeout, context.Cause(ctx))
		}
		return fmt.Errorf("%s exited: %w%s", script, err, lastLine(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), ans); err != nil {
		return fmt.Errorf("unreadable answer from %s: %w%s", script, err, lastLine(stderr.String()))
	}
	return nil
}

// checkEnv is the checker's environment: the server's, one torch thread
// (a check runs one small batch) and no bytecode files in model folders.
func checkEnv(base []string) []string {
	env := make([]string, 0, len(base)+2)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if k == "OMP_NUM_THREADS" || k == "PYTHONDONTWRITEBYTECODE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1")
}

// lastLine is ": <the last non-empty line of s>", or "".
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return ": " + l
	}
	return ""
}

// limitedBuffer keeps the first limit bytes written to it and drops the
// rest, so a runaway check cannot grow memory without bound.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (w *limitedBuffer) Write(p []byte) (int, error) {
	if room := w.limit - w.Len(); room > 0 {
		w.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
