package integration_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestChainModelServerKeys: under serve -c the model server's settings
// come from sluice.yaml's model_server keys, not from the flags of the
// same settings, which the start-up log names as ignored.
func TestChainModelServerKeys(t *testing.T) {
	base := gwExample(t)
	gateway := map[string]any{
		"anonymous": map[string]any{"allowed": true},
		"services":  []any{gwService(base, "parcel-eta", nil, gwRoute("default", nil, "", 100, 0))},
	}
	c := gwStartWith(t, "examples/models", "parcel_eta", gwFeatureRepo(t, ""), gateway, gwOptions{
		args: []string{"--server-name", "from-flag", "--exit-timeout-secs", "7"},
		mutate: func(cfg map[string]any) {
			ms := cfg["model_server"].(map[string]any)
			ms["server_name"], ms["server_version"] = "triton", "2.50.0"
			ms["exit_timeout"] = "3s"
		},
	})
	res, err := c.get(t.Context(), c.url(c.models, "/v2"))
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("GET /v2: %v %d %s", err, res.code, res.body)
	}
	var meta struct{ Name, Version string }
	if err := json.Unmarshal(res.body, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != "triton" || meta.Version != "2.50.0" {
		t.Errorf("server metadata %+v, want model_server's triton 2.50.0", meta)
	}
	logs := c.tail()
	if !strings.Contains(logs, "flags ignored under -c") || !strings.Contains(logs, "--server-name") || !strings.Contains(logs, "--exit-timeout-secs") {
		t.Errorf("no warning naming the ignored flags; logs:\n%s", logs)
	}
}
