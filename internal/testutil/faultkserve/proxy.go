package faultkserve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// maxMsgSize lifts gRPC's 4 MiB default on both legs, so the proxy never
// refuses a message the upstream would take.
const maxMsgSize = 1 << 30

// restartWait bounds how long Restart retries to bind the saved address:
// a port can stay busy for a moment after the old listener closed.
const restartWait = 2 * time.Second

// ErrClosed is returned by Restart after Close.
var ErrClosed = errors.New("faultkserve: proxy closed")

// Proxy is a fault-injecting KServe v2 gRPC server in front of one upstream
// model server. Its methods are safe for concurrent use.
type Proxy struct {
	pb.UnimplementedGRPCInferenceServiceServer

	upstream pb.GRPCInferenceServiceClient
	conn     *grpc.ClientConn
	addr     string        // host:port, kept across Stop and Restart
	closed   chan struct{} // closed by Close; releases hung calls

	calls, failed, forwarded atomic.Int64

	mu     sync.Mutex    // protects the fields below
	srv    *grpc.Server  // nil while stopped
	served chan struct{} // closed when srv's Serve has returned
	done   bool          // Close was called
	fault  fault
}

// fault is the fault plan for ModelInfer.
type fault struct {
	hang  bool
	every int64   // fail every nth call; 0: off
	seen  int64   // calls counted since SetErrorEvery
	rate  float64 // fail this share at random; 0: off
	code  codes.Code
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to the KServe
// v2 gRPC server at upstream (host:port). The upstream connection is made
// lazily, so upstream need not be up yet. Call Close when done.
func New(upstream string) (*Proxy, error) {
	conn, err := grpc.NewClient(upstream,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("dial upstream %s: %w", upstream, err)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &Proxy{
		upstream: pb.NewGRPCInferenceServiceClient(conn),
		conn:     conn,
		addr:     lis.Addr().String(),
		closed:   make(chan struct{}),
	}
	p.mu.Lock()
	p.serve(lis)
	p.mu.Unlock()
	return p, nil
}

// serve starts a fresh gRPC server on lis. p.mu must be held.
func (p *Proxy) serve(lis net.Listener) {
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize))
	pb.RegisterGRPCInferenceServiceServer(srv, p)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis) // returns when Stop closes the listener
	}()
	p.srv, p.served = srv, served
}

// Addr returns the proxy's host:port. It stays the same across Stop and
// Restart.
func (p *Proxy) Addr() string { return p.addr }

// Stop closes the listener and every open connection, cancelling the calls in
// flight (forwarded and hung ones alike), so new dials are refused until
// Restart. Stopping a stopped proxy does nothing.
func (p *Proxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

func (p *Proxy) stopLocked() {
	if p.srv == nil {
		return
	}
	// Stop, not GracefulStop: a crashed server does not finish its calls.
	p.srv.Stop()
	<-p.served
	p.srv, p.served = nil, nil
}

// Restart listens again on the proxy's address after Stop. It retries for a
// short while if the port is still busy and returns the bind error if it
// stays busy, or ErrClosed after Close. Restarting a running proxy does
// nothing. The fault plan and the counters survive a restart.
func (p *Proxy) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return ErrClosed
	}
	if p.srv != nil {
		return nil
	}
	var lc net.ListenConfig
	deadline := time.Now().Add(restartWait)
	for {
		lis, err := lc.Listen(context.Background(), "tcp", p.addr)
		if err == nil {
			p.serve(lis)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faultkserve: listen on %s again: %w", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SetDown stops the proxy (down) or restarts it on the same address (up);
// see Stop and Restart.
func (p *Proxy) SetDown(down bool) error {
	if down {
		p.Stop()
		return nil
	}
	return p.Restart()
}

// Close stops the proxy for good, releases hung calls and closes the upstream
// connection. It may be called more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return
	}
	p.done = true
	close(p.closed)
	p.stopLocked()
	p.mu.Unlock()
	_ = p.conn.Close() // nothing useful to do about a failed close in a test
}

// SetErrorEvery makes every nth ModelInfer call (the nth, the 2nth, …,
// counted from this call on) fail with code, without reaching the upstream.
// n <= 0 turns error injection off. It replaces a rate set by SetErrorRate.
func (p *Proxy) SetErrorEvery(n int, code codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault.every, p.fault.seen, p.fault.rate, p.fault.code = max(int64(n), 0), 0, 0, code
}

// SetErrorRate makes each ModelInfer call fail with code with probability
// rate (clamped to [0, 1]), without reaching the upstream. A rate of 0 turns
// error injection off. It replaces a plan set by SetErrorEvery. Prefer
// SetErrorEvery where a test asserts exact counts.
func (p *Proxy) SetErrorRate(rate float64, code codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault.rate, p.fault.every, p.fault.seen, p.fault.code = min(max(rate, 0), 1), 0, 0, code
}

