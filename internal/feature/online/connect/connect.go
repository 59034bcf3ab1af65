// Package connect opens the online store a feature repository configures
// (feature_store.yaml's online_store section) and instruments it with
// Prometheus metrics.
package connect

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// Store types.
const (
	TypeEmbedded = "embedded"
	TypeRedis    = "redis"
)

// DefaultPath is the embedded store's file, relative to the repository.
const DefaultPath = "data/online.db"

// Config is the online_store section of feature_store.yaml.
type Config struct {
	// Type is "embedded" (default) or "redis".
	Type string `yaml:"type"`
	// Path is the embedded store's file; relative paths are relative to
	// the repository directory (default data/online.db).
	Path string `yaml:"path"`
	// Redis configures the redis type; its keys sit next to type.
	Redis RedisConfig `yaml:",inline"`
}

// RedisConfig configures a Redis online store.
type RedisConfig struct {
	// Mode is "standalone" (default), "cluster" or "sentinel". Feast's
	// spellings "redis", "redis_cluster" and "redis_sentinel" are accepted.
	Mode       string   `yaml:"redis_type"`
	Addrs      []string `yaml:"addrs"` // server, cluster seed nodes or sentinels; default 127.0.0.1:6379
	MasterName string   `yaml:"master_name"`
	Username   string   `yaml:"username"`
	Password   string   `yaml:"password"`
	DB         int      `yaml:"db"`
	// Timeouts are durations such as "500ms".
	DialTimeout  time.Duration `yaml:"dial_timeout"`  // default 1s
	ReadTimeout  time.Duration `yaml:"read_timeout"`  // default 500ms
	WriteTimeout time.Duration `yaml:"write_timeout"` // default 500ms
	// PoolTimeout bounds the wait for a pooled connection; it is not part
	// of read_timeout or write_timeout. Default 1s.
	PoolTimeout time.Duration `yaml:"pool_timeout"`
	PoolSize    int           `yaml:"pool_size"`
	// ConnectionString is Feast's form, "host:port[,host:port...][,password=…][,db=N][,username=…][,ssl=true][,ssl_…=…]",
	// accepted so Feast repositories load unchanged; it fills the fields
	// above and below that are not set.
	ConnectionString string `yaml:"connection_string"`

	// TLS, with redis-py's names, which are also the keys Feast passes
	// through its connection_string.
	//
	// SSL connects over TLS (TLS 1.2 or newer); the other ssl_ keys need it.
	SSL bool `yaml:"ssl"`
	// SSLCACerts is the PEM bundle of CAs the server certificate is
	// verified against; empty means the system roots.
	SSLCACerts string `yaml:"ssl_ca_certs"`
	// SSLCertFile and SSLKeyFile are the client certificate chain and its
	// key, presented for mTLS (tls-auth-clients); set both or neither.
	SSLCertFile string `yaml:"ssl_certfile"`
	SSLKeyFile  string `yaml:"ssl_keyfile"`
	// SSLCertReqs is "required" (default; "optional" means the same for
	// a client, as in Python) or "none": the server certificate is not
	// verified at all, which lets anyone on the path impersonate Redis.
	SSLCertReqs string `yaml:"ssl_cert_reqs"`
	// SSLCheckHostname false verifies the server certificate's chain but
	// not that it names the host dialled (default true; redis-py before
	// 6.0 defaulted to false).
	SSLCheckHostname *bool `yaml:"ssl_check_hostname"`
}

