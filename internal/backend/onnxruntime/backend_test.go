//go:build cgo

package onnxruntime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

func TestBackendIdentity(t *testing.T) {
	b := testBackend(t)
	require.Equal(t, "onnxruntime", b.Name())
	require.Equal(t, "model.onnx", b.DefaultFilename())

	var reg backend.Registry
	reg.Register(b, Platform)
	got, err := reg.Lookup("", "onnxruntime_onnx")
	require.NoError(t, err)
	require.Same(t, b, got)
}

func TestSignature(t *testing.T) {
	b := testBackend(t)
	spec := func(name string, dt infer.DataType, shape ...int64) infer.TensorSpec {
		return infer.TensorSpec{Name: name, DataType: dt, Shape: shape}
	}
	eta := infer.Signature{
		Inputs: []infer.TensorSpec{
			spec("user_features", infer.FP32, -1, 128),
			spec("package_features", infer.FP32, -1, 64),
			spec("route_features", infer.FP32, -1, 32),
		},
		Outputs: []infer.TensorSpec{
			spec("eta_prediction", infer.FP32, -1, 1),
			spec("confidence_score", infer.FP32, -1, 1),
		},
	}
	var types infer.Signature
	for _, k := range []struct {
		suffix string
		dt     infer.DataType
	}{
		{"fp16", infer.FP16},
		{"bf16", infer.BF16},
		{"fp64", infer.FP64},
		{"i8", infer.Int8},
		{"u16", infer.Uint16},
		{"u64", infer.Uint64},
		{"str", infer.Bytes},
		{"bool", infer.Bool},
	} {
		types.Inputs = append(types.Inputs, spec("x_"+k.suffix, k.dt, -1, 3))
		types.Outputs = append(types.Outputs, spec("y_"+k.suffix, k.dt, -1, 3))
	}
	tests := []struct {
		name string
		path string
		want infer.Signature
	}{
		{name: "simple", path: modelPath("simple", 1), want: infer.Signature{
			Inputs:  []infer.TensorSpec{spec("INPUT0", infer.Int32, -1, 16), spec("INPUT1", infer.Int32, -1, 16)},
			Outputs: []infer.TensorSpec{spec("OUTPUT0", infer.Int32, -1, 16), spec("OUTPUT1", infer.Int32, -1, 16)},
		}},
		{name: "parcel_eta v1", path: modelPath("parcel_eta", 1), want: eta},
		{name: "parcel_eta v2", path: modelPath("parcel_eta", 2), want: eta},
		{name: "digits", path: modelPath("digits", 1), want: infer.Signature{
			Inputs:  []infer.TensorSpec{spec("input", infer.FP32, -1, 1, 8, 8)},
			Outputs: []infer.TensorSpec{spec("logits", infer.FP32, -1, 10)},
		}},
		{name: "every converted type", path: "testdata/types.onnx", want: types},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Signature(t.Context(), tc.path)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSignatureErrors(t *testing.T) {
	b := testBackend(t)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	missing := filepath.Join(t.TempDir(), "model.onnx")
	tests := []struct {
		name    string
		ctx     context.Context
		path    string
		wantErr string
	}{
		{
			name: "sequence output", ctx: t.Context(), path: "testdata/sequence.onnx",
			wantErr: "output 'seq' is a sequence; only tensor inputs and outputs are supported",
		},
		{name: "missing file", ctx: t.Context(), path: missing, wantErr: "read onnx model " + missing},
		{name: "not a model", ctx: t.Context(), path: "testdata/fuzz/FuzzBytesStrings/nul", wantErr: "read onnx model"},
		{name: "canceled", ctx: canceled, path: modelPath("simple", 1), wantErr: context.Canceled.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Signature(tc.ctx, tc.path)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	t.Run("load refuses a sequence model too", func(t *testing.T) {
		_, err := b.Load(t.Context(), backend.LoadOptions{Model: "seq", Version: 1, Path: "testdata/sequence.onnx"})
		require.ErrorContains(t, err, "output 'seq' is a sequence")
	})
}

func TestSimple(t *testing.T) {
	inst := loadModel(t, modelPath("simple", 1), map[string]string{ParamIntraOpThreads: "1"})
	for _, batch := range []int{1, 3, 8} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			a := make([]int32, batch*16)
			b := make([]int32, batch*16)
			for i := range a {
				a[i] = int32(i*7 - 40)
				b[i] = int32(i%5 - 2)
			}
			shape := infer.Shape{int64(batch), 16}
			out, err := inst.Execute(t.Context(),
				[]infer.Tensor{i32Tensor("INPUT1", shape, b), i32Tensor("INPUT0", shape, a)}, // any order
				[]string{"OUTPUT0", "OUTPUT1"})
			require.NoError(t, err)
			require.Len(t, out, 2)
			sum, diff := i32s(t, out[0]), i32s(t, out[1])
			for i := range a {
				require.Equal(t, a[i]+b[i], sum[i], "OUTPUT0[%d]", i)
				require.Equal(t, a[i]-b[i], diff[i], "OUTPUT1[%d]", i)
			}
			require.Equal(t, "OUTPUT0", out[0].Name)
			require.Equal(t, shape, out[0].Shape)
		})
	}
	t.Run("requested outputs in the requested order", func(t *testing.T) {
		shape := infer.Shape{1, 16}
		ones := make([]int32, 16)
		for i := range ones {
			ones[i] = 1
		}
		in := []infer.Tensor{i32Tensor("INPUT0", shape, ones), i32Tensor("INPUT1", shape, ones)}
		out, err := inst.Execute(t.Context(), in, []string{"OUTPUT1"})
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.Equal(t, "OUTPUT1", out[0].Name)
		require.Equal(t, make([]int32, 16), i32s(t, out[0]))

		out, err = inst.Execute(t.Context(), in, []string{"OUTPUT1", "OUTPUT0"})
		require.NoError(t, err)
		require.Equal(t, []string{"OUTPUT1", "OUTPUT0"}, []string{out[0].Name, out[1].Name})

		out, err = inst.Execute(t.Context(), in, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"OUTPUT0", "OUTPUT1"}, []string{out[0].Name, out[1].Name})
	})
}

