package integration_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFromPlainBuild: a binary built with a plain `go build` (no
// -ldflags) reports the commit Go stamped into its build info
// (vcs.revision, "-dirty" when vcs.modified). Go's default is to stamp in
// a git checkout; this machine's environment sets GOFLAGS=-buildvcs=false,
// so the build here asks for the default explicitly (-buildvcs=true) and
// fails, never skips, when no stamp comes out.
func TestVersionFromPlainBuild(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.CommandContext(t.Context(), "go", "build", "-buildvcs=true", "-o", bin, "./cmd/sluice")
	build.Dir = repoDir
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	info, err := exec.CommandContext(t.Context(), "go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var rev string
	modified := false
	for line := range strings.SplitSeq(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "build" {
			continue
		}
		switch k, v, _ := strings.Cut(f[1], "="); k {
		case "vcs.revision":
			rev = v
		case "vcs.modified":
			modified = v == "true"
		}
	}
	head, err := exec.CommandContext(t.Context(), "git", "-C", repoDir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	if rev != strings.TrimSpace(string(head)) {
		t.Fatalf("go build stamped vcs.revision %q, HEAD is %s (Go stamps nothing in a linked git worktree: run the test in a clone)", rev, head)
	}
	want := "commit        " + rev
	if modified {
		want += "-dirty"
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), want+"\n") {
		t.Errorf("sluice version lacks %q:\n%s", want, out)
	}
}
