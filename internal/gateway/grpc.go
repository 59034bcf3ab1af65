package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-ml/sluice/internal/gateway/ratelimit"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/gatewaypb"
)

// grpcService is the gateway's gRPC edge (sluice.gateway.v1.Gateway).
type grpcService struct {
	gatewaypb.UnimplementedGatewayServer
	g *Gateway
}

// RegisterGRPC registers the gateway's gRPC service on s.
func (g *Gateway) RegisterGRPC(s *grpc.Server) {
	gatewaypb.RegisterGatewayServer(s, &grpcService{g: g})
}

// Predict calls one service with the same pipeline as the HTTP edge. The
// metadata plays the part of the HTTP headers.
func (s *grpcService) Predict(ctx context.Context, req *gatewaypb.PredictRequest) (*gatewaypb.PredictResponse, error) {
	g := s.g
	st := g.state.Load()
	svc, ok := st.byName[req.GetService()]
	if !ok {
		return nil, grpcapi.ToStatus(infer.Errorf(infer.KindNotFound, ReasonNotFound, "no service named %q", req.GetService()))
	}
	r := &http.Request{Header: http.Header{}, RemoteAddr: "unknown:0"}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, vs := range md {
			if strings.HasPrefix(k, ":") || strings.HasSuffix(k, "-bin") {
				continue
			}
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			r.TLS = &ti.State
		}
	}
	reqID := requestID(r)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-request-id", reqID))
	readBody := func() ([]byte, error) {
		body, err := json.Marshal(req.GetFields().AsMap())
		if err != nil {
			return nil, infer.Errorf(infer.KindInvalid, ReasonInvalidJSON, "fields: %v", err)
		}
		return body, nil
	}
	a, err := g.predict(ctx, st, svc, r, reqID, readBody)
	if err != nil {
		if rl, ok := asRateLimited(err); ok {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("retry-after", ratelimit.RetryAfterHeader(rl.RetryAfter)))
		}
		return nil, grpcapi.ToStatus(err)
	}
	outs := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(a.outputs))}
	for i := range a.outputs {
		o := &a.outputs[i]
		if !o.array {
			outs.Fields[o.name] = structpb.NewNumberValue(shortest(o.values[0], o.dt))
			continue
		}
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(o.values))}
		for j, x := range o.values {
			l.Values[j] = structpb.NewNumberValue(shortest(x, o.dt))
		}
		outs.Fields[o.name] = structpb.NewListValue(l)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-sluice-route", a.route, "x-sluice-version", a.version))
	return &gatewaypb.PredictResponse{
		RequestId: a.requestID, Service: a.service, Route: a.route, Model: a.model,
		Version: a.version, Source: a.source, Outputs: outs,
	}, nil
}

// shortest returns the float64 whose shortest decimal form is the FP32
// value's (0.9, not 0.8999999761581421), so gRPC and HTTP answers agree.
func shortest(x float64, dt infer.DataType) float64 {
	if dt != infer.FP32 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	y, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', -1, 32), 64)
	if err != nil {
		return x
	}
	return y
}
