package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-ml/sluice/internal/feature/online"
)

// Breaker defaults, used when Options leaves them zero.
const (
	// DefaultBreakerFailures is how many store calls in a row must fail
	// before the breaker opens. One slow command (a big DEL blocking the
	// server for longer than the read timeout) fails one call; three in a
	// row means Redis is down or hung.
	DefaultBreakerFailures = 3
	// DefaultBreakerProbe is how long an open breaker fails calls at once
	// before it lets one through to see whether Redis is back. It bounds
	// how late the store notices a recovery; one probe per interval is no
	// load on a server that is struggling.
	DefaultBreakerProbe = 250 * time.Millisecond
)

// ErrBreakerOpen is wrapped (with online.ErrUnavailable) by the errors of
// calls refused because the store's circuit breaker is open.
var ErrBreakerOpen = errors.New("redis circuit breaker open")

// errStoreTimeout is wrapped by the error of a call Redis did not answer
// within the store's timeout (rather than the caller's deadline).
var errStoreTimeout = errors.New("no answer within the store timeout")

// errPoolBusy is wrapped by the error of a call that found no free pooled
// connection within the pool timeout.
var errPoolBusy = errors.New("every pooled connection busy for the pool timeout")

// BreakerState is a snapshot of the store's circuit breaker.
type BreakerState struct {
	// Open is true while calls are refused without reaching Redis (a
	// probe may be in flight).
	Open bool
	// Opened counts the times the breaker opened since the store was
	// opened.
	Opened uint64
	// Failures is the current run of failed calls.
	Failures int
}

// outcome is how a store call ended, as the breaker sees it.
type outcome uint8

const (
	// outcomeSuccess: Redis answered (even with an error of the request,
	// such as a row that does not decode).
	outcomeSuccess outcome = iota
	// outcomeFailure: Redis could not be reached or did not answer within
	// the store's timeout.
	outcomeFailure
	// outcomeNeutral: the caller gave up (its context ended) before the
	// store's timeout; says nothing about Redis.
	outcomeNeutral
)

// breaker is a consecutive-failure circuit breaker. Closed, it counts
// failed calls in a row; at failures it opens and refuses every call.
// Calls that were in flight together when one of them failed count as one
// failure: a stall of the process or of Redis (a loaded machine, a slow
// command) that times out every call then in flight is one event, not
// Redis down. Only a call started after the last counted failure counts
// again, so the breaker opens on failures that last, not on concurrency.
// After probe it lets a single call through: if that call succeeds the
// breaker closes, if it fails the breaker stays open for another probe
// interval. It stops a hung or dead Redis from costing every request the
// full timeout while it is down, and it never sends more than one call at
// a time to a server that has not answered.
type breaker struct {
	failures int // < 1 disables the breaker
	probe    time.Duration
	logger   *slog.Logger
	isOpen   atomic.Bool // mirrors open, for readers on the hot path

	mu       sync.Mutex // protects the fields below
	fails    int        // consecutive failures while closed
	failSeq  uint64     // counts the failures counted, ever: a call's ticket
	open     bool
	openedAt time.Time // when it opened, or when the last probe failed
	probing  bool      // a probe call is in flight
	opened   uint64
}

func newBreaker(failures int, probe time.Duration, logger *slog.Logger) *breaker {
	return &breaker{failures: failures, probe: probe, logger: logger}
}

// noTicket is the ticket of a call whose failure always counts (done).
const noTicket = ^uint64(0)

// allow reports whether a call may go to Redis now; probe is true when the
// call is the open breaker's probe and must be reported with done. Its
// failure always counts (begin and end discount overlapping failures).
func (b *breaker) allow() (probe bool, err error) {
	_, probe, err = b.begin()
	return probe, err
}

// done records how an allowed call ended.
func (b *breaker) done(probe bool, o outcome, err error) { b.end(noTicket, probe, o, err) }

// begin is allow that also returns the call's ticket for end: the
// number of failures counted when it started.
func (b *breaker) begin() (ticket uint64, probe bool, err error) {
	if b.failures < 1 {
		return noTicket, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return b.failSeq, false, nil
	}
	if b.probing || time.Since(b.openedAt) < b.probe {
		return noTicket, false, fmt.Errorf("%w after %d failed calls in a row; it lets one call through every %s", ErrBreakerOpen, b.failures, b.probe)
	}
	b.probing = true
	return b.failSeq, true, nil
}

