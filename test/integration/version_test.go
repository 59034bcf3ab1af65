package integration_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestVersionFromPlainBuild: the binary TestMain builds with a plain
// `go build` (no -ldflags) reports the commit Go stamped into its build
// info (vcs.revision, "-dirty" when vcs.modified). Go stamps nothing with
// -buildvcs=false or in a git worktree; the test then has nothing to
// compare and says so (TestStampedVersion in internal/cli covers the
// reading either way).
func TestVersionFromPlainBuild(t *testing.T) {
	info, err := exec.CommandContext(t.Context(), "go", "version", "-m", binPath).Output()
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
	if rev == "" {
		t.Skipf("the binary carries no VCS stamp (GOFLAGS=%q; Go stamps none with -buildvcs=false or in a git worktree)", os.Getenv("GOFLAGS")+" "+goEnv(t, "GOFLAGS"))
	}
	want := "commit        " + rev
	if modified {
		want += "-dirty"
	}
	out, err := exec.CommandContext(t.Context(), binPath, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), want+"\n") {
		t.Errorf("sluice version lacks %q:\n%s", want, out)
	}
}

func goEnv(t *testing.T, key string) string {
	out, err := exec.CommandContext(t.Context(), "go", "env", key).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
