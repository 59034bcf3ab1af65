package telemetry

import (
	"context"
	"fmt"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Sampling is the root sampler SetupTracing installs when given one: a
// trace-id ratio that can change while the process runs (Triton's trace
// extension sets it). Its methods are safe for concurrent use.
type Sampling struct {
	cur    atomic.Pointer[ratioSampler]
	on     atomic.Bool  // set by SetupTracing once spans are exported
	count  atomic.Int64 // root traces still to sample; -1: no limit
	models atomic.Pointer[map[string]*ModelRule]
}

// ModelRule is the root sampling of the requests for one model (Triton's
// per-model trace settings): a ratio, and a count of traces still to take
// (shared with the global one when the model sets none).
type ModelRule struct {
	ratio float64
	s     sdktrace.Sampler
	count *atomic.Int64
}

// NewModelRule returns a rule sampling ratio of the model's traces,
// counting them on count, or on the global count when count is nil.
func (s *Sampling) NewModelRule(ratio float64, count *atomic.Int64) *ModelRule {
	ratio = min(max(ratio, 0), 1)
	if count == nil {
		count = &s.count
	}
	return &ModelRule{ratio: ratio, s: sdktrace.TraceIDRatioBased(ratio), count: count}
}

// SetModelRules replaces the per-model rules; a model without one follows
// the global ratio and count.
func (s *Sampling) SetModelRules(rules map[string]*ModelRule) { s.models.Store(&rules) }

type modelKey struct{}

// WithModel records in ctx the model a request is for, so that the root
// sampler can follow that model's rule (TraceHTTP and the gRPC server set
// it before the server span starts).
func WithModel(ctx context.Context, model string) context.Context {
	if model == "" {
		return ctx
	}
	return context.WithValue(ctx, modelKey{}, model)
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
	sampler, count := s.cur.Load().s, &s.count
	if rules := s.models.Load(); rules != nil && p.ParentContext != nil {
		if m, ok := p.ParentContext.Value(modelKey{}).(string); ok {
			if rule := (*rules)[m]; rule != nil {
				sampler, count = rule.s, rule.count
			}
		}
	}
	r := sampler.ShouldSample(p)
	if r.Decision != sdktrace.RecordAndSample {
		return r
	}
	for {
		n := count.Load()
		switch {
		case n < 0:
			return r
		case n == 0:
			r.Decision = sdktrace.Drop
			return r
		case count.CompareAndSwap(n, n-1):
			return r
		}
	}
}

// Description implements sdktrace.Sampler.
func (s *Sampling) Description() string {
	return fmt.Sprintf("SluiceSampling{%g}", s.Ratio())
}
