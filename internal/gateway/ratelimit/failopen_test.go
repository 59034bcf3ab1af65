package ratelimit

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// privateRedis is a redis-server process owned by one test.
type privateRedis struct {
	t    *testing.T
	path string
	port int
	cmd  *exec.Cmd
}

func newPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not installed: %v", err)
	}
	p := &privateRedis{t: t, path: path, port: freePort(t)}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *privateRedis) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

func (p *privateRedis) start() {
	p.t.Helper()
	p.cmd = exec.CommandContext(context.Background(), p.path,
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", p.t.TempDir())
	require.NoError(p.t, p.cmd.Start())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	harness.WaitFor(p.t, 5*time.Second, 20*time.Millisecond, "redis-server on "+p.addr()+" to start", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := c.Ping(ctx).Err()
		return err == nil, fmt.Sprint(err)
	})
}

// stop kills the server by its pid and waits for it to exit.
func (p *privateRedis) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// TestFailOpenFallsBackAndRecovers: with Redis gone the local bucket
// decides; when Redis is back (its script cache empty) decisions go back
// to it. The budgets are generous here: this test is about falling back
// and coming back, and on a loaded machine a decision may take longer
// than the product's 50 ms (warm) or 500 ms (cold) budget, which the
// product answers locally, as it should (TestRedisColdCallGetsConnectBudget
// and TestFailOpenToleratesAStall test the budgets). Redis being gone is
// a refused connection, no timeout, so nothing here waits for a budget.
func TestFailOpenFallsBackAndRecovers(t *testing.T) {
	srv := newPrivateRedis(t)
	client := newTestClient(t, srv.addr())
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	f := NewFailOpen(
		NewRedis(client, RedisOptions{Prefix: "t:", Metrics: m, Timeout: 10 * time.Second, ConnectTimeout: 10 * time.Second}),
		NewLocal(LocalOptions{Metrics: m}),
		FailOpenOptions{ProbeInterval: 50 * time.Millisecond, Metrics: m},
	)
	limit := Limit{Rate: 0.01, Burst: 2}

	d, err := f.Allow(t.Context(), "client-a", limit)
	require.NoError(t, err)
	require.Equal(t, Decision{Allowed: true, Remaining: 1, Backend: BackendRedis}, d)
	require.InDelta(t, 1.0, testutil.ToFloat64(m.redisUp), 0)

	srv.stop()

	// The local bucket decides now, with its own budget for the key.
	var backends []string
	var results []bool
	for range 3 {
		d, err := f.Allow(t.Context(), "client-a", limit)
		require.NoError(t, err)
		backends = append(backends, d.Backend)
		results = append(results, d.Allowed)
	}
	require.Equal(t, []string{BackendLocal, BackendLocal, BackendLocal}, backends)
	require.Equal(t, []bool{true, true, false}, results)
	require.False(t, f.RedisUp())
	require.InDelta(t, 0.0, testutil.ToFloat64(m.redisUp), 0)
	require.InDelta(t, 3.0, testutil.ToFloat64(m.fallbacks), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(m.decisions.WithLabelValues(BackendLocal, "limited")), 0)

	// Restart on the same port: the script cache is empty, so this also
	// exercises the EVAL fallback after NOSCRIPT.
	srv.start()
	harness.WaitFor(t, 5*time.Second, 10*time.Millisecond, "the limiter back on redis", func() (bool, string) {
		d, err := f.Allow(t.Context(), "client-b", limit)
		require.NoError(t, err)
		if d.Backend == BackendRedis {
			require.True(t, d.Allowed)
		}
		return d.Backend == BackendRedis, fmt.Sprintf("%+v", d)
	})
	require.True(t, f.RedisUp())
	require.InDelta(t, 1.0, testutil.ToFloat64(m.redisUp), 0)
	// The restarted Redis lost client-a's TAT, so its budget is full again there.
	d, err = f.Allow(t.Context(), "client-a", limit)
	require.NoError(t, err)
	require.Equal(t, BackendRedis, d.Backend)
	require.True(t, d.Allowed)
}