func TestParcelETAMatchesPyTorch(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			var ref reference
			readJSON(t, filepath.Join(examples, "reference", fmt.Sprintf("parcel_eta_v%d.json", version)), &ref)
			inst := loadModel(t, modelPath("parcel_eta", version), nil)
			var inputs []infer.Tensor
			for _, r := range ref.Inputs {
				inputs = append(inputs, f32Tensor(r.Name, r.Shape, r.f32()))
			}
			var names []string
			for _, r := range ref.Outputs {
				names = append(names, r.Name)
			}
			out, err := inst.Execute(t.Context(), inputs, names)
			require.NoError(t, err)
			for i, r := range ref.Outputs {
				require.Equal(t, r.Shape, out[i].Shape, r.Name)
				got := f32s(t, out[i])
				require.Len(t, got, len(r.Data))
				for j, want := range r.Data {
					require.InDelta(t, want, float64(got[j]), 1e-5, "%s[%d]", r.Name, j)
				}
			}
		})
	}
	t.Run("versions differ", func(t *testing.T) {
		var v1, v2 reference
		readJSON(t, filepath.Join(examples, "reference", "parcel_eta_v1.json"), &v1)
		readJSON(t, filepath.Join(examples, "reference", "parcel_eta_v2.json"), &v2)
		require.Equal(t, v1.Inputs, v2.Inputs, "both references use the same input")
		require.NotEqual(t, v1.Outputs[0].Data, v2.Outputs[0].Data)
	})
}

func TestDigitsAccuracy(t *testing.T) {
	var set struct {
		ImageShape    infer.Shape `json:"image_shape"`
		TorchAccuracy float64     `json:"torch_accuracy"`
		Labels        []int       `json:"labels"`
		Images        [][]float32 `json:"images"`
	}
	readJSON(t, filepath.Join(examples, "reference", "digits_test.json"), &set)
	require.Len(t, set.Images, len(set.Labels))
	require.NotEmpty(t, set.Labels)
	inst := loadModel(t, modelPath("digits", 1), nil)

	const maxBatch = 64 // the model's max_batch_size
	correct := 0
	for start := 0; start < len(set.Images); start += maxBatch {
		end := min(start+maxBatch, len(set.Images))
		var pixels []float32
		for _, img := range set.Images[start:end] {
			pixels = append(pixels, img...)
		}
		shape := append(infer.Shape{int64(end - start)}, set.ImageShape...)
		out, err := inst.Execute(t.Context(), []infer.Tensor{f32Tensor("input", shape, pixels)}, []string{"logits"})
		require.NoError(t, err)
		require.Equal(t, infer.Shape{int64(end - start), 10}, out[0].Shape)
		logits := f32s(t, out[0])
		for i := range end - start {
			row := logits[i*10 : i*10+10]
			best := 0
			for c := range row {
				if row[c] > row[best] {
					best = c
				}
			}
			if best == set.Labels[start+i] {
				correct++
			}
		}
	}
	acc := float64(correct) / float64(len(set.Labels))
	t.Logf("digits accuracy through the backend: %.4f (%d/%d); PyTorch: %.4f", acc, correct, len(set.Labels), set.TorchAccuracy)
	require.GreaterOrEqual(t, acc, 0.95)
	require.InDelta(t, set.TorchAccuracy, acc, 2.0/float64(len(set.Labels)), "ONNX Runtime and PyTorch should agree")
}

