package record

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultSlack is StreamOptions.Slack's default.
const DefaultSlack = time.Minute

// StreamOptions configure a StreamReader beyond ReadOptions.
type StreamOptions struct {
	ReadOptions
	// Slack is how much later than its Time a record may have been stored
	// (the shadow call, the writer's queue, clock skew between hosts).
	// With From set the reader starts at stream time From-Slack; with To
	// set it stops at the first message stored at or after To+Slack.
	// Records are filtered on Time either way. Default DefaultSlack.
	Slack time.Duration
}

// MessageError is a malformed message in a JetStream recording.
type MessageError struct {
	Stream   string
	Sequence uint64
	Err      error
}

// Error names the stream and the message's sequence number.
func (e *MessageError) Error() string {
	return fmt.Sprintf("stream %s message %d: %v", e.Stream, e.Sequence, e.Err)
}

// Unwrap returns the cause, e.g. a *VersionError.
func (e *MessageError) Unwrap() error { return e.Err }

// StreamReader reads a JetStream recording in stream order with an ordered
// consumer, from the start (or From-Slack) to the end of the stream as it
// is when the reader catches up with it (or to To+Slack).
type StreamReader struct {
	opts    StreamOptions
	stream  string
	nc      *nats.Conn
	it      jetstream.MessagesContext
	end     bool
	skipped int
}

// OpenStream opens the stream nopts.Stream on nopts.URL for reading; a
// missing stream is an error. Only the connection fields of nopts are
// used.
func OpenStream(ctx context.Context, nopts NATSOptions, opts StreamOptions) (*StreamReader, error) {
	nopts.defaults()
	if opts.Slack <= 0 {
		opts.Slack = DefaultSlack
	}
	nc, err := connect(ctx, nopts.URL, slog.New(slog.DiscardHandler), secure(nopts.TLS))
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", nopts.Stream, err)
	}
	r := &StreamReader{opts: opts, stream: nopts.Stream, nc: nc}
	if err := r.open(ctx, nopts); err != nil {
		nc.Close()
		return nil, fmt.Errorf("open stream %s: %w", nopts.Stream, err)
	}
	return r, nil
}

func (r *StreamReader) open(ctx context.Context, nopts NATSOptions) error {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, nopts.Stream)
	if err != nil {
		return err
	}
	filter := nopts.SubjectPrefix + ".>"
	if r.opts.Service != "" {
		filter = nopts.Subject(r.opts.Service)
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:   []string{filter},
		DeliverPolicy:    jetstream.DeliverAllPolicy,
		MaxResetAttempts: 5,
	}
	if !r.opts.From.IsZero() {
		start := r.opts.From.Add(-r.opts.Slack)
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &start
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	r.it, err = cons.Messages()
	if err != nil {
		return err
	}
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		r.end = true // nothing to read now; do not wait for more
	}
	return nil
}

// Skipped returns how many malformed messages SkipBad has skipped so far.
func (r *StreamReader) Skipped() int { return r.skipped }

// Next returns the next record in range, or io.EOF at the end. A malformed
// message is a *MessageError unless ReadOptions.SkipBad is set.
func (r *StreamReader) Next(ctx context.Context) (*Record, error) {
	for !r.end {
		msg, err := r.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("read stream %s: %w", r.stream, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", r.stream, err)
		}
		if md.NumPending == 0 {
			r.end = true
		}
		if !r.opts.To.IsZero() && !md.Timestamp.Before(r.opts.To.Add(r.opts.Slack)) {
			r.end = true
			break
		}
		rec, err := Decode(msg.Data())
		if err != nil {
			if r.opts.SkipBad {
				r.skipped++
				continue
			}
			return nil, &MessageError{Stream: r.stream, Sequence: md.Sequence.Stream, Err: err}
		}
		if r.opts.match(rec) {
			return rec, nil
		}
	}
	return nil, io.EOF
}

// Close stops the consumer and closes the connection.
func (r *StreamReader) Close() error {
	if r.nc == nil {
		return nil
	}
	r.end = true
	r.it.Stop()
	r.nc.Close()
	r.nc = nil
	return nil
}
