package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/backend/onnxruntime"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/modelrepo"
)

// tracedService feeds the example "simple" model (two INT32 [16] inputs)
// from features and request fields, so one prediction crosses the
// gateway, the feature read, the model queue and the model execution.
const tracedService = `    - name: eta
      path: POST /v1/services/eta:predict
      entities:
        - {name: user, join_key: user_id}
        - {name: route, join_key: route_id}
      request_fields:
        - {name: base_eta, type: float32, required: true}
      feature_service: eta
      model: {name: simple, version: "1"}
      outputs:
        - {name: sum, from: OUTPUT0}
      inputs:
        - {tensor: INPUT0, datatype: INT32, missing: zero, features: [user_stats:trips, user_stats:premium, user_embedding:embedding, route_features:distance_km,
            field:base_eta, field:base_eta, field:base_eta, field:base_eta, field:base_eta, field:base_eta, field:base_eta, field:base_eta, field:base_eta]}
        - {tensor: INPUT1, datatype: INT32, features: [field:user_id, field:user_id, field:user_id, field:user_id, field:user_id, field:user_id, field:user_id, field:user_id,
            field:user_id, field:user_id, field:user_id, field:user_id, field:user_id, field:user_id, field:user_id, field:user_id]}
      routes: [{name: default, route: {weighted: [{backend: local, weight: 100}]}}]
`

// realModels serves examples/models/simple with the real ONNX Runtime.
func realModels(t *testing.T) *modelrepo.Manager {
	t.Helper()
	lib, err := onnxruntime.FindLibrary("")
	if err != nil {
		t.Fatalf("ONNX Runtime library not installed: %v", err)
	}
	ort, err := onnxruntime.New(onnxruntime.Options{LibraryPath: lib}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ort.Close() })
	reg := &backend.Registry{}
	reg.Register(ort, onnxruntime.Platform)
	m, err := modelrepo.New(modelrepo.Options{
		Repositories: []string{"../../examples/models"}, ControlMode: modelrepo.ControlExplicit,
		StartupModels: []string{"simple"},
	}, reg, nil, nil)
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

// recorder is the test binary's one OpenTelemetry provider. The global
// provider hands every tracer made before it is set (the gateway's, the
// model server's) to the first real provider it is given, for good, so
// the tests set one once and switch its recording on and off instead.
var recorder struct {
	once sync.Once
	exp  atomic.Pointer[tracetest.InMemoryExporter]
}

// spanSwitch samples and keeps every span while a test records them,
// and none otherwise.
type spanSwitch struct{}

func (spanSwitch) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if recorder.exp.Load() == nil {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.AlwaysSample().ShouldSample(p)
}

func (spanSwitch) Description() string { return "the test's recording switch" }

func (spanSwitch) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (spanSwitch) OnEnd(s sdktrace.ReadOnlySpan) {
	if e := recorder.exp.Load(); e != nil {
		_ = e.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{s})
	}
}

func (spanSwitch) Shutdown(context.Context) error   { return nil }
func (spanSwitch) ForceFlush(context.Context) error { return nil }

// recordSpans records every span started until the test ends, sampled
// whatever its parent says.
func recordSpans(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	recorder.once.Do(func() {
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(spanSwitch{}), sdktrace.WithSpanProcessor(spanSwitch{})))
	})
	exp := tracetest.NewInMemoryExporter()
	recorder.exp.Store(exp)
	t.Cleanup(func() { recorder.exp.Store(nil) })
	return exp
}

// TestTraceOfOnePrediction: a sampled prediction leaves the four spans
// of the chain, linked to their parents, under the caller's trace.
func TestTraceOfOnePrediction(t *testing.T) {
	exp := recordSpans(t)

	models := realModels(t)
	yml := "gateway:\n  listen: \"127.0.0.1:8080\"\n  admin: \"127.0.0.1:9901\"\n  anonymous: {allowed: true}\n  services:\n" +
		tracedService + "  backends: [{name: local, kind: in_process}]\n"
	e := newEnv(t, parseConfig(t, yml), func(o *gateway.Options) { o.Models = models })
	e.features.put("user_stats:trips", 7, feature.Value{I64: 3})
	e.features.put("user_embedding:embedding", 7, feature.Value{F32s: []float32{1, 2, 3, 4}})

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest(http.MethodPost, etaPath, strings.NewReader(`{"user_id": 7, "route_id": 2, "base_eta": 5}`))
	req.Header.Set("traceparent", parent)
	w := httptest.NewRecorder()
	e.g.ServeHTTP(w, req)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	// INPUT0 = [3 trips, premium 0, embedding 1..4, distance 0 (missing), base_eta 5 ×9], INPUT1 = user 7.
	require.Contains(t, w.Body.String(), `"sum":[10,7,8,9,10,11,7,12,12,12,12,12,12,12,12,12]`)

	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	for _, name := range []string{"gateway.predict", "feature.read", "model.infer", "model.queue", "model.execute"} {
		require.Contains(t, byName, name, "spans: %v", names(spans))
	}
	root := byName["gateway.predict"]
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", root.SpanContext.TraceID().String(), "the caller's trace continues")
	require.Equal(t, "00f067aa0ba902b7", root.Parent.SpanID().String(), "the gateway span's parent is the caller's")
	require.Equal(t, trace.SpanKindServer, root.SpanKind)
	childOf := func(child, parent string) {
		t.Helper()
		require.Equal(t, byName[parent].SpanContext.SpanID(), byName[child].Parent.SpanID(), "%s is a child of %s", child, parent)
		require.Equal(t, root.SpanContext.TraceID(), byName[child].SpanContext.TraceID())
	}
	childOf("feature.read", "gateway.predict")
	childOf("model.infer", "gateway.predict")
	childOf("model.queue", "model.infer")
	childOf("model.execute", "model.infer")
	q, x := byName["model.queue"], byName["model.execute"]
	require.False(t, x.StartTime.Before(q.EndTime), "execution starts when the queue wait ends")
	require.False(t, x.EndTime.After(byName["model.infer"].EndTime.Add(time.Millisecond)), "execution ends within the model call")
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}
