package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/onlinetest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// failMargin is how much later than the store timeout a failing call may
// return: scheduling on a loaded test machine, not Redis.
const failMargin = 150 * time.Millisecond

func TestBreakerStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(3, 250*time.Millisecond, slog.New(slog.DiscardHandler))
		boom := errors.New("boom")
		call := func(o outcome) {
			t.Helper()
			probe, err := b.allow()
			require.NoError(t, err)
			b.done(probe, o, boom)
		}

		// Failures in a row open it; a success in between resets the run.
		call(outcomeFailure)
		call(outcomeFailure)
		call(outcomeSuccess)
		call(outcomeFailure)
		call(outcomeFailure)
		call(outcomeNeutral) // the caller gave up: no verdict on Redis
		require.False(t, b.state().Open)
		call(outcomeFailure)
		require.Equal(t, BreakerState{Open: true, Opened: 1, Failures: 3}, b.state())

		// Open: calls are refused until the probe interval has passed.
		_, err := b.allow()
		require.ErrorIs(t, err, ErrBreakerOpen)
		time.Sleep(249 * time.Millisecond)
		_, err = b.allow()
		require.ErrorIs(t, err, ErrBreakerOpen)
		time.Sleep(time.Millisecond)

		// One probe at a time; a failed probe waits another interval.
		probe, err := b.allow()
		require.NoError(t, err)
		require.True(t, probe)
		_, err = b.allow()
		require.ErrorIs(t, err, ErrBreakerOpen, "one probe in flight at a time")
		b.done(true, outcomeFailure, boom)
		_, err = b.allow()
		require.ErrorIs(t, err, ErrBreakerOpen)
		time.Sleep(250 * time.Millisecond)

		// A probe whose caller gave up lets the next call probe.
		probe, err = b.allow()
		require.NoError(t, err)
		b.done(probe, outcomeNeutral, nil)
		require.True(t, b.state().Open)

		// A successful probe closes it.
		probe, err = b.allow()
		require.NoError(t, err)
		require.True(t, probe)
		b.done(probe, outcomeSuccess, nil)
		require.Equal(t, BreakerState{Open: false, Opened: 1}, b.state())
		_, err = b.allow()
		require.NoError(t, err)
	})
}

// TestBreakerCountsOneStallOnce: calls in flight together that all fail
// (one stall of a loaded machine times out every call then waiting) are
// one failure; failures of calls started one after another open it.
func TestBreakerCountsOneStallOnce(t *testing.T) {
	b := newBreaker(3, time.Second, slog.New(slog.DiscardHandler))
	boom := errors.New("boom")
	var tickets []uint64
	for range 64 {
		tk, probe, err := b.begin()
		require.NoError(t, err)
		require.False(t, probe)
		tickets = append(tickets, tk)
	}
	for _, tk := range tickets {
		b.end(tk, false, outcomeFailure, boom)
	}
	require.Equal(t, BreakerState{Failures: 1}, b.state(), "one stall, one failure")
	for range 2 {
		tk, _, err := b.begin()
		require.NoError(t, err)
		b.end(tk, false, outcomeFailure, boom)
	}
	require.Equal(t, BreakerState{Open: true, Opened: 1, Failures: 3}, b.state(), "failures one after another open it")
}

func TestBreakerDisabled(t *testing.T) {
	b := newBreaker(-1, time.Second, slog.New(slog.DiscardHandler))
	for range 10 {
		probe, err := b.allow()
		require.NoError(t, err)
		b.done(probe, outcomeFailure, errors.New("boom"))
	}
	require.False(t, b.state().Open)
}

// hungStore starts a private Redis, opens a store on it with 200ms
// timeouts, writes one row and returns the store, the row's key and the
// server.
func hungStore(t *testing.T, opts Options) (*Store, online.Key, *server) {
	t.Helper()
	port := freePort(t)
	srv := startServer(t, port, t.TempDir())
	opts.Addrs = []string{"127.0.0.1:" + port}
	opts.ReadTimeout, opts.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	s, err := Open(t.Context(), "hung", opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	k := online.Key{View: "v", Entity: onlinetest.Ent(1)}
	_, err = s.Write(t.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 1, Payload: []byte("x")}}}, online.WriteOptions{})
	require.NoError(t, err)
	return s, k, srv
}

