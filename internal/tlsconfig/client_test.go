package tlsconfig

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

func TestClientOptionsValidate(t *testing.T) {
	tests := []struct {
		name     string
		opts     ClientOptions
		enabled  bool
		wantErr  string
		warnings int
	}{
		{name: "zero", opts: ClientOptions{}},
		{name: "system roots", opts: ClientOptions{ServerName: "redis.internal"}, enabled: true},
		{name: "mtls", opts: ClientOptions{CAFile: "ca", CertFile: "c", KeyFile: "k"}, enabled: true},
		{name: "cert without key", opts: ClientOptions{CertFile: "c"}, enabled: true, wantErr: "key_file: required with cert_file"},
		{name: "key without cert", opts: ClientOptions{KeyFile: "k"}, enabled: true, wantErr: "cert_file: required with key_file"},
		{name: "insecure", opts: ClientOptions{InsecureSkipVerify: true}, enabled: true, warnings: 1},
		{name: "insecure with CA and name", opts: ClientOptions{InsecureSkipVerify: true, CAFile: "ca", ServerName: "x"}, enabled: true, warnings: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.enabled, tt.opts.Enabled())
			require.Len(t, tt.opts.Warnings(), tt.warnings)
			err := tt.opts.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			_, err = ClientConfig(tt.opts)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestClientOptionsConfig(t *testing.T) {
	clients := tlstest.NewCA(t)
	p := newPKI(t, clients, ClientAuthRequest)
	s, _ := newServer(t, p)
	addr := serve(t, s)
	dir := t.TempDir()
	caFile := p.serverCA.WriteCAFile(t, dir, "server-ca")

	t.Run("CA file", func(t *testing.T) {
		cfg, err := ClientConfig(ClientOptions{CAFile: caFile})
		require.NoError(t, err)
		require.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
		r, err := dial(t, addr, cfg)
		require.NoError(t, err)
		require.Empty(t, r.identity)
	})
	t.Run("wrong server name", func(t *testing.T) {
		cfg, err := ClientConfig(ClientOptions{CAFile: caFile, ServerName: "redis.internal"})
		require.NoError(t, err)
		_, err = dial(t, addr, cfg)
		require.ErrorContains(t, err, "redis.internal")
	})
	t.Run("system roots do not trust a private CA", func(t *testing.T) {
		cfg, err := ClientConfig(ClientOptions{ServerName: "localhost"})
		require.NoError(t, err)
		_, err = dial(t, addr, cfg)
		require.Error(t, err)
	})
	t.Run("insecure skip verify", func(t *testing.T) {
		cfg, err := ClientConfig(ClientOptions{InsecureSkipVerify: true})
		require.NoError(t, err)
		_, err = dial(t, addr, cfg)
		require.NoError(t, err)
	})
	t.Run("bad CA file", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.crt")
		require.NoError(t, os.WriteFile(bad, []byte("junk"), 0o600))
		_, err := ClientConfig(ClientOptions{CAFile: bad})
		require.ErrorContains(t, err, "parse ca_file "+bad+": no CERTIFICATE block found")
		_, err = ClientConfig(ClientOptions{CAFile: filepath.Join(dir, "missing.crt")})
		require.ErrorContains(t, err, "read ca_file: open "+filepath.Join(dir, "missing.crt"))
	})
	t.Run("client certificate reloaded", func(t *testing.T) {
		certFile := filepath.Join(dir, "client.crt")
		keyFile := filepath.Join(dir, "client.key")
		write := func(cn string) {
			certPEM, keyPEM := clients.IssueClient(t, cn)
			require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
			require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
		}
		write("alice")
		cfg, err := ClientConfig(ClientOptions{CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
		require.NoError(t, err)
		r, err := dial(t, addr, cfg)
		require.NoError(t, err)
		require.Equal(t, "alice", r.identity)

		write("bob")
		eventually(t, "the new client certificate is presented", func() bool {
			r, err := dial(t, addr, cfg)
			return err == nil && r.identity == "bob"
		})

		// A broken pair keeps the previous one in use.
		require.NoError(t, os.WriteFile(keyFile, []byte("junk"), 0o600))
		cc := &clientCert{certFile: certFile, keyFile: keyFile}
		require.ErrorContains(t, cc.load(), "parse key_file "+keyFile)
		for range 3 {
			r, err := dial(t, addr, cfg)
			require.NoError(t, err)
			require.Equal(t, "bob", r.identity)
		}
	})
	t.Run("bad client certificate", func(t *testing.T) {
		certFile, _ := clients.WriteFiles(t, dir, "c1")
		_, otherKey := clients.WriteFiles(t, dir, "c2")
		_, err := ClientConfig(ClientOptions{CertFile: certFile, KeyFile: otherKey})
		require.ErrorContains(t, err, "does not match cert_file "+certFile)
	})
}
