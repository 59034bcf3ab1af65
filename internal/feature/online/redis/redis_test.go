package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/onlinetest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis's pool retries a failed dial in a goroutine that notices
		// Close only after its current sleep.
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

var _ online.Store = (*Store)(nil)

func sharedAddr() string {
	if a := os.Getenv("SLUICE_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

func randomPrefix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sluicetest:" + hex.EncodeToString(b[:]) + ":"
}

// needRedis fails the test when Redis is not reachable.
func needRedis(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("redis at %s not reachable: %v", addr, err)
	}
	_ = c.Close()
}

// openIsolated opens a store under a fresh random prefix and deletes the
// prefix's keys at the end (never FLUSHALL: the Redis may be shared).
func openIsolated(t *testing.T, opts Options) *Store {
	t.Helper()
	opts.KeyPrefix = randomPrefix(t)
	s, err := Open(t.Context(), "", opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := Open(context.Background(), "", opts)
		if err != nil {
			t.Errorf("reopen for cleanup: %v", err)
			return
		}
		defer c.Close()
		require.NoError(t, c.DeletePrefix(context.Background()))
	})
	return s
}

func TestConformanceStandalone(t *testing.T) {
	addr := sharedAddr()
	needRedis(t, addr)
	onlinetest.Run(t, func(t *testing.T) online.Store {
		t.Helper()
		return openIsolated(t, Options{Addrs: []string{addr}})
	})
}

func TestConformanceCluster(t *testing.T) {
	addrs := startCluster(t, 3)
	onlinetest.Run(t, func(t *testing.T) online.Store {
		t.Helper()
		return openIsolated(t, Options{Mode: Cluster, Addrs: addrs})
	})
}

func TestConformanceSentinel(t *testing.T) {
	redisServerPath(t)
	masterPort := freePort(t)
	startServer(t, masterPort, t.TempDir())
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte("sentinel monitor sluicemaster 127.0.0.1 "+masterPort+" 1\n"), 0o644))
	sentPort := freePort(t)
	// A sentinel's config file must come first and be writable.
	spawn(t, sentPort, []string{conf, "--sentinel", "--port", sentPort, "--bind", "127.0.0.1", "--dir", dir})
	addrs := []string{"127.0.0.1:" + sentPort}
	onlinetest.Run(t, func(t *testing.T) online.Store {
		t.Helper()
		return openIsolated(t, Options{Mode: Sentinel, MasterName: "sluicemaster", Addrs: addrs})
	})
}

func TestClusterSpreadsViewKeys(t *testing.T) {
	addrs := startCluster(t, 3)
	s := openIsolated(t, Options{Mode: Cluster, Addrs: addrs})
	var es []online.Entry
	for i := range int64(300) {
		es = append(es, online.Entry{Key: online.Key{View: "v", Entity: onlinetest.Ent(i)}, Record: feature.Record{EventTS: 1}})
	}
	_, err := s.Write(t.Context(), es, online.WriteOptions{})
	require.NoError(t, err)
	for _, a := range addrs {
		out, err := exec.Command("redis-cli", "-p", portOf(t, a), "dbsize").Output()
		require.NoError(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(string(out)))
		require.NoError(t, err)
		require.Greater(t, n, 30, "node %s holds a share of one view's keys", a)
	}
}

func TestBadOptions(t *testing.T) {
	_, err := Open(t.Context(), "p", Options{})
	require.ErrorContains(t, err, "no addresses")
	_, err = Open(t.Context(), "p", Options{Mode: "ring", Addrs: []string{"x:1"}})
	require.ErrorContains(t, err, "unknown mode")
	_, err = Open(t.Context(), "p", Options{Mode: Sentinel, Addrs: []string{"x:1"}})
	require.ErrorContains(t, err, "master_name")
	port := freePort(t)
	_, err = Open(t.Context(), "p", Options{Addrs: []string{"127.0.0.1:" + port}})
	require.ErrorIs(t, err, online.ErrUnavailable)
}

func TestBadViewName(t *testing.T) {
	addr := sharedAddr()
	needRedis(t, addr)
	s := openIsolated(t, Options{Addrs: []string{addr}})
	defer s.Close()
	_, err := s.Write(t.Context(), []online.Entry{{Key: online.Key{View: "a:b"}}}, online.WriteOptions{})
	require.ErrorContains(t, err, "view name")
	require.ErrorContains(t, s.DeleteView(t.Context(), "a*"), "view name")
}

