//go:build cgo

package libtorch

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/backend/python"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

const (
	examples      = "../../../examples/models"
	integrationTD = "../../../test/integration/testdata/torch_models"
)

func generatedModel(t *testing.T, name string) string {
	t.Helper()
	generated.once.Do(func() {
		generated.dir, generated.err = os.MkdirTemp("", "libtorch-test-") //nolint:usetesting // one folder for all tests (sync.Once); a t.TempDir goes with the first test
		if generated.err != nil {
			return
		}
		out, err := exec.Command(python.DefaultInterpreter, filepath.Join("testdata", "make_models.py"), generated.dir).CombinedOutput()
		if err != nil {
			generated.err = errors.New(string(out) + err.Error())
		}
	})
	if generated.err != nil {
		t.Fatalf("testdata/make_models.py (needs %s with python3-torch: scripts/setup.sh): %v", python.DefaultInterpreter, generated.err)
	}
	return filepath.Join(generated.dir, name, "1", "model.pt")
}

// shimBackend opens the shim library; without it the test fails (make
// deps builds it).
func shimBackend(t *testing.T, fallback backend.Backend) (*Backend, *harness.SyncBuffer) {
	t.Helper()
	logger, logs := testLogger()
	b := New(Options{}, fallback, logger)
	if ok, why := b.InProcess(); !ok {
		t.Fatalf("libtorch shim not available: %s (make deps installs libtorch-dev and runs scripts/build-torch-shim.sh)", why)
	}
	return b, logs
}

func readConfig(t *testing.T, modelDir string) *inferencepb.ModelConfig {
	t.Helper()
	return benchConfig(t, modelDir)
}

func benchConfig(tb testing.TB, modelDir string) *inferencepb.ModelConfig {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(modelDir, "config.pbtxt"))
	if err != nil {
		tb.Fatal(err)
	}
	return testConfig(tb, filepath.Base(modelDir), string(data))
}

func benchLoadOptions(cfg *inferencepb.ModelConfig) backend.LoadOptions {
	params := map[string]string{}
	for k, v := range cfg.GetParameters() {
		params[k] = v.GetStringValue()
	}
	return backend.LoadOptions{Model: cfg.GetName(), Version: 1, Config: cfg, Parameters: params, InstanceCount: 1}
}

func load(t *testing.T, b backend.Backend, name, path string, cfg *inferencepb.ModelConfig) backend.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	in, err := b.Load(ctx, backend.LoadOptions{Model: name, Version: 1, Path: path, Config: cfg, InstanceCount: 1, LoadID: 1})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	t.Cleanup(func() { _ = in.Close() })
	return in
}

func run(t *testing.T, in backend.Instance, inputs []infer.Tensor, outputs ...string) []infer.Tensor {
	t.Helper()
	out, err := in.Execute(t.Context(), inputs, outputs)
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	return out
}

// ramp is n float32 values from start in steps of step, as a tensor.
func ramp(name string, shape infer.Shape, start, step float32) infer.Tensor {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = start + step*float32(i%97)
	}
	return f32Tensor(name, shape, vals...)
}

