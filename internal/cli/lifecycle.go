package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// group is the lifecycle of one server process (model server, feature
// server, gateway, or the chain of all three), after Prometheus's
// run.Group. Each component is an execute/interrupt pair, added in the
// order the components start: execute serves until the component ends,
// interrupt stops it. When the group stops (its parent context ends or an
// execute fails), the interrupts run one after the other in the reverse
// order, each once the one before it has returned: what was added last
// (the gateway in front) stops first, so a component never loses what
// it depends on while it still serves. Loops that only need to end with
// the process run with Go and end with ctx.
type group struct {
	// ctx ends when the group begins to stop: the parent context ended
	// or a component failed. Background loops run under it.
	ctx    context.Context
	cancel context.CancelFunc
	eg     *errgroup.Group
	// hurry ends when a second stop signal arrives: a drain waiting out
	// its period (waitDrain) ends at once.
	hurry     context.Context
	endHurry  context.CancelFunc
	interrupt []func(hurry context.Context) error
	stopping  sync.Once // starts the goroutine that runs the interrupts
}

// newGroup returns a group that stops when parent ends.
func newGroup(parent context.Context) *group {
	ctx, cancel := context.WithCancel(parent)
	eg, ctx := errgroup.WithContext(ctx)
	hurry, endHurry := context.WithCancel(context.WithoutCancel(parent))
	return &group{ctx: ctx, cancel: cancel, eg: eg, hurry: hurry, endHurry: endHurry}
}

// abandon stops a group whose process will not serve (a later part of
// its start failed) as run would stop it, and waits for it. After run,
// it does nothing.
func (g *group) abandon() {
	g.cancel()
	_ = g.run(context.Background())
}

// Go runs a background loop that ends with g.ctx; an error stops the
// group.
func (g *group) Go(loop func() error) { g.eg.Go(loop) }

// add adds a component: execute runs now and serves until the component
// ends (nil once interrupted); interrupt, nil for none, runs when the
// group stops, after the interrupts of every component added later.
// The hurry context it gets ends on a second stop signal.
func (g *group) add(execute func() error, interrupt func(hurry context.Context) error) {
	if execute != nil {
		g.eg.Go(execute)
	}
	if interrupt != nil {
		g.interrupt = append(g.interrupt, interrupt)
	}
}

// hurryOn ends the hurry context when the second signal arrives on sigs:
// the first is the one that began the stop (cmd/sluice turns it into the
// end of the parent context). It returns a function that stops watching.
func (g *group) hurryOn(sigs <-chan os.Signal) (stop func()) {
	done := make(chan struct{})
	go func() {
		seen := 0
		for {
			select {
			case <-done:
				return
			case <-sigs:
				if seen++; seen >= 2 {
					g.endHurry()
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// run waits for the group to stop, runs the interrupts in reverse order
// and returns the first error of any execute or interrupt. An error that
// only says the parent context was cancelled is no error: that is how a
// server is asked to stop.
func (g *group) run(parent context.Context) error {
	g.stopping.Do(func() {
		g.eg.Go(func() error {
			<-g.ctx.Done()
			var errs []error
			for _, v := range slices.Backward(g.interrupt) {
				errs = append(errs, v(g.hurry))
			}
			return errors.Join(errs...)
		})
	})
	err := g.eg.Wait()
	g.cancel()
	g.endHurry()
	if err != nil && parent.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// waitDrain waits out a drain period; a second stop signal (hurry) ends
// it at once.
func waitDrain(hurry context.Context, period time.Duration) {
	t := time.NewTimer(period)
	defer t.Stop()
	select {
	case <-t.C:
	case <-hurry.Done():
	}
}

// notifyStop relays SIGINT and SIGTERM for group.hurryOn; signal.Stop
// ends it.
func notifyStop() chan os.Signal {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	return sigs
}

// cleanups is a stack of the undo functions of what a start-up opened:
// each resource pushes its close as it opens, and run closes them last
// first, on a failed start as at the end of a served one.
type cleanups []func()

// push adds f, to run before everything pushed earlier.
func (c *cleanups) push(f func()) { *c = append(*c, f) }

// run runs the stack, last pushed first, and empties it.
func (c *cleanups) run() {
	for i := range slices.Backward(*c) {
		(*c)[i]()
	}
	*c = nil
}
