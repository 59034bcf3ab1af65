package gateway_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/pb/gatewaypb"
)

// grpcClient serves e's gateway over an in-memory gRPC connection.
func grpcClient(tb testing.TB, e *testEnv) gatewaypb.GatewayClient {
	tb.Helper()
	return gatewaypb.NewGatewayClient(grpcConn(tb, e))
}

// grpcConn serves e's gateway's gRPC server, with the options the
// product gives it, over an in-memory connection.
func grpcConn(tb testing.TB, e *testEnv) *grpc.ClientConn {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(e.g.GRPCServerOptions()...)
	e.g.RegisterGRPC(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///gateway",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

// grpcReason returns the code and ErrorInfo reason of a gRPC error.
func grpcReason(t *testing.T, err error) (codes.Code, string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason()
		}
	}
	t.Fatalf("status %v has no ErrorInfo", st)
	return 0, ""
}

func predictRequest(t *testing.T, fields map[string]any) *gatewaypb.PredictRequest {
	t.Helper()
	return &gatewaypb.PredictRequest{Service: "eta", Fields: mustStruct(t, fields)}
}

func mustStruct(tb testing.TB, fields map[string]any) *structpb.Struct {
	tb.Helper()
	s, err := structpb.NewStruct(fields)
	require.NoError(tb, err)
	return s
}

func TestGRPCPredict(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, routes: routingRoutes, gateway: []string{
		clientsYAML("{requests_per_second: 0.1, burst: 2}"),
		"priority_headers: [{name: x-user-type, value: premium, priority: 1}]",
	}})))
	c := grpcClient(t, e)
	user := coldUser(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer alice-key", "x-canary", "true", "x-request-id", "grpc-req-1", "x-user-type", "premium")
	var hdr metadata.MD
	resp, err := c.Predict(ctx, predictRequest(t, map[string]any{"user_id": user, "base_eta": 30}), grpc.Header(&hdr))
	require.NoError(t, err)
	require.Equal(t, "grpc-req-1", resp.GetRequestId())
	require.Equal(t, "eta", resp.GetService())
	require.Equal(t, "canary", resp.GetRoute(), "metadata routes like headers")
	require.Equal(t, "2", resp.GetVersion())
	require.Equal(t, "eta_model", resp.GetModel())
	require.Equal(t, "model", resp.GetSource())
	require.Equal(t, []string{"grpc-req-1"}, hdr.Get("x-request-id"))
	require.Equal(t, []string{"canary"}, hdr.Get("x-sluice-route"))
	require.Equal(t, []string{"2"}, hdr.Get("x-sluice-version"))
	outs := resp.GetOutputs().AsMap()
	require.Equal(t, float64(user)+30, outs["eta_minutes"])
	require.InDelta(t, 0.9, outs["confidence"], 1e-6)
	req := e.model.last(t)
	require.Equal(t, int64(1), req.Parameters["priority"], "metadata sets the priority")
	require.Equal(t, "grpc-req-1", req.ID)

	// Digit strings work for ids, as over HTTP.
	_, err = c.Predict(ctx, predictRequest(t, map[string]any{"user_id": strconv.Itoa(user), "base_eta": 30}))
	require.NoError(t, err)

	// alice's burst of 2 is spent: the third call is refused with a
	// retry-after trailer.
	var trailer metadata.MD
	_, err = c.Predict(ctx, predictRequest(t, map[string]any{"user_id": user, "base_eta": 30}), grpc.Trailer(&trailer))
	code, reason := grpcReason(t, err)
	require.Equal(t, codes.ResourceExhausted, code)
	require.Equal(t, gateway.ReasonRateLimited, reason)
	ra, convErr := strconv.Atoi(firstOf(trailer.Get("retry-after")))
	require.NoError(t, convErr, "retry-after %v", trailer.Get("retry-after"))
	require.GreaterOrEqual(t, ra, 1)
}

