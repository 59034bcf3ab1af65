package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is the W3C trace-context propagator every Sluice edge uses
// to read and write "traceparent" and "tracestate".
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Tracer returns the named tracer of the global provider: a no-op until
// SetupTracing installs an exporting one, so spans cost almost nothing
// while tracing is off.
func Tracer(name string) trace.Tracer { return otel.Tracer(name) }

// TracingOptions configure SetupTracing.
type TracingOptions struct {
	// Endpoint is the OTLP/gRPC collector address (host:port); empty
	// leaves tracing off.
	Endpoint string
	// SampleRatio is the share of traces sampled at the root, by trace id
	// (so every service keeps the same traces); a request that arrives
	// with a sampled parent is always kept. Default 0.01.
	SampleRatio float64
	// ServiceName names this process in the traces. Default "sluice".
	ServiceName string
	// Insecure sends OTLP without TLS (collectors on loopback or in the
	// cluster). Default true.
	Secure bool
}

// SetupTracing installs an OTLP-exporting tracer provider with
// parent-based, trace-id-ratio sampling. It returns the function that
// flushes and stops it; with no endpoint it installs nothing and returns a
// no-op.
func SetupTracing(ctx context.Context, opts TracingOptions, logger *slog.Logger) (func(context.Context) error, error) {
	if opts.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	if opts.SampleRatio <= 0 {
		opts.SampleRatio = 0.01
	}
	if opts.ServiceName == "" {
		opts.ServiceName = "sluice"
	}
	copts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(opts.Endpoint), otlptracegrpc.WithTimeout(5 * time.Second)}
	if !opts.Secure {
		copts = append(copts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, copts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(opts.ServiceName)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SampleRatio))),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	logger.Info("tracing on", "otlp_endpoint", opts.Endpoint, "sample_ratio", opts.SampleRatio)
	return tp.Shutdown, nil
}

// traceHandler adds trace_id and span_id to records logged with a context
// that carries a sampled span.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// TraceID returns the trace id of ctx's span, or "".
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}
