package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-ml/sluice/internal/gateway/release"
)

// The gateway's goroutines. RunBackground starts them all:
//
//   - the control loops: the health checks (one loop per backend of the
//     current configuration, restarted when Reload publishes another),
//     and the one-second tick (the release hooks' Tick, such as the
//     rollout controllers and drift checks; retired clients). They stop
//     when RunBackground's ctx ends or Close is called, and RunBackground waits for them
//     before it returns.
//   - the request-path workers: the access-log writer and the shadow
//     workers. They finish what requests handed them, so they outlive
//     RunBackground's ctx: requests still draining from the listeners after it
//     ended are logged and mirrored. Close stops them (no request will
//     hand them more) and waits until they are done.
//
// New starts none of them. A gateway that never runs still serves (its
// requests run on the callers' goroutines), and Close does what the
// workers would have done itself.

// lifecycle is what RunBackground and Close share.
type lifecycle struct {
	mu      sync.Mutex // protects started, closed and retired
	started bool
	closed  bool
	retired []retiree

	closing   chan struct{} // closed by Close: RunBackground's control loops stop
	done      chan struct{} // closed when RunBackground returns
	closeOnce sync.Once
	closeErr  error
}

// retiree is a client of a retired configuration, closed at a deadline.
type retiree struct {
	at      time.Time
	closeFn func()
}

func newLifecycle() lifecycle {
	return lifecycle{closing: make(chan struct{}), done: make(chan struct{})}
}

// start marks the gateway running. It reports an error when it runs
// already, and false (nothing to run) when it was closed.
func (l *lifecycle) start() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.started:
		return false, errors.New("gateway: RunBackground called twice")
	case l.closed:
		return false, nil
	}
	l.started = true
	return true, nil
}

// close marks the gateway closed and reports whether RunBackground had started.
func (l *lifecycle) close() (started bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.closing)
	}
	return l.started
}

// retireAfter runs closeFn after d (on RunBackground's tick), or at Close if that
// comes first; at once when the gateway is closed already.
func (l *lifecycle) retireAfter(d time.Duration, closeFn func()) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		closeFn()
		return
	}
	l.retired = append(l.retired, retiree{at: time.Now().Add(d), closeFn: closeFn})
	l.mu.Unlock()
}

// closeRetired runs the closers due at now (all of them when now is
// zero).
func (l *lifecycle) closeRetired(now time.Time) {
	l.mu.Lock()
	var due []func()
	keep := l.retired[:0]
	for _, r := range l.retired {
		if now.IsZero() || !now.Before(r.at) {
			due = append(due, r.closeFn)
		} else {
			keep = append(keep, r)
		}
	}
	clear(l.retired[len(keep):])
	l.retired = keep
	l.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// RunBackground runs the gateway's background work (see the top of
// lifecycle.go) and returns once ctx ends, or Close is called, and its
// control loops have stopped. The access-log writer and the shadow
// workers it starts keep going until Close, which waits for them. A
// RunBackground after Close returns at once; a second one is an error.
func (g *Gateway) RunBackground(ctx context.Context) error {
	if ok, err := g.life.start(); !ok {
		return err
	}
	defer close(g.life.done)
	// The request-path workers: Close ends and waits for them.
	go g.access.Run()
	go g.mirror.Run()

	loops, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-g.life.closing:
			stop()
		case <-loops.Done():
		}
	})
	wg.Go(func() { g.superviseHealth(loops) })
	wg.Go(func() { g.tick(loops) })
	wg.Wait()
	return nil
}

// superviseHealth runs the health checks of the published configuration,
// and of the next one after each Reload, until ctx ends.
func (g *Gateway) superviseHealth(ctx context.Context) {
	for {
		hctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		st := g.state.Load()
		go func() { // waited for below, before the next round or return
			defer close(done)
			g.checkHealth(hctx, st)
		}()
		select {
		case <-ctx.Done():
		case <-g.reloaded:
		}
		cancel()
		<-done
		if ctx.Err() != nil {
			return
		}
	}
}

// tick runs once a second until ctx ends: the release hooks' Tick (the
// rollout controllers' clock, the drift checks), the fleet's baselines,
// the closers of retired clients whose grace period is over, and the
// expiry of idle proxy connections. Each hook's Tick and the fleet's share
// run on goroutines of their own, one at a time each: a Tick or a write to
// the fleet that waits on the network (a hung NATS) holds back neither the
// other hooks nor the rest of the tick. tick waits for them before it
// returns.
func (g *Gateway) tick(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var fleetBusy atomic.Bool
	busy := map[release.Hook]*atomic.Bool{} // a hook's Tick runs
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := g.state.Load()
		now := g.opts.Now()
		busy = g.tickHooks(ctx, &wg, st, now, busy)
		if fleetBusy.CompareAndSwap(false, true) {
			wg.Go(func() {
				defer fleetBusy.Store(false)
				g.fleetTick(ctx)
			})
		}
		wall := time.Now()
		g.life.closeRetired(wall)
		g.http.closeExpired(wall)
		for _, b := range st.backends {
			if c, ok := b.client.(*kserveHTTP); ok && c.ownTLS {
				c.up.closeExpired(wall)
			}
		}
	}
}

// tickHooks starts the Tick of each hook of st whose previous Tick is
// done, and returns the busy flags of st's hooks (those of hooks a reload
// dropped are forgotten).
func (g *Gateway) tickHooks(ctx context.Context, wg *sync.WaitGroup, st *state, now time.Time, busy map[release.Hook]*atomic.Bool) map[release.Hook]*atomic.Bool {
	next := make(map[release.Hook]*atomic.Bool, len(busy))
	for _, s := range st.byName {
		for _, h := range s.hooks {
			b := busy[h]
			if b == nil {
				b = new(atomic.Bool)
			}
			next[h] = b
			if b.CompareAndSwap(false, true) {
				wg.Go(func() {
					defer b.Store(false)
					h.Tick(ctx, now)
				})
			}
		}
	}
	return next
}

// Close ends the gateway once its edges stopped sending requests: RunBackground's
// loops stop, the queued shadow calls finish and their records are
// flushed, the access log is drained, and every backend's connections
// close. ctx bounds the wait for the shadow calls (those still running
// when it ends are cancelled) and the flushes. Close is safe to call more
// than once; later calls return the first one's result.
func (g *Gateway) Close(ctx context.Context) error {
	g.life.closeOnce.Do(func() { g.life.closeErr = g.close(ctx) })
	return g.life.closeErr
}

func (g *Gateway) close(ctx context.Context) error {
	started := g.life.close()
	errs := []error{g.mirror.Finish(ctx, started), g.access.Close(ctx)}
	if started {
		select {
		case <-g.life.done:
		case <-ctx.Done():
			errs = append(errs, context.Cause(ctx))
		}
	}
	st := g.state.Load()
	for _, b := range st.backends {
		var forget func(string)
		if g.opts.Remote != nil {
			forget = g.opts.Remote.Forget
		}
		b.release(forget)
	}
	g.life.closeRetired(time.Time{})
	if st.redis != nil {
		_ = st.redis.Close()
	}
	g.http.closeIdle()
	return errors.Join(errs...)
}
