//go:build cgo

package onnxruntime

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

const examples = "../../../examples"

var shared struct {
	once sync.Once
	b    *Backend
	err  error
}

// testBackend returns the package's shared Backend. Without the ONNX
// Runtime library it fails: make deps installs it.
func testBackend(tb testing.TB) *Backend {
	tb.Helper()
	lib, err := FindLibrary("")
	if err != nil {
		tb.Fatal(err)
	}
	shared.once.Do(func() { shared.b, shared.err = New(Options{LibraryPath: lib}, nil) })
	require.NoError(tb, shared.err)
	return shared.b
}

func closeSharedBackend() error {
	if shared.b == nil {
		return nil
	}
	return shared.b.Close()
}

func modelPath(model string, version int) string {
	return filepath.Join(examples, "models", model, strconv.Itoa(version), "model.onnx")
}

func loadModel(tb testing.TB, path string, params map[string]string) *Instance {
	tb.Helper()
	b := testBackend(tb)
	model := filepath.Base(filepath.Dir(filepath.Dir(path)))
	if filepath.Base(filepath.Dir(path)) == "testdata" {
		model = filepath.Base(path)
	}
	inst, err := b.Load(tb.Context(), backend.LoadOptions{
		Model: model, Version: 1,
		Path: path, Parameters: params, InstanceCount: 1,
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, inst.Close()) })
	return inst.(*Instance)
}

func f32Tensor(name string, shape infer.Shape, vals []float32) infer.Tensor {
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return infer.Tensor{Name: name, DataType: infer.FP32, Shape: shape, Data: data}
}

func i32Tensor(name string, shape infer.Shape, vals []int32) infer.Tensor {
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
	}
	return infer.Tensor{Name: name, DataType: infer.Int32, Shape: shape, Data: data}
}

func f32s(tb testing.TB, t infer.Tensor) []float32 {
	tb.Helper()
	require.Equal(tb, infer.FP32, t.DataType, "tensor %s", t.Name)
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

func i32s(tb testing.TB, t infer.Tensor) []int32 {
	tb.Helper()
	require.Equal(tb, infer.Int32, t.DataType, "tensor %s", t.Name)
	out := make([]int32, len(t.Data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// refTensor is one tensor of a reference file in examples/reference.
type refTensor struct {
	Name     string      `json:"name"`
	Datatype string      `json:"datatype"`
	Shape    infer.Shape `json:"shape"`
	Data     []float64   `json:"data"`
}

func (r refTensor) f32() []float32 {
	out := make([]float32, len(r.Data))
	for i, v := range r.Data {
		out[i] = float32(v)
	}
	return out
}

type reference struct {
	Inputs  []refTensor `json:"inputs"`
	Outputs []refTensor `json:"outputs"`
}

func readJSON(tb testing.TB, path string, v any) {
	tb.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(tb, err)
	require.NoError(tb, json.Unmarshal(raw, v))
}

// randomETA builds parcel_eta inputs for a batch from a simple LCG.
func randomETA(batch int, seed uint32) []infer.Tensor {
	next := func() float32 {
		seed = seed*1664525 + 1013904223
		return float32(seed>>8)/float32(1<<24)*4 - 2
	}
	var out []infer.Tensor
	for _, in := range []struct {
		name string
		dim  int
	}{{"user_features", 128}, {"package_features", 64}, {"route_features", 32}} {
		vals := make([]float32, batch*in.dim)
		for i := range vals {
			vals[i] = next()
		}
		out = append(out, f32Tensor(in.name, infer.Shape{int64(batch), int64(in.dim)}, vals))
	}
	return out
}
