package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
)

const addSubConfig = `
name: "add_sub"
backend: "python"
input [
  { name: "INPUT0" data_type: %[1]s dims: [ 4 ] },
  { name: "INPUT1" data_type: %[1]s dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: %[1]s dims: [ 4 ] },
  { name: "OUTPUT1" data_type: %[1]s dims: [ 4 ] }
]
`

const identityConfig = `
name: "identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
`

func TestAddSub(t *testing.T) {
	b, logs := testBackend(t, Options{})
	t.Run("FP32", func(t *testing.T) {
		cfg := testConfig(t, "add_sub", fmt.Sprintf(addSubConfig, "TYPE_FP32"))
		in := loadInstances(t, b, "add_sub", modelPath(t, "add_sub"), cfg, 1, 1)[0]
		outs, err := in.Execute(t.Context(), []infer.Tensor{
			f32Tensor("INPUT0", infer.Shape{4}, 1, 2, 3, 4.5),
			f32Tensor("INPUT1", infer.Shape{4}, 10, 20, 30, 0.25),
		}, []string{"OUTPUT1", "OUTPUT0"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := f32s(t, outs[0]), []float32{-9, -18, -27, 4.25}; !slices.Equal(got, want) {
			t.Errorf("OUTPUT1 = %v, want %v", got, want)
		}
		if got, want := f32s(t, outs[1]), []float32{11, 22, 33, 4.75}; !slices.Equal(got, want) {
			t.Errorf("OUTPUT0 = %v, want %v", got, want)
		}
		if outs[0].Name != "OUTPUT1" || !slices.Equal(outs[0].Shape, infer.Shape{4}) {
			t.Errorf("first output = %s %v, want OUTPUT1 [4]", outs[0].Name, outs[0].Shape)
		}
	})
	t.Run("INT32", func(t *testing.T) {
		cfg := testConfig(t, "add_sub", fmt.Sprintf(addSubConfig, "TYPE_INT32"))
		in := loadInstances(t, b, "add_sub", modelPath(t, "add_sub"), cfg, 2, 1)[0]
		outs, err := in.Execute(t.Context(), []infer.Tensor{
			i32Tensor("INPUT0", infer.Shape{4}, 1, 2, 3, -4),
			i32Tensor("INPUT1", infer.Shape{4}, 10, 20, 30, 40),
		}, []string{"OUTPUT0", "OUTPUT1"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := i32s(t, outs[0]), []int32{11, 22, 33, 36}; !slices.Equal(got, want) {
			t.Errorf("OUTPUT0 = %v, want %v", got, want)
		}
		if got, want := i32s(t, outs[1]), []int32{-9, -18, -27, -44}; !slices.Equal(got, want) {
			t.Errorf("OUTPUT1 = %v, want %v", got, want)
		}
		// Close calls finalize(), which logs through pb_utils.Logger.
		pid := in.PID()
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		if !pidGone(pid) {
			t.Errorf("worker %d still exists after Close", pid)
		}
		if !contains(logs.String(), "add_sub finalize add_sub_0_0") {
			t.Errorf("finalize() did not log through pb_utils.Logger; log:\n%s", logs)
		}
	})
}

func TestBytes(t *testing.T) {
	b, _ := testBackend(t, Options{})
	cfg := testConfig(t, "bytes_echo", `
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "LENGTH" data_type: TYPE_INT32 dims: [ -1 ] }
]`)
	in := loadInstances(t, b, "bytes_echo", modelPath(t, "bytes_echo"), cfg, 1, 1)[0]
	var data []byte
	elems := [][]byte{[]byte("hello"), {}, []byte("wörld\x00x")}
	for _, e := range elems {
		data = infer.AppendBytesElement(data, e)
	}
	outs, err := in.Execute(t.Context(), []infer.Tensor{{Name: "INPUT0", DataType: infer.Bytes, Shape: infer.Shape{3}, Data: data}}, []string{"OUTPUT0", "LENGTH"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := infer.SplitBytes(outs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"HELLO", "", strings.ToUpper("w") + "\xc3\xb6RLD\x00X"}
	if len(got) != len(want) {
		t.Fatalf("OUTPUT0 has %d elements, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("OUTPUT0[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	if l := i32s(t, outs[1]); !slices.Equal(l, []int32{5, 0, 8}) {
		t.Errorf("LENGTH = %v, want [5 0 8]", l)
	}
}

func TestRequestBoundaries(t *testing.T) {
	b, _ := testBackend(t, Options{})
	cfg := testConfig(t, "identity", identityConfig)
	in := loadInstances(t, b, "identity", modelPath(t, "identity"), cfg, 1, 1)[0]
	inputs := [][]infer.Tensor{
		{f32Tensor("INPUT0", infer.Shape{1, 2}, 1, 2)},
		{f32Tensor("INPUT0", infer.Shape{2, 2}, 3, 4, 5, 6)},
		{f32Tensor("INPUT0", infer.Shape{1, 2}, -2, 0)},
		{f32Tensor("INPUT0", infer.Shape{1, 2}, 7, 8)},
	}
	outputs := [][]string{{"OUTPUT0", "BATCH"}, {"BATCH"}, {"OUTPUT0"}, {"OUTPUT0"}}
	outs, errs := in.ExecuteRequests(t.Context(), inputs, outputs, nil)
	for i, err := range errs {
		if i == 2 {
			continue
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := f32s(t, outs[0][0]); !slices.Equal(got, []float32{1, 2}) {
		t.Errorf("request 0 OUTPUT0 = %v", got)
	}
	if got := i32s(t, outs[0][1]); !slices.Equal(got, []int32{4}) {
		t.Errorf("request 0 BATCH = %v, want [4]: the four requests share one execute() call", got)
	}
	if got := i32s(t, outs[1][0]); !slices.Equal(got, []int32{4, 4}) || !slices.Equal(outs[1][0].Shape, infer.Shape{2, 1}) {
		t.Errorf("request 1 BATCH = %v %v, want [4 4] of shape [2 1]", got, outs[1][0].Shape)
	}
	if got := f32s(t, outs[3][0]); !slices.Equal(got, []float32{7, 8}) {
		t.Errorf("request 3 OUTPUT0 = %v", got)
	}
	// The third request's TritonError is its own 400, not the batch's.
	var ie *apierr.Error
	if !errors.As(errs[2], &ie) || ie.Kind != apierr.KindInvalid || ie.Reason != ReasonModelError || ie.Msg != "negative two is not welcome" {
		t.Errorf("request 2 error = %#v, want KindInvalid model_error with the model's message", errs[2])
	}
}

func TestModelErrors(t *testing.T) {
	b, _ := testBackend(t, Options{})
	cfg := testConfig(t, "m", `
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]`)

	t.Run("execute raises", func(t *testing.T) {
		in := loadInstances(t, b, "raises", modelPath(t, "raises"), cfg, 1, 1)[0]
		_, errs := in.ExecuteRequests(t.Context(),
			[][]infer.Tensor{{f32Tensor("INPUT0", infer.Shape{1}, 1)}, {f32Tensor("INPUT0", infer.Shape{1}, 2)}},
			[][]string{{"OUTPUT0"}, {"OUTPUT0"}}, nil)
		for i, err := range errs {
			var ie *apierr.Error
			if !errors.As(err, &ie) || ie.Kind != apierr.KindInternal || ie.Reason != ReasonModelException ||
				!contains(ie.Msg, "ValueError: the model cannot do this", "model.py:6") {
				t.Errorf("request %d error = %v, want a model_exception naming the exception and model.py:6", i, err)
			}
		}
		// The worker survives an exception.
		if _, err := in.Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1}, 1)}, []string{"OUTPUT0"}); reason(err) != ReasonModelException {
			t.Errorf("second call: %v, want model_exception again", err)
		}
	})

	loadErr := func(t *testing.T, b *Backend, name, path string) error {
		t.Helper()
		_, err := b.Load(t.Context(), backend.LoadOptions{Model: name, Version: 1, Path: path, Config: cfg, InstanceCount: 1})
		if err == nil {
			t.Fatal("load succeeded")
		}
		return err
	}
	t.Run("syntax error", func(t *testing.T) {
		err := loadErr(t, b, "bad_syntax", modelPath(t, "bad_syntax"))
		if !contains(err.Error(), "SyntaxError", "model.py:5") {
			t.Errorf("error = %v, want the SyntaxError at model.py:5", err)
		}
	})
	t.Run("no TritonPythonModel", func(t *testing.T) {
		p := copyModel(t, "raises")
		if err := os.WriteFile(p, []byte("class Model:\n    pass\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := loadErr(t, b, "m", p); !contains(err.Error(), "defines no class TritonPythonModel") {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("missing model.py", func(t *testing.T) {
		err := loadErr(t, b, "m", filepath.Join(t.TempDir(), "1", "model.py"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error = %v, want it to wrap fs.ErrNotExist", err)
		}
	})
	t.Run("missing interpreter", func(t *testing.T) {
		nb, _ := testBackend(t, Options{Interpreter: filepath.Join(t.TempDir(), "python9")})
		if err := loadErr(t, nb, "add_sub", modelPath(t, "add_sub")); !contains(err.Error(), "python9", "python3-numpy") {
			t.Errorf("error = %v, want it to name the interpreter and the packages", err)
		}
	})
	t.Run("BLS without a server", func(t *testing.T) {
		p := copyModel(t, "raises")
		src := `import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        r = pb_utils.InferenceRequest(model_name="other", requested_output_names=["Y"], inputs=[])
        return [r.exec() for _ in requests]
`
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		in := loadInstances(t, b, "bls", p, cfg, 9, 1)[0]
		_, err := in.Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1}, 1)}, []string{"OUTPUT0"})
		// The response exec() returns carries the error, and the model
		// returns that response.
		if !contains(errString(err), "the server takes no BLS requests") {
			t.Errorf("error = %v, want the BLS response's error", err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestConfigSignature(t *testing.T) {
	b := New(Options{}, nil, nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.py"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, cfg, wantErr string
		want               infer.Signature
	}{
		{
			name: "batching with reshape",
			cfg: `max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]
output [ { name: "Y" data_type: TYPE_STRING dims: [ 2, -1 ] } ]`,
			want: infer.Signature{
				Inputs:  []infer.TensorSpec{{Name: "X", DataType: infer.FP32, Shape: infer.Shape{-1}}},
				Outputs: []infer.TensorSpec{{Name: "Y", DataType: infer.Bytes, Shape: infer.Shape{-1, 2, -1}}},
			},
		},
		{name: "no outputs", cfg: `input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]`, wantErr: "python models need input and output: in config.pbtxt"},
		{name: "decoupled", cfg: `input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }`, want: infer.Signature{
			Inputs:  []infer.TensorSpec{{Name: "X", DataType: infer.FP32, Shape: infer.Shape{1}}},
			Outputs: []infer.TensorSpec{{Name: "Y", DataType: infer.FP32, Shape: infer.Shape{1}}},
		}},
		{name: "bf16", cfg: `input [ { name: "X" data_type: TYPE_BF16 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]`, wantErr: "TYPE_BF16 is not supported"},
		// Triton's qa/python_models/sequence_int32: START and READY are
		// named only as control inputs; the model still gets them. A state
		// (qa/L0_implicit_state's models) is an input and an output. A
		// control the configuration also lists as an input is not added
		// twice.
		{name: "sequence controls and states", cfg: `max_batch_size: 2
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] },
    { name: "INPUT" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 3 ] } ]
}`, want: infer.Signature{
			Inputs: []infer.TensorSpec{
				{Name: "INPUT", DataType: infer.Int32, Shape: infer.Shape{-1, 1}},
				{Name: "START", DataType: infer.Int32, Shape: infer.Shape{-1, 1}},
				{Name: "READY", DataType: infer.FP32, Shape: infer.Shape{-1, 1}},
				{Name: "CORRID", DataType: infer.Bytes, Shape: infer.Shape{-1, 1}},
				{Name: "INPUT_STATE", DataType: infer.Int32, Shape: infer.Shape{-1, 3}},
			},
			Outputs: []infer.TensorSpec{
				{Name: "OUTPUT", DataType: infer.Int32, Shape: infer.Shape{-1, 1}},
				{Name: "OUTPUT_STATE", DataType: infer.Int32, Shape: infer.Shape{-1, 3}},
			},
		}},
		{name: "missing file", cfg: `default_model_filename: "other.py"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]`, wantErr: "other.py is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig, err := b.ConfigSignature(t.Context(), dir, testConfig(t, "m", tt.cfg))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(sig.Inputs, tt.want.Inputs, specEqual) || !slices.EqualFunc(sig.Outputs, tt.want.Outputs, specEqual) {
				t.Errorf("signature = %+v, want %+v", sig, tt.want)
			}
		})
	}
}

func specEqual(a, b infer.TensorSpec) bool {
	return a.Name == b.Name && a.DataType == b.DataType && slices.Equal(a.Shape, b.Shape)
}

func TestPyTorchTarget(t *testing.T) {
	touch := func(t *testing.T, dir string, names ...string) {
		t.Helper()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name       string
		files      []string
		configured string
		want       string
		wantErr    string
	}{
		{name: "torchscript", files: []string{"model.pt"}, want: builtinTorchScript},
		{name: "configured .pt", files: []string{"net.pt"}, configured: "net.pt", want: builtinTorchScript},
		{name: "state_dict", files: []string{"model.pth", "model_config.json", "model.py"}, want: builtinStateDict},
		{name: "state_dict without metadata", files: []string{"model.pth"}, wantErr: "no model_config.json"},
		{name: "nothing", files: []string{"model.onnx"}, wantErr: "holds no PyTorch model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			touch(t, dir, tt.files...)
			got, err := pytorchTarget(dir, tt.configured)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("error = %v, want %q wrapping fs.ErrNotExist", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.builtin != tt.want {
				t.Fatalf("target = %+v, %v; want builtin %s", got, err, tt.want)
			}
		})
	}
}

func TestCrashAndRestart(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, _ := testBackend(t, Options{RestartBackoff: 50 * time.Millisecond})
	b.m = newMetrics(reg)
	cfg := testConfig(t, "identity", identityConfig)
	ins := loadInstances(t, b, "identity", modelPath(t, "identity"), cfg, 7, 2)
	a, sib := ins[0], ins[1]
	pidA, pidB := a.PID(), sib.PID()
	row := func(v float32) []infer.Tensor { return []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1, 2}, v, v)} }
	names := []string{"OUTPUT0", "PID"}

	// A request in flight when its worker is killed gets worker_crashed.
	errc := make(chan error, 1)
	go func() {
		_, err := a.Execute(context.Background(), row(-3), names)
		errc <- err
	}()
	waitFor(t, "request in flight", 5*time.Second, func() bool { return a.current() != nil && a.current().unanswered.Load() == 1 })
	if err := syscall.Kill(pidA, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var ie *apierr.Error
	if !errors.As(err, &ie) || ie.Kind != apierr.KindUnavailable || ie.Reason != ReasonWorkerCrashed {
		t.Fatalf("in-flight request error = %v, want KindUnavailable worker_crashed", err)
	}
	if !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("error = %v, want it to say how the worker ended", err)
	}

	// Until it is back, the instance's requests run on its sibling.
	waitFor(t, "worker restarted", 30*time.Second, func() bool {
		outs, err := a.Execute(t.Context(), row(1), names)
		if err != nil {
			t.Fatalf("request during restart: %v", err)
		}
		pid := int(i64s(t, outs[1])[0])
		if pid != pidA && pid != pidB {
			return true
		}
		if pid == pidA {
			t.Fatalf("request ran on the killed worker %d", pidA)
		}
		return false
	})
	if !pidGone(pidA) {
		t.Errorf("killed worker %d was not reaped", pidA)
	}
	if got := testutil.ToFloat64(b.m.restarts.WithLabelValues("identity", "1")); got != 1 {
		t.Errorf("restarts = %v, want 1", got)
	}
	if got := testutil.ToFloat64(b.m.up.WithLabelValues("identity", "1")); got != 2 {
		t.Errorf("up = %v, want 2", got)
	}
	if r := a.Unhealthy(); r != "" {
		t.Errorf("Unhealthy() = %q after a restart", r)
	}

	// A model that kills its own worker: same error, and the next call works.
	if _, err := a.Execute(t.Context(), row(-1), names); reason(err) != ReasonWorkerCrashed {
		t.Errorf("self-kill: %v, want worker_crashed", err)
	}
	if _, err := a.Execute(t.Context(), row(2), names); err != nil {
		t.Errorf("after self-kill: %v", err)
	}
}

func TestCrashLoopStaysDown(t *testing.T) {
	b, logs := testBackend(t, Options{RestartBackoff: 10 * time.Millisecond, RestartLimit: 3})
	cfg := testConfig(t, "crash_init", `
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]`)
	p := copyModel(t, "crash_init")
	in := loadInstances(t, b, "crash_init", p, cfg, 1, 1)[0]
	pid := in.PID()
	if err := os.WriteFile(filepath.Join(filepath.Dir(p), "CRASH"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "instance down", 30*time.Second, func() bool { return in.Unhealthy() != "" })
	r := in.Unhealthy()
	if !contains(r, "died 3 times in a row", "exit status 3", "crash_init: refusing to start") {
		t.Errorf("reason = %q, want the count, the exit status and the last stderr line", r)
	}
	if !contains(logs.String(), "python worker stays down") {
		t.Errorf("no warning logged; log:\n%s", logs)
	}
	_, err := in.Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1}, 1)}, []string{"INPUT0"})
	if reason(err) != ReasonWorkerCrashed || !strings.Contains(err.Error(), "no python worker is up") {
		t.Errorf("request to a down instance: %v", err)
	}
	var hr backend.HealthReporter = in
	if hr.Unhealthy() == "" {
		t.Error("HealthReporter says healthy")
	}
}

func TestUnresponsiveWorkerIsKilled(t *testing.T) {
	b, logs := testBackend(t, Options{PingInterval: 50 * time.Millisecond, PingTimeout: 200 * time.Millisecond, RestartBackoff: 10 * time.Millisecond})
	cfg := testConfig(t, "identity", identityConfig)
	in := loadInstances(t, b, "identity", modelPath(t, "identity"), cfg, 1, 1)[0]
	pid := in.PID()

	// A call its caller gave up on keeps the worker busy (2 s here, ten
	// ping timeouts): busy is not unresponsive.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err := in.Execute(ctx, []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1, 2}, -3, -3)}, []string{"OUTPUT0"})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned call: %v, want the deadline", err)
	}
	if _, err := in.Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1, 2}, 1, 1)}, []string{"OUTPUT0"}); err != nil {
		t.Fatalf("call queued behind the abandoned one: %v", err)
	}
	if in.PID() != pid {
		t.Fatalf("the busy worker was replaced")
	}

	// A stopped process answers nothing, as a wedged one would.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "worker replaced", 30*time.Second, func() bool { p := in.PID(); return p != 0 && p != pid })
	if !pidGone(pid) {
		t.Errorf("stopped worker %d still exists", pid)
	}
	if !contains(logs.String(), "did not answer a ping") {
		t.Errorf("no log of the ping timeout; log:\n%s", logs)
	}
}

