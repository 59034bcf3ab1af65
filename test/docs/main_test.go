// Package docs_test holds the tests that keep the documentation and the
// first run honest: the docs and help texts claim nothing as "next" or
// "coming" (docs_test.go), every command shown in README.md and docs/*.md
// runs (commands_test.go), and scripts/demo.sh works on any ports with data
// fresh for every id (demo_test.go). It builds the sluice binary and the
// example data generator once per run, without -race: these tests run the
// product as a user does.
package docs_test

import (
	"bytes"
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

var (
	binPath string // the sluice binary
	genPath string // examples/parcel-eta/features/gen
	repoDir string // the module root
	ortLib  string // the ONNX Runtime library
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	repoDir = filepath.Join(filepath.Dir(file), "..", "..")
	lib, err := onnxruntime.FindLibrary("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		return 1
	}
	ortLib = lib
	dir, err := os.MkdirTemp("", "sluice-docs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "bin", "sluice")
	genPath = filepath.Join(dir, "bin", "gen")
	for _, b := range []struct{ out, pkg string }{{binPath, "./cmd/sluice"}, {genPath, "./examples/parcel-eta/features/gen"}} {
		build := exec.Command("go", "build", "-o", b.out, b.pkg)
		build.Dir = repoDir
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "docs: build", b.pkg+":", err)
			return 1
		}
	}
	return m.Run()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
