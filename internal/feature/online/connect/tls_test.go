package connect

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/testutil/tlsrun"
)

func TestDecodeSSLKeys(t *testing.T) {
	src := `
type: redis
addrs: ["redis.internal:6380"]
ssl: true
ssl_ca_certs: tls/ca.pem
ssl_certfile: tls/client.pem
ssl_keyfile: tls/client.key
ssl_cert_reqs: required
ssl_check_hostname: false
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&c))
	require.Equal(t, RedisConfig{
		Addrs: []string{"redis.internal:6380"}, SSL: true, SSLCACerts: "tls/ca.pem", SSLCertFile: "tls/client.pem",
		SSLKeyFile: "tls/client.key", SSLCertReqs: "required", SSLCheckHostname: new(false),
	}, c.Redis)
	require.NoError(t, c.Validate())
	o, ok, err := c.Redis.clientTLS("/repo")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "/repo/tls/ca.pem", o.CAFile, "paths are relative to the repository")
	require.Equal(t, "/repo/tls/client.key", o.KeyFile)
}

func TestValidateSSL(t *testing.T) {
	redisWith := func(r RedisConfig) Config { return Config{Type: TypeRedis, Redis: r} }
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"ssl", redisWith(RedisConfig{SSL: true}), ""},
		{"connection string", redisWith(RedisConfig{ConnectionString: "a:1,ssl=true,ssl_cert_reqs=none"}), ""},
		{"ca without ssl", redisWith(RedisConfig{SSLCACerts: "ca.pem"}), "ssl_ca_certs needs ssl: true"},
		{"check_hostname without ssl", redisWith(RedisConfig{SSLCheckHostname: new(true)}), "ssl_check_hostname needs ssl: true"},
		{"cert without key", redisWith(RedisConfig{SSL: true, SSLCertFile: "c.pem"}), "ssl_certfile and ssl_keyfile go together"},
		{"key without cert", redisWith(RedisConfig{ConnectionString: "a:1,ssl=true,ssl_keyfile=k.pem"}), "ssl_certfile and ssl_keyfile go together"},
		{"cert_reqs", redisWith(RedisConfig{SSL: true, SSLCertReqs: "sometimes"}), `ssl_cert_reqs "sometimes" is not one of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// roundTrip writes a row through s and reads it back.
func roundTrip(t *testing.T, s online.Store) {
	t.Helper()
	k := online.Key{View: "v", Entity: []byte{7}}
	_, err := s.Write(t.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 42}}}, online.WriteOptions{})
	require.NoError(t, err)
	got, err := s.Read(t.Context(), []online.Key{k})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Found)
	require.Equal(t, int64(42), got[0].Record.EventTS)
}

func TestOpenRedisTLS(t *testing.T) {
	f := tlsrun.NewFiles(t)
	srv := tlsrun.StartRedis(t, f, tlsrun.RedisOptions{RequireClientCert: true})
	var b [6]byte
	_, _ = rand.Read(b[:])
	project := "connecttls_" + hex.EncodeToString(b[:])
	open := func(t *testing.T, r RedisConfig) (online.Store, error) {
		t.Helper()
		r.DialTimeout, r.ReadTimeout, r.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
		// Relative paths: the files sit in the "repository".
		return Open(t.Context(), Config{Type: TypeRedis, Redis: r}, project, f.Dir, nil, nil)
	}
	mtls := RedisConfig{Addrs: []string{srv.Addr}, SSL: true, SSLCACerts: "ca.crt", SSLCertFile: "client.crt", SSLKeyFile: "client.key"}

	t.Run("keys", func(t *testing.T) {
		s, err := open(t, mtls)
		require.NoError(t, err)
		defer s.Close()
		roundTrip(t, s)
	})
	t.Run("connection string", func(t *testing.T) {
		s, err := open(t, RedisConfig{ConnectionString: srv.Addr + `,ssl=true,ssl_ca_certs="ca.crt",ssl_certfile=client.crt,ssl_keyfile=client.key`})
		require.NoError(t, err)
		defer s.Close()
		roundTrip(t, s)
	})
	t.Run("ssl_check_hostname false still verifies the chain", func(t *testing.T) {
		r := mtls
		r.SSLCACerts, r.SSLCheckHostname = "other-ca.crt", new(false)
		_, err := open(t, r)
		require.ErrorContains(t, err, "certificate signed by unknown authority")
	})

	failures := []struct {
		name string
		edit func(*RedisConfig)
		msg  string
	}{
		{"unknown CA", func(r *RedisConfig) { r.SSLCACerts = "other-ca.crt" }, "certificate signed by unknown authority"},
		// Refused after the client's side of the handshake (TLS 1.3): the
		// error is the alert or a broken pipe, whichever comes first.
		{"no client certificate", func(r *RedisConfig) { r.SSLCertFile, r.SSLKeyFile = "", "" }, "open redis online store"},
		{"plaintext", func(r *RedisConfig) { *r = RedisConfig{Addrs: r.Addrs} }, "open redis online store"},
		{"missing CA file", func(r *RedisConfig) { r.SSLCACerts = "nope.crt" }, "redis tls: read ca_file"},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			r := mtls
			tc.edit(&r)
			_, err := open(t, r)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

// TestSkipHostname dials with a name the server certificate does not
// carry: refused by default, accepted with ssl_check_hostname false.
func TestSkipHostname(t *testing.T) {
	f := tlsrun.NewFiles(t)
	srv := tlsrun.StartRedis(t, f, tlsrun.RedisOptions{})
	ping := func(check bool) error {
		r := RedisConfig{SSL: true, SSLCACerts: filepath.Base(f.CAFile), SSLCheckHostname: &check}
		cfg, _, err := r.tlsConfig(f.Dir)
		require.NoError(t, err)
		cfg.ServerName = "redis.internal"
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, TLSConfig: cfg, MaxRetries: -1, DialTimeout: 2 * time.Second})
		defer c.Close()
		return c.Ping(t.Context()).Err()
	}
	require.ErrorContains(t, ping(true), fmt.Sprintf("not %s", "redis.internal"))
	require.NoError(t, ping(false))
}