func TestCloseStopsWorkers(t *testing.T) {
	b, _ := testBackend(t, Options{FinalizeTimeout: 500 * time.Millisecond, KillTimeout: 500 * time.Millisecond})
	cfg := testConfig(t, "identity", identityConfig)
	ins := loadInstances(t, b, "identity", modelPath(t, "identity"), cfg, 1, 2)
	p := copyModel(t, "raises")
	// finalize() that hangs and ignores SIGTERM: SIGKILL ends it.
	src := `import signal, time
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return []
    def finalize(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
`
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ins = append(ins, loadInstances(t, b, "stubborn", p, testConfig(t, "stubborn", `
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]`), 2, 1)...)
	var pids []int
	for _, in := range ins {
		pids = append(pids, in.PID())
	}
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Go(func() {
			if err := in.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
	wg.Wait()
	for _, pid := range pids {
		if !pidGone(pid) {
			t.Errorf("worker %d still exists after Close", pid)
		}
	}
	if _, err := ins[0].Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1, 2}, 1, 1)}, []string{"OUTPUT0"}); reason(err) != ReasonWorkerCrashed {
		t.Errorf("execute after close: %v", err)
	}
}

func TestLargeTensors(t *testing.T) {
	b, _ := testBackend(t, Options{})
	cfg := testConfig(t, "identity", `
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] }
]`)
	in := loadInstances(t, b, "identity", modelPath(t, "identity"), cfg, 1, 1)[0]
	// 3 × 100,000 floats: sent from the caller's buffer on the Go side
	// and from numpy's memory on the Python side, not copied inline.
	const n = 100_000
	vals := make([]float32, 3*n)
	for i := range vals {
		vals[i] = float32(i%1000) + 0.5
	}
	outs, err := in.Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{3, n}, vals...)}, []string{"OUTPUT0", "BATCH"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f32s(t, outs[0]); !slices.Equal(got, vals) || !slices.Equal(outs[0].Shape, infer.Shape{3, n}) {
		t.Errorf("OUTPUT0 differs from INPUT0 (shape %v)", outs[0].Shape)
	}
	if _, err := in.Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1, 4}, 1, 2, 3, 4)}, []string{"OUTPUT0"}); err != nil {
		t.Errorf("small call after a large one: %v", err)
	}
}

