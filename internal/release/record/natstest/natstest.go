// Package natstest runs a private nats-server with JetStream for tests
// that must kill, hang or restart the broker: the record package's fault
// tests and the gateway's recording drills. It is test support: nothing
// outside tests imports it.
//
// A server belongs to the test that started it: it listens on a loopback
// port the server picks itself (-p -1) and reports in its ports file, so no
// other process can take the port between a test's pick and the bind; a
// restart binds the same port again. Its store is in the test's temporary
// directory; it is
// signalled by its pid only, and is stopped when the test ends. A missing
// nats-server binary fails the test; it never skips.
package natstest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// startTimeout bounds how long Start and Restart wait for JetStream to
// answer.
const startTimeout = 15 * time.Second

// Server is one nats-server process with JetStream. Restart runs it again
// on the same port and store, so a stream outlives a kill. Its methods
// must be called from the test's goroutine (they may fail the test).
type Server struct {
	tb   testing.TB
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// Start starts a server on a loopback port of its choosing (read back
// from its ports file) with its store in a new temporary directory, waits
// until JetStream answers, and stops it when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/local/bin/nats-server"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		tb.Fatalf("natstest: nats-server binary not found: %v", err)
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir()}
	s.Restart()
	tb.Cleanup(s.Stop)
	return s
}

// URL is the server's client URL.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Port is the server's client port.
func (s *Server) Port() int { return s.port }

// Running reports whether the process was started and not yet killed or
// stopped (a paused server is running).
func (s *Server) Running() bool { return s.cmd != nil }

// Restart runs the server (again) on its port and store and waits until
// JetStream answers. The server must not be running. The first run lets
// the server pick the port and reads it from the ports file.
func (s *Server) Restart() {
	s.tb.Helper()
	if s.cmd != nil {
		s.tb.Fatalf("natstest: server on port %d is already running", s.port)
	}
	port := "-1" // the server picks a free one
	if s.port != 0 {
		port = strconv.Itoa(s.port)
	}
	// Not the test's context: Stop ends the server with SIGTERM, a clean
	// shutdown, and a restarted one outlives the call that started it.
	cmd := exec.CommandContext(context.Background(), s.bin, "-js", "-a", "127.0.0.1", "-p", port, "--ports_file_dir", s.dir, //nolint:gosec // G204: the nats-server binary the test found, with these fixed arguments
		"-sd", s.dir, "-l", filepath.Join(s.dir, "server.log"))
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("natstest: start nats-server: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(cmd, s.done)
	harness.WaitFor(s.tb, startTimeout, 50*time.Millisecond, "natstest: nats-server answering", func() (bool, string) {
		err := s.readPort()
		if err == nil {
			err = s.ping()
		}
		if err == nil {
			return true, ""
		}
		select {
		case <-s.done:
			s.cmd = nil
			s.tb.Fatalf("natstest: nats-server on port %d exited during start-up (%v); see %s", s.port, err, filepath.Join(s.dir, "server.log"))
		default:
		}
		return false, fmt.Sprintf("port %d: %v", s.port, err)
	})
}

// readPort learns the port the running server bound from its ports
// file, once.
func (s *Server) readPort() error {
	if s.port != 0 {
		return nil
	}
	p, err := harness.NATSPort(s.dir, s.bin, s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	s.port = p
	return nil
}

// ping connects and asks JetStream for the account's information.
func (s *Server) ping() error {
	nc, err := nats.Connect(s.URL(), nats.Timeout(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// signal sends sig to the running server.
func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatalf("natstest: no server running on port %d", s.port)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("natstest: signal %v to nats-server: %v", sig, err)
	}
}

// Kill ends the server with SIGKILL (no clean shutdown: what it had not
// written to its store is lost with it) and waits for it.
func (s *Server) Kill() {
	s.tb.Helper()
	s.signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Pause stops the server with SIGSTOP: connections stay open, nothing is
// read or answered. Resume continues it. Where /proc shows process states
// (Linux), Pause returns once every thread of the server has stopped:
// kill(2) only queues the signal.
func (s *Server) Pause() {
	s.tb.Helper()
	s.signal(syscall.SIGSTOP)
	s.waitState(true)
}

// Resume continues a paused server with SIGCONT and, where /proc shows
// process states, waits until it runs again.
func (s *Server) Resume() {
	s.tb.Helper()
	s.signal(syscall.SIGCONT)
	s.waitState(false)
}

// waitState waits until every thread of the server is stopped (or none
// is), as /proc/<pid>/task/*/stat says; without /proc it returns at once.
func (s *Server) waitState(stopped bool) {
	s.tb.Helper()
	harness.WaitFor(s.tb, 5*time.Second, 5*time.Millisecond, fmt.Sprintf("natstest: nats-server on port %d stopped=%v", s.port, stopped), func() (bool, string) {
		all, ok := s.threadsStopped(stopped)
		return !ok || all, "some threads not there yet"
	})
}

// threadsStopped reports whether every thread is stopped (want true) or
// none is (want false); ok is false when /proc cannot tell.
func (s *Server) threadsStopped(want bool) (all, ok bool) {
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(s.cmd.Process.Pid), "task", "*", "stat"))
	if err != nil || len(tasks) == 0 {
		return false, false
	}
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // a thread that just ended
		}
		// "pid (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, false
		}
		st := b[i+2]
		if isStopped := st == 'T' || st == 't'; isStopped != want {
			return false, true
		}
	}
	return true, true
}

// Stop ends the server with SIGTERM (a clean shutdown), continuing it
// first if it is paused, and waits for it; after 10 s it kills it. It does
// nothing when no server runs.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server must run to stop
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// String names the server for failure messages.
func (s *Server) String() string {
	return fmt.Sprintf("nats-server on 127.0.0.1:%d (store %s)", s.port, s.dir)
}
