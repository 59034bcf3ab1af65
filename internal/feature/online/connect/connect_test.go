package connect

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("time.Sleep"))
}

func TestDecodeYAML(t *testing.T) {
	src := `
type: redis
redis_type: cluster
addrs: ["10.0.0.1:6379", "10.0.0.2:6379"]
username: u
password: p
db: 2
dial_timeout: 2s
read_timeout: 250ms
write_timeout: 300ms
pool_timeout: 2s
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&c))
	require.Equal(t, Config{Type: "redis", Redis: RedisConfig{
		Mode: "cluster", Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}, Username: "u", Password: "p", DB: 2,
		DialTimeout: 2 * time.Second, ReadTimeout: 250 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		PoolTimeout: 2 * time.Second,
	}}, c)
	require.NoError(t, c.Validate())
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"default", Config{}, ""},
		{"embedded", Config{Type: "embedded", Path: "x.db"}, ""},
		{"redis", Config{Type: "redis"}, ""},
		{"feast spelling", Config{Type: "redis", Redis: RedisConfig{Mode: "redis_cluster"}}, ""},
		{"unknown type", Config{Type: "sqlite"}, `type "sqlite" is not supported`},
		{"unknown mode", Config{Type: "redis", Redis: RedisConfig{Mode: "ring"}}, `redis_type "ring"`},
		{"sentinel without master", Config{Type: "redis", Redis: RedisConfig{Mode: "sentinel"}}, "master_name"},
		{"negative timeout", Config{Type: "redis", Redis: RedisConfig{ReadTimeout: -time.Second}}, "negative"},
		{"negative pool timeout", Config{Type: "redis", Redis: RedisConfig{PoolTimeout: -time.Second}}, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.err)
		})
	}
}

func TestOpenEmbeddedDefaultPathAndMetrics(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	s, err := Open(t.Context(), Config{}, "proj", dir, nil, reg)
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "data", "online.db"))
	inner, ok := s.(interface{ Unwrap() online.Store }).Unwrap().(*embedded.Store)
	require.True(t, ok)
	require.Equal(t, filepath.Join(dir, DefaultPath), inner.Path())

	k := online.Key{View: "v", Entity: []byte{1}}
	_, err = s.Write(t.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 1}}}, online.WriteOptions{})
	require.NoError(t, err)
	for range 3 {
		_, err = s.Read(t.Context(), []online.Key{k})
		require.NoError(t, err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = s.Read(cancelled, []online.Key{k})
	require.Error(t, err)
	require.NoError(t, s.Close())

	m := newMetrics(reg) // the same collectors, found again on reg
	require.InDelta(t, 3, testutil.ToFloat64(m.requests.WithLabelValues("embedded", "read", "ok")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.requests.WithLabelValues("embedded", "read", "error")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.requests.WithLabelValues("embedded", "write", "ok")), 0)
	require.Equal(t, 2, testutil.CollectAndCount(m.duration))

	// A second store in the same process reuses the registered metrics.
	s2, err := Open(t.Context(), Config{Path: filepath.Join(dir, "other.db")}, "proj", dir, nil, reg)
	require.NoError(t, err)
	require.NoError(t, s2.Close())
}

type downStore struct{ online.Store }

func (downStore) Ping(context.Context) error {
	return errors.Join(online.ErrUnavailable, errors.New("dial tcp: refused"))
}

func TestUnavailableOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := Instrument(downStore{}, "redis", reg)
	require.ErrorIs(t, s.Ping(t.Context()), online.ErrUnavailable)
	m := newMetrics(reg)
	require.InDelta(t, 1, testutil.ToFloat64(m.requests.WithLabelValues("redis", "ping", "unavailable")), 0)
}

func TestOpenRedis(t *testing.T) {
	c, err := net.DialTimeout("tcp", "127.0.0.1:6379", time.Second)
	if err != nil {
		// CI machines run Redis on 6379; a missing one there is a failure.
		t.Fatal("no redis at 127.0.0.1:6379")
	}
	_ = c.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	project := "connecttest_" + hex.EncodeToString(b[:])
	s, err := Open(t.Context(), Config{Type: "redis", Redis: RedisConfig{Addrs: []string{"127.0.0.1:6379"}}}, project, t.TempDir(), nil, nil)
	require.NoError(t, err)
	defer s.Close()
	rs := s.(interface{ Unwrap() online.Store }).Unwrap().(*redis.Store)
	defer func() { require.NoError(t, rs.DeletePrefix(context.Background())) }()
	require.NoError(t, s.PutMeta(t.Context(), "m", []byte("x")))
	v, err := s.GetMeta(t.Context(), "m")
	require.NoError(t, err)
	require.Equal(t, "x", string(v))
}

func TestConnectionString(t *testing.T) {
	cases := []struct {
		in   string
		want RedisConfig
		err  string
	}{
		{"localhost:6379", RedisConfig{Addrs: []string{"localhost:6379"}}, ""},
		{"a:1,b:2,password=secret,db=3,ssl=false", RedisConfig{Addrs: []string{"a:1", "b:2"}, Password: "secret", DB: 3}, ""},
		{"a:1,username=u", RedisConfig{Addrs: []string{"a:1"}, Username: "u"}, ""},
		{"a:1,ssl=true", RedisConfig{Addrs: []string{"a:1"}, SSL: true}, ""},
		{"a:1,ssl=True", RedisConfig{Addrs: []string{"a:1"}, SSL: true}, ""},
		{
			`a:1,ssl=true,ssl_ca_certs="/etc/redis/ca, bundle.pem",ssl_certfile=c.pem,ssl_keyfile=k.pem,ssl_cert_reqs=required,ssl_check_hostname=false`,
			RedisConfig{},
			"address", // Feast splits on every comma too: no commas in paths
		},
		{
			`a:1,ssl=true,ssl_ca_certs="/etc/redis/ca.pem",ssl_certfile=c.pem,ssl_keyfile=k.pem,ssl_cert_reqs=required,ssl_check_hostname=false`,
			RedisConfig{
				Addrs: []string{"a:1"}, SSL: true, SSLCACerts: "/etc/redis/ca.pem", SSLCertFile: "c.pem", SSLKeyFile: "k.pem",
				SSLCertReqs: "required", SSLCheckHostname: new(false),
			},
			"",
		},
		{"a:1,ssl=maybe", RedisConfig{}, "ssl=maybe is not true or false"},
		{"a:1,db=x", RedisConfig{}, "db"},
		{"a:1,color=red", RedisConfig{}, "unknown option"},
		{"nohostport", RedisConfig{}, "address"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			r := RedisConfig{ConnectionString: c.in}
			err := parseConnectionString(&r)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			r.ConnectionString = ""
			require.Equal(t, c.want, r)
		})
	}
	// Explicit fields win over the connection string.
	r := RedisConfig{Addrs: []string{"x:1"}, Password: "p", ConnectionString: "a:1,password=q"}
	require.NoError(t, parseConnectionString(&r))
	require.Equal(t, []string{"x:1"}, r.Addrs)
	require.Equal(t, "p", r.Password)
}

func FuzzConnectionString(f *testing.F) {
	for _, s := range []string{
		"localhost:6379", "a:1,b:2,password=x,db=2,ssl=false", "a:1,db=-1", ",,=,", "[::1]:6379,username=u",
		`a:1,ssl=true,ssl_ca_certs="ca.pem",ssl_certfile=c.pem,ssl_keyfile=k.pem,ssl_cert_reqs=none,ssl_check_hostname=false`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := RedisConfig{ConnectionString: s}
		if err := parseConnectionString(&r); err != nil {
			return
		}
		for _, a := range r.Addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				t.Fatalf("accepted bad address %q", a)
			}
		}
		if r.DB < 0 {
			t.Fatalf("negative db %d", r.DB)
		}
		if o, ok, err := r.clientTLS("/repo"); err == nil && ok != r.SSL {
			t.Fatalf("ssl %v, yet TLS options %+v (on: %v)", r.SSL, o, ok)
		}
	})
}
