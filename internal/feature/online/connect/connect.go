// Package connect opens the online store a feature repository configures
// (feature_store.yaml's online_store section) and instruments it with
// Prometheus metrics.
package connect

import (
	"context"
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
	PoolSize     int           `yaml:"pool_size"`
	// ConnectionString is Feast's form, "host:port[,host:port...][,password=…][,db=N][,username=…]",
	// accepted so Feast repositories load unchanged; it fills the fields
	// above that are not set.
	ConnectionString string `yaml:"connection_string"`
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
		case "ssl":
			if v != "false" {
				return fmt.Errorf("connection_string: ssl=%s is not supported", v)
			}
		default:
			return fmt.Errorf("connection_string: unknown option %q", k)
		}
	}
	if len(r.Addrs) == 0 {
		r.Addrs = addrs
	}
	return nil
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
		for _, d := range []time.Duration{c.Redis.DialTimeout, c.Redis.ReadTimeout, c.Redis.WriteTimeout} {
			if d < 0 {
				return fmt.Errorf("negative redis timeout %s", d)
			}
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
		rs, err := redis.Open(ctx, project, redis.Options{
			Mode: mode, Addrs: addrs, MasterName: cfg.Redis.MasterName,
			Username: cfg.Redis.Username, Password: cfg.Redis.Password, DB: cfg.Redis.DB,
			DialTimeout: cfg.Redis.DialTimeout, ReadTimeout: cfg.Redis.ReadTimeout, WriteTimeout: cfg.Redis.WriteTimeout,
			PoolSize: cfg.Redis.PoolSize, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		s, kind = rs, TypeRedis
		logger.Info("online store opened", "type", kind, "redis_type", string(mode), "addrs", addrs)
	}
	return Instrument(s, kind, reg), nil
}
