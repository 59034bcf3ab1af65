package integration_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
)

// TestChainReadiness: a model that fails to load leaves `serve -c` ready by
// default (one broken model must not take a pod whose other models serve
// out of rotation), while its own readiness says it is not; Triton's
// strict readiness is one config key or flag away, and the flag wins.
func TestChainReadiness(t *testing.T) {
	t.Parallel()
	broken := t.TempDir()
	mustWrite(t, filepath.Join(broken, "broken", "config.pbtxt"), []byte(`name: "broken"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
`))
	mustWrite(t, filepath.Join(broken, "broken", "1", "model.onnx"), []byte("not an ONNX model"))
	base := gwExample(t)
	gateway := map[string]any{
		"anonymous": map[string]any{"allowed": true},
		"services":  []any{gwService(base, "parcel-eta", nil, gwRoute("default", nil, "", 100, 0))},
	}
	repo := gwFeatureRepo(t, "")
	for _, tc := range []struct {
		name   string
		strict any // model_server.strict_readiness; nil leaves it out
		args   []string
		want   int
	}{
		{name: "default", want: http.StatusOK},
		{name: "config strict", strict: true, want: http.StatusServiceUnavailable},
		{name: "flag strict", args: []string{"--strict-readiness"}, want: http.StatusServiceUnavailable},
		{name: "flag beats config", strict: true, args: []string{"--strict-readiness=false"}, want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := gwStartWith(t, "examples/models", "parcel_eta", repo, gateway, gwOptions{
				args: tc.args,
				mutate: func(cfg map[string]any) {
					ms := cfg["model_server"].(map[string]any)
					ms["model_repository"] = append(ms["model_repository"].([]string), broken)
					ms["load_model"] = []string{"parcel_eta", "broken"}
					if tc.strict != nil {
						ms["strict_readiness"] = tc.strict
					}
				},
			})
			get := func(path string) int {
				t.Helper()
				res, err := c.get(t.Context(), c.url(c.models, path))
				if err != nil {
					t.Fatal(err)
				}
				return res.code
			}
			if code := get("/v2/models/broken/ready"); code == http.StatusOK {
				t.Fatalf("the broken model reports ready; logs:\n%s", c.tail())
			}
			if code := get("/v2/models/parcel_eta/ready"); code != http.StatusOK {
				t.Fatalf("parcel_eta ready = %d; logs:\n%s", code, c.tail())
			}
			if code := get("/v2/health/ready"); code != tc.want {
				t.Errorf("/v2/health/ready = %d, want %d (%s)", code, tc.want, fmt.Sprint(tc.args))
			}
			if code := get("/v2/health/live"); code != http.StatusOK {
				t.Errorf("/v2/health/live = %d, want 200", code)
			}
		})
	}
}