// parseConnectionString applies Feast's connection_string to r.
func parseConnectionString(r *RedisConfig) error {
	if r.ConnectionString == "" {
		return nil
	}
	var addrs []string
	for part := range strings.SplitSeq(r.ConnectionString, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, isOpt := strings.Cut(part, "=")
		if !isOpt {
			if _, _, err := net.SplitHostPort(part); err != nil {
				return fmt.Errorf("connection_string: address %q: %w", part, err)
			}
			addrs = append(addrs, part)
			continue
		}
		switch strings.TrimSpace(k) {
		case "password":
			if r.Password == "" {
				r.Password = v
			}
		case "username":
			if r.Username == "" {
				r.Username = v
			}
		case "db":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("connection_string: db %q is not a non-negative integer", v)
			}
			if r.DB == 0 {
				r.DB = n
			}
		case "ssl", "ssl_check_hostname":
			b, err := strconv.ParseBool(optionValue(v))
			if err != nil {
				return fmt.Errorf("connection_string: %s=%s is not true or false", k, v)
			}
			if k == "ssl" {
				r.SSL = r.SSL || b
			} else if r.SSLCheckHostname == nil {
				r.SSLCheckHostname = &b
			}
		case "ssl_ca_certs":
			r.SSLCACerts = cmp.Or(r.SSLCACerts, optionValue(v))
		case "ssl_certfile":
			r.SSLCertFile = cmp.Or(r.SSLCertFile, optionValue(v))
		case "ssl_keyfile":
			r.SSLKeyFile = cmp.Or(r.SSLKeyFile, optionValue(v))
		case "ssl_cert_reqs":
			r.SSLCertReqs = cmp.Or(r.SSLCertReqs, optionValue(v))
		default:
			return fmt.Errorf("connection_string: unknown option %q", k)
		}
	}
	if len(r.Addrs) == 0 {
		r.Addrs = addrs
	}
	return nil
}

// optionValue is a connection_string value as Feast reads it: a JSON
// string ("…") is unquoted, anything else is taken as it is.
func optionValue(v string) string {
	v = strings.TrimSpace(v)
	var s string
	if strings.HasPrefix(v, `"`) && json.Unmarshal([]byte(v), &s) == nil {
		return s
	}
	return v
}

// clientTLS maps the ssl_ keys to TLS client options, with relative paths
// made relative to baseDir; ok is false when TLS is off.
func (r RedisConfig) clientTLS(baseDir string) (o tlsconfig.ClientOptions, ok bool, err error) {
	if !r.SSL {
		for _, kv := range [][2]string{
			{"ssl_ca_certs", r.SSLCACerts}, {"ssl_certfile", r.SSLCertFile}, {"ssl_keyfile", r.SSLKeyFile}, {"ssl_cert_reqs", r.SSLCertReqs},
		} {
			if kv[1] != "" {
				return o, false, fmt.Errorf("%s needs ssl: true (redis-py would ignore it and connect in plaintext)", kv[0])
			}
		}
		if r.SSLCheckHostname != nil {
			return o, false, errors.New("ssl_check_hostname needs ssl: true")
		}
		return o, false, nil
	}
	switch r.SSLCertReqs {
	case "", "required", "optional":
	case "none":
		o.InsecureSkipVerify = true
	default:
		return o, false, fmt.Errorf("ssl_cert_reqs %q is not one of required, optional, none", r.SSLCertReqs)
	}
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(baseDir, p)
	}
	if (r.SSLCertFile == "") != (r.SSLKeyFile == "") {
		return o, false, errors.New("ssl_certfile and ssl_keyfile go together: set both or neither")
	}
	o.CAFile, o.CertFile, o.KeyFile = abs(r.SSLCACerts), abs(r.SSLCertFile), abs(r.SSLKeyFile)
	return o, true, nil
}

// tlsConfig builds the store's TLS configuration, reading the files; nil
// when TLS is off.
func (r RedisConfig) tlsConfig(baseDir string) (*tls.Config, []string, error) {
	o, ok, err := r.clientTLS(baseDir)
	if err != nil || !ok {
		return nil, nil, err
	}
	cfg, err := tlsconfig.ClientConfig(o) // errors name ca_file, cert_file or key_file and the path
	if err != nil {
		return nil, nil, fmt.Errorf("redis tls: %w", err)
	}
	warnings := o.Warnings()
	if r.SSLCheckHostname != nil && !*r.SSLCheckHostname && !o.InsecureSkipVerify {
		skipHostname(cfg)
		warnings = append(warnings, "ssl_check_hostname: false: any certificate the CA issued is accepted for any Redis host")
	}
	return cfg, warnings, nil
}

