package admission

import (
	"context"
	"strconv"

	"google.golang.org/grpc/stats"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Responses are charged to the same budget as requests (issue 22): an
// edge that is about to build a response of n bytes (its encoding, and
// the model outputs it holds meanwhile) takes them first. A response the
// budget cannot take now is refused with ErrOverloaded (503, Retry-After:
// 1); one it could never take, more than the seven eighths that large
// requests may hold, is refused with a ResponseTooLarge error (413).
// Like a request, a response of at most SmallBytes may take the reserve,
// so ordinary answers keep going out while large ones hold the rest.

// ReserveResponse takes n bytes of b for a response about to be built.
// On success the caller gives them back with Release once the response is
// written. A nil Budget takes nothing and always succeeds.
func (b *Budget) ReserveResponse(n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	if b.max > 0 && n > b.bulk {
		return responseTooLarge(n, b.bulk)
	}
	if !b.acquire(n, n > SmallBytes) {
		return ErrOverloaded
	}
	return nil
}

// ChargeResponse charges n bytes of a response to the request whose
// context ctx is: they are held until the request ends (for gRPC, once
// its last message is sent; see GRPCServerOptions) and refused like
// ReserveResponse's. Without an account in ctx (no admission on the
// listener) it charges nothing.
func ChargeResponse(ctx context.Context, n int64) error {
	a, ok := ctx.Value(accountKey{}).(*account)
	if !ok || n <= 0 {
		return nil
	}
	if a.b.max > 0 && n > a.b.bulk {
		return responseTooLarge(n, a.b.bulk)
	}
	return a.take(n, n > SmallBytes) // a small response may take the reserve
}

func responseTooLarge(n, limit int64) error {
	return apierr.Errorf(apierr.KindResourceExhausted, apierr.ReasonResponseTooLarge,
		"the response would need %s bytes of memory, more than the server's in-flight budget lets one request hold (%s bytes); ask for less (fewer or smaller outputs, binary_data_output instead of JSON)",
		strconv.FormatInt(n, 10), strconv.FormatInt(limit, 10))
}

// responseAccounts is the gRPC stats handler that gives every call an
// account (found by Charge and ChargeResponse) and closes it when the
// call ends: after its last message went out, which an interceptor never
// sees (grpc-go encodes a unary call's response after every interceptor
// has returned).
type responseAccounts struct{ g *grpcGate }

func (r responseAccounts) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, accountKey{}, &account{b: r.g.budget, rej: r.g.rej})
}

func (r responseAccounts) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, end := s.(*stats.End); !end {
		return
	}
	if a, ok := ctx.Value(accountKey{}).(*account); ok {
		a.close()
	}
}

func (responseAccounts) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (responseAccounts) HandleConn(context.Context, stats.ConnStats) {}

// ReserveStreamResponse takes n bytes for one response message of a
// stream, from the budget of the call whose context ctx is; release gives
// them back once the message is sent. A stream's responses are not
// charged to its account, which is held until the stream ends. Without
// an account in ctx it takes nothing.
func ReserveStreamResponse(ctx context.Context, n int64) (release func(), err error) {
	a, ok := ctx.Value(accountKey{}).(*account)
	if !ok || n <= 0 {
		return func() {}, nil
	}
	if err := a.b.ReserveResponse(n); err != nil {
		return nil, err
	}
	return func() { a.b.Release(n) }, nil
}
