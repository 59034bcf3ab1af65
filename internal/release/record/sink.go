package record

import (
	"context"
	"fmt"
)

// Sink stores records. The Writer calls it from one goroutine; the sinks in
// this package are also safe for concurrent use.
type Sink interface {
	// Write stores recs in order and returns how many it stored; the
	// others failed and err says why. A record that cannot be encoded fails
	// alone. Write must not keep recs or the slice after it returns. It
	// returns promptly once ctx is done.
	Write(ctx context.Context, recs []*Record) (int, error)
	// Close makes everything written durable (or, for a broker, waits for
	// it to be acknowledged, bounded by ctx) and releases the sink. It
	// reports records that were written but may not have been stored.
	// Write must not be called after Close.
	Close(ctx context.Context) error
}

// entry is an accepted record as the Writer and its spool handle it:
// encoded once, with the id that makes every attempt to store it the same
// message to a deduplicating sink.
type entry struct {
	// id is unique per accepted record and stable across retries and
	// restarts (it is spooled with the record): NATS's Nats-Msg-Id.
	id      string
	service string
	data    []byte // Encode's output
}

// entrySink is a Sink that stores encoded entries and says exactly which
// it stored. FileSink and NATSSink have it; the Writer adapts any other
// Sink.
type entrySink interface {
	// writeEntries stores es and sets stored[i] for each es[i] it knows
	// is stored (len(stored) == len(es), all false on entry). It returns
	// promptly once ctx is done; err says why the others were not stored.
	// It must not keep es or their data.
	writeEntries(ctx context.Context, es []entry, stored []bool) error
}

// recordSink adapts a Sink without writeEntries: it decodes the entries
// and counts the first n Write reports as stored.
type recordSink struct{ Sink }

func (s recordSink) writeEntries(ctx context.Context, es []entry, stored []bool) error {
	recs := make([]*Record, 0, len(es))
	idx := make([]int, 0, len(es))
	var decErr error
	for i, e := range es {
		r, err := Decode(e.data)
		if err != nil {
			decErr = fmt.Errorf("decode spooled record: %w", err)
			continue
		}
		recs = append(recs, r)
		idx = append(idx, i)
	}
	n, err := s.Write(ctx, recs)
	for _, i := range idx[:min(max(n, 0), len(idx))] {
		stored[i] = true
	}
	if err == nil {
		err = decErr
	}
	return err
}