// TestKillAndRecover: with Redis gone, every operation fails with
// ErrUnavailable; when it is back on the same port, the same Store works.
func TestKillAndRecover(t *testing.T) {
	port := freePort(t)
	dir := t.TempDir()
	srv := startServer(t, port, dir)
	s, err := Open(t.Context(), "killtest", Options{Addrs: []string{"127.0.0.1:" + port}})
	require.NoError(t, err)
	defer s.Close()

	k := online.Key{View: "v", Entity: onlinetest.Ent(1)}
	_, err = s.Write(t.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 1, Payload: []byte("x")}}}, online.WriteOptions{})
	require.NoError(t, err)

	srv.kill(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = s.Read(ctx, []online.Key{k})
	require.ErrorIs(t, err, online.ErrUnavailable)
	_, err = s.Write(ctx, []online.Entry{{Key: k, Record: feature.Record{EventTS: 2}}}, online.WriteOptions{})
	require.ErrorIs(t, err, online.ErrUnavailable)
	require.ErrorIs(t, s.Ping(ctx), online.ErrUnavailable)
	_, err = s.GetMeta(ctx, "m")
	require.ErrorIs(t, err, online.ErrUnavailable)
	t.Logf("errors after kill took %s", time.Since(start))

	startServer(t, port, dir) // no persistence: the restarted server is empty
	harness.WaitFor(t, 15*time.Second, 100*time.Millisecond, "the store recovers once redis is back", func() (bool, string) {
		_, err := s.Write(t.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 3, Payload: []byte("back")}}}, online.WriteOptions{})
		return err == nil, fmt.Sprint(err)
	})
	rs, err := s.Read(t.Context(), []online.Key{k})
	require.NoError(t, err)
	require.Equal(t, "back", string(rs[0].Record.Payload))
}

// TestFrozenServerTimesOut: a server that stops answering (SIGSTOP) makes
// calls fail with ErrUnavailable after the read timeout, not hang; when it
// answers again the same Store works.
func TestFrozenServerTimesOut(t *testing.T) {
	port := freePort(t)
	srv := startServer(t, port, t.TempDir())
	s, err := Open(t.Context(), "frozen", Options{Addrs: []string{"127.0.0.1:" + port}, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	k := online.Key{View: "v", Entity: onlinetest.Ent(1)}

	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGSTOP))
	cont := func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) }
	defer cont()
	start := time.Now()
	_, err = s.Read(context.Background(), []online.Key{k})
	require.ErrorIs(t, err, online.ErrUnavailable)
	require.Less(t, time.Since(start), 5*time.Second, "bounded by the timeouts")
	cont()

	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "a read after SIGCONT", func() (bool, string) {
		_, err := s.Read(t.Context(), []online.Key{k})
		return err == nil, fmt.Sprint(err)
	})
}

// --- private redis-server processes ---

type server struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *server) kill(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Kill()
	<-s.done
}

func redisServerPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not installed")
	}
	return p
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return p
}

func startServer(t *testing.T, port, dir string, extra ...string) *server {
	t.Helper()
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no"}, extra...)
	return spawn(t, port, args)
}

// spawn runs redis-server with args and waits until port accepts.
func spawn(t *testing.T, port string, args []string) *server {
	t.Helper()
	cmd := exec.Command(redisServerPath(t), args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "redis-server on port "+port+" to start", func() (bool, string) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 200*time.Millisecond)
		if err != nil {
			return false, err.Error()
		}
		_ = c.Close()
		return true, ""
	})
	return s
}

// startCluster starts n masters with cluster mode on and joins them.
func startCluster(t *testing.T, n int) []string {
	t.Helper()
	redisServerPath(t)
	var addrs []string
	for i := range n {
		dir := t.TempDir()
		port := freePort(t)
		startServer(t, port, dir, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)))
		addrs = append(addrs, "127.0.0.1:"+port)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	harness.WaitFor(t, 20*time.Second, 50*time.Millisecond, "every cluster node ok", func() (bool, string) {
		for _, a := range addrs {
			info, err := exec.Command("redis-cli", "-p", portOf(t, a), "cluster", "info").Output()
			if err != nil || !strings.Contains(string(info), "cluster_state:ok") {
				return false, fmt.Sprintf("node %s: %s %v", a, info, err)
			}
		}
		return true, ""
	})
	return addrs
}

func TestLegacyRows(t *testing.T) {
	addr := sharedAddr()
	needRedis(t, addr)
	s := openIsolated(t, Options{Addrs: []string{addr}})
	defer s.Close()
	onlinetest.RunLegacyRows(t, s, func(t *testing.T, view string, entity, raw []byte) {
		t.Helper()
		require.NoError(t, s.c.Set(t.Context(), s.rowKey(view, entity), raw, 0).Err())
	})
}
