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
	cur atomic.Pointer[ratioSampler]
	on  atomic.Bool // set by SetupTracing once spans are exported
}

type ratioSampler struct {
	ratio float64
	s     sdktrace.Sampler
}

// NewSampling returns a sampler keeping ratio of the traces.
func NewSampling(ratio float64) *Sampling {
	s := &Sampling{}
	s.SetRatio(ratio)
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

// ShouldSample implements sdktrace.Sampler.
func (s *Sampling) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return s.cur.Load().s.ShouldSample(p)
}

// Description implements sdktrace.Sampler.
func (s *Sampling) Description() string {
	return fmt.Sprintf("SluiceSampling{%g}", s.Ratio())
}
