package infer

import "context"

type queuedKey struct{}

// WithQueued returns a copy of ctx carrying f, which the scheduler that
// takes a request made with that context calls once the request holds its
// place in the queue. Like net/http/httptrace, the hook travels in the
// context so that the layers between the protocol edge and the scheduler
// need not know it. A gRPC stream uses it to read the next request of a
// sequence only after the previous one is queued, so that a sequence's
// requests keep their order while several of them wait in the queue at
// once, as Triton's streams allow.
func WithQueued(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, queuedKey{}, f)
}

// Queued calls the hook WithQueued put in ctx, if any. A scheduler calls
// it at most once per request, after queueing it; f must be quick and must
// not block.
func Queued(ctx context.Context) {
	if f, ok := ctx.Value(queuedKey{}).(func()); ok {
		f()
	}
}