// In-process libtorch answers what the Python worker answers, for the
// example TorchScript model (inputs by argument name, outputs by config
// order) and the integration tests' INPUT__0/OUTPUT__0 model. The
// worker gets the shim's bundled BLAS, as the server's newBackends gives
// it: the BLAS decides the last bits of a matrix product.
func TestInProcessMatchesPythonWorker(t *testing.T) {
	lib, err := FindLibrary("")
	if err != nil {
		t.Fatal(err)
	}
	var opts python.Options
	if dir := BundledBLAS(lib); dir != "" {
		opts.TorchLibraryDirs = []string{dir}
	}
	py := python.New(opts, nil, nil)
	t.Cleanup(func() { _ = py.Close() })
	b, logs := shimBackend(t, py.PyTorch())
	cases := []struct {
		dir     string
		inputs  []infer.Tensor
		outputs []string
	}{
		{
			dir: filepath.Join(examples, "parcel_eta_ts"),
			inputs: []infer.Tensor{
				ramp("user_features", infer.Shape{3, 128}, -1, 0.02),
				ramp("package_features", infer.Shape{3, 64}, 0.5, -0.01),
				ramp("route_features", infer.Shape{3, 32}, 2, 0.03),
			},
			outputs: []string{"eta_prediction", "confidence_score"},
		},
		{
			dir:     filepath.Join(integrationTD, "ts_addsub"),
			inputs:  []infer.Tensor{ramp("INPUT__0", infer.Shape{2, 4}, 1, 1), ramp("INPUT__1", infer.Shape{2, 4}, 0.5, 0.25)},
			outputs: []string{"OUTPUT__1", "OUTPUT__0"},
		},
	}
	for _, c := range cases {
		name := filepath.Base(c.dir)
		t.Run(name, func(t *testing.T) {
			cfg := readConfig(t, c.dir)
			path := filepath.Join(c.dir, "1", "model.pt")
			inProc := load(t, b, name, path, cfg)
			if _, ok := inProc.(*Instance); !ok {
				t.Fatalf("loaded a %T, want the in-process *Instance; log:\n%s", inProc, logs)
			}
			worker := load(t, py.PyTorch(), name, path, cfg)
			got := run(t, inProc, c.inputs, c.outputs...)
			want := run(t, worker, c.inputs, c.outputs...)
			for i := range want {
				if got[i].Name != want[i].Name || got[i].DataType != want[i].DataType || got[i].Shape.String() != want[i].Shape.String() {
					t.Fatalf("output %d = %s %s %s, worker's %s %s %s", i, got[i].Name, got[i].DataType, got[i].Shape, want[i].Name, want[i].DataType, want[i].Shape)
				}
				g, w := f32s(got[i]), f32s(want[i])
				for j := range w {
					if math.Abs(float64(g[j]-w[j])) > 1e-6 {
						t.Fatalf("%s[%d] = %v in-process, %v in the worker", got[i].Name, j, g[j], w[j])
					}
				}
			}
		})
	}
	if !strings.Contains(logs.String(), "engine=libtorch") {
		t.Errorf("load log does not say the models run in-process:\n%s", logs)
	}
}

