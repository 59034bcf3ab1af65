package grpcapi

import (
	"context"
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// DefaultMaxRecvMsgSize is the default largest request message, 64 MiB.
const DefaultMaxRecvMsgSize = 64 << 20

// ServerOptions configure the *grpc.Server built by NewServer. Zero values
// take defaults.
type ServerOptions struct {
	// MaxRecvMsgSize bounds a request message; larger ones are refused
	// with ResourceExhausted. Default DefaultMaxRecvMsgSize.
	MaxRecvMsgSize int
	// MaxSendMsgSize bounds a response message. Default math.MaxInt32,
	// as in Triton.
	MaxSendMsgSize int
	// KeepaliveMinTime is the shortest interval between client pings the
	// server tolerates; clients pinging more often are disconnected.
	// Default 10s.
	KeepaliveMinTime time.Duration
	// KeepaliveTime is how long a connection may be idle before the server
	// pings the client. Default 2m.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long the server waits for a ping's answer
	// before closing the connection. Default 20s.
	KeepaliveTimeout time.Duration
	// HealthPollInterval is how often a health Watch stream re-reads
	// readiness. Default 1s.
	HealthPollInterval time.Duration
	// DelayNonInfer is Triton's TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC
	// test hook: every GRPCInferenceService call other than the inference
	// ones waits this long before it is handled, so that a test can see a
	// client deadline expire (qa/L0_client_timeout). 0: off.
	DelayNonInfer time.Duration
	// Extra are more server options: TLS credentials, the authorization
	// and admission interceptors (they run after the metrics and recovery
	// interceptors, so a refusal is counted).
	Extra []grpc.ServerOption
}

func (o *ServerOptions) setDefaults() {
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if o.MaxSendMsgSize <= 0 {
		o.MaxSendMsgSize = math.MaxInt32
	}
	if o.KeepaliveMinTime <= 0 {
		o.KeepaliveMinTime = 10 * time.Second
	}
	if o.KeepaliveTime <= 0 {
		o.KeepaliveTime = 2 * time.Minute
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = 20 * time.Second
	}
	if o.HealthPollInterval <= 0 {
		o.HealthPollInterval = time.Second
	}
}

// NewServer returns a *grpc.Server serving svc, the standard gRPC health
// service (grpc.health.v1, SERVING while the models are ready) and server
// reflection. Every RPC passes through a metrics interceptor and a
// recovery interceptor that turns a panic into Internal.
//
// To stop: call svc.Shutdown (health turns NOT_SERVING, Watch streams
// end), then GracefulStop with a deadline, then Stop, since open
// ModelStreamInfer streams last as long as their clients keep them.
func NewServer(svc *Service, opts ServerOptions) *grpc.Server {
	opts.setDefaults()
	unary := []grpc.UnaryServerInterceptor{svc.metricsUnary, svc.recoverUnary}
	if opts.DelayNonInfer > 0 {
		unary = append(unary, delayNonInfer(opts.DelayNonInfer))
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(opts.MaxSendMsgSize),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             opts.KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    opts.KeepaliveTime,
			Timeout: opts.KeepaliveTimeout,
		}),
		// Calls run on a pool of goroutines whose stacks have already grown
		// to what an inference needs, instead of a fresh goroutine per call
		// that grows its stack, copying it, every time (5 % of a
		// parcel_eta call's CPU). When every worker is busy, grpc starts a
		// goroutine for the call as it would without the pool.
		grpc.NumStreamWorkers(streamWorkers()),
		// Metrics first so that a recovered panic is counted as Internal.
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(svc.metricsStream, svc.recoverStream),
	}, opts.Extra...)...)
	pb.RegisterGRPCInferenceServiceServer(srv, svc)
	healthpb.RegisterHealthServer(srv, &health{svc: svc, poll: opts.HealthPollInterval})
	reflection.Register(srv)
	return srv
}

// delayNonInfer holds each unary GRPCInferenceService call but ModelInfer
// for d before handling it (ServerOptions.DelayNonInfer). A call whose
// deadline passes meanwhile ends there, unhandled.
func delayNonInfer(d time.Duration) grpc.UnaryServerInterceptor {
	prefix := "/" + pb.GRPCInferenceService_ServiceDesc.ServiceName + "/"
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, prefix) || info.FullMethod == pb.GRPCInferenceService_ModelInfer_FullMethodName {
			return handler(ctx, req)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return handler(ctx, req)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The words gRPC clients use for their own deadline: the
				// answer may reach the client before its timer fires.
				return nil, status.Error(codes.DeadlineExceeded, "Deadline Exceeded")
			}
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// streamWorkers is the size of the call goroutine pool: enough for the
// calls a server keeps busy at once, a few per core.
func streamWorkers() uint32 {
	return uint32(min(max(4*runtime.GOMAXPROCS(0), 16), 256))
}

func (s *Service) metricsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	if mr, ok := req.(interface{ GetModelName() string }); ok {
		ctx = telemetry.WithModel(ctx, mr.GetModelName()) // the model's trace settings
	}
	ctx, end := telemetry.TraceGRPC(ctx, info.FullMethod)
	defer end()
	resp, err := handler(ctx, req)
	s.observe(info.FullMethod, start, err)
	return resp, err
}

func (s *Service) metricsStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	s.observe(info.FullMethod, start, err)
	return err
}

func (s *Service) observe(method string, start time.Time, err error) {
	s.metrics.observe(method, status.Code(err), time.Since(start).Seconds())
}

func (s *Service) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.panicked(ctx, info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

func (s *Service) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.panicked(ss.Context(), info.FullMethod, r)
		}
	}()
	return handler(srv, ss)
}

func (s *Service) panicked(ctx context.Context, method string, r any) error {
	s.logger.ErrorContext(ctx, "panic in request handler",
		"method", method, "panic", r, "stack", string(debug.Stack()))
	return apierr.StatusError(codes.Internal, reasonInternal, "internal error while handling "+method)
}

// health serves grpc.health.v1 from the service's readiness: the overall
// status ("") and inference.GRPCInferenceService are SERVING exactly when
// the models are ready and the service is not shutting down.
type health struct {
	healthpb.UnimplementedHealthServer
	svc  *Service
	poll time.Duration
}

func (h *health) status(service string) (healthpb.HealthCheckResponse_ServingStatus, bool) {
	if service != "" && service != pb.GRPCInferenceService_ServiceDesc.ServiceName {
		return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, false
	}
	if h.svc.ready() {
		return healthpb.HealthCheckResponse_SERVING, true
	}
	return healthpb.HealthCheckResponse_NOT_SERVING, true
}

// Check implements grpc.health.v1.Health.
func (h *health) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, known := h.status(req.GetService())
	if !known {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", shorten(req.GetService()))
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List implements grpc.health.v1.Health.
func (h *health) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, name := range []string{"", pb.GRPCInferenceService_ServiceDesc.ServiceName} {
		st, _ := h.status(name)
		out.Statuses[name] = &healthpb.HealthCheckResponse{Status: st}
	}
	return out, nil
}

// Watch implements grpc.health.v1.Health: it sends the current status, then
// every change, until the client goes away or the service shuts down.
func (h *health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx := stream.Context()
	ticker := time.NewTicker(h.poll)
	defer ticker.Stop()
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	for {
		st, _ := h.status(req.GetService())
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-h.svc.closed:
			if last != healthpb.HealthCheckResponse_NOT_SERVING && last != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
				return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
			}
			return nil
		case <-ticker.C:
		}
	}
}
