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
	Model     string
	Thrash    int // bytes of other memory touched between calls (0: none)
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

// ortRows are the raw ONNX Runtime rows of a run.
type ortRows struct {
	main   []ortResult // parcel_eta at each batch size
	cold   *ortResult  // parcel_eta at batch 1 with caches disturbed between calls
	ranker []ortResult // the compute-bound model at each batch size
}

// measureORT loads the models into this process through Sluice's ONNX
// Runtime backend (one session, intra-op threads 1, like the served
// config) and times Execute at each batch size.
func measureORT(ctx context.Context, cfg config, batches []int, logger *slog.Logger) (ortRows, error) {
	var out ortRows
	lib := cfg.ORTLibrary
	if lib == "" {
		var err error
		if lib, err = onnxruntime.FindLibrary(""); err != nil {
			return out, fmt.Errorf("find onnxruntime: %w", err)
		}
	}
	be, err := onnxruntime.New(onnxruntime.Options{LibraryPath: lib}, logger)
	if err != nil {
		return out, fmt.Errorf("start onnxruntime backend: %w", err)
	}
	defer func() { _ = be.Close() }()

	eta := ortModel{name: "parcel_eta", onnx: cfg.ONNXModel, request: cfg.RequestFile}
	if out.main, err = eta.measure(ctx, be, batches, cfg.ORTTime, 0, logger); err != nil {
		return out, err
	}
	if cfg.ColdCacheMiB > 0 && ctx.Err() == nil {
		cold, err := eta.measure(ctx, be, []int{1}, cfg.ORTTime, cfg.ColdCacheMiB<<20, logger)
		if err != nil {
			return out, err
		}
		if len(cold) == 1 {
			out.cold = &cold[0]
		}
	}
	if cfg.RankerModel != "" && cfg.RankerONNX != "" && ctx.Err() == nil {
		rb, err := parseInts(cfg.RankerBatches)
		if err != nil {
			return out, fmt.Errorf("parse -ranker-batches: %w", err)
		}
		ranker := ortModel{name: cfg.RankerModel, onnx: cfg.RankerONNX, request: cfg.RankerRequest}
		if out.ranker, err = ranker.measure(ctx, be, rb, cfg.ORTTime, 0, logger); err != nil {
			return out, err
		}
	}
	return out, nil
}

// ortModel is one model of the raw rows.
type ortModel struct {
	name, onnx, request string
}

// measure times Execute at each batch size; with thrash > 0 it writes to
// that many bytes of other memory (untimed) before each call, as a
// server's network, decoding and client work evict the model's weights
// from the cache between requests.
func (m ortModel) measure(ctx context.Context, be *onnxruntime.Backend, batches []int, d time.Duration, thrash int, logger *slog.Logger) ([]ortResult, error) {
	inst, err := be.Load(ctx, backend.LoadOptions{
		Model: m.name, Version: 1, Path: m.onnx,
		Parameters:    map[string]string{onnxruntime.ParamIntraOpThreads: "1"},
		InstanceCount: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", m.onnx, err)
	}
	defer func() { _ = inst.Close() }()
	var other []byte
	if thrash > 0 {
		other = make([]byte, thrash)
	}
	var out []ortResult
	for _, b := range batches {
		if ctx.Err() != nil {
			break
		}
		in, err := batchTensors(m.request, b)
		if err != nil {
			return out, err
		}
		exec := func(ctx context.Context) error {
			_, err := inst.Execute(ctx, in, nil)
			return err
		}
		before := func() {
			for i := 0; i < len(other); i += 64 { // one write per cache line
				other[i]++
			}
		}
		if other == nil {
			before = nil
		}
		timeLoopAfter(ctx, before, exec, d/4) // warm-up, discarded
		r := timeLoopAfter(ctx, before, exec, d)
		r.Batch, r.Model, r.Thrash = b, m.name, thrash
		logger.Info("raw onnxruntime", "model", m.name, "batch", b, "thrash_bytes", thrash,
			"infer_per_s", int(r.InferPerSec()), "p50", percentile(r.Latencies, 0.5))
		out = append(out, r)
	}
	return out, nil
}

// maxCalls bounds one timeLoop whatever its duration.
const maxCalls = 5_000_000

// timeLoop calls do back to back for d (or maxCalls calls) and records
// each call's latency. The first error ends the loop.
func timeLoop(ctx context.Context, do func(context.Context) error, d time.Duration) ortResult {
	return timeLoopAfter(ctx, nil, do, d)
}

// timeLoopAfter is timeLoop that runs before (when not nil) ahead of each
// call, outside the call's latency.
func timeLoopAfter(ctx context.Context, before func(), do func(context.Context) error, d time.Duration) ortResult {
	r := ortResult{Latencies: make([]time.Duration, 0, 4096)}
	start := time.Now()
	deadline := start.Add(d)
	for ctx.Err() == nil && r.Calls < maxCalls {
		if before != nil {
			before()
		}
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
