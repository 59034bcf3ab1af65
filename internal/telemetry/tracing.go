package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
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

// TracingOptions configure SetupTracing. What they leave empty, the
// standard OpenTelemetry environment variables may set (see SetupTracing).
type TracingOptions struct {
	// Endpoint is the OTLP/gRPC collector address (host:port); it turns
	// the otlp exporter on.
	Endpoint string
	// Exporter is otlp, console or none; empty: OTEL_TRACES_EXPORTER,
	// else otlp when Endpoint or OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is
	// set, else none.
	Exporter string
	// File is where the console exporter writes its spans (JSON, one
	// object per span, appended); empty: standard output.
	File string
	// SampleRatio is the share of traces sampled at the root, by trace id
	// (so every service keeps the same traces); a request that arrives
	// with a sampled parent is always kept. 0: OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG when set, else 0.01.
	SampleRatio float64
	// Sampling, when set, is the root sampler (parent-based) instead of a
	// fixed ratio, so that the ratio can change at run time; it starts at
	// SampleRatio (0: 0.01). OTEL_TRACES_SAMPLER is then ignored.
	Sampling *Sampling
	// ServiceName names this process in the traces. Empty:
	// OTEL_SERVICE_NAME, else "sluice".
	ServiceName string
	// Insecure sends OTLP without TLS (collectors on loopback or in the
	// cluster). Default true.
	Secure bool
}

// Exporters SetupTracing knows (OTEL_TRACES_EXPORTER's values).
const (
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
	ExporterNone    = "none"
)

// SetupTracing installs an exporting tracer provider with parent-based,
// trace-id-ratio sampling. It returns the function that flushes and stops
// it; with no exporter it installs nothing and returns a no-op.
//
// Settings in opts win; what they leave empty comes from the standard
// OpenTelemetry environment: OTEL_TRACES_EXPORTER (otlp, console, none),
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (and
// the exporter's other OTEL_EXPORTER_OTLP_* settings), OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG. Unlike the SDK's default, no variable set means
// no tracing: a process without a collector sends nothing.
func SetupTracing(ctx context.Context, opts TracingOptions, logger *slog.Logger) (func(context.Context) error, error) {
	kind := tracingExporter(opts)
	if kind == ExporterNone {
		return func(context.Context) error { return nil }, nil
	}
	var (
		exp       sdktrace.SpanExporter
		closeFile func() error
		err       error
	)
	switch kind {
	case ExporterOTLP:
		copts := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(5 * time.Second)}
		if opts.Endpoint != "" {
			// A host:port of ours; an OTEL_* endpoint is a URL whose
			// scheme says whether to use TLS, which the exporter reads.
			copts = append(copts, otlptracegrpc.WithEndpoint(opts.Endpoint))
			if !opts.Secure {
				copts = append(copts, otlptracegrpc.WithInsecure())
			}
		}
		exp, err = otlptracegrpc.New(ctx, copts...)
	case ExporterConsole:
		var w io.Writer = os.Stdout
		if opts.File != "" {
			f, ferr := os.OpenFile(opts.File, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if ferr != nil {
				return nil, fmt.Errorf("tracing: %w", ferr)
			}
			w, closeFile = f, f.Close
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	default:
		return nil, fmt.Errorf("tracing: unknown exporter %q (want otlp, console or none)", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := tracingResource(ctx, opts.ServiceName)
	if err != nil {
		return nil, err
	}
	popts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	sampler, sampling := tracingSampler(opts)
	if sampler != nil {
		popts = append(popts, sdktrace.WithSampler(sampler))
	}
	tp := sdktrace.NewTracerProvider(popts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	logger.Info("tracing on", "exporter", kind, "otlp_endpoint", opts.Endpoint, "file", opts.File, "sampler", strings.TrimSpace(sampling))
	return func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		if closeFile != nil {
			err = errors.Join(err, closeFile())
		}
		return err
	}, nil
}

// tracingExporter picks the exporter: opts.Exporter, else otlp when an
// endpoint is set in opts, else OTEL_TRACES_EXPORTER, else otlp when the
// environment names an OTLP endpoint, else none.
func tracingExporter(opts TracingOptions) string {
	switch {
	case opts.Exporter != "":
		return opts.Exporter
	case opts.Endpoint != "":
		return ExporterOTLP
	case os.Getenv("OTEL_TRACES_EXPORTER") != "":
		return strings.TrimSpace(strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER")))
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		return ExporterOTLP
	default:
		return ExporterNone
	}
}

// tracingResource describes this process to the tracing backend: the
// SDK, the host and the OTEL_* environment, with the service name name,
// else the environment's, else sluice.
func tracingResource(ctx context.Context, name string) (*resource.Resource, error) {
	// WithFromEnv reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
	// now (resource.Default would keep what it read first); a configured
	// name wins over both.
	if name == "" && os.Getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), "service.name=") {
		name = "sluice"
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if res == nil {
		res = resource.Empty()
	}
	if name != "" {
		res, err = resource.Merge(res, resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(name)))
		if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
			return nil, fmt.Errorf("tracing: %w", err)
		}
	}
	return res, nil
}

// tracingSampler picks the sampler and describes it for the log: opts'
// run-time changeable Sampling, else opts' SampleRatio, else the SDK's
// reading of OTEL_TRACES_SAMPLER (a nil sampler), else 1%; all but the
// environment's are parent-based.
func tracingSampler(opts TracingOptions) (sdktrace.Sampler, string) {
	switch {
	case opts.Sampling != nil:
		ratio := opts.SampleRatio
		if ratio <= 0 {
			ratio = 0.01
		}
		opts.Sampling.SetRatio(ratio)
		opts.Sampling.SetExporting(true)
		return sdktrace.ParentBased(opts.Sampling), fmt.Sprintf("parentbased_traceidratio %g (changeable at run time)", ratio)
	case opts.SampleRatio > 0:
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SampleRatio)), fmt.Sprintf("parentbased_traceidratio %g", opts.SampleRatio)
	case os.Getenv("OTEL_TRACES_SAMPLER") != "":
		// The SDK reads OTEL_TRACES_SAMPLER and its _ARG itself.
		return nil, os.Getenv("OTEL_TRACES_SAMPLER") + " " + os.Getenv("OTEL_TRACES_SAMPLER_ARG")
	default:
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)), "parentbased_traceidratio 0.01"
	}
}

