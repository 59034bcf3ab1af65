package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestGroupStopsInReverseOrder: the components stop last added first,
// each interrupt after the one before it has returned, and every execute
// is waited for.
func TestGroupStopsInReverseOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	grp := newGroup(ctx)
	var (
		mu    sync.Mutex
		order []string
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	for _, name := range []string{"models", "features", "gateway"} {
		stop := make(chan struct{})
		grp.add(func() error {
			<-stop
			note(name + " ended")
			return nil
		}, func(context.Context) error {
			note(name + " interrupted")
			close(stop)
			return nil
		})
	}
	cancel()
	if err := grp.run(ctx); err != nil {
		t.Fatalf("run = %v, want nil: a cancelled parent is how a server is asked to stop", err)
	}
	interrupts := slices.DeleteFunc(slices.Clone(order), func(s string) bool { return s[len(s)-5:] == "ended" })
	want := []string{"gateway interrupted", "features interrupted", "models interrupted"}
	if !slices.Equal(interrupts, want) {
		t.Errorf("interrupt order = %v, want %v", interrupts, want)
	}
	if len(order) != 6 {
		t.Errorf("events = %v, want every execute ended too", order)
	}
}

// TestGroupFailedExecuteStopsAll: one component's error stops the group,
// the others are interrupted, and run returns that error.
func TestGroupFailedExecuteStopsAll(t *testing.T) {
	grp := newGroup(t.Context())
	boom := errors.New("listener broke")
	stop := make(chan struct{})
	grp.add(func() error { <-stop; return nil }, func(context.Context) error { close(stop); return nil })
	grp.add(func() error { return boom }, nil)
	if err := grp.run(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("run = %v, want %v", err, boom)
	}
}

// TestGroupSecondSignalEndsDrain: a drain waiting out a long period ends
// when a second stop signal arrives, and the group finishes stopping.
func TestGroupSecondSignalEndsDrain(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	grp := newGroup(ctx)
	sigs := make(chan os.Signal, 2)
	defer grp.hurryOn(sigs)()
	draining := make(chan struct{})
	stopped := make(chan struct{})
	grp.add(func() error { <-stopped; return nil }, func(hurry context.Context) error {
		close(draining)
		waitDrain(hurry, time.Hour)
		close(stopped)
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- grp.run(ctx) }()
	sigs <- syscall.SIGTERM // the first: cmd/sluice turns it into the end of ctx
	cancel()
	<-draining
	sigs <- syscall.SIGTERM // the second: the drain ends now
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v", err)
		}
	case <-time.After(time.Minute): // a failure bound, not a speed check
		t.Fatal("the drain went on after a second stop signal")
	}
}

// TestGroupAbandonStopsStarted: a start that fails after a component
// began serving stops it as a normal shutdown would.
func TestGroupAbandonStopsStarted(t *testing.T) {
	grp := newGroup(t.Context())
	stop := make(chan struct{})
	interrupted := false
	grp.add(func() error { <-stop; return nil }, func(context.Context) error {
		interrupted = true
		close(stop)
		return nil
	})
	loopEnded := make(chan struct{})
	grp.Go(func() error { <-grp.ctx.Done(); close(loopEnded); return nil })
	grp.abandon()
	<-loopEnded
	if !interrupted {
		t.Error("abandon did not interrupt the started component")
	}
	grp.abandon() // a second call does nothing
}

// TestCleanupsLastFirst: the cleanup stack closes the last opened first.
func TestCleanupsLastFirst(t *testing.T) {
	var got []int
	var c cleanups
	for i := range 3 {
		c.push(func() { got = append(got, i) })
	}
	c.run()
	c.run() // emptied: nothing runs twice
	if !slices.Equal(got, []int{2, 1, 0}) {
		t.Errorf("cleanup order = %v, want [2 1 0]", got)
	}
}

// TestChainListenerFailureClosesGateway: a gateway listener that fails to
// bind after gateway.New has built the gateway still closes it, and the
// gateway alone closes the recorder it was given ("recording closed" is
// its log line, once).
func TestChainListenerFailureClosesGateway(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0") // the admin port, taken
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Close() }()
	dir := t.TempDir()
	doc := fmt.Sprintf(`gateway:
  listen: %q
  admin: %q
  access_log: "off"
  anonymous: {allowed: true}
  recording: {dir: %q}
  services:
%s      shadow: {version: "2"}
  backends: [{name: remote, kind: kserve_grpc, endpoints: [%q]}]
`, cliFreeAddr(t), held.Addr().String(), filepath.Join(dir, "recordings"), etaServiceYAML, cliFreeAddr(t))
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Run(t.Context(), []string{"serve", "-c", path, "--log-format", "text"}, &out, &errOut)
	if code == 0 {
		t.Fatalf("serve -c started with its admin port taken; stderr:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "listen gateway admin") {
		t.Fatalf("serve -c failed, but not on the admin listener; stderr:\n%s", errOut.String())
	}
	if n := strings.Count(errOut.String(), "recording closed"); n != 1 {
		t.Errorf("the gateway closed %d times after its admin listener failed, want once; stderr:\n%s", n, errOut.String())
	}
}
