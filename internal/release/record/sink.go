package record

import "context"

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
