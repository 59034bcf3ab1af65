// Package docs_test holds the tests that keep the documentation and the
// first run honest: the docs and help texts claim nothing as "next" or
// "coming" (docs_test.go), every command shown in README.md and docs/*.md
// runs (commands_test.go), and scripts/demo.sh works on any ports with data
// fresh for every id (demo_test.go). It builds the sluice binary and the
// example data generator once per run, without -race: these tests run the
// product as a user does.
package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/testutil/tier"
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
	if tier.LeftOut("end-to-end docs") {
		return 0
	}
	env, cleanup, err := harness.Setup("docs")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	repoDir, ortLib = env.RepoDir, env.ORTLib
	binPath = filepath.Join(env.Dir, "bin", "sluice")
	genPath = filepath.Join(env.Dir, "bin", "gen")
	for _, b := range []struct{ out, pkg string }{{binPath, "./cmd/sluice"}, {genPath, "./examples/parcel-eta/features/gen"}} {
		if err := env.Build(b.out, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, "docs:", err)
			return 1
		}
	}
	return m.Run()
}

func freePort(t *testing.T) int {
	t.Helper()
	return harness.FreePort(t)
}

type syncBuffer = harness.SyncBuffer