// skipHostname makes cfg verify the server's chain against its roots (the
// system's when RootCAs is nil) without checking the name: crypto/tls
// either verifies both or neither.
func skipHostname(cfg *tls.Config) {
	roots := cfg.RootCAs
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redis sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("verify redis certificate: %w", err)
		}
		return nil
	}
}

func redisMode(m string) (redis.Mode, error) {
	switch m {
	case "", "standalone", "redis":
		return redis.Standalone, nil
	case "cluster", "redis_cluster":
		return redis.Cluster, nil
	case "sentinel", "redis_sentinel":
		return redis.Sentinel, nil
	}
	return "", fmt.Errorf("redis_type %q is not supported (want standalone, cluster or sentinel)", m)
}

// Validate reports configuration errors without connecting.
func (c Config) Validate() error {
	switch c.Type {
	case "", TypeEmbedded:
		return nil
	case TypeRedis:
		if err := parseConnectionString(&c.Redis); err != nil {
			return err
		}
		if _, err := redisMode(c.Redis.Mode); err != nil {
			return err
		}
		if m, _ := redisMode(c.Redis.Mode); m == redis.Sentinel && c.Redis.MasterName == "" {
			return errors.New("redis_type sentinel needs master_name")
		}
		for _, d := range []time.Duration{c.Redis.DialTimeout, c.Redis.ReadTimeout, c.Redis.WriteTimeout, c.Redis.PoolTimeout} {
			if d < 0 {
				return fmt.Errorf("negative redis timeout %s", d)
			}
		}
		if _, _, err := c.Redis.clientTLS(""); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("online store type %q is not supported (want embedded or redis)", c.Type)
}

// Open opens the configured store for project, with paths relative to
// baseDir (the feature repository), wrapped with request metrics
// registered on reg (nil = unregistered).
func Open(ctx context.Context, cfg Config, project, baseDir string, logger *slog.Logger, reg prometheus.Registerer) (online.Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open online store: %w", err)
	}
	var (
		s    online.Store
		kind string
	)
	switch cfg.Type {
	case "", TypeEmbedded:
		path := cfg.Path
		if path == "" {
			path = DefaultPath
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join(baseDir, path)
		}
		es, err := embedded.Open(path, embedded.Options{})
		if err != nil {
			return nil, err
		}
		s, kind = es, TypeEmbedded
		logger.Info("online store opened", "type", kind, "path", path)
	case TypeRedis:
		_ = parseConnectionString(&cfg.Redis) // checked by Validate
		mode, _ := redisMode(cfg.Redis.Mode)
		addrs := cfg.Redis.Addrs
		if len(addrs) == 0 {
			addrs = []string{"127.0.0.1:6379"}
		}
		tlsCfg, warnings, err := cfg.Redis.tlsConfig(baseDir)
		if err != nil {
			return nil, fmt.Errorf("open online store: %w", err)
		}
		for _, w := range warnings {
			logger.Warn("online store tls is not safe", "warning", w)
		}
		rs, err := redis.Open(ctx, project, redis.Options{
			Mode: mode, Addrs: addrs, MasterName: cfg.Redis.MasterName,
			Username: cfg.Redis.Username, Password: cfg.Redis.Password, DB: cfg.Redis.DB,
			DialTimeout: cfg.Redis.DialTimeout, ReadTimeout: cfg.Redis.ReadTimeout, WriteTimeout: cfg.Redis.WriteTimeout,
			PoolTimeout: cfg.Redis.PoolTimeout, PoolSize: cfg.Redis.PoolSize, TLS: tlsCfg, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		s, kind = rs, TypeRedis
		logger.Info("online store opened", "type", kind, "redis_type", string(mode), "addrs", addrs, "tls", tlsCfg != nil)
	}
	return Instrument(s, kind, reg), nil
}
