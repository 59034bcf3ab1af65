package integration_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestVersionFromPlainBuild: the binary TestMain builds with a plain
// `go build` (no -ldflags) reports the commit it was built from, from the
// VCS stamp Go writes into the build info.
func TestVersionFromPlainBuild(t *testing.T) {
	head, err := exec.CommandContext(t.Context(), "git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	out, err := exec.CommandContext(t.Context(), binPath, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice version: %v\n%s", err, out)
	}
	want := "commit        " + strings.TrimSpace(string(head))
	if !strings.Contains(string(out), want) {
		t.Errorf("sluice version lacks %q:\n%s", want, out)
	}
}
