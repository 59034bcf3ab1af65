package telemetry

import (
	"context"

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
