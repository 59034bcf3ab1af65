package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/authz/authzspec"
)

func TestSecurityProblems(t *testing.T) {
	_, err := Load("testdata/security.bad.yaml")
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`security.bad.yaml:3:17: security.tokens[0].token: a literal token`,
		`security.memory_budget_bytes: must not be negative`,
		`security.tokens[1].token_sha256: want 64 hex digits`,
		`security.tokens[1].role: "watch" is not one of read, operate`,
		`model_server.http_restricted_api[0]:`,
		`model_server.address: "0.0.0.0" is reachable beyond loopback, but no operate token is configured`,
		`model_server.tls:`,
		`feature_server.address: "0.0.0.0" is reachable beyond loopback`,
		`feature_server.read_auth: "maybe" is not one of open, token`,
		`gateway.admin: "0.0.0.0:9901" is reachable beyond loopback`,
		`gateway.tls.client_ca_file: clients name a tls_identity`,
	} {
		require.Contains(t, msg, want)
	}
}

func TestSecurityTokensHashedAndLoopbackDefaults(t *testing.T) {
	doc := `security:
  tokens:
    - {id: ops, token: "${OPS_TOKEN}", role: operate}
model_server: {model_repository: [m]}
feature_server: {repo: f, address: 0.0.0.0}
gateway: {admin: "0.0.0.0:9901"}
`
	env := func(k string) (string, bool) {
		if k == "OPS_TOKEN" {
			return "s3cret", true
		}
		return "", false
	}
	cfg, err := Parse("sluice.yaml", []byte(doc), env)
	require.NoError(t, err, "an operate token allows listeners beyond loopback")
	tok := cfg.Security.Tokens[0]
	require.Empty(t, tok.Token, "the plain secret is dropped")
	require.Equal(t, authzspec.HashToken("s3cret"), tok.SHA256)
	require.Equal(t, "127.0.0.1", cfg.ModelServer.Address, "internal listeners bind loopback by default")
	require.Equal(t, "stderr", cfg.Security.AuditLog)
	require.Positive(t, cfg.Security.MemoryBudgetBytes)
	require.Equal(t, int64(64<<20), cfg.ModelServer.Limits.MaxBodyBytes)
	require.Equal(t, int64(16<<20), cfg.FeatureServer.Limits.MaxBodyBytes)
	require.Equal(t, int64(1<<20), cfg.Gateway.Limits.MaxBodyBytes)
	require.NotContains(t, cfg.String(), tok.SHA256, "config dumps redact token hashes")
}

func TestRestrictedAPIValuesRedacted(t *testing.T) {
	doc := "model_server: {model_repository: [m], http_restricted_api: [\"model-repository:admin-key=${K}\"]}\n"
	cfg, err := Parse("sluice.yaml", []byte(doc), func(string) (string, bool) { return "hunter2", true })
	require.NoError(t, err)
	require.Equal(t, "model-repository:admin-key=hunter2", cfg.ModelServer.HTTPRestrictedAPI[0])
	require.False(t, strings.Contains(cfg.String(), "hunter2"))
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9901": true, "127.1.2.3:1": true, "[::1]:80": true, "localhost:80": true, "::1": true,
		":9901": false, "0.0.0.0:80": false, "[::]:80": false, "10.0.0.5:80": false, "example.com:80": false, "": false,
	} {
		require.Equal(t, want, IsLoopback(addr), addr)
	}
}

func TestRestrictedRepositoryBeyondLoopbackNeedsBothProtocols(t *testing.T) {
	const rule = `["model-repository:admin-key=${K}"]`
	env := func(string) (string, bool) { return "hunter2", true }
	for _, tt := range []struct {
		name    string
		section string
		wantErr bool
	}{
		{name: "http only", section: "http_restricted_api: " + rule, wantErr: true},
		{name: "grpc only", section: "grpc_restricted_protocol: " + rule, wantErr: true},
		{name: "both", section: "http_restricted_api: " + rule + ", grpc_restricted_protocol: " + rule},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := "model_server: {model_repository: [m], address: 0.0.0.0, " + tt.section + "}\n"
			_, err := Parse("sluice.yaml", []byte(doc), env)
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, `model_server.address: "0.0.0.0" is reachable beyond loopback, but no operate token is configured`)
		})
	}
}

