package telemetry

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// resetTracing puts the no-op provider back when the test ends.
func resetTracing(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
}

// The console exporter writes spans to a file with no collector, named
// and sampled as the OTEL_* environment says.
func TestConsoleExporterHonoursTheEnvironment(t *testing.T) {
	resetTracing(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_SERVICE_NAME", "eta-chain")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	stop, err := SetupTracing(t.Context(), TracingOptions{File: file}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer("test").Start(context.Background(), "work")
	id := span.SpanContext().TraceID().String()
	span.End()
	if err := stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name        string
		SpanContext struct{ TraceID string }
		Resource    []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	if err := json.NewDecoder(strings.NewReader(string(b))).Decode(&got); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if got.Name != "work" || got.SpanContext.TraceID != id {
		t.Fatalf("span %q trace %s, want work %s (always_on from OTEL_TRACES_SAMPLER)", got.Name, got.SpanContext.TraceID, id)
	}
	attrs := map[string]any{}
	for _, kv := range got.Resource {
		attrs[kv.Key] = kv.Value.Value
	}
	if attrs["service.name"] != "eta-chain" || attrs["deployment.environment"] != "staging" {
		t.Fatalf("resource %v lacks OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES", attrs)
	}
}

// The sampler environment applies only when no ratio is configured; an
// explicit setting wins.
func TestConfiguredSettingsWinOverTheEnvironment(t *testing.T) {
	resetTracing(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	stop, err := SetupTracing(t.Context(), TracingOptions{Exporter: ExporterConsole, File: file, SampleRatio: 1, ServiceName: "configured"},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer("test").Start(context.Background(), "kept")
	if !span.IsRecording() {
		t.Fatal("sample_ratio 1 must win over OTEL_TRACES_SAMPLER=always_off")
	}
	span.End()
	if err := stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), `"configured"`) {
		t.Fatalf("service name: %s", b)
	}
}

func TestTracingOffAndUnknownExporter(t *testing.T) {
	resetTracing(t)
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
	}
	logger := slog.New(slog.DiscardHandler)
	stop, err := SetupTracing(t.Context(), TracingOptions{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	if _, span := Tracer("test").Start(context.Background(), "x"); span.SpanContext().IsValid() {
		t.Fatal("no exporter configured, yet spans are made")
	}
	_ = stop(t.Context())
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := SetupTracing(t.Context(), TracingOptions{}, logger); err == nil || !strings.Contains(err.Error(), "zipkin") {
		t.Fatalf("unknown exporter: err %v", err)
	}
}

// TraceHTTP returns the trace in the response: the caller's when tracing
// is off, a new one under the caller's when it is on.
func TestTraceHTTPReturnsTheTrace(t *testing.T) {
	resetTracing(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var inner trace.SpanContext
	h := TraceHTTP("test.http", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	}))
	serve := func(tp string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		if tp != "" {
			r.Header.Set("traceparent", tp)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// Off, no caller trace: nothing added.
	if w := serve(""); w.Header().Get("X-Trace-Id") != "" || w.Header().Get("Traceparent") != "" {
		t.Fatalf("headers without a trace: %v", w.Header())
	}
	// Off, with the caller's: its trace id comes back.
	if w := serve(parent); w.Header().Get("X-Trace-Id") != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("X-Trace-Id %q, want the caller's", w.Header().Get("X-Trace-Id"))
	}
	// On: a server span under the caller's, which the handler sees.
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	stop, err := SetupTracing(t.Context(), TracingOptions{Exporter: ExporterConsole, File: file, SampleRatio: 1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop(context.Background()) }()
	w := serve(parent)
	if w.Header().Get("X-Trace-Id") != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("X-Trace-Id %q, want the caller's trace", w.Header().Get("X-Trace-Id"))
	}
	tp := w.Header().Get("Traceparent")
	if tp == "" || tp == parent || !strings.Contains(tp, inner.SpanID().String()) {
		t.Fatalf("traceparent %q: want the server span %s", tp, inner.SpanID())
	}
	w = serve("")
	if id := w.Header().Get("X-Trace-Id"); len(id) != 32 || id != inner.TraceID().String() {
		t.Fatalf("a new trace: X-Trace-Id %q, handler's %s", id, inner.TraceID())
	}
}
