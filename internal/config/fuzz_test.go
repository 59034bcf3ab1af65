package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Parse: it must never panic, and a
// config it accepts must validate again unchanged and redact cleanly.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	files = append(files, "../../examples/parcel-eta/sluice.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("gateway: &a {services: [*a, *a]}\n"))
	f.Add([]byte("gateway:\n  clients: [{id: x, api_key: \"${K:-v}\"}]\n"))
	f.Add([]byte("model_server: {http_port: ${P}}\n"))
	f.Add([]byte("security: {tokens: [{id: o, token: \"${K}\", role: operate}]}\ngateway: {admin: \"0.0.0.0:9901\", tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem, client_auth: request, min_version: \"1.3\"}}\n"))
	f.Add([]byte("model_server: {model_repository: [m], http_restricted_api: [\"model-repository,statistics:k=${K}\"], limits: {max_body_bytes: 1024}}\n"))
	lookup := func(k string) (string, bool) {
		if k == "K" {
			return "key", true
		}
		return "", false
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data, lookup)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		_ = cfg.String()
		if cfg.Gateway != nil {
			for _, cl := range cfg.Gateway.Clients {
				if cl.APIKey != "" {
					t.Fatalf("plain API key kept: %q", cl.APIKey)
				}
			}
		}
	})
}