// freeze stops srv (SIGSTOP) until the returned function or the end of
// the test resumes it.
func freeze(t *testing.T, srv *server) (resume func()) {
	t.Helper()
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGSTOP))
	var once sync.Once
	resume = func() { once.Do(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// TestHungServerFailsFast: a Redis that stops answering (SIGSTOP) fails
// the very first call within the read timeout (not the timeout twice over
// for a retry); after a few failures the
// breaker fails calls at once; after SIGCONT a read succeeds within a
// second.
func TestHungServerFailsFast(t *testing.T) {
	s, k, srv := hungStore(t, Options{})
	resume := freeze(t, srv)

	start := time.Now()
	_, err := s.Read(context.Background(), []online.Key{k})
	took := time.Since(start)
	require.ErrorIs(t, err, online.ErrUnavailable)
	require.Less(t, took, 200*time.Millisecond+failMargin, "the first read after the hang fails within the read timeout")
	t.Logf("first read after SIGSTOP failed in %s: %v", took, err)

	// The caller's deadline wins when it is sooner; giving up is not
	// Redis's failure.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	start = time.Now()
	_, err = s.Read(ctx, []online.Key{k})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, online.ErrUnavailable)
	require.Less(t, time.Since(start), 50*time.Millisecond+failMargin)

	// Two more failures open the breaker; then calls fail without
	// waiting for Redis.
	for range DefaultBreakerFailures - 1 {
		_, err = s.Read(context.Background(), []online.Key{k})
		require.ErrorIs(t, err, online.ErrUnavailable)
	}
	require.True(t, s.BreakerState().Open)
	for range 20 {
		start = time.Now()
		_, err = s.GetMeta(context.Background(), "m")
		require.ErrorIs(t, err, online.ErrUnavailable)
		if errors.Is(err, ErrBreakerOpen) {
			require.Less(t, time.Since(start), failMargin, "an open breaker answers at once")
		}
	}
	require.ErrorIs(t, s.Ping(context.Background()), online.ErrUnavailable)

	resume()
	var n int
	recovered := harness.WaitFor(t, 5*time.Second, 20*time.Millisecond, "a read after SIGCONT", func() (bool, string) {
		n++
		_, err := s.Read(context.Background(), []online.Key{k})
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("recovered %s after SIGCONT (%d reads)", recovered, n)
	require.Less(t, recovered, time.Second, "recovery within a second of SIGCONT")
	require.Equal(t, BreakerState{Open: false, Opened: 1}, s.BreakerState())
}

// TestHungServerConcurrent: with more concurrent callers than pooled
// connections, every caller fails: the ones holding a connection within
// the read timeout, the ones waiting for one within the pool timeout,
// and a caller whose turn comes just before the pool timeout within the
// read timeout after it (its new connection's handshake goes unanswered).
// No call is retried into a second timeout.
func TestHungServerConcurrent(t *testing.T) {
	const poolTimeout = 200 * time.Millisecond
	s, k, srv := hungStore(t, Options{PoolSize: 4, PoolTimeout: poolTimeout, BreakerFailures: -1})
	freeze(t, srv)
	const callers = 32
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			start := time.Now()
			_, err := s.Read(context.Background(), []online.Key{k})
			if took := time.Since(start); took >= poolTimeout+200*time.Millisecond+failMargin {
				err = fmt.Errorf("took %s: %w", took, err)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, online.ErrUnavailable, "caller %d", i)
		require.NotContains(t, err.Error(), "took", "caller %d", i)
	}
}

// TestHungServerWrites: writes and metadata writes are bounded by the
// write timeout too.
func TestHungServerWrites(t *testing.T) {
	s, k, srv := hungStore(t, Options{BreakerFailures: -1})
	freeze(t, srv)
	start := time.Now()
	_, err := s.Write(context.Background(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 2}}}, online.WriteOptions{})
	require.ErrorIs(t, err, online.ErrUnavailable)
	require.Less(t, time.Since(start), 200*time.Millisecond+failMargin)
	start = time.Now()
	require.ErrorIs(t, s.PutMeta(context.Background(), "m", []byte("x")), online.ErrUnavailable)
	require.Less(t, time.Since(start), 200*time.Millisecond+failMargin)
	start = time.Now()
	require.ErrorIs(t, s.DeleteView(context.Background(), "v"), online.ErrUnavailable)
	require.Less(t, time.Since(start), 200*time.Millisecond+failMargin)
}

