package record

import (
	"context"
	"testing"
	"time"
)

// discardSink stores nothing, as fast as it can.
type discardSink struct{}

func (discardSink) Write(_ context.Context, recs []*Record) (int, error) { return len(recs), nil }
func (discardSink) Close(context.Context) error                          { return nil }

// BenchmarkWriterOffer measures the request-path cost of recording: one
// Offer, accepted or dropped. It must not allocate.
func BenchmarkWriterOffer(b *testing.B) {
	rec := sample(1, time.Now())
	b.Run("accepted", func(b *testing.B) {
		w := runWriter(b, discardSink{}, WriterOptions{QueueSize: 1 << 16}, nil, nil)
		b.ReportAllocs()
		for b.Loop() {
			for !w.Offer(rec) { // a full queue would measure dropping instead
			}
		}
		b.StopTimer()
		_ = w.Close(context.Background())
	})
	b.Run("dropped", func(b *testing.B) {
		w := runWriter(b, discardSink{}, WriterOptions{}, nil, nil)
		_ = w.Close(context.Background())
		b.ReportAllocs()
		for b.Loop() {
			w.Offer(rec)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		w := runWriter(b, discardSink{}, WriterOptions{QueueSize: 1 << 16}, nil, nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w.Offer(rec)
			}
		})
		b.StopTimer()
		_ = w.Close(context.Background())
	})
}

func TestOfferDoesNotAllocate(t *testing.T) {
	w := runWriter(t, discardSink{}, WriterOptions{QueueSize: 1 << 16}, nil, nil)
	defer func() { _ = w.Close(t.Context()) }()
	rec := sample(1, time.Now())
	if n := testing.AllocsPerRun(1000, func() { w.Offer(rec) }); n != 0 {
		t.Fatalf("Offer allocates %v times per call", n)
	}
}