// countHook counts commands sent through a go-redis client.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// While Redis is down, at most one call per probe interval tries it, so a
// dead Redis does not add its timeout to every request.
func TestFailOpenProbesAtMostOncePerInterval(t *testing.T) {
	// A socket path that does not exist: every dial fails at once, and no
	// other process can start listening there while the test runs (a TCP
	// port that was free a moment ago can be taken by a parallel test).
	client := redis.NewClient(&redis.Options{
		Network: "unix", Addr: filepath.Join(t.TempDir(), "no-redis.sock"),
		ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { _ = client.Close() })
	hook := &countHook{}
	client.AddHook(hook)
	clock := newManualClock()
	m := NewMetrics(nil)
	f := NewFailOpen(
		NewRedis(client, RedisOptions{Metrics: m}),
		NewLocal(LocalOptions{Now: clock.Now, Metrics: m}),
		FailOpenOptions{Now: clock.Now, Metrics: m},
	)
	limit := Limit{Rate: 100, Burst: 100}
	allow := func() {
		t.Helper()
		d, err := f.Allow(t.Context(), "k", limit)
		require.NoError(t, err)
		require.Equal(t, BackendLocal, d.Backend)
		require.True(t, d.Allowed)
	}

	for range 5 {
		allow()
	}
	require.Equal(t, int64(1), hook.n.Load(), "only the first call tried redis")

	clock.Advance(999 * time.Millisecond)
	allow()
	require.Equal(t, int64(1), hook.n.Load())

	clock.Advance(time.Millisecond)
	for range 5 {
		allow()
	}
	require.Equal(t, int64(2), hook.n.Load(), "one probe after the interval")
	require.InDelta(t, 11.0, testutil.ToFloat64(m.fallbacks), 0)
}

func TestFailOpenCallerCancelled(t *testing.T) {
	c, prefix := sharedRedis(t)
	f := NewFailOpen(NewRedis(c, RedisOptions{Prefix: prefix}), NewLocal(LocalOptions{}), FailOpenOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := f.Allow(ctx, "k", Limit{Rate: 1, Burst: 1})
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, f.RedisUp(), "a cancelled caller does not mark redis down")
}

// stallHook makes every command wait until release is closed, then time
// out, while stall is set: a Redis (or a process) that stalled.
type stallHook struct {
	stall   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.stall.Load() {
			h.entered <- struct{}{}
			<-h.release
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return next(ctx, cmd)
	}
}

func (h *stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFailOpenToleratesAStall: calls that time out together in one stall
// fall back to the local bucket one by one, but Redis stays up; timeouts
// of calls made one after another take it down.
func TestFailOpenToleratesAStall(t *testing.T) {
	c, prefix := sharedRedis(t)
	hook := &stallHook{entered: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(hook)
	t.Cleanup(func() { hook.stall.Store(false) }) // before sharedRedis deletes the keys
	m := NewMetrics(nil)
	f := NewFailOpen(NewRedis(c, RedisOptions{Prefix: prefix, Metrics: m}), NewLocal(LocalOptions{Metrics: m}), FailOpenOptions{Metrics: m})
	limit := Limit{Rate: 1000, Burst: 1000}
	d, err := f.Allow(t.Context(), "k", limit)
	require.NoError(t, err)
	require.Equal(t, BackendRedis, d.Backend)

	hook.stall.Store(true)
	const inFlight = 8
	backends := make(chan string, inFlight)
	for range inFlight {
		go func() {
			d, err := f.Allow(t.Context(), "k", limit)
			if err != nil {
				backends <- err.Error()
				return
			}
			backends <- d.Backend
		}()
	}
	for range inFlight {
		<-hook.entered
	}
	close(hook.release)
	for range inFlight {
		require.Equal(t, BackendLocal, <-backends)
	}
	require.True(t, f.RedisUp(), "one stall is not Redis down")

	hook.release = make(chan struct{})
	close(hook.release)
	go func() {
		for range DownAfterTimeouts - 1 {
			<-hook.entered
		}
	}()
	// The stall counted as one timeout: DownAfterTimeouts-1 more in a row.
	for range DownAfterTimeouts - 2 {
		d, err := f.Allow(t.Context(), "k", limit)
		require.NoError(t, err)
		require.Equal(t, BackendLocal, d.Backend)
	}
	require.True(t, f.RedisUp())
	_, err = f.Allow(t.Context(), "k", limit)
	require.NoError(t, err)
	require.False(t, f.RedisUp(), "timeouts one after another are Redis down")
}