func TestDataTypes(t *testing.T) {
	inst := loadModel(t, "testdata/types.onnx", nil)
	shape := infer.Shape{2, 3}
	le16 := func(vals ...uint16) []byte {
		out := make([]byte, 0, 2*len(vals))
		for _, v := range vals {
			out = binary.LittleEndian.AppendUint16(out, v)
		}
		return out
	}
	le64 := func(vals ...uint64) []byte {
		out := make([]byte, 0, 8*len(vals))
		for _, v := range vals {
			out = binary.LittleEndian.AppendUint64(out, v)
		}
		return out
	}
	var strs []byte
	for _, s := range []string{"", "a", "héllo", "tab\tsep", "\xff\xfe", "last"} {
		strs = infer.AppendBytesElement(strs, []byte(s))
	}
	floats := make([]uint64, 6)
	for i, f := range []float64{0, -1.5, math.Pi, math.Inf(1), 1e-300, math.MaxFloat64} {
		floats[i] = math.Float64bits(f)
	}
	inputs := []infer.Tensor{
		// FP16: 1, -2, 0.5, 65504 (largest), +0, -0.
		{Name: "x_fp16", DataType: infer.FP16, Shape: shape, Data: le16(0x3c00, 0xc000, 0x3800, 0x7bff, 0, 0x8000)},
		// BF16: 1, -2, 0.5, 3.0e38-ish, smallest normal, NaN.
		{Name: "x_bf16", DataType: infer.BF16, Shape: shape, Data: le16(0x3f80, 0xc000, 0x3f00, 0x7f61, 0x0080, 0x7fc0)},
		{Name: "x_fp64", DataType: infer.FP64, Shape: shape, Data: le64(floats...)},
		{Name: "x_i8", DataType: infer.Int8, Shape: shape, Data: []byte{0x80, 0xff, 0, 1, 0x7f, 0x42}},
		{Name: "x_u16", DataType: infer.Uint16, Shape: shape, Data: le16(0, 1, 0xffff, 0x1234, 0x8000, 7)},
		{Name: "x_u64", DataType: infer.Uint64, Shape: shape, Data: le64(0, 1, math.MaxUint64, 1<<63, 12345678901234, 9)},
		{Name: "x_str", DataType: infer.Bytes, Shape: shape, Data: strs},
		// Any non-zero byte is true on the wire; Not inverts.
		{Name: "x_bool", DataType: infer.Bool, Shape: shape, Data: []byte{0, 1, 2, 255, 0, 1}},
	}
	out, err := inst.Execute(t.Context(), inputs, nil)
	require.NoError(t, err)
	require.Len(t, out, len(inputs))
	for i, in := range inputs {
		t.Run(in.DataType.String(), func(t *testing.T) {
			got := out[i]
			require.Equal(t, "y"+in.Name[1:], got.Name)
			require.Equal(t, in.DataType, got.DataType)
			require.Equal(t, shape, got.Shape)
			if in.DataType == infer.Bool {
				require.Equal(t, []byte{1, 0, 0, 0, 1, 0}, got.Data)
				return
			}
			require.Equal(t, in.Data, got.Data)
		})
	}
	t.Run("empty batch", func(t *testing.T) {
		empty := make([]infer.Tensor, len(inputs))
		for i, in := range inputs {
			empty[i] = infer.Tensor{Name: in.Name, DataType: in.DataType, Shape: infer.Shape{0, 3}, Data: []byte{}}
		}
		out, err := inst.Execute(t.Context(), empty, []string{"y_fp16", "y_str", "y_bool", "y_fp64"})
		require.NoError(t, err)
		for _, o := range out {
			require.Equal(t, infer.Shape{0, 3}, o.Shape, o.Name)
			require.Empty(t, o.Data, o.Name)
		}
	})
	t.Run("NUL in a string is refused", func(t *testing.T) {
		bad := append([]infer.Tensor(nil), inputs...)
		var s []byte
		for range 6 {
			s = infer.AppendBytesElement(s, []byte("a\x00b"))
		}
		bad[6].Data = s
		_, err := inst.Execute(t.Context(), bad, nil)
		requireReason(t, err, apierr.KindInvalid, "invalid_bytes")
	})
}

