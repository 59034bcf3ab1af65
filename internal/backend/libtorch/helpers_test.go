package libtorch

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math"
	"sync"
	"testing"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

func testLogger() (*slog.Logger, *harness.SyncBuffer) {
	logs := &harness.SyncBuffer{}
	return slog.New(slog.NewTextHandler(logs, nil)), logs
}

// fakeFallback stands in for the Python worker's pytorch backend: it
// records the loads it gets.
type fakeFallback struct {
	mu    sync.Mutex
	loads []string
}

type fakeInstance struct{}

func (fakeInstance) Execute(context.Context, []infer.Tensor, []string) ([]infer.Tensor, error) {
	return nil, nil
}
func (fakeInstance) Close() error { return nil }

func (f *fakeFallback) Name() string            { return "pytorch" }
func (f *fakeFallback) DefaultFilename() string { return "model.pt" }
func (f *fakeFallback) Signature(context.Context, string) (infer.Signature, error) {
	return infer.Signature{}, nil
}

func (f *fakeFallback) ConfigSignature(context.Context, string, *inferencepb.ModelConfig) (infer.Signature, error) {
	return infer.Signature{}, nil
}

func (f *fakeFallback) Load(_ context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads = append(f.loads, opts.Model)
	return fakeInstance{}, nil
}

func (f *fakeFallback) loaded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.loads...)
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

func f32Tensor(name string, shape infer.Shape, vals ...float32) infer.Tensor {
	return infer.Tensor{Name: name, DataType: infer.FP32, Shape: shape, Data: onnxgen.Float32s(vals...)}
}

func f32s(t infer.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}
