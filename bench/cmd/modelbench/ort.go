package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/backend/onnxruntime"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/perf"
)

// ortResult is one raw ONNX Runtime row: one caller executing back to back
// at a fixed batch size, as a server instance with count 1 would.
type ortResult struct {
	Batch     int
	Calls     int
	Elapsed   time.Duration
	Latencies []time.Duration // ascending
	Err       string
}

// CallsPerSec is model executions per second.
func (r ortResult) CallsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

// InferPerSec is rows per second (executions × batch).
func (r ortResult) InferPerSec() float64 { return r.CallsPerSec() * float64(r.Batch) }

// batchTensors reads the request file and tiles its rows to the batch.
func batchTensors(path string, batch int) ([]infer.Tensor, error) {
	src, err := perf.ReadRequestFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]infer.Tensor, 0, len(src))
	for _, t := range src {
		tt, err := perf.Tile(t, batch)
		if err != nil {
			return nil, err
		}
		out = append(out, tt)
	}
	return out, nil
}

// measureORT loads the model into this process through Sluice's ONNX
// Runtime backend (one session, intra-op threads 1, like the served
// config) and times Execute at each batch size.
func measureORT(ctx context.Context, cfg config, batches []int, logger *slog.Logger) ([]ortResult, error) {
	lib := cfg.ORTLibrary
	if lib == "" {
		var err error
		if lib, err = onnxruntime.FindLibrary(""); err != nil {
			return nil, fmt.Errorf("find onnxruntime: %w", err)
		}
	}
	be, err := onnxruntime.New(onnxruntime.Options{LibraryPath: lib}, logger)
	if err != nil {
		return nil, fmt.Errorf("start onnxruntime backend: %w", err)
	}
	defer func() { _ = be.Close() }()
	inst, err := be.Load(ctx, backend.LoadOptions{
		Model: "parcel_eta", Version: 2, Path: cfg.ONNXModel,
		Parameters:    map[string]string{onnxruntime.ParamIntraOpThreads: "1"},
		InstanceCount: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", cfg.ONNXModel, err)
	}
	defer func() { _ = inst.Close() }()
	outputs := []string{"eta_prediction", "confidence_score"}

	var out []ortResult
	for _, b := range batches {
		if ctx.Err() != nil {
			break
		}
		in, err := batchTensors(cfg.RequestFile, b)
		if err != nil {
			return out, err
		}
		exec := func(ctx context.Context) error {
			_, err := inst.Execute(ctx, in, outputs)
			return err
		}
		timeLoop(ctx, exec, cfg.ORTTime/4) // warm-up, discarded
		r := timeLoop(ctx, exec, cfg.ORTTime)
		r.Batch = b
		logger.Info("raw onnxruntime", "batch", b, "infer_per_s", int(r.InferPerSec()), "p50", percentile(r.Latencies, 0.5))
		out = append(out, r)
	}
	return out, nil
}

// maxCalls bounds one timeLoop whatever its duration.
const maxCalls = 5_000_000

// timeLoop calls do back to back for d (or maxCalls calls) and records
// each call's latency. The first error ends the loop.
func timeLoop(ctx context.Context, do func(context.Context) error, d time.Duration) ortResult {
	r := ortResult{Latencies: make([]time.Duration, 0, 4096)}
	start := time.Now()
	deadline := start.Add(d)
	for ctx.Err() == nil && r.Calls < maxCalls {
		t0 := time.Now()
		if !t0.Before(deadline) {
			break
		}
		if err := do(ctx); err != nil {
			r.Err = err.Error()
			break
		}
		r.Latencies = append(r.Latencies, time.Since(t0))
		r.Calls++
	}
	r.Elapsed = time.Since(start)
	slices.Sort(r.Latencies)
	return r
}

// percentile is the nearest-rank p-quantile of sorted (0 for none).
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(float64(n)*p+0.999999999) - 1
	return sorted[max(0, min(i, n-1))]
}
