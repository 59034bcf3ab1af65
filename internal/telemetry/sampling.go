package telemetry

import (
	"fmt"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Sampling is the root sampler SetupTracing installs when given one: a
// trace-id ratio that can change while the process runs (Triton's trace
// extension sets it). Its methods are safe for concurrent use.
type Sampling struct {
	cur   atomic.Pointer[ratioSampler]
	on    atomic.Bool  // set by SetupTracing once spans are exported
	count atomic.Int64 // root traces still to sample; -1: no limit
}

type ratioSampler struct {
	ratio float64
	s     sdktrace.Sampler
}

// NewSampling returns a sampler keeping ratio of the traces.
func NewSampling(ratio float64) *Sampling {
	s := &Sampling{}
	s.SetRatio(ratio)
	s.count.Store(-1)
	return s
}

// SetRatio changes the share of traces sampled at the root (0 to 1).
func (s *Sampling) SetRatio(ratio float64) {
	ratio = min(max(ratio, 0), 1)
	s.cur.Store(&ratioSampler{ratio: ratio, s: sdktrace.TraceIDRatioBased(ratio)})
}

// Ratio is the share of traces sampled at the root.
func (s *Sampling) Ratio() float64 { return s.cur.Load().ratio }

// Exporting reports whether spans sampled here are exported.
func (s *Sampling) Exporting() bool { return s.on.Load() }

// SetExporting records whether spans sampled here are exported;
// SetupTracing sets it when it installs the sampler with an exporter.
func (s *Sampling) SetExporting(on bool) { s.on.Store(on) }

// SetCount limits the traces sampled at the root from now on to n (Triton's
// trace_count); -1 (any n < 0) lifts the limit. Each trace sampled counts
// it down; at 0 no more are sampled.
func (s *Sampling) SetCount(n int64) { s.count.Store(max(n, -1)) }

// Count is the number of root traces still to sample; -1: no limit.
func (s *Sampling) Count() int64 { return s.count.Load() }

// ShouldSample implements sdktrace.Sampler.
func (s *Sampling) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	r := s.cur.Load().s.ShouldSample(p)
	if r.Decision != sdktrace.RecordAndSample {
		return r
	}
	for {
		n := s.count.Load()
		switch {
		case n < 0:
			return r
		case n == 0:
			r.Decision = sdktrace.Drop
			return r
		case s.count.CompareAndSwap(n, n-1):
			return r
		}
	}
}

// Description implements sdktrace.Sampler.
func (s *Sampling) Description() string {
	return fmt.Sprintf("SluiceSampling{%g}", s.Ratio())
}
