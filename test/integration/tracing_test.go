package integration_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChainTracesToAFile: with the console exporter (no collector) and the
// OTEL_* environment, every answer of the gateway, the model server and
// the feature server returns its trace id, and the spans of that trace
// are in the file when the process stops.
func TestChainTracesToAFile(t *testing.T) {
	t.Parallel()
	spans := filepath.Join(t.TempDir(), "spans.jsonl")
	base := gwExample(t)
	gateway := map[string]any{
		"clients":   []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous": map[string]any{"allowed": false},
		"services":  []any{gwService(base, "parcel-eta", nil, gwRoute("default", nil, "", 100, 0))},
	}
	env := append([]string{"OTEL_TRACES_SAMPLER=always_on", "OTEL_SERVICE_NAME=eta-chain-under-test"}, gwKeyEnv...)
	c := gwStartWith(t, "examples/models", "parcel_eta", gwFeatureRepo(t, ""), gateway, gwOptions{
		env:    env,
		mutate: func(cfg map[string]any) { cfg["tracing"] = map[string]any{"exporter": "console", "file": spans} },
	})
	ids := c.presentIDs(t)
	traceOf := func(what string, res gwResult) string {
		t.Helper()
		id := res.hdr.Get("X-Trace-Id")
		if len(id) != 32 || !strings.Contains(res.hdr.Get("Traceparent"), id) {
			t.Fatalf("%s: X-Trace-Id %q, traceparent %q; want the trace", what, id, res.hdr.Get("Traceparent"))
		}
		return id
	}
	res, err := c.predict(t.Context(), "parcel-eta", gwBody(ids.users[0], ids.packages[0], ids.routes[0], 30, 0.5), gwAuth)
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("predict: %v %d %s", err, res.code, res.body)
	}
	answered := traceOf("gateway answer", res)
	res, err = c.predict(t.Context(), "parcel-eta", gwBody(ids.users[0], 987654321, ids.routes[0], 30, 0.5), gwAuth)
	if err != nil || res.code != http.StatusNotFound {
		t.Fatalf("unknown package: %v %d %s", err, res.code, res.body)
	}
	failed := traceOf("gateway error", res)
	res, err = c.get(t.Context(), c.url(c.models, "/v2/models/parcel_eta"))
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("model metadata: %v %d", err, res.code)
	}
	traceOf("model server", res)
	res, err = c.send(t.Context(), http.MethodPost, c.url(c.features, "/get-online-features"),
		[]byte(`{"features":["route_features:distance_km"],"entities":{"route_id":[1]}}`), nil)
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("online features: %v %d %s", err, res.code, res.body)
	}
	traceOf("feature server", res)

	c.stop(t) // flushes the spans
	b, err := os.ReadFile(spans)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{answered, failed, `"gateway.predict"`, `"model.infer"`, "eta-chain-under-test"} {
		if !strings.Contains(text, want) {
			t.Errorf("the span file lacks %s (%d bytes)", want, len(b))
		}
	}
}