// The scheduler hands Python instances batches of separate requests.
var _ batch.RequestExecutor = (*Instance)(nil)

// Each request of one execute() call sees its own parameters as the JSON
// string request.parameters() returns, and "{}" when it has none, as
// Triton's Python backend passes them (qa/L0_parameters/parameters_test.py
// test_http_parameter: string, integer, double and bool values).
func TestRequestParameters(t *testing.T) {
	b, _ := testBackend(t, Options{})
	cfg := testConfig(t, "params", `
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]`)
	in := loadInstances(t, b, "params", modelPath(t, "params"), cfg, 1, 1)[0]
	one := func() []infer.Tensor { return []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1}, 1)} }
	params := []infer.Parameters{
		{"key1": "value1", "key2": int64(2), "key3": 123.123, "key4": true, "my_header": `a "quoted" \ value`},
		nil,
		{"u": uint64(math.MaxUint64)},
	}
	outs, errs := in.ExecuteRequests(t.Context(), [][]infer.Tensor{one(), one(), one()},
		[][]string{{"PARAMS"}, {"PARAMS"}, {"PARAMS"}}, params)
	want := []map[string]any{
		{"key1": "value1", "key2": 2.0, "key3": 123.123, "key4": true, "my_header": `a "quoted" \ value`},
		{},
		{"u": float64(math.MaxUint64)},
	}
	for i := range want {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		elems, err := infer.SplitBytes(outs[i][0].Data)
		if err != nil || len(elems) != 1 {
			t.Fatalf("request %d: PARAMS %q: %v", i, outs[i][0].Data, err)
		}
		var got map[string]any
		if err := json.Unmarshal(elems[0], &got); err != nil {
			t.Fatalf("request %d: parameters() = %q is not JSON: %v", i, elems[0], err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("request %d: parameters() = %s, want %v", i, elems[0], want[i])
		}
	}
	// Execute (no parameters) still answers "{}".
	o, err := in.Execute(t.Context(), one(), []string{"PARAMS"})
	if err != nil {
		t.Fatal(err)
	}
	if elems, _ := infer.SplitBytes(o[0].Data); len(elems) != 1 || string(elems[0]) != "{}" {
		t.Errorf("Execute: parameters() = %q, want {}", o[0].Data)
	}
}

// An output of another data type than the configuration's is answered as
// the model returned it, as Triton does: Triton's bls_decoupled example
// sums into numpy's default int64 and returns that for its TYPE_INT32
// output SUM, and its client reads the sum. The first one is logged.
// Before, the request failed with invalid_model_output.
func TestOutputDataTypeAsReturned(t *testing.T) {
	b, logs := testBackend(t, Options{})
	dir := filepath.Join(t.TempDir(), "sum", "1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.py")
	if err := os.WriteFile(path, []byte(`import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            total = np.array([0])
            total += pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)]))
        return out
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "sum", `name: "sum" backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]`)
	in := loadInstances(t, b, "sum", path, cfg, 1, 1)[0]
	for range 2 {
		outs, err := in.Execute(t.Context(), []infer.Tensor{i32Tensor("IN", infer.Shape{1}, 16)}, []string{"SUM"})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0].DataType != infer.Int64 || fmt.Sprint(i64s(t, outs[0])) != "[16]" {
			t.Errorf("SUM = %s %v, want INT64 [16]", outs[0].DataType, outs[0].Shape)
		}
	}
	if n := strings.Count(logs.String(), "data type is not the configuration's"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs)
	}
}
