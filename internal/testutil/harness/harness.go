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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := new(net.ListenConfig).Listen(tb.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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
