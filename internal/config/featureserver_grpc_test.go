package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// feature_server.grpc_port is off unless set, and when set it must be a
// port other than the HTTP one.
func TestFeatureServerGRPCPort(t *testing.T) {
	parse := func(extra string) (*Config, error) {
		return Parse("sluice.yaml", []byte("feature_server:\n  repo: /features\n"+extra), nil)
	}
	cfg, err := parse("")
	require.NoError(t, err)
	require.Zero(t, cfg.FeatureServer.GRPCPort)

	cfg, err = parse("  grpc_port: 6567\n")
	require.NoError(t, err)
	require.Equal(t, 6567, cfg.FeatureServer.GRPCPort)

	_, err = parse("  port: 6566\n  grpc_port: 6566\n")
	require.ErrorContains(t, err, "feature_server.grpc_port")
	require.ErrorContains(t, err, "must differ from feature_server.port")

	_, err = parse("  grpc_port: 70000\n")
	require.ErrorContains(t, err, "feature_server.grpc_port")
}