// TraceHeaders writes the trace of ctx's span into a response's headers:
// X-Trace-Id (the id to search for in a tracing backend or the logs) and
// traceparent (W3C trace context). Without a valid span it writes
// nothing.
func TraceHeaders(ctx context.Context, h http.Header) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	h["X-Trace-Id"] = []string{sc.TraceID().String()}
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// TraceHTTP wraps an HTTP handler in a server span named name that
// continues the caller's traceparent, and returns the trace in the
// response's headers (TraceHeaders) so a caller can find it. While
// tracing is off and no traceparent arrives it adds nothing but a header
// lookup.
func TraceHTTP(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The provider's tracer now, not at wrap time: SetupTracing may
		// replace the provider after the handler is built.
		tracer := Tracer("github.com/sluice-ml/sluice/internal/telemetry")
		ctx := WithModel(r.Context(), pathModel(r.URL.Path))
		if r.Header.Get("Traceparent") != "" {
			ctx = Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if !span.SpanContext().IsValid() && !trace.SpanContextFromContext(ctx).IsValid() {
			next.ServeHTTP(w, r)
			return
		}
		// Only a trace there is to find: a sampled span, or the caller's.
		if span.SpanContext().IsSampled() || r.Header.Get("Traceparent") != "" {
			TraceHeaders(ctx, w.Header())
		}
		if span.IsRecording() {
			span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path))
		}
		// The handler may continue a traceparent itself: it finds this
		// span's, not the caller's.
		r = r.WithContext(ctx)
		if r.Header.Get("Traceparent") != "" {
			r.Header = r.Header.Clone()
			Propagator.Inject(ctx, propagation.HeaderCarrier(r.Header))
		}
		next.ServeHTTP(w, r)
	})
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

// pathModel is the model a KServe path names (/v2/models/M/...), or "".
func pathModel(path string) string {
	rest, ok := strings.CutPrefix(path, "/v2/models/")
	if !ok {
		return ""
	}
	m, _, _ := strings.Cut(rest, "/")
	return m
}
