package tlstest_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/tlsconfig"
	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIssue(t *testing.T) {
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	tests := []struct {
		name      string
		issue     func() (certPEM, keyPEM []byte)
		identity  string
		serverToo bool
		wantDNS   []string
		wantIPs   int
	}{
		{
			name:     "server named by its common name",
			issue:    func() ([]byte, []byte) { return ca.Issue(t, "gateway") },
			identity: "gateway", serverToo: true, wantDNS: []string{"gateway", "localhost"}, wantIPs: 2,
		},
		{
			name:     "URI SAN",
			issue:    func() ([]byte, []byte) { return ca.Issue(t, "alice", "spiffe://sluice/alice") },
			identity: "spiffe://sluice/alice", serverToo: true, wantDNS: []string{"localhost"}, wantIPs: 2,
		},
		{
			name:     "DNS SAN",
			issue:    func() ([]byte, []byte) { return ca.Issue(t, "x", "x.svc", "10.1.2.3") },
			identity: "x.svc", serverToo: true, wantDNS: []string{"x.svc", "localhost"}, wantIPs: 3,
		},
		{
			name:     "client, common name only",
			issue:    func() ([]byte, []byte) { return ca.IssueClient(t, "carol") },
			identity: "carol",
		},
		{
			name:     "client, email",
			issue:    func() ([]byte, []byte) { return ca.IssueClient(t, "dave", "dave@example.com") },
			identity: "dave@example.com",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, keyPEM := tt.issue()
			pair := tlstest.KeyPair(t, certPEM, keyPEM)
			leaf := pair.Leaf
			require.Equal(t, tt.identity, tlsconfig.CertIdentity(leaf))
			require.Equal(t, tt.wantDNS, leaf.DNSNames)
			require.Len(t, leaf.IPAddresses, tt.wantIPs)
			_, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			require.NoError(t, err)
			_, err = leaf.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			require.Error(t, err, "another CA does not trust it")
			_, err = leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.1"})
			if tt.serverToo {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

func TestFiles(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.WriteFiles(t, dir, "server")
	_, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
	data, err := os.ReadFile(ca.WriteCAFile(t, dir, "ca"))
	require.NoError(t, err)
	require.Equal(t, ca.CertPEM(), data)
	_, err = tlsconfig.ParseCAPool(data)
	require.NoError(t, err)

	cfg := ca.ClientConfig(t, "alice", "spiffe://sluice/alice")
	require.Len(t, cfg.Certificates, 1)
	require.Equal(t, "spiffe://sluice/alice", tlsconfig.CertIdentity(cfg.Certificates[0].Leaf))
}
