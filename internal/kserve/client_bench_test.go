package kserve

import (
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// benchRequest is a typical gateway call: one row of 8 FP32 features.
func benchRequest() *infer.Request {
	return &infer.Request{Model: "echo", Inputs: []infer.Tensor{
		{Name: "INPUT0", DataType: infer.FP32, Shape: infer.Shape{1, 8}, Data: fp32Bytes(1, 2, 3, 4, 5, 6, 7, 8)},
	}}
}

// BenchmarkInfer measures one ModelInfer round trip over loopback against
// a real grpcapi server, client and server in this process.
func BenchmarkInfer(b *testing.B) {
	ts := startSluice(b)
	c := newClient(b, Options{})
	ctx := ctxTimeout(b, 10*time.Minute)
	req := benchRequest()
	if _, err := c.Infer(ctx, ts.addr, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Infer(ctx, ts.addr, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInferParallel is BenchmarkInfer with concurrent callers sharing
// one connection, as the gateway's request handlers do.
func BenchmarkInferParallel(b *testing.B) {
	ts := startSluice(b)
	c := newClient(b, Options{})
	ctx := ctxTimeout(b, 10*time.Minute)
	if _, err := c.Infer(ctx, ts.addr, benchRequest()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := benchRequest()
		for pb.Next() {
			if _, err := c.Infer(ctx, ts.addr, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