// holdPool takes the store's only pooled connection (PoolSize 1) for d
// with a BLPOP on an empty list, a command that blocks its connection but
// not the server, and returns once the pool has no idle connection left.
// The returned channel closes when the BLPOP ends.
func holdPool(t *testing.T, s *Store, d time.Duration) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.c.BLPop(context.Background(), d, s.prefix+"hold").Err()
	}()
	harness.WaitFor(t, 5*time.Second, time.Millisecond, "the BLPOP holds the only connection", func() (bool, string) {
		st := s.c.PoolStats()
		return st.TotalConns == 1 && st.IdleConns == 0, fmt.Sprintf("%+v", *st)
	})
	return done
}

// TestPoolWaitIsNotRedisTime: a call that waits for a pooled connection
// longer than the read timeout still succeeds once it gets one: the read
// timeout is Redis's time to answer, counted from when the command is
// sent, and a busy pool on a loaded machine does not spend it.
func TestPoolWaitIsNotRedisTime(t *testing.T) {
	needRedis(t, sharedAddr())
	s := openIsolated(t, Options{
		Addrs: []string{sharedAddr()}, PoolSize: 1,
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond, PoolTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { _ = s.Close() })
	k := online.Key{View: "v", Entity: onlinetest.Ent(1)}
	_, err := s.Write(t.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 1, Payload: []byte("x")}}}, online.WriteOptions{})
	require.NoError(t, err)

	held := holdPool(t, s, time.Second) // BLPOP's shortest timeout
	res, err := s.Read(context.Background(), []online.Key{k})
	require.NoError(t, err, "the read waited for the pool, not for Redis")
	require.True(t, res[0].Found)
	<-held
	require.Equal(t, BreakerState{}, s.BreakerState())
}

// TestPoolTimeoutIsNotCounted: calls that find every pooled connection
// busy for the pool timeout fail (503 online_store_unavailable, naming
// the pool), but they say nothing about Redis, so however many there are
// the breaker stays closed.
func TestPoolTimeoutIsNotCounted(t *testing.T) {
	needRedis(t, sharedAddr())
	s := openIsolated(t, Options{Addrs: []string{sharedAddr()}, PoolSize: 1, PoolTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { _ = s.Close() })
	k := online.Key{View: "v", Entity: onlinetest.Ent(1)}

	held := holdPool(t, s, time.Second)
	for i := range 2 * DefaultBreakerFailures {
		_, err := s.Read(context.Background(), []online.Key{k})
		require.ErrorIs(t, err, online.ErrUnavailable, "read %d", i)
		require.ErrorIs(t, err, errPoolBusy, "read %d", i)
	}
	require.Equal(t, BreakerState{}, s.BreakerState(), "a busy pool is not Redis failing")
	<-held
	_, err := s.Read(context.Background(), []online.Key{k})
	require.NoError(t, err)
}

// firstConnSilent listens on a free loopback port and forwards every
// connection to target, except the first, which it accepts and never
// answers: the first exchange of a new client that misses its read
// timeout, as on a loaded machine.
func firstConnSilent(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if n == 0 {
				continue // accepted, never answered
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, up)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
			wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
		}
	})
	return ln.Addr().String()
}

// TestOpenSurvivesASlowFirstExchange: Open's first ping also dials and
// shakes hands; when that exchange misses the read timeout (the first
// connection never answers), Open pings again on a new connection and
// succeeds, with the breaker closed and no failures counted.
func TestOpenSurvivesASlowFirstExchange(t *testing.T) {
	needRedis(t, sharedAddr())
	addr := firstConnSilent(t, sharedAddr())
	s, err := Open(t.Context(), "", Options{
		Addrs: []string{addr}, KeyPrefix: randomPrefix(t),
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond,
	})
	require.NoError(t, err, "one slow exchange does not fail the start-up")
	t.Cleanup(func() { _ = s.Close() })
	require.Equal(t, BreakerState{}, s.BreakerState())
	require.NoError(t, s.Ping(t.Context()))
}

// TestOpenFailsAtOnceWhenRefused: a refused connection is no slow
// exchange: Open fails on the first ping.
func TestOpenFailsAtOnceWhenRefused(t *testing.T) {
	_, err := Open(t.Context(), "", Options{Addrs: []string{"127.0.0.1:" + freePort(t)}, KeyPrefix: randomPrefix(t)})
	require.ErrorIs(t, err, online.ErrUnavailable)
	require.NotErrorIs(t, err, errStoreTimeout)
}