// end records how a call allowed by begin with ticket ended. A failure
// of a call that started before the last counted failure is the same
// stall as that one and is not counted again.
func (b *breaker) end(ticket uint64, probe bool, o outcome, err error) {
	if b.failures < 1 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	switch o {
	case outcomeSuccess:
		if b.open {
			b.open = false
			b.isOpen.Store(false)
			b.logger.Info("online store circuit breaker closed: redis answers again")
		}
		b.fails = 0
	case outcomeFailure:
		switch {
		case probe:
			b.openedAt = time.Now() // still down: wait another interval
		case b.open: // a call let in before the breaker opened
		case ticket != noTicket && ticket != b.failSeq:
			// In flight when another call's failure was counted: the same
			// stall.
		default:
			b.fails++
			b.failSeq++
			if b.fails >= b.failures {
				b.open, b.openedAt = true, time.Now()
				b.isOpen.Store(true)
				b.opened++
				b.logger.Warn("online store circuit breaker opened", "failures", b.fails, "probe_interval", b.probe, "err", err)
			}
		}
	case outcomeNeutral:
	}
}

func (b *breaker) state() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BreakerState{Open: b.open, Opened: b.opened, Failures: b.fails}
}

// BreakerState returns the state of the store's circuit breaker.
func (s *Store) BreakerState() BreakerState { return s.breaker.state() }

// BreakerOpen reports whether the store's circuit breaker is open. It is
// cheap enough to call after every store call.
func (s *Store) BreakerOpen() bool { return s.breaker.isOpen.Load() }

// guard runs one store call through the breaker. timeout is the one of
// the store's timeouts the call's commands answer within; guard names it
// when Redis did not. An error of a call whose caller's context ended
// first is reported as that context's error, not as the store being
// unavailable: the caller gave up, Redis may be fine. A call that failed
// waiting for a pooled connection is reported unavailable but is not
// counted as Redis's failure: every connection was busy with calls whose
// own outcome counts.
func (s *Store) guard(ctx context.Context, op string, timeout time.Duration, fn func(context.Context) error) error {
	ticket, probe, err := s.breaker.begin()
	if err != nil {
		return unavailable(op, err)
	}
	err = fn(ctx)
	o := outcomeSuccess
	var ne net.Error
	if errors.Is(err, online.ErrUnavailable) {
		o = outcomeFailure
		switch {
		case ctx.Err() != nil || deadlinePassed(ctx):
			o = outcomeNeutral
			err = fmt.Errorf("%s: %w", op, callerCause(ctx))
		case errors.Is(err, goredis.ErrPoolTimeout):
			o = outcomeNeutral
			err = fmt.Errorf("%w (%w, %s)", err, errPoolBusy, s.poolTimeout)
		case errors.As(err, &ne) && ne.Timeout():
			// go-redis reports "i/o timeout"; say whose.
			err = fmt.Errorf("%w (%w, %s)", err, errStoreTimeout, timeout)
		}
	} else if err != nil && ctx.Err() != nil {
		o = outcomeNeutral
	}
	s.breaker.end(ticket, probe, o, err)
	return err
}

// deadlinePassed reports whether ctx's deadline has passed. go-redis sets
// the socket's deadline to the caller's when it is the sooner, so the
// socket can time out a moment before ctx reports its error.
func deadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// callerCause is why the caller's ctx ended (or is ending: see
// deadlinePassed).
func callerCause(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// Read implements online.Store. It fails with online.ErrUnavailable
// when Redis does not answer within the read timeout of the command being
// sent (or by the caller's deadline, when sooner), and at once while the
// breaker is open.
func (s *Store) Read(ctx context.Context, keys []online.Key) ([]online.Result, error) {
	var out []online.Result
	err := s.guard(ctx, "read redis", s.readTimeout, func(ctx context.Context) error {
		var err error
		out, err = s.read(ctx, keys)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Write implements online.Store; each pipelined batch is one round trip.
func (s *Store) Write(ctx context.Context, entries []online.Entry, opts online.WriteOptions) (online.WriteStats, error) {
	var st online.WriteStats
	err := s.guard(ctx, "write redis", s.writeTimeout, func(ctx context.Context) error {
		var err error
		st, err = s.write(ctx, entries, opts)
		return err
	})
	return st, err
}

// DeleteView implements online.Store; each SCAN and UNLINK batch is a
// command bounded by the store's timeouts.
func (s *Store) DeleteView(ctx context.Context, view string) error {
	return s.guard(ctx, fmt.Sprintf("delete view '%s'", view), s.writeTimeout, func(ctx context.Context) error {
		return s.deleteView(ctx, view)
	})
}

// GetMeta implements online.Store.
func (s *Store) GetMeta(ctx context.Context, name string) ([]byte, error) {
	var v []byte
	err := s.guard(ctx, fmt.Sprintf("get metadata '%s'", name), s.readTimeout, func(ctx context.Context) error {
		var err error
		v, err = s.getMeta(ctx, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// PutMeta implements online.Store.
func (s *Store) PutMeta(ctx context.Context, name string, value []byte) error {
	return s.guard(ctx, fmt.Sprintf("put metadata '%s'", name), s.writeTimeout, func(ctx context.Context) error {
		return s.putMeta(ctx, name, value)
	})
}

// Ping implements online.Store; in Cluster mode every master must
// answer.
func (s *Store) Ping(ctx context.Context) error {
	return s.guard(ctx, "ping redis", s.readTimeout, s.ping)
}
