package batch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// passExec answers every batch of one request with the same preallocated
// outputs, so that a benchmark measures the batcher alone.
func passExec(outs []infer.Tensor) Executor {
	return ExecutorFunc(func(context.Context, []infer.Tensor, []string) ([]infer.Tensor, error) {
		return outs, nil
	})
}

// copyExec answers with a fresh copy of the first input as output "y":
// the one output buffer per batch that a real backend allocates.
// A non-zero spin makes each execution busy-wait that long, like a model
// would compute, so that requests pile up and get batched.
type copyExec struct {
	spin          time.Duration
	batches, rows atomic.Int64
}

func (e *copyExec) Execute(_ context.Context, inputs []infer.Tensor, _ []string) ([]infer.Tensor, error) {
	if e.spin > 0 {
		for start := time.Now(); time.Since(start) < e.spin; {
		}
	}
	in := inputs[0]
	e.batches.Add(1)
	e.rows.Add(in.Shape[0])
	data := make([]byte, len(in.Data))
	copy(data, in.Data)
	return []infer.Tensor{{Name: "y", DataType: in.DataType, Shape: in.Shape, Data: data}}, nil
}

func BenchmarkSubmit(b *testing.B) {
	b.Run("batch1", func(b *testing.B) {
		req := request(1, 1)
		bt, err := New(Options{Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 8},
			[]Executor{passExec([]infer.Tensor{req.Inputs[0]})}, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bt.Submit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if err := bt.Close(ctx); err != nil {
			b.Fatal(err)
		}
	})
	concurrent := []struct {
		name  string
		execs int
		spin  time.Duration
	}{
		{name: "concurrent", execs: 2},                                      // executors always free: little batching
		{name: "concurrent-batched", execs: 1, spin: 20 * time.Microsecond}, // a busy instance: requests batch up
	}
	for _, c := range concurrent {
		b.Run(c.name, func(b *testing.B) {
			e := &copyExec{spin: c.spin}
			execs := make([]Executor, c.execs)
			for i := range execs {
				execs[i] = e
			}
			bt, err := New(Options{Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 32}, execs, nil, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				req := request(1, 1)
				ctx := context.Background()
				for pb.Next() {
					if _, err := bt.Submit(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if n := e.batches.Load(); n > 0 {
				b.ReportMetric(float64(e.rows.Load())/float64(n), "rows/batch")
			}
			if err := bt.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
