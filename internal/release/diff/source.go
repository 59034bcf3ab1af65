package diff

import (
	"context"
	"io"

	"github.com/sluice-ml/sluice/internal/release/record"
)

// FromRecords returns a record.Source that yields recs in order, for
// recordings already in memory.
func FromRecords(recs ...*record.Record) record.Source {
	return &sliceSource{recs: recs}
}

type sliceSource struct {
	recs []*record.Record
	next int
}

// Next returns the next record, or io.EOF after the last.
func (s *sliceSource) Next(ctx context.Context) (*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	if s.next >= len(s.recs) {
		return nil, io.EOF
	}
	s.next++
	return s.recs[s.next-1], nil
}

// Close does nothing.
func (s *sliceSource) Close() error { return nil }

// side is what the analysis keeps of one arm.
type side struct {
	model, version string
	status         int
	reason         string
	latencyMS      float64
	outputs        map[string][]float64
}

// arm returns the named arm of r, or nil when r has none.
func arm(r *record.Record, name string) *side {
	a, ok := r.Arms[name]
	if !ok {
		return nil
	}
	return &side{
		model: a.Model, version: a.Version, status: a.Status, reason: a.Reason,
		latencyMS: a.LatencyMS, outputs: a.Outputs,
	}
}
