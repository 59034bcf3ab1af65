package servingapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/online/redis"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// failMargin is how much later than the store timeout a failing request
// may answer: scheduling on a loaded test machine, not Redis.
const failMargin = 150 * time.Millisecond

// startPrivateRedis runs a redis-server on a free loopback port, stopped
// by its pid at the end of the test, and returns its address and process.
func startPrivateRedis(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	})
	addr := "127.0.0.1:" + port
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "redis-server on "+addr+" to start", func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false, err.Error()
		}
		_ = c.Close()
		return true, ""
	})
	return addr, cmd
}

// TestHungRedis runs the feature server's HTTP API on a real Redis that
// stops answering (SIGSTOP): the first request after the hang answers 503
// online_store_unavailable within the store's read timeout, with a body
// that names no address; once the breaker is open requests fail at once;
// after SIGCONT the server answers 200 within a second.
func TestHungRedis(t *testing.T) {
	const timeout = 200 * time.Millisecond
	addr, proc := startPrivateRedis(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	store, err := redis.Open(t.Context(), "", redis.Options{
		Addrs: []string{addr}, ReadTimeout: timeout, WriteTimeout: timeout, KeyPrefix: "sluicetest:" + hex.EncodeToString(b[:]) + ":",
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	hold := &servingtest.Holder{}
	hold.P.Store(servingtest.Repo(t))
	logs := &servingtest.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	srv := serving.New(hold, store, serving.Options{Now: func() time.Time { return now }}, logger, nil)
	h := NewHandler(srv, HandlerOptions{}, logger, nil)

	_, err = srv.Push(t.Context(), "user_push", map[string][]any{
		"user_id": {int64(1)}, "level": {int64(3)}, "event_timestamp": {now.Add(-time.Minute).Format(time.RFC3339)},
	}, serving.PushOnline)
	require.NoError(t, err)
	get := func() (int, string, time.Duration) {
		start := time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/get-online-features",
			strings.NewReader(`{"features":["user_live:level"],"entities":{"user_id":[1]}}`)))
		return rec.Code, rec.Body.String(), time.Since(start)
	}
	code, body, _ := get()
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"PRESENT"`)

	require.NoError(t, proc.Process.Signal(syscall.SIGSTOP))
	var resume sync.Once
	cont := func() { resume.Do(func() { _ = proc.Process.Signal(syscall.SIGCONT) }) }
	t.Cleanup(cont)

	code, body, took := get()
	t.Logf("first request after SIGSTOP: %d in %s: %s", code, took, body)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	msg, reason := errorBody(t, []byte(body))
	require.Equal(t, serving.ReasonStoreUnavailable, reason)
	require.NotRegexp(t, internals, msg)
	require.Less(t, took, timeout+failMargin, "the first request after the hang fails within the store timeout")

	// The breaker opens after a few failures; then requests do not wait.
	for range redis.DefaultBreakerFailures - 1 {
		code, body, _ = get()
		require.Equal(t, http.StatusServiceUnavailable, code, body)
	}
	require.True(t, store.BreakerState().Open)
	code, body, took = get()
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	msg, reason = errorBody(t, []byte(body))
	require.Equal(t, serving.ReasonStoreUnavailable, reason)
	require.NotRegexp(t, internals, msg)
	require.Less(t, took, failMargin, "an open breaker answers without waiting for Redis")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.NotRegexp(t, internals, rec.Body.String())

	cont()
	resumed := harness.WaitFor(t, 5*time.Second, 20*time.Millisecond, "a 200 after SIGCONT", func() (bool, string) {
		code, body, _ = get()
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	t.Logf("answering again %s after SIGCONT", resumed)
	require.Less(t, resumed, time.Second, "recovery within a second of SIGCONT")
	require.Contains(t, logs.String(), "no answer within the store timeout", "the log keeps the detail the body leaves out")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, store.DeletePrefix(ctx))
}
