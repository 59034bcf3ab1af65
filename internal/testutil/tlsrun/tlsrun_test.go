package tlsrun

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRedis(t *testing.T) {
	f := NewFiles(t)
	s := StartRedis(t, f, RedisOptions{RequireClientCert: true})

	ping := func(opts *redis.Options) error {
		opts.Addr, opts.MaxRetries, opts.DialTimeout = s.Addr, -1, 2*time.Second
		c := redis.NewClient(opts)
		defer c.Close()
		return c.Ping(t.Context()).Err()
	}
	t.Run("mtls", func(t *testing.T) {
		require.NoError(t, ping(&redis.Options{TLSConfig: f.ClientConfig(t, true)}))
	})
	t.Run("no client certificate", func(t *testing.T) {
		require.Error(t, ping(&redis.Options{TLSConfig: f.ClientConfig(t, false)}))
	})
	t.Run("plaintext", func(t *testing.T) {
		require.Error(t, ping(&redis.Options{}))
	})
	s.Stop()
	s.Stop()
}

func TestNATS(t *testing.T) {
	f := NewFiles(t)
	s := StartNATS(t, f, NATSOptions{RequireClientCert: true})
	connect := func(opts ...nats.Option) error {
		nc, err := nats.Connect("nats://"+s.Addr, append(opts, nats.Timeout(2*time.Second))...)
		if err == nil {
			nc.Close()
		}
		return err
	}
	require.NoError(t, connect(nats.Secure(f.ClientConfig(t, true))))
	require.Error(t, connect(nats.Secure(f.ClientConfig(t, false))))
	require.Error(t, connect())
}