func TestUnalignedInput(t *testing.T) {
	inst := loadModel(t, modelPath("parcel_eta", 2), nil)
	aligned := randomETA(3, 99)
	want, err := inst.Execute(t.Context(), aligned, nil)
	require.NoError(t, err)

	unaligned := make([]infer.Tensor, len(aligned))
	for i, in := range aligned {
		// Place each tensor at an odd offset, as it would sit after a JSON
		// header in a binary request body.
		buf := make([]byte, len(in.Data)+1)
		copy(buf[1:], in.Data)
		in.Data = buf[1:]
		unaligned[i] = in
	}
	got, err := inst.Execute(t.Context(), unaligned, nil)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestConcurrentExecute(t *testing.T) {
	inst := loadModel(t, modelPath("parcel_eta", 2), nil)
	batches := []int{1, 3, 8, 17}
	const iterations = 25
	wants := make([][]infer.Tensor, len(batches))
	inputs := make([][]infer.Tensor, len(batches))
	for i, bs := range batches {
		inputs[i] = randomETA(bs, uint32(i+1))
		var err error
		wants[i], err = inst.Execute(t.Context(), inputs[i], nil)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for i := range batches {
		wg.Go(func() {
			for range iterations {
				got, err := inst.Execute(t.Context(), inputs[i], nil)
				if err != nil {
					t.Errorf("batch %d: %v", batches[i], err)
					return
				}
				if !equalTensors(got, wants[i]) {
					t.Errorf("batch %d: result differs from the single-caller run", batches[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

func equalTensors(a, b []infer.Tensor) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].DataType != b[i].DataType ||
			a[i].Shape.String() != b[i].Shape.String() || string(a[i].Data) != string(b[i].Data) {
			return false
		}
	}
	return true
}

func requireReason(t *testing.T, err error, kind apierr.Kind, reason string) *apierr.Error {
	t.Helper()
	var ie *apierr.Error
	require.True(t, errors.As(err, &ie), "want *apierr.Error, got %v", err)
	require.Equal(t, reason, ie.Reason, ie.Error())
	require.Equal(t, kind, ie.Kind, ie.Error())
	return ie
}

func TestExecuteErrors(t *testing.T) {
	inst := loadModel(t, modelPath("simple", 1), nil)
	shape := infer.Shape{1, 16}
	ok0 := i32Tensor("INPUT0", shape, make([]int32, 16))
	ok1 := i32Tensor("INPUT1", shape, make([]int32, 16))
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()

	tests := []struct {
		name    string
		ctx     context.Context
		inputs  []infer.Tensor
		outputs []string
		kind    apierr.Kind
		reason  string
		msg     string
	}{
		{
			name: "missing input", inputs: []infer.Tensor{ok0}, kind: apierr.KindInvalid, reason: "missing_input",
			msg: "missing input 'INPUT1' for model 'simple'",
		},
		{
			name: "unknown input", inputs: []infer.Tensor{ok0, ok1, i32Tensor("INPUT2", shape, make([]int32, 16))},
			kind: apierr.KindInvalid, reason: "unknown_input", msg: "unexpected input 'INPUT2'",
		},
		{
			name: "duplicate input", inputs: []infer.Tensor{ok0, ok1, ok0}, kind: apierr.KindInvalid, reason: "duplicate_input",
			msg: "input 'INPUT0' given more than once",
		},
		{
			name: "wrong datatype", inputs: []infer.Tensor{ok0, f32Tensor("INPUT1", shape, make([]float32, 16))},
			kind: apierr.KindInvalid, reason: "datatype_mismatch", msg: "input 'INPUT1': expected datatype INT32, got FP32",
		},
		{
			name: "wrong shape", inputs: []infer.Tensor{i32Tensor("INPUT0", infer.Shape{1, 15}, make([]int32, 15)), ok1},
			kind: apierr.KindInvalid, reason: "invalid_shape", msg: "input 'INPUT0': expected shape [-1,16], got [1,15]",
		},
		{
			name: "wrong byte size", inputs: []infer.Tensor{ok0, {Name: "INPUT1", DataType: infer.Int32, Shape: shape, Data: make([]byte, 63)}},
			kind: apierr.KindInvalid, reason: "invalid_size", msg: "input 'INPUT1'",
		},
		{
			name: "unknown output", inputs: []infer.Tensor{ok0, ok1}, outputs: []string{"OUTPUT9"},
			kind: apierr.KindInvalid, reason: "unknown_output", msg: "unknown output 'OUTPUT9'",
		},
		{name: "canceled", ctx: canceled, inputs: []infer.Tensor{ok0, ok1}, kind: apierr.KindUnavailable, reason: "canceled"},
		{name: "deadline", ctx: expired, inputs: []infer.Tensor{ok0, ok1}, kind: apierr.KindTimeout, reason: "deadline_exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			out, err := inst.Execute(ctx, tc.inputs, tc.outputs)
			require.Nil(t, out)
			ie := requireReason(t, err, tc.kind, tc.reason)
			require.Contains(t, ie.Error(), tc.msg)
		})
	}
	t.Run("context errors stay matchable", func(t *testing.T) {
		_, err := inst.Execute(canceled, []infer.Tensor{ok0, ok1}, nil)
		require.ErrorIs(t, err, context.Canceled)
		_, err = inst.Execute(expired, []infer.Tensor{ok0, ok1}, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestLoadParameters(t *testing.T) {
	b := testBackend(t)
	load := func(params map[string]string, instances int) error {
		inst, err := b.Load(t.Context(), backend.LoadOptions{
			Model: "simple", Version: 1,
			Path: modelPath("simple", 1), Parameters: params, InstanceCount: instances,
		})
		if err != nil {
			return err
		}
		defer inst.Close()
		one := make([]int32, 16)
		for i := range one {
			one[i] = int32(i)
		}
		out, err := inst.Execute(t.Context(), []infer.Tensor{
			i32Tensor("INPUT0", infer.Shape{1, 16}, one), i32Tensor("INPUT1", infer.Shape{1, 16}, one),
		}, []string{"OUTPUT0"})
		if err != nil {
			return err
		}
		if got := i32s(t, out[0]); got[15] != 30 {
			return fmt.Errorf("OUTPUT0[15] = %d, want 30", got[15])
		}
		return nil
	}
	tests := []struct {
		name      string
		params    map[string]string
		instances int
		wantErr   string
	}{
		{name: "defaults", instances: 1},
		{name: "threads and level", params: map[string]string{ParamIntraOpThreads: "2", ParamInterOpThreads: "1", ParamGraphOptLevel: "disable_all"}, instances: 1},
		{name: "oversubscribed turns spinning off", params: map[string]string{ParamIntraOpThreads: "2"}, instances: 64},
		{name: "bad intra", params: map[string]string{ParamIntraOpThreads: "two"}, wantErr: "parameter intra_op_thread_count"},
		{name: "bad inter", params: map[string]string{ParamInterOpThreads: "1.5"}, wantErr: "parameter inter_op_thread_count"},
		{name: "bad level", params: map[string]string{ParamGraphOptLevel: "max"}, wantErr: "parameter graph_optimization_level"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := load(tc.params, tc.instances)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := b.Load(t.Context(), backend.LoadOptions{Model: "x", Version: 1, Path: filepath.Join(t.TempDir(), "model.onnx")})
		require.ErrorContains(t, err, "read onnx model")
	})
}

func TestBackendsShareTheEnvironment(t *testing.T) {
	b := testBackend(t)
	lib, err := FindLibrary("")
	require.NoError(t, err)
	second, err := New(Options{LibraryPath: lib}, nil)
	require.NoError(t, err)
	require.NoError(t, second.Close())
	require.NoError(t, second.Close(), "Close is idempotent")

	// Closing the second Backend must leave the environment to the first.
	_, err = b.Signature(t.Context(), modelPath("simple", 1))
	require.NoError(t, err)
	inst := loadModel(t, modelPath("simple", 1), nil)
	require.NoError(t, inst.Close())
	require.NoError(t, inst.Close(), "Close is idempotent")
}
