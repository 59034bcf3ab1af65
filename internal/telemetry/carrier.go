package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// MetadataCarrier adapts gRPC metadata to the propagator's carrier.
type MetadataCarrier metadata.MD

// Get returns the first value of key.
func (c MetadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (c MetadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys lists the keys.
func (c MetadataCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// ExtractGRPC returns ctx with the remote span context carried in the
// incoming gRPC metadata, if any.
func ExtractGRPC(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return Propagator.Extract(ctx, MetadataCarrier(md))
}

// InjectGRPC returns ctx with ctx's span context added to the outgoing
// gRPC metadata; ctx is returned as is when it carries no valid span.
func InjectGRPC(ctx context.Context) context.Context {
	md := metadata.MD{}
	Propagator.Inject(ctx, MetadataCarrier(md))
	if len(md) == 0 {
		return ctx
	}
	kv := make([]string, 0, 2*len(md))
	for k, vs := range md {
		for _, v := range vs {
			kv = append(kv, k, v)
		}
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// TraceGRPC starts the server span of a unary gRPC call, continuing the
// caller's traceparent, and returns the trace in the call's header
// metadata (x-trace-id and traceparent) when there is one to find: the
// span is sampled, or the caller sent its own. It is TraceHTTP for gRPC;
// end the span with the returned function.
func TraceGRPC(ctx context.Context, method string) (context.Context, func()) {
	tracer := Tracer("github.com/sluice-ml/sluice/internal/telemetry")
	caller := len(metadata.ValueFromIncomingContext(ctx, "traceparent")) > 0
	if caller {
		ctx = ExtractGRPC(ctx)
	}
	ctx, span := tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer))
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && (span.SpanContext().IsSampled() || caller) {
		md := metadata.MD{}
		Propagator.Inject(ctx, MetadataCarrier(md))
		md.Set("x-trace-id", sc.TraceID().String())
		_ = grpc.SetHeader(ctx, md) // fails only outside a gRPC call
	}
	return ctx, func() { span.End() }
}
