//go:build cgo

package onnxruntime

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// wrapped runs inputs on per-call tensors, the path sets replace.
func wrapped(t *testing.T, inst *Instance, inputs []infer.Tensor, outputs []string) []infer.Tensor {
	t.Helper()
	ordered, err := inst.orderInputs(inputs, nil)
	require.NoError(t, err)
	want, err := inst.wantedOutputs(outputs, nil)
	require.NoError(t, err)
	out, err := inst.executeWrapped(t.Context(), ordered, want)
	require.NoError(t, err)
	return out
}

func freeSets(inst *Instance, key int64) int {
	inst.pool.mu.Lock()
	defer inst.pool.mu.Unlock()
	return len(inst.pool.free[key])
}

func TestSetsMatchPerCallTensors(t *testing.T) {
	inst := loadModel(t, modelPath("parcel_eta", 2), nil)
	require.True(t, inst.pool.usable)
	for _, tc := range []struct {
		name    string
		batch   int
		outputs []string
	}{
		{name: "batch 1, every output", batch: 1},
		{name: "batch 5, one output", batch: 5, outputs: []string{"confidence_score"}},
		{name: "batch 5, outputs reordered", batch: 5, outputs: []string{"confidence_score", "eta_prediction"}},
		{name: "batch 0", batch: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inputs := randomETA(tc.batch, 7)
			want := wrapped(t, inst, inputs, tc.outputs)
			for range 3 { // a fresh set, then the same one reused
				got, err := inst.Execute(t.Context(), inputs, tc.outputs)
				require.NoError(t, err)
				require.True(t, equalTensors(got, want), "got %v, want %v", got, want)
				for _, o := range got {
					require.NotNil(t, o.Data)
					require.Equal(t, len(o.Data), cap(o.Data), "output %s may not grow into its neighbour", o.Name)
					if len(o.Data) > 0 {
						require.Zero(t, uintptr(unsafe.Pointer(unsafe.SliceData(o.Data)))%8, "output %s is 8-byte aligned", o.Name)
					}
				}
			}
			require.Equal(t, 1, freeSets(inst, int64(tc.batch)))
		})
	}
}

func TestSetOutputsAreTheCallers(t *testing.T) {
	inst := loadModel(t, modelPath("parcel_eta", 2), nil)
	first, err := inst.Execute(t.Context(), randomETA(2, 1), nil)
	require.NoError(t, err)
	keep := string(first[0].Data)
	_, err = inst.Execute(t.Context(), randomETA(2, 2), nil)
	require.NoError(t, err)
	require.Equal(t, keep, string(first[0].Data), "a later run on the same set must not change an earlier result")
}

func TestLargeBatchesWrapRequestMemory(t *testing.T) {
	inst := loadModel(t, modelPath("parcel_eta", 2), nil)
	// (128 + 64 + 32 + 2) float32 per row: 2,000 rows take more than
	// maxSetBytes.
	const batch = 2000
	require.Greater(t, batch*(128+64+32+2)*4, maxSetBytes)
	inputs := randomETA(batch, 3)
	got, err := inst.Execute(t.Context(), inputs, nil)
	require.NoError(t, err)
	require.True(t, equalTensors(got, wrapped(t, inst, inputs, nil)))
	require.Zero(t, freeSets(inst, batch))
	inst.pool.mu.Lock()
	require.Zero(t, inst.pool.bytes)
	inst.pool.mu.Unlock()
}