// SetHang makes ModelInfer block (hang) until the caller's context ends, the
// proxy stops or it closes, or stops that for calls that arrive afterwards;
// calls already hanging keep hanging. A hang takes precedence over injected
// errors. Readiness and metadata calls keep being forwarded.
func (p *Proxy) SetHang(hang bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault.hang = hang
}

// ClearFaults turns every fault off: no hang, no injected errors.
func (p *Proxy) ClearFaults() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = fault{}
}

// Calls returns the number of ModelInfer calls received.
func (p *Proxy) Calls() int64 { return p.calls.Load() }

// Failed returns the number of ModelInfer calls answered with an injected
// error or ended while hung.
func (p *Proxy) Failed() int64 { return p.failed.Load() }

// Forwarded returns the number of ModelInfer calls sent to the upstream.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

type action int

const (
	actForward action = iota
	actFail
	actHang
)

// next decides what the current ModelInfer call gets.
func (p *Proxy) next() (action, codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := &p.fault
	switch {
	case f.hang:
		return actHang, codes.OK
	case f.every > 0:
		f.seen++
		if f.seen%f.every == 0 {
			return actFail, f.code
		}
	case f.rate > 0:
		if rand.Float64() < f.rate { //nolint:gosec // fault injection, not security
			return actFail, f.code
		}
	}
	return actForward, codes.OK
}

// ModelInfer applies the fault plan, then forwards the call.
func (p *Proxy) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	p.calls.Add(1)
	switch act, code := p.next(); act {
	case actFail:
		p.failed.Add(1)
		return nil, status.Errorf(code, "faultkserve: injected %s", code)
	case actHang:
		select {
		case <-ctx.Done():
		case <-p.closed:
		}
		p.failed.Add(1)
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		return nil, status.Error(codes.Unavailable, "faultkserve: proxy closed")
	case actForward:
	}
	p.forwarded.Add(1)
	return forward(ctx, req, p.upstream.ModelInfer)
}

// ServerLive forwards the call.
func (p *Proxy) ServerLive(ctx context.Context, req *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return forward(ctx, req, p.upstream.ServerLive)
}

// ServerReady forwards the call.
func (p *Proxy) ServerReady(ctx context.Context, req *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return forward(ctx, req, p.upstream.ServerReady)
}

// ModelReady forwards the call.
func (p *Proxy) ModelReady(ctx context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	return forward(ctx, req, p.upstream.ModelReady)
}

// ServerMetadata forwards the call.
func (p *Proxy) ServerMetadata(ctx context.Context, req *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return forward(ctx, req, p.upstream.ServerMetadata)
}

// ModelMetadata forwards the call.
func (p *Proxy) ModelMetadata(ctx context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	return forward(ctx, req, p.upstream.ModelMetadata)
}

// ModelConfig forwards the call.
func (p *Proxy) ModelConfig(ctx context.Context, req *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	return forward(ctx, req, p.upstream.ModelConfig)
}

// ModelStatistics forwards the call.
func (p *Proxy) ModelStatistics(ctx context.Context, req *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	return forward(ctx, req, p.upstream.ModelStatistics)
}

// RepositoryIndex forwards the call.
func (p *Proxy) RepositoryIndex(ctx context.Context, req *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	return forward(ctx, req, p.upstream.RepositoryIndex)
}

// forward makes one unary upstream call with the incoming call's deadline and
// metadata and copies the upstream's response header and trailer back. An
// upstream status error is returned as is, so its code and details reach the
// caller unchanged.
func forward[Req, Resp any](ctx context.Context, req Req, call func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	out := ctx
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		out = metadata.NewOutgoingContext(ctx, passable(md))
	}
	var header, trailer metadata.MD
	resp, err := call(out, req, grpc.Header(&header), grpc.Trailer(&trailer))
	if len(header) > 0 {
		_ = grpc.SetHeader(ctx, header) // fails only once headers were sent, which they were not
	}
	if len(trailer) > 0 {
		_ = grpc.SetTrailer(ctx, trailer)
	}
	return resp, err
}

// passable drops the pseudo-headers and transport headers of incoming
// metadata, which gRPC sets itself on the outgoing call.
func passable(in metadata.MD) metadata.MD {
	out := make(metadata.MD, len(in))
	for k, v := range in {
		switch {
		case strings.HasPrefix(k, ":"), strings.HasPrefix(k, "grpc-"),
			k == "content-type", k == "user-agent", k == "te":
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	return out
}

var _ pb.GRPCInferenceServiceServer = (*Proxy)(nil)
