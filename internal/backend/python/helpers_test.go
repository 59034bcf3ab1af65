package python

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// logBuffer collects a backend's logs for assertions.
type logBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testBackend returns a backend with fast supervision settings, closed
// when the test ends, and its log.
func testBackend(t *testing.T, opts Options) (*Backend, *logBuffer) {
	t.Helper()
	if _, err := exec.LookPath(DefaultInterpreter); err != nil && opts.Interpreter == "" {
		t.Fatalf("%s is needed for these tests (scripts/setup.sh installs python3-numpy): %v", DefaultInterpreter, err)
	}
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := New(opts, logger, nil)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
		if t.Failed() {
			t.Logf("backend log:\n%s", logs)
		}
	})
	return b, logs
}

// testConfig parses a config.pbtxt text with defaults applied.
func testConfig(tb testing.TB, name, text string) *inferencepb.ModelConfig {
	tb.Helper()
	cfg, _, err := modelconfig.Parse(name+"/config.pbtxt", []byte(text))
	if err != nil {
		tb.Fatalf("parse config: %v", err)
	}
	modelconfig.ApplyDefaults(cfg, name)
	return cfg
}

// modelPath is a test model's model.py.
func modelPath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "models", name, "1", "model.py"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// copyModel copies a test model into a fresh repository folder and returns
// its model.py.
func copyModel(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(modelPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name, "1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "model.py")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadInstances loads count instances of one load of a model, closed when
// the test ends.
func loadInstances(t *testing.T, b *Backend, name, path string, cfg *inferencepb.ModelConfig, loadID uint64, count int) []*Instance {
	t.Helper()
	var out []*Instance
	for range count {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		in, err := b.Load(ctx, backend.LoadOptions{
			Model: name, Version: 1, Path: path, InstanceCount: count, Config: cfg, LoadID: loadID,
		})
		cancel()
		if err != nil {
			t.Fatalf("load %s: %v", name, err)
		}
		out = append(out, in.(*Instance))
		t.Cleanup(func() { _ = in.Close() })
	}
	return out
}

func f32Tensor(name string, shape infer.Shape, vals ...float32) infer.Tensor {
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return infer.Tensor{Name: name, DataType: infer.FP32, Shape: shape, Data: data}
}

func i32Tensor(name string, shape infer.Shape, vals ...int32) infer.Tensor {
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
	}
	return infer.Tensor{Name: name, DataType: infer.Int32, Shape: shape, Data: data}
}

func f32s(t *testing.T, tn infer.Tensor) []float32 {
	t.Helper()
	if tn.DataType != infer.FP32 {
		t.Fatalf("tensor %s is %s, want FP32", tn.Name, tn.DataType)
	}
	out := make([]float32, len(tn.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(tn.Data[4*i:]))
	}
	return out
}

func i32s(t *testing.T, tn infer.Tensor) []int32 {
	t.Helper()
	if tn.DataType != infer.Int32 {
		t.Fatalf("tensor %s is %s, want INT32", tn.Name, tn.DataType)
	}
	out := make([]int32, len(tn.Data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(tn.Data[4*i:]))
	}
	return out
}

func i64s(t *testing.T, tn infer.Tensor) []int64 {
	t.Helper()
	out := make([]int64, len(tn.Data)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(tn.Data[8*i:]))
	}
	return out
}

// reason returns an error's infer reason, or "".
func reason(err error) string {
	if ie, ok := errors.AsType[*apierr.Error](err); ok {
		return ie.Reason
	}
	return ""
}

// pidGone reports whether no process has pid any more (a zombie counts as
// gone only once reaped).
func pidGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	harness.WaitFor(t, d, 10*time.Millisecond, what, func() (bool, string) { return cond(), "not yet" })
}

// contains reports whether s contains every part.
func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func filepathAbs(rel string) (string, error) { return filepath.Abs(filepath.FromSlash(rel)) }

// loadBench loads one instance for a benchmark.
func loadBench(b *testing.B, bk *Backend, path string, cfg *inferencepb.ModelConfig) *Instance {
	b.Helper()
	in, err := bk.Load(b.Context(), backend.LoadOptions{Model: "bench", Version: 1, Path: path, Config: cfg, InstanceCount: 1, LoadID: 1})
	if err != nil {
		b.Fatal(err)
	}
	return in.(*Instance)
}