func TestSetRunOptionsReusableAfterCancel(t *testing.T) {
	inst := loadModel(t, modelPath("parcel_eta", 2), nil)
	inputs := randomETA(1, 4)
	want := wrapped(t, inst, inputs, nil)
	ordered, err := inst.orderInputs(inputs, nil)
	require.NoError(t, err)
	s := inst.takeSet(1)
	require.NotNil(t, s)
	defer inst.putSet(s)
	for range 20 {
		// The context ends as the run starts: the terminator races it, and
		// either way the set must run normally afterwards.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _ = inst.executeSet(ctx, s, ordered, inst.all)
		got, err := inst.executeSet(t.Context(), s, ordered, inst.all)
		require.NoError(t, err)
		require.True(t, equalTensors(got, want))
	}
	// A terminator that ran is never handed to a later run.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s.term = newTerminator(s.ro)
	s.term.fn()
	require.True(t, s.term.finish())
	s.term.fn() // late: does nothing
	require.NoError(t, s.ro.UnsetTerminate())
	s.term = nil
	_, err = inst.executeSet(ctx, s, ordered, inst.all)
	_ = err // may or may not be stopped in time
	got, err := inst.executeSet(t.Context(), s, ordered, inst.all)
	require.NoError(t, err)
	require.True(t, equalTensors(got, want))
}

func TestSetsOffWhenOutputShapesDiffer(t *testing.T) {
	inst := loadModel(t, modelPath("parcel_eta", 2), nil)
	inputs := randomETA(3, 5)
	want := wrapped(t, inst, inputs, nil)
	// Pretend the signature promised two values per row: the kept tensor
	// has the wrong shape, ONNX Runtime refuses it, and the call still
	// answers from per-call tensors.
	inst.sig.Outputs[0].Shape = infer.Shape{-1, 2}
	got, err := inst.Execute(t.Context(), inputs, nil)
	require.NoError(t, err)
	require.True(t, equalTensors(got, want))
	inst.pool.mu.Lock()
	off, bytes := inst.pool.off, inst.pool.bytes
	inst.pool.mu.Unlock()
	require.True(t, off)
	require.Zero(t, bytes)
	got, err = inst.Execute(t.Context(), inputs, nil)
	require.NoError(t, err)
	require.True(t, equalTensors(got, want))
}

func TestPoolUsable(t *testing.T) {
	fp32 := func(dims ...int64) infer.TensorSpec {
		return infer.TensorSpec{Name: "x", DataType: infer.FP32, Shape: dims}
	}
	for _, tc := range []struct {
		name string
		sig  infer.Signature
		want bool
	}{
		{name: "batch dimension only", sig: infer.Signature{Inputs: []infer.TensorSpec{fp32(-1, 4)}, Outputs: []infer.TensorSpec{fp32(-1, 1)}}, want: true},
		{name: "fixed shapes", sig: infer.Signature{Inputs: []infer.TensorSpec{fp32(2, 4)}, Outputs: []infer.TensorSpec{fp32(2)}}, want: true},
		{name: "variable inner input dimension", sig: infer.Signature{Inputs: []infer.TensorSpec{fp32(-1, -1)}, Outputs: []infer.TensorSpec{fp32(-1)}}},
		{name: "variable output, fixed inputs", sig: infer.Signature{Inputs: []infer.TensorSpec{fp32(2)}, Outputs: []infer.TensorSpec{fp32(-1)}}},
		{name: "scalar", sig: infer.Signature{Inputs: []infer.TensorSpec{fp32()}, Outputs: []infer.TensorSpec{fp32(1)}}},
		{name: "bytes", sig: infer.Signature{Inputs: []infer.TensorSpec{{Name: "s", DataType: infer.Bytes, Shape: infer.Shape{-1}}}, Outputs: []infer.TensorSpec{fp32(-1)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, poolUsable(tc.sig))
		})
	}
}

func TestCopyBool(t *testing.T) {
	dst := make([]byte, 4)
	copyBool(dst, []byte{0, 1, 2, 255})
	require.Equal(t, []byte{0, 1, 1, 1}, dst)
}

func BenchmarkExecuteSetVersusWrapped(b *testing.B) {
	inst := loadModel(b, modelPath("parcel_eta", 2), map[string]string{ParamIntraOpThreads: "1"})
	inputs := randomETA(1, 1)
	ordered, err := inst.orderInputs(inputs, nil)
	require.NoError(b, err)
	b.Run("set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := inst.Execute(b.Context(), inputs, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wrapped", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := inst.executeWrapped(b.Context(), ordered, inst.all); err != nil {
				b.Fatal(err)
			}
		}
	})
}
