package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/gatewaypb"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// The gRPC edge (sluice.gateway.v1.Gateway): the metadata plays the part
// of the HTTP headers, and the request's fields are decoded from their
// protobuf values straight into the service's fields.

// grpcService is the gateway's gRPC edge.
type grpcService struct {
	gatewaypb.UnimplementedGatewayServer
	g *Gateway
}

// RegisterGRPC registers the gateway's gRPC service on s.
func (g *Gateway) RegisterGRPC(s *grpc.Server) {
	gatewaypb.RegisterGatewayServer(s, &grpcService{g: g})
}

// GRPCServerOptions are the options the gateway's gRPC server needs
// besides its listener's: calls of a method the gateway does not serve
// are answered UNIMPLEMENTED with a reason and counted under service
// "unknown", as the HTTP edge counts a path it does not serve.
func (g *Gateway) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		g.countUnknown(http.StatusNotImplemented, ReasonNotFound)
		return apierr.StatusError(codes.Unimplemented, ReasonNotFound, "the gateway serves no method "+strconv.Quote(method))
	})}
}

// Predict calls one service through the same pipeline as the HTTP edge.
func (s *grpcService) Predict(ctx context.Context, req *gatewaypb.PredictRequest) (*gatewaypb.PredictResponse, error) {
	g := s.g
	st := g.state.Load()
	svc, ok := st.byName[req.GetService()]
	if !ok {
		g.countUnknown(http.StatusNotFound, ReasonNotFound)
		return nil, apierr.GRPCStatus(apierr.Errorf(apierr.KindNotFound, ReasonNotFound, "no service named %q", req.GetService()))
	}
	c := &Call{Service: svc.name, Header: http.Header{}, Peer: "unknown:0", Body: fieldsBody{req.GetFields()}}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, vs := range md {
			if strings.HasPrefix(k, ":") || strings.HasSuffix(k, "-bin") {
				continue
			}
			for _, v := range vs {
				c.Header.Add(k, v)
			}
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.Peer = p.Addr.String()
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			c.TLS = &ti.State
		}
	}
	c.RequestID = requestID(c.Header)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-request-id", c.RequestID))
	c.Traced = func(tctx context.Context) {
		md := metadata.MD{}
		telemetry.Propagator.Inject(tctx, telemetry.MetadataCarrier(md))
		md.Set("x-trace-id", telemetry.TraceID(tctx))
		_ = grpc.SetHeader(ctx, md)
	}
	// The response is built before the call is logged, so the log has
	// its size.
	var resp *gatewaypb.PredictResponse
	c.Respond = func(a *Answer, err error) int64 {
		if err != nil {
			return int64(proto.Size(status.Convert(apierr.GRPCStatus(err)).Proto()))
		}
		resp = predictResponse(a)
		return int64(proto.Size(resp))
	}
	a, err := g.predict(ctx, st, svc, c)
	if err != nil {
		if rl, ok := asRateLimited(err); ok {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("retry-after", retryAfter(rl)))
		}
		return nil, apierr.GRPCStatus(err)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-sluice-route", a.Route, "x-sluice-version", a.Version))
	return resp, nil
}

// predictResponse is the gRPC form of an answer.
func predictResponse(a *Answer) *gatewaypb.PredictResponse {
	outs := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(a.Outputs))}
	for i := range a.Outputs {
		o := &a.Outputs[i]
		if !o.Array {
			outs.Fields[o.Name] = structpb.NewNumberValue(shortest(o.Values[0], o.DataType))
			continue
		}
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(o.Values))}
		for j, x := range o.Values {
			l.Values[j] = structpb.NewNumberValue(shortest(x, o.DataType))
		}
		outs.Fields[o.Name] = structpb.NewListValue(l)
	}
	return &gatewaypb.PredictResponse{
		RequestId: a.RequestID, Service: a.Service, Route: a.Route, Model: a.Model,
		Version: a.Version, Source: a.Source, Outputs: outs,
	}
}

// fieldsBody is the request values of a gRPC call: a protobuf Struct of
// entity keys and request fields, read as the HTTP edge reads the same
// values in JSON (a number for an int64 field must be whole, a string of
// digits is an id too, null leaves a field unset).
type fieldsBody struct{ fields *structpb.Struct }

func (b fieldsBody) decode(s *service, vals []value) (int64, error) {
	n := int64(proto.Size(b.fields))
	fs := b.fields.GetFields()
	unknown, found := "", false
	for k := range fs {
		if _, ok := s.fieldIdx[k]; !ok && (!found || k < unknown) {
			unknown, found = k, true // the first in order, so the answer does not change from call to call
		}
	}
	if found {
		return n, apierr.Errorf(apierr.KindInvalid, ReasonUnknownField, "unknown field %q: service %q takes %s", unknown, s.name, s.fieldList())
	}
	for i := range s.fields {
		if v, ok := fs[s.fields[i].name]; ok {
			if err := parseProtoValue(&s.fields[i], v, &vals[i]); err != nil {
				return n, err
			}
		}
	}
	return n, s.checkRequired(vals)
}

// parseProtoValue parses one protobuf value of field f into v: the value's
// JSON form (protobuf's: NaN and infinities are the strings "NaN",
// "Infinity" and "-Infinity") goes through parseValue, so both edges
// accept and refuse the same values with the same words.
func parseProtoValue(f *reqField, pv *structpb.Value, v *value) error {
	var raw []byte
	switch k := pv.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		*v = value{}
		return nil
	case *structpb.Value_NumberValue:
		x := k.NumberValue
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return parseProtoValue(f, structpb.NewStringValue(nonFinite(x)), v)
		}
		raw = appendJSONFloat(make([]byte, 0, 24), x)
	case *structpb.Value_BoolValue:
		raw = strconv.AppendBool(nil, k.BoolValue)
	case *structpb.Value_StringValue:
		if f.kind == kindString {
			// Protobuf strings are valid UTF-8: the value is the string.
			*v = value{s: k.StringValue, set: true}
			return nil
		}
		raw, _ = json.Marshal(k.StringValue) //nolint:errchkjson // a string always marshals
	default: // a list or a struct: refused with its JSON form in the message
		raw, _ = json.Marshal(pv.AsInterface()) //nolint:errchkjson // AsInterface is JSON's: always marshals
	}
	return parseValue(f, raw, v)
}

// nonFinite is how protobuf's JSON form writes NaN and the infinities.
func nonFinite(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case x > 0:
		return "Infinity"
	default:
		return "-Infinity"
	}
}

// appendJSONFloat appends x as encoding/json writes a float64.
func appendJSONFloat(b []byte, x float64) []byte {
	f := byte('f')
	if a := math.Abs(x); a != 0 && (a < 1e-6 || a >= 1e21) {
		f = 'e'
	}
	b = strconv.AppendFloat(b, x, f, -1, 64)
	if f == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
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
