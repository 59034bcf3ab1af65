package admission

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// startGRPC serves the standard health service behind GRPCServerOptions
// on a loopback port and returns a client for it.
func startGRPC(t *testing.T, l Limits, b *Budget, m *Metrics) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(GRPCServerOptions("grpc", l, b, m)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		wg.Wait()
	})
	return healthpb.NewHealthClient(conn)
}

// requireRefused checks a ResourceExhausted status with its ErrorInfo
// reason.
func requireRefused(t *testing.T, err error, reason string) {
	t.Helper()
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "status: %v", st)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			require.Equal(t, reason, ei.GetReason())
			require.Equal(t, apierr.ErrorDomain, ei.GetDomain())
			return
		}
	}
	t.Fatalf("no ErrorInfo in %v", st)
}

func TestGRPC(t *testing.T) {
	const kib = 1 << 10
	m := NewMetrics(nil)
	b := NewBudget(1024*kib, m)
	c := startGRPC(t, Limits{MaxBodyBytes: 512 * kib, MaxHeaderCount: 100}, b, m)
	rejected := func(reason string) float64 {
		return testutil.ToFloat64(m.rejections.WithLabelValues("grpc", reason))
	}

	t.Run("a small call passes", func(t *testing.T) {
		resp, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
		require.Zero(t, b.InUse())
	})

	t.Run("a message over MaxRecvMsgSize", func(t *testing.T) {
		_, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 513*kib)})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "err: %v", err)
		require.Zero(t, b.InUse())
	})

	t.Run("a message the budget cannot take", func(t *testing.T) {
		// 100 KiB free: enough for the tap to let the stream in, not for
		// the 200 KiB message the interceptor charges.
		require.True(t, b.TryAcquire(924*kib))
		defer b.Release(924 * kib)
		before := rejected(ReasonOverloaded)
		_, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 200*kib)})
		requireRefused(t, err, ReasonOverloaded)
		require.InDelta(t, before+1, rejected(ReasonOverloaded), 0)
		_, err = c.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "a small call still fits")
	})

	t.Run("streams refused while the budget is exhausted", func(t *testing.T) {
		require.True(t, b.TryAcquire(b.Max()))
		before := rejected(ReasonOverloaded)
		w, err := c.Watch(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = w.Recv()
		requireRefused(t, err, ReasonOverloaded)
		_, err = c.Check(t.Context(), &healthpb.HealthCheckRequest{})
		requireRefused(t, err, ReasonOverloaded)
		require.InDelta(t, before+2, rejected(ReasonOverloaded), 0)
		b.Release(b.Max())
		_, err = c.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "accepted again once the budget frees")
	})

	t.Run("a stream's message is charged while it runs", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req := &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 10*kib)}
		w, err := c.Watch(ctx, req)
		require.NoError(t, err)
		resp, err := w.Recv()
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVICE_UNKNOWN, resp.GetStatus())
		require.Equal(t, int64(proto.Size(req)), b.InUse())
		cancel()
		waitFor(t, "the stream's charge to be released", func() bool { return b.InUse() == 0 })
	})

	t.Run("too many metadata values", func(t *testing.T) {
		md := metadata.MD{}
		for i := range 120 {
			md.Set("x-test-"+strconv.Itoa(i), "v")
		}
		_, err := c.Check(metadata.NewOutgoingContext(t.Context(), md), &healthpb.HealthCheckRequest{})
		requireRefused(t, err, ReasonTooManyHeaders)
		require.InDelta(t, 1, rejected(ReasonTooManyHeaders), 0)
	})

	require.Zero(t, b.InUse())
}

func TestGRPCWithoutBudgetOrMetrics(t *testing.T) {
	c := startGRPC(t, Limits{}, nil, nil)
	_, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 1<<20)})
	require.Equal(t, codes.NotFound, status.Code(err), "gRPC's default limit, unlimited budget: the service answers")
}
