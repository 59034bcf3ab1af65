package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestModelServerRuntimeKeys: the model_server keys of the flags that set
// what the model server does at start, at shutdown and in its answers
// are read from the file; left out, each is NewModelServer's default but
// the address and readiness; a 0 written for exit_timeout or
// compress_min_bytes is kept.
func TestModelServerRuntimeKeys(t *testing.T) {
	cfg, err := Parse("s.yaml", []byte(`model_server:
  model_repository: [m]
  exit_on_error: true
  model_git_commit: {parcel_eta: abc1234}
  exit_timeout: 0s
  cache_size: 1048576
  triton_metrics: false
  server_name: triton
  server_version: 2.50.0
  http_header_forward_pattern: "my_header.*"
  grpc_header_forward_pattern: "x-.*"
  compress_min_bytes: 0
  max_output_bytes: 4096
feature_server: {repo: f, exit_timeout: 5s}
gateway: {exit_timeout: 0s}
`), nil)
	require.NoError(t, err)
	m := cfg.ModelServer
	want := chainModelServer("m")
	want.ExitOnError, want.ModelGitCommit = true, map[string]string{"parcel_eta": "abc1234"}
	want.ExitTimeout, want.CacheSize, want.TritonMetrics = 0, 1<<20, new(false)
	want.ServerName, want.ServerVersion = "triton", "2.50.0"
	want.HTTPHeaderForwardPattern, want.GRPCHeaderForwardPattern = "my_header.*", "x-.*"
	want.CompressMinBytes, want.MaxOutputBytes = 0, 4096
	require.Equal(t, want, *m)
	require.Equal(t, 5*time.Second, cfg.FeatureServer.ExitTimeout.Std())
	require.Zero(t, cfg.Gateway.ExitTimeout, "exit_timeout: 0s waits for none")

	cfg, err = Parse("s.yaml", []byte("model_server: {model_repository: [m]}\nfeature_server: {repo: f}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, chainModelServer("m"), *cfg.ModelServer, "left out: the flags' defaults")
	require.Equal(t, DefaultExitTimeout, cfg.FeatureServer.ExitTimeout.Std())
}

// chainModelServer is model_server with the given repositories and every
// other key left out: the flags' defaults but the address and readiness.
func chainModelServer(repos ...string) ModelServer {
	m := NewModelServer()
	m.ModelRepository = repos
	m.Address, m.StrictReadiness = DefaultChainAddress, new(false)
	return m
}

// TestModelServerRuntimeKeysValidated: a bad value is refused with the
// key's name and the line it is on, as every other key's.
func TestModelServerRuntimeKeysValidated(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"exit_timeout: -1s", "s.yaml:2:3: model_server.exit_timeout: must not be negative"},
		{"cache_size: -1", "s.yaml:2:3: model_server.cache_size: must be a number of bytes, 0 (no cache) or more"},
		{"compress_min_bytes: -2", "s.yaml:2:3: model_server.compress_min_bytes: -2: want a number of bytes, 0 or more, or -1 (never compress)"},
		{"max_output_bytes: -5", "s.yaml:2:3: model_server.max_output_bytes: must be a number of bytes, more than 0"},
		{"model_git_commit: {parcel_eta: \"\"}", "s.yaml:2:3: model_server.model_git_commit: \"parcel_eta\": \"\": want a model name and its commit"},
		{"http_header_forward_pattern: \"(\"", "s.yaml:2:3: model_server.http_header_forward_pattern: \"(\" is not a regular expression"},
		{"grpc_header_forward_pattern: \"[a\"", "s.yaml:2:3: model_server.grpc_header_forward_pattern: \"[a\" is not a regular expression"},
		{"triton_metrics: maybe", "model_server.triton_metrics"},
		{"exit_on_eror: true", "exit_on_error"},
	} {
		_, err := Parse("s.yaml", []byte("model_server:\n  "+tc.yaml+"\n  model_repository: [m]\n"), nil)
		require.ErrorContains(t, err, tc.want, tc.yaml)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"feature_server: {repo: f, exit_timeout: -1s}", "feature_server.exit_timeout: must not be negative"},
		{"gateway: {exit_timeout: -2s}", "gateway.exit_timeout: must not be negative"},
	} {
		_, err := Parse("s.yaml", []byte(tc.yaml+"\n"), nil)
		require.ErrorContains(t, err, tc.want, tc.yaml)
	}
}