// A batch's rows get what each row gets alone, and concurrent callers of
// one instance each get their own answer.
func TestBatchesAndConcurrentCallers(t *testing.T) {
	b, _ := shimBackend(t, &fakeFallback{})
	dir := filepath.Join(examples, "parcel_eta_ts")
	in := load(t, b, "parcel_eta_ts", filepath.Join(dir, "1", "model.pt"), readConfig(t, dir))
	const rows = 5
	inputs := []infer.Tensor{
		ramp("user_features", infer.Shape{rows, 128}, -1, 0.02),
		ramp("package_features", infer.Shape{rows, 64}, 0.5, -0.01),
		ramp("route_features", infer.Shape{rows, 32}, 2, 0.03),
	}
	batch := f32s(run(t, in, inputs, "eta_prediction")[0])
	if len(batch) != rows {
		t.Fatalf("batch of %d gave %d predictions", rows, len(batch))
	}
	row := func(r int) []infer.Tensor {
		out := make([]infer.Tensor, len(inputs))
		for i, x := range inputs {
			w := len(x.Data) / rows
			out[i] = infer.Tensor{Name: x.Name, DataType: x.DataType, Shape: infer.Shape{1, x.Shape[1]}, Data: x.Data[r*w : (r+1)*w]}
		}
		return out
	}
	var wg sync.WaitGroup
	errs := make(chan string, rows*8)
	for range 8 {
		for r := range rows {
			wg.Go(func() {
				out, err := in.Execute(t.Context(), row(r), []string{"eta_prediction"})
				if err != nil {
					errs <- err.Error()
					return
				}
				if got := f32s(out[0]); len(got) != 1 || math.Abs(float64(got[0]-batch[r])) > 1e-5 {
					errs <- "row " + string(rune('0'+r)) + ": alone differs from in a batch"
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func i64Tensor(name string, shape infer.Shape, vals ...int64) infer.Tensor {
	data := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(data[8*i:], uint64(v))
	}
	return infer.Tensor{Name: name, DataType: infer.Int64, Shape: shape, Data: data}
}

func f64Tensor(name string, shape infer.Shape, vals ...float64) infer.Tensor {
	data := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(v))
	}
	return infer.Tensor{Name: name, DataType: infer.FP64, Shape: shape, Data: data}
}

const namedConfig = `
platform: "pytorch_libtorch"
max_batch_size: 4
input [
  { name: "counts" data_type: TYPE_INT64 dims: [ 3 ] },
  { name: "scale" data_type: TYPE_FP64 dims: [ 2 ] }
]
output [
  { name: "doubled" data_type: TYPE_INT64 dims: [ 3 ] },
  { name: "total" data_type: TYPE_FP64 dims: [ 1 ] }
]
`

// Inputs go to forward()'s arguments by name whatever the config order,
// and INT64 and FP64 tensors cross unchanged.
func TestNamedArgumentsAndTypes(t *testing.T) {
	b, _ := shimBackend(t, &fakeFallback{})
	in := load(t, b, "named", generatedModel(t, "named"), testConfig(t, "named", namedConfig))
	out := run(t, in, []infer.Tensor{
		i64Tensor("counts", infer.Shape{2, 3}, 1, 2, 3, -4, 5, 1<<40),
		f64Tensor("scale", infer.Shape{2, 2}, 1, 3, 0.25, 0.75),
	}, "total", "doubled")
	if out[0].Name != "total" || out[0].Shape.String() != "[2,1]" || out[1].Shape.String() != "[2,3]" {
		t.Fatalf("outputs = %s %s, %s %s", out[0].Name, out[0].Shape, out[1].Name, out[1].Shape)
	}
	if got := []float64{math.Float64frombits(binary.LittleEndian.Uint64(out[0].Data)), math.Float64frombits(binary.LittleEndian.Uint64(out[0].Data[8:]))}; got[0] != 2 || got[1] != 0.5 {
		t.Errorf("total = %v, want [2 0.5]", got)
	}
	want := []int64{2, 4, 6, -8, 10, 1 << 41}
	for i, w := range want {
		if g := int64(binary.LittleEndian.Uint64(out[1].Data[8*i:])); g != w {
			t.Errorf("doubled[%d] = %d, want %d", i, g, w)
		}
	}
}

// Bad requests get the reason codes clients rely on.
func TestBadInputs(t *testing.T) {
	b, _ := shimBackend(t, &fakeFallback{})
	named := load(t, b, "named", generatedModel(t, "named"), testConfig(t, "named", namedConfig))
	picky := load(t, b, "picky", generatedModel(t, "picky"), testConfig(t, "picky", oneInputConfig))
	wrongOut := load(t, b, "named_fp32", generatedModel(t, "named"), testConfig(t, "named_fp32",
		strings.Replace(namedConfig, `name: "doubled" data_type: TYPE_INT64`, `name: "doubled" data_type: TYPE_FP32`, 1)))
	counts := i64Tensor("counts", infer.Shape{1, 3}, 1, 2, 3)
	scale := f64Tensor("scale", infer.Shape{1, 2}, 1, 2)
	short := scale
	short.Data = short.Data[:8]
	tests := []struct {
		name    string
		in      backend.Instance
		inputs  []infer.Tensor
		outputs []string
		kind    apierr.Kind
		reason  string
		msg     string
	}{
		{"datatype", named, []infer.Tensor{counts, f32Tensor("scale", infer.Shape{1, 2}, 1, 2)}, []string{"total"}, apierr.KindInvalid, ReasonDatatypeMismatch, "FP32"},
		{"missing", named, []infer.Tensor{counts}, []string{"total"}, apierr.KindInvalid, ReasonMissingInput, "'scale'"},
		{"unknown input", named, []infer.Tensor{counts, scale, f32Tensor("extra", infer.Shape{1}, 1)}, []string{"total"}, apierr.KindInvalid, ReasonUnknownInput, "'extra'"},
		{"size", named, []infer.Tensor{counts, short}, []string{"total"}, apierr.KindInvalid, ReasonInvalidSize, "'scale'"},
		{"unknown output", named, []infer.Tensor{counts, scale}, []string{"nope"}, apierr.KindInvalid, ReasonUnknownOutput, "'nope'"},
		{"forward raises", picky, []infer.Tensor{f32Tensor("x", infer.Shape{1, 2}, 1, -1)}, []string{"y"}, apierr.KindInternal, ReasonBackendError, "negative input"},
		{"output datatype", wrongOut, []infer.Tensor{counts, scale}, []string{"doubled"}, apierr.KindInternal, ReasonInvalidModelOutput, "INT64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.in.Execute(t.Context(), tt.inputs, tt.outputs)
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Kind != tt.kind || ae.Reason != tt.reason || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error = %v, want kind %v reason %s naming %s", err, tt.kind, tt.reason, tt.msg)
			}
		})
	}
	// The instance still serves after a failed forward().
	out := run(t, picky, []infer.Tensor{f32Tensor("x", infer.Shape{1, 2}, 1, 2)}, "y")
	if got := f32s(out[0]); got[0] != 2 || got[1] != 3 {
		t.Fatalf("y = %v after an error, want [2 3]", got)
	}
}

// Models the in-process path does not run go to the Python worker, and the
// load log says why.
func TestUnsupportedModelsFallBack(t *testing.T) {
	fb := &fakeFallback{}
	b, logs := shimBackend(t, fb)
	dictCfg := testConfig(t, "dictarg", oneInputConfig)
	if _, ok := load(t, b, "dictarg", generatedModel(t, "dictarg"), dictCfg).(fakeInstance); !ok {
		t.Fatal("a forward() taking a Dict did not go to the fallback")
	}
	stateDict := writeModelDir(t, "sd", "model.pth")
	if _, ok := load(t, b, "sd", stateDict, testConfig(t, "sd", oneInputConfig)).(fakeInstance); !ok {
		t.Fatal("a state_dict model did not go to the fallback")
	}
	strCfg := testConfig(t, "str", strings.Replace(oneInputConfig, "TYPE_FP32 dims: [ 2 ] } ]\noutput", "TYPE_STRING dims: [ 2 ] } ]\noutput", 1))
	if _, ok := load(t, b, "str", generatedModel(t, "picky"), strCfg).(fakeInstance); !ok {
		t.Fatal("a TYPE_STRING model did not go to the fallback")
	}
	// picky's forward() takes one argument; a config with two inputs goes
	// to the worker, which reports what it makes of it.
	twoInputs := testConfig(t, "two", strings.Replace(oneInputConfig, `input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]`,
		`input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "z" data_type: TYPE_FP32 dims: [ 2 ] } ]`, 1))
	if _, ok := load(t, b, "two", generatedModel(t, "picky"), twoInputs).(fakeInstance); !ok {
		t.Fatal("a config whose inputs do not map onto forward() did not go to the fallback")
	}
	forced := load(t, b, "forced", generatedModel(t, "picky"), testConfig(t, "forced", oneInputConfig))
	if _, ok := forced.(*Instance); !ok {
		t.Fatal("picky did not load in-process")
	}
	inst, err := b.Load(t.Context(), backend.LoadOptions{
		Model: "forced", Version: 1, Path: generatedModel(t, "picky"),
		Config: testConfig(t, "forced", oneInputConfig), Parameters: map[string]string{EngineParameter: "python"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inst.(fakeInstance); !ok {
		t.Fatalf("%s python: loaded a %T, want the worker's instance", EngineParameter, inst)
	}
	if got := fb.loaded(); strings.Join(got, ",") != "dictarg,sd,str,two,forced" {
		t.Fatalf("fallback loads = %v", got)
	}
	for _, why := range []string{"Dict(str, Tensor)", "no model.pt", "TYPE_STRING", "declares 2 inputs, forward() takes 1"} {
		if !strings.Contains(logs.String(), why) {
			t.Errorf("load log does not say %q:\n%s", why, logs)
		}
	}
}

func TestBadParameters(t *testing.T) {
	b, _ := shimBackend(t, &fakeFallback{})
	for _, p := range []string{"INTRA_OP_THREAD_COUNT", "DISABLE_OPTIMIZED_EXECUTION", EngineParameter} {
		cfg := testConfig(t, "picky", oneInputConfig+`parameters { key: "`+p+`" value: { string_value: "lots" } }`)
		_, err := b.Load(t.Context(), backend.LoadOptions{
			Model: "picky", Version: 1, Path: generatedModel(t, "picky"), Config: cfg,
			Parameters: map[string]string{p: "lots"},
		})
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s \"lots\": load error %v, want one naming the parameter", p, err)
		}
	}
	// A file libtorch cannot read is a load error, not a fallback.
	junk := writeModelDir(t, "junk", "model.pt")
	_, err := b.Load(t.Context(), backend.LoadOptions{Model: "junk", Version: 1, Path: junk, Config: testConfig(t, "junk", oneInputConfig)})
	if err == nil || !strings.Contains(err.Error(), "libtorch cannot load model.pt") {
		t.Errorf("load of an empty model.pt = %v", err)
	}
}
