package admission

import (
	"context"
	"math"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// tapFloor is how much of the budget must be free for a new gRPC stream to
// be accepted (a quarter of the budget if that is less). The tap runs before gRPC reads the stream's first message
// into memory and cannot know its size; with less than this free, even a
// modest message could not be charged, so the stream is refused before
// its bytes are read rather than after.
const tapFloor = 64 << 10

// GRPCServerOptions returns the server options that bound a gRPC
// listener's memory:
//
//   - grpc.MaxRecvMsgSize(l.MaxBodyBytes): a larger message is refused with
//     ResourceExhausted by gRPC itself (these refusals are not in the
//     rejections metric: gRPC answers them before any hook runs);
//   - grpc.MaxHeaderListSize(l.MaxHeaderBytes);
//   - grpc.MaxConcurrentStreams(l.MaxConcurrentStreams, default 250);
//   - an InTapHandle that refuses a new stream with ResourceExhausted
//     (ErrorInfo reason "overloaded") when less than 64 KiB of the budget is
//     free (a quarter of it, for budgets under 256 KiB), and one carrying more than l.MaxHeaderCount metadata values
//     (reason "too_many_headers");
//   - unary and stream interceptors that charge each received message's
//     proto.Size to the budget (ResourceExhausted "overloaded" when it
//     cannot): a unary request for the whole call, a stream's latest
//     message until the next one is received or the stream ends.
//
// gRPC allows one InTapHandle per server: don't combine these options with
// another. The interceptors are chained (grpc.ChainUnaryInterceptor), so
// they compose with the server's others; they run after any added before
// them. b and m may be nil: an unlimited budget, unregistered metrics.
func GRPCServerOptions(listener string, l Limits, b *Budget, m *Metrics) []grpc.ServerOption {
	if b == nil {
		b = NewBudget(0, nil)
	}
	g := &grpcGate{limits: l, budget: b, rej: orUnregistered(m).forListener(listener), floor: min(tapFloor, b.Max()/4)}
	streams := l.MaxConcurrentStreams
	if streams == 0 {
		streams = DefaultMaxConcurrentStreams
	}
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(streams),
		grpc.InTapHandle(g.tap),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
		grpc.StatsHandler(responseAccounts{g}),
	}
	if l.MaxBodyBytes > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(int(min(l.MaxBodyBytes, math.MaxInt32))))
	}
	if l.MaxHeaderBytes > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(min(l.MaxHeaderBytes, math.MaxInt32))))
	}
	return opts
}

// grpcGate is one gRPC listener's admission control.
type grpcGate struct {
	limits Limits
	budget *Budget
	rej    *rejectCounters
	floor  int64 // a new stream needs this much of the budget free
}

func (g *grpcGate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if limit := g.limits.MaxHeaderCount; limit > 0 && tooManyMetadata(info.Header, limit) {
		g.rej.tooManyHeaders.Inc()
		return ctx, refusal(ReasonTooManyHeaders, "request has more than "+strconv.Itoa(limit)+" metadata values")
	}
	if free := g.budget.free(); free <= 0 || free < g.floor {
		g.rej.overloaded.Inc()
		return ctx, refusal(ReasonOverloaded, ErrOverloaded.Error())
	}
	return ctx, nil
}

func (g *grpcGate) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	n := msgSize(req)
	if !g.budget.TryAcquire(n) {
		g.rej.overloaded.Inc()
		return nil, refusal(ReasonOverloaded, ErrOverloaded.Error())
	}
	defer g.budget.Release(n)
	return handler(ctx, req)
}

func (g *grpcGate) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	cs := &chargedStream{ServerStream: ss, g: g}
	defer cs.close()
	return handler(srv, cs)
}

// chargedStream charges the latest received message of a stream to the
// budget. The previous one is released when the next arrives: a stream
// handler is done with a request once it asks for the next.
type chargedStream struct {
	grpc.ServerStream
	g *grpcGate

	mu     sync.Mutex // protects held, closed
	held   int64
	closed bool
}

func (s *chargedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		s.swap(0)
		return err
	}
	if !s.swap(msgSize(m)) {
		s.g.rej.overloaded.Inc()
		return refusal(ReasonOverloaded, ErrOverloaded.Error())
	}
	return nil
}

// swap releases the held charge and takes n instead, reporting whether
// the budget could take n.
func (s *chargedStream) swap(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.g.budget.Release(s.held)
	s.held = 0
	if s.closed || !s.g.budget.TryAcquire(n) {
		return false
	}
	s.held = n
	return true
}

func (s *chargedStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.g.budget.Release(s.held)
	s.held = 0
	s.closed = true
}

// msgSize is the size charged for a received message: its encoded size.
func msgSize(m any) int64 {
	if pm, ok := m.(proto.Message); ok {
		return int64(proto.Size(pm))
	}
	return 0
}

// tooManyMetadata reports whether md holds more than limit values.
func tooManyMetadata(md metadata.MD, limit int) bool {
	if len(md) > limit {
		return true
	}
	n := 0
	for _, v := range md {
		n += len(v)
		if n > limit {
			return true
		}
	}
	return false
}

// refusal is a ResourceExhausted status carrying reason in an ErrorInfo,
// as every Sluice gRPC error does.
func refusal(reason, msg string) error {
	return apierr.StatusError(codes.ResourceExhausted, reason, msg)
}
