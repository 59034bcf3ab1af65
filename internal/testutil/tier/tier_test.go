package tier

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLeftOutUnderShort runs this test binary again with and without
// -short: under -short LeftOut is true and says which tier it leaves out.
func TestLeftOutUnderShort(t *testing.T) {
	if os.Getenv("TIER_CHILD") == "1" {
		if LeftOut("example") {
			os.Exit(3)
		}
		os.Exit(4)
	}
	for _, c := range []struct {
		short bool
		code  int
	}{{true, 3}, {false, 4}} {
		args := []string{"-test.run=^TestLeftOutUnderShort$"}
		if c.short {
			args = append(args, "-test.short")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "TIER_CHILD=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != c.code {
			t.Fatalf("short=%v: %v, want exit %d; output:\n%s", c.short, err, c.code, out)
		}
		if said := strings.Contains(string(out), "example tier: left out under -short"); said != c.short {
			t.Errorf("short=%v: output %q", c.short, out)
		}
	}
}
