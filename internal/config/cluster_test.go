package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func loadWithCluster(t *testing.T, cluster string) (*Config, string, error) {
	t.Helper()
	minimal, err := os.ReadFile("testdata/minimal.good.yaml")
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	doc := string(minimal)
	if cluster != "" {
		doc += "\ncluster: " + cluster + "\n"
	}
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	cfg, err := Load(path)
	return cfg, dir, err
}

func TestClusterAbsentIsSingleProcess(t *testing.T) {
	cfg, _, err := loadWithCluster(t, "")
	require.NoError(t, err)
	require.Nil(t, cfg.Cluster, "no cluster section: state stays in the process")
}

func TestClusterDefaults(t *testing.T) {
	cfg, _, err := loadWithCluster(t, "{}")
	require.NoError(t, err)
	c := cfg.Cluster
	require.NotNil(t, c)
	require.Equal(t, "sluice", c.Name)
	require.Equal(t, "SLUICE", c.BucketPrefix)
	require.Equal(t, "nats://127.0.0.1:4222", c.NATS.URL)
	require.Equal(t, 250*time.Millisecond, c.PublishInterval.Std())
	require.Equal(t, 5*time.Second, c.ReplicaTTL.Std())
	require.Equal(t, 10*time.Second, c.ConnectTimeout.Std())
	require.Empty(t, c.Replica, "filled in at start from the host name and pid")
}

func TestClusterSettings(t *testing.T) {
	cfg, dir, err := loadWithCluster(t, `{name: eu-fleet, replica: gw-0, bucket_prefix: ACME, publish_interval: 500ms, replica_ttl: 3s,
  nats: {url: "tls://nats-a:4222,tls://nats-b:4222", credentials: creds/sluice.creds, tls: {ca_file: ca.pem}}}`)
	require.NoError(t, err)
	c := cfg.Cluster
	require.Equal(t, "eu-fleet", c.Name)
	require.Equal(t, "gw-0", c.Replica)
	require.Equal(t, "ACME", c.BucketPrefix)
	require.Equal(t, filepath.Join(dir, "creds/sluice.creds"), c.NATS.Credentials, "relative to the config file")
	require.Equal(t, filepath.Join(dir, "ca.pem"), c.NATS.TLS.CAFile)
	require.Equal(t, 3*time.Second, c.ReplicaTTL.Std())
}

func TestClusterBad(t *testing.T) {
	_, _, err := loadWithCluster(t, `{name: "eu fleet", replica: "a.b", bucket_prefix: "x*", publish_interval: 2s, replica_ttl: 3s,
  nats: {url: "http://nats:4222,nats://user:pw@nats:4222"}}`)
	for _, want := range []string{
		`cluster.name: "eu fleet": want 1 to 64 letters`,
		`cluster.replica: "a.b"`,
		`cluster.bucket_prefix: "x*"`,
		`cluster.nats.url: "http://nats:4222": scheme must be nats or tls`,
		`cluster.nats.url: "nats://user:xxxxx@nats:4222" carries credentials`,
		"cluster.replica_ttl: 3s must be at least twice publish_interval (2s)",
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestFallbackBaselineFileAndHistoryBound(t *testing.T) {
	example, err := os.ReadFile("../../examples/parcel-eta/sluice.yaml")
	require.NoError(t, err)
	load := func(old, repl string) (*Config, string, error) {
		require.Contains(t, string(example), old)
		dir := t.TempDir()
		path := filepath.Join(dir, "sluice.yaml")
		require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(example), old, repl, 1)), 0o600))
		cfg, err := Load(path)
		return cfg, dir, err
	}
	cfg, dir, err := load("history: 24", "history: 720\n        baseline_file: state/eta-baseline.json")
	require.NoError(t, err)
	var fb *Fallback
	for _, s := range cfg.Gateway.Services {
		if s.Fallback != nil {
			fb = s.Fallback
		}
	}
	require.NotNil(t, fb)
	require.Equal(t, filepath.Join(dir, "state/eta-baseline.json"), fb.BaselineFile, "relative to the config file")
	_, _, err = load("history: 24", "history: 721")
	require.ErrorContains(t, err, "history: 721 outside [1,720]")
}
