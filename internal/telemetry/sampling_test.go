package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The root sampling follows SetRatio at once; a sampled parent is still
// followed when the ratio is 0 (parent-based, as SetupTracing installs it).
func TestSamplingChangesAtRunTime(t *testing.T) {
	s := NewSampling(1)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(s)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tp.Tracer("test")
	sampled := func(ctx context.Context) (context.Context, bool) {
		ctx, span := tr.Start(ctx, "x")
		defer span.End()
		return ctx, span.SpanContext().IsSampled()
	}
	parent, ok := sampled(context.Background())
	if !ok {
		t.Fatal("ratio 1: root span not sampled")
	}
	s.SetRatio(0)
	if _, ok := sampled(context.Background()); ok {
		t.Fatal("ratio 0: root span sampled")
	}
	if _, ok := sampled(parent); !ok {
		t.Fatal("ratio 0: a sampled parent's child was dropped")
	}
	s.SetRatio(7)
	if s.Ratio() != 1 {
		t.Fatalf("ratio %g, want it clamped to 1", s.Ratio())
	}
}

func TestPathModel(t *testing.T) {
	for path, want := range map[string]string{
		"/v2/models/simple/infer":            "simple",
		"/v2/models/simple/versions/1/infer": "simple",
		"/v2/models/simple/trace/setting":    "simple",
		"/v2/models/simple":                  "simple",
		"/v2/health/ready":                   "",
		"/v2/repository/models/simple/load":  "",
	} {
		if got := pathModel(path); got != want {
			t.Errorf("pathModel(%q) = %q, want %q", path, got, want)
		}
	}
}