func TestOutboundTLS(t *testing.T) {
	const good = `gateway:
  backends:
    - {name: remote, kind: kserve_grpc, endpoints: ["10.0.0.1:8001"], tls: {ca_file: tls/ca.crt, cert_file: tls/gw.crt, key_file: tls/gw.key, server_name: models.internal}}
    - {name: web, kind: kserve_http, endpoints: ["10.0.0.2:8000"], tls: {}}
  rate_limit_backend: {type: redis, redis: {addrs: ["10.0.0.3:6380"], tls: {ca_file: /etc/ssl/redis-ca.crt}}}
  recording: {sink: nats, nats: {url: "nats://10.0.0.4:4222", tls: {ca_file: tls/ca.crt, cert_file: tls/gw.crt, key_file: tls/gw.key}}}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(path, []byte(good), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	g := cfg.Gateway
	require.Equal(t, ClientTLS{
		CAFile: filepath.Join(dir, "tls/ca.crt"), CertFile: filepath.Join(dir, "tls/gw.crt"), KeyFile: filepath.Join(dir, "tls/gw.key"),
		ServerName: "models.internal",
	}, *g.Backends[0].TLS, "paths are relative to the config file")
	require.Equal(t, ClientTLS{}, *g.Backends[1].TLS, "tls: {} is TLS with the system roots")
	require.Equal(t, "/etc/ssl/redis-ca.crt", g.RateLimitBackend.Redis.TLS.CAFile)
	require.Equal(t, filepath.Join(dir, "tls/gw.key"), g.Recording.NATS.TLS.KeyFile)

	for _, tt := range []struct {
		name, doc, want string
	}{
		{
			name: "in_process backend",
			doc:  `gateway: {backends: [{name: local, kind: in_process, tls: {ca_file: ca.crt}}]}`,
			want: "gateway.backends[0].tls: an in_process backend makes no connection",
		},
		{
			name: "backend cert without key",
			doc:  `gateway: {backends: [{name: r, kind: kserve_grpc, endpoints: ["10.0.0.1:8001"], tls: {cert_file: c.crt}}]}`,
			want: "gateway.backends[0].tls: key_file: required with cert_file",
		},
		{
			name: "redis key without cert",
			doc:  `gateway: {rate_limit_backend: {type: redis, redis: {addrs: ["10.0.0.3:6380"], tls: {key_file: k.key}}}}`,
			want: "gateway.rate_limit_backend.redis.tls: cert_file: required with key_file",
		},
		{
			name: "nats cert without key",
			doc:  `gateway: {recording: {sink: nats, nats: {tls: {cert_file: c.crt}}}}`,
			want: "gateway.recording.nats.tls: key_file: required with cert_file",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("sluice.yaml", []byte(tt.doc+"\n"), nil)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestLimitsMustFitTheBudget(t *testing.T) {
	doc := "security: {memory_budget_bytes: 33554432}\nmodel_server: {model_repository: [m], limits: {max_body_bytes: 67108864}}\n"
	_, err := Parse("sluice.yaml", []byte(doc), nil)
	require.ErrorContains(t, err, "model_server.limits: max_body_bytes 67108864 exceeds the memory budget")
}

// TestProxyAllowAPIs: the KServe proxy's allow_apis may not open a
// state-changing or shared-memory group to anonymous callers, nor to
// callers no operate token can hold to account (issue 22 item 2).
func TestProxyAllowAPIs(t *testing.T) {
	doc := func(anonymous bool, tokens string, apis string) string {
		return tokens + `gateway:
  anonymous: {allowed: ` + map[bool]string{true: "true", false: "false"}[anonymous] + `}
  backends: [{name: m, kind: kserve_http, endpoints: ["127.0.0.1:8000"]}]
  proxy: {backend: m, allow_apis: ` + apis + `}
`
	}
	env := func(k string) (string, bool) { return "s3cret", k == "OPS_TOKEN" }
	const ops = "security:\n  tokens: [{id: ops, token: \"${OPS_TOKEN}\", role: operate}]\n"
	_, err := Parse("sluice.yaml", []byte(doc(true, ops, "[shared-memory, inference, bogus]")), env)
	require.ErrorContains(t, err, `gateway.proxy.allow_apis[0]: the shared-memory API would be open to anonymous callers`)
	require.ErrorContains(t, err, `gateway.proxy.allow_apis[2]: unknown API group "bogus"`)
	require.NotContains(t, err.Error(), "allow_apis[1]", "a default group may be listed")
	_, err = Parse("sluice.yaml", []byte(doc(false, "", "[model-repository]")), env)
	require.ErrorContains(t, err, `gateway.proxy.allow_apis[0]: the model-repository API changes the model server's state`)
	cfg, err := Parse("sluice.yaml", []byte(doc(false, ops, "[model-repository, logging]")), env)
	require.NoError(t, err)
	require.Equal(t, []string{"model-repository", "logging"}, cfg.Gateway.Proxy.AllowAPIs)
	_, err = Parse("sluice.yaml", []byte(doc(true, "", "[]")), env)
	require.NoError(t, err, "the default groups need nothing")
}
