// Package harness is the set-up the end-to-end test packages (test/docs,
// test/integration) share: the module root, the ONNX Runtime library, the
// binaries each package builds once per run, free loopback ports, the
// ports a process bound on port 0 as its ports file reports them, a log
// buffer safe for a process's output and the test reading it, and
// WaitFor, the one way tests wait for a condition.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-ml/sluice/internal/backend/onnxruntime"
)

// Env is what a test package's TestMain prepares.
type Env struct {
	// RepoDir is the module root.
	RepoDir string
	// ORTLib is the ONNX Runtime library the binaries load.
	ORTLib string
	// Dir is a temporary folder for the binaries, removed by the cleanup
	// Setup returns.
	Dir string
}

// Setup finds the module root and the ONNX Runtime library and makes the
// temporary folder; name prefixes the folder and error messages. The end
// to end tests need the real runtime (`make test` installs it): without
// it Setup fails rather than letting the tests skip.
func Setup(name string) (Env, func(), error) {
	_, file, _, _ := runtime.Caller(0)
	env := Env{RepoDir: filepath.Join(filepath.Dir(file), "..", "..", "..")}
	lib, err := onnxruntime.FindLibrary("")
	if err != nil {
		return Env{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	env.ORTLib = lib
	if env.Dir, err = os.MkdirTemp("", "sluice-"+name+"-"); err != nil {
		return Env{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	return env, func() { _ = os.RemoveAll(env.Dir) }, nil
}

// Build runs `go build [flags] -o out pkg` in the module root, its output
// on stderr.
func (e Env) Build(out, pkg string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(context.Background(), "go", args...)
	cmd.Dir = e.RepoDir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// process the test starts to bind. The port is below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), where outgoing
// connections take their local ports from, so a connection opened by any
// test between this call and the bind cannot take it; and no port is
// returned twice in one test binary, so tests running in parallel never
// get the same one. Where the range leaves no room below it, the kernel
// picks the port (127.0.0.1:0).
func FreePort(tb testing.TB) int {
	tb.Helper()
	lc := new(net.ListenConfig)
	lo, hi := belowEphemeral()
	for range 200 {
		if hi <= lo {
			break
		}
		p := lo + rand.IntN(hi-lo) //nolint:gosec // a port to try, not a secret
		if !ports.take(p) {
			continue
		}
		ln, err := lc.Listen(tb.Context(), "tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use: it stays taken, and another is tried
		}
		_ = ln.Close()
		return p
	}
	for {
		ln, err := lc.Listen(tb.Context(), "tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if ports.take(p) {
			return p
		}
	}
}

// portLow is where FreePort's ports start: above the well-known ports and
// the usual fixed service ports (Redis 6379, NATS 4222, 8000–9999).
const portLow = 20000

// belowEphemeral is the range [lo, hi) FreePort picks from: from portLow
// up to the start of the ephemeral range.
func belowEphemeral() (lo, hi int) {
	hi = 32768 // Linux's default start
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return portLow, hi
}

// ports are the ports FreePort has returned or found in use.
var ports = portSet{m: map[int]bool{}}

type portSet struct {
	mu sync.Mutex // protects m
	m  map[int]bool
}

// take marks p taken and reports whether it was free of this process's
// earlier picks.
func (s *portSet) take(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[p] {
		return false
	}
	s.m[p] = true
	return true
}

// SyncBuffer is a bytes.Buffer a process writes while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