func firstOf(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func TestGRPCErrors(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{clientsYAML("{}")}})))
	c := grpcClient(t, e)
	authed := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "alice-key")
	ctx, cancel := context.WithTimeout(authed, 5*time.Second)
	defer cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		req    *gatewaypb.PredictRequest
		code   codes.Code
		reason string
	}{
		{name: "unknown service", ctx: ctx, req: &gatewaypb.PredictRequest{Service: "nope"}, code: codes.NotFound, reason: gateway.ReasonNotFound},
		{name: "no key", ctx: context.Background(), req: predictRequest(t, map[string]any{"user_id": 7, "base_eta": 30}), code: codes.Unauthenticated, reason: auth.ReasonMissingAPIKey},
		{
			name: "wrong key", ctx: metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope"),
			req: predictRequest(t, map[string]any{"user_id": 7, "base_eta": 30}), code: codes.Unauthenticated, reason: auth.ReasonInvalidAPIKey,
		},
		{name: "missing field", ctx: ctx, req: predictRequest(t, map[string]any{"user_id": 7}), code: codes.InvalidArgument, reason: gateway.ReasonMissingField},
		{name: "no fields", ctx: ctx, req: &gatewaypb.PredictRequest{Service: "eta"}, code: codes.InvalidArgument, reason: gateway.ReasonMissingField},
		{name: "unknown field", ctx: ctx, req: predictRequest(t, map[string]any{"user_id": 7, "base_eta": 30, "x": 1}), code: codes.InvalidArgument, reason: gateway.ReasonUnknownField},
		{name: "wrong type", ctx: ctx, req: predictRequest(t, map[string]any{"user_id": true, "base_eta": 30}), code: codes.InvalidArgument, reason: gateway.ReasonInvalidField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Predict(tt.ctx, tt.req)
			code, reason := grpcReason(t, err)
			require.Equal(t, tt.code, code, "err: %v", err)
			require.Equal(t, tt.reason, reason, "err: %v", err)
		})
	}
	require.Zero(t, e.model.calls.Load())
}

// The gRPC edge returns the call's trace in its header metadata, errors
// included.
func TestGRPCReturnsTheTrace(t *testing.T) {
	e := newEtaEnv(t)
	c := grpcClient(t, e)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", parent)
	var hdr metadata.MD
	_, err := c.Predict(ctx, predictRequest(t, map[string]any{"user_id": 7, "route_id": 3, "base_eta": 30}), grpc.Header(&hdr))
	require.NoError(t, err)
	require.Equal(t, []string{"4bf92f3577b34da6a3ce929d0e0e4736"}, hdr.Get("x-trace-id"))
	require.Contains(t, firstOf(hdr.Get("traceparent")), "4bf92f3577b34da6a3ce929d0e0e4736")
	hdr = nil
	_, err = c.Predict(ctx, predictRequest(t, map[string]any{"user_id": 8, "route_id": 3, "base_eta": 30}), grpc.Header(&hdr))
	code, reason := grpcReason(t, err)
	require.Equal(t, codes.NotFound, code)
	require.Equal(t, gateway.ReasonMissingFeature, reason)
	require.Equal(t, []string{"4bf92f3577b34da6a3ce929d0e0e4736"}, hdr.Get("x-trace-id"))
}

// A gRPC call for no service the gateway has, or of a method it does not
// serve, is refused with a reason and counted under service "unknown",
// as the HTTP edge counts a path it does not serve.
func TestGRPCUnknownCallsCounted(t *testing.T) {
	e := newEtaEnv(t)
	conn := grpcConn(t, e)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "alice-key")

	_, err := gatewaypb.NewGatewayClient(conn).Predict(ctx, &gatewaypb.PredictRequest{Service: "nope"})
	code, reason := grpcReason(t, err)
	require.Equal(t, codes.NotFound, code)
	require.Equal(t, gateway.ReasonNotFound, reason)

	for _, method := range []string{"/sluice.gateway.v1.Gateway/Nope", "/inference.GRPCInferenceService/ModelInfer"} {
		err := conn.Invoke(ctx, method, &gatewaypb.PredictRequest{}, &gatewaypb.PredictResponse{})
		code, reason := grpcReason(t, err)
		require.Equal(t, codes.Unimplemented, code, "%s: %v", method, err)
		require.Equal(t, gateway.ReasonNotFound, reason, "%s: %v", method, err)
		require.Contains(t, status.Convert(err).Message(), method)
	}
	count := func(labels map[string]string) float64 {
		return metricValue(t, e.reg, "sluice_gateway_requests_total", labels)
	}
	require.Equal(t, 1.0, count(map[string]string{"service": "unknown", "route": "unknown", "code": "404", "reason": "not_found"}))
	require.Equal(t, 2.0, count(map[string]string{"service": "unknown", "route": "unknown", "code": "501", "reason": "not_found"}))
	require.Zero(t, e.model.calls.Load())
}
