// Package machine describes where a benchmark ran: CPUs, memory, kernel,
// Go version, commit, and the load average.
package machine

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Info describes where the run happened.
type Info struct {
	CPUs      int
	CPUModel  string
	MemTotal  string
	Kernel    string
	GoVersion string
	Commit    string
}

// Read gathers Info from /proc, the Go runtime and git.
func Read(ctx context.Context) Info {
	m := Info{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), CPUModel: "unknown", MemTotal: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(fields[1], 64); err == nil {
					m.MemTotal = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Commit = "unknown"
	git := func(args ...string) ([]byte, error) { return exec.CommandContext(ctx, "git", args...).Output() }
	if out, err := git("rev-parse", "--short=12", "HEAD"); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && len(st) > 0 {
			m.Commit += " (plus uncommitted changes)"
		} else if st, err := git("status", "--porcelain"); err == nil && len(st) > 0 {
			m.Commit += " (plus untracked files)"
		}
	}
	return m
}

// LoadAvg is the 1, 5 and 15-minute load average, or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
