package perf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on Linux for
// every architecture Go supports there.
const clockTick = 10 * time.Millisecond

// errNoProc is returned where /proc cannot be read.
var errNoProc = errors.New("server CPU needs /proc (Linux)")

// procCPU returns the CPU time (user + system, of every thread) that the
// processes pids and all their descendants have used, the descendants
// already reaped included (their time is in their parents' cutime and
// cstime, so the total does not drop when a worker exits). A server of
// several processes, like gunicorn's master and workers, is measured by
// its root pid. procRoot is the /proc mount ("/proc" outside tests).
func procCPU(procRoot string, pids []int) (time.Duration, error) {
	stats, err := readProcStats(procRoot)
	if err != nil {
		return 0, err
	}
	children := map[int][]int{}
	for pid, st := range stats {
		children[st.ppid] = append(children[st.ppid], pid)
	}
	var ticks uint64
	seen := map[int]bool{}
	var walk func(pid int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		st := stats[pid]
		ticks += st.utime + st.stime + st.cutime + st.cstime
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, pid := range pids {
		if _, ok := stats[pid]; !ok {
			return 0, fmt.Errorf("server process %d not found in %s", pid, procRoot)
		}
		walk(pid)
	}
	return time.Duration(ticks) * clockTick, nil
}

// ProcessCPU returns the CPU time (user + system) that the processes pids
// and all their descendants have used so far, from /proc (Linux; 10 ms
// ticks). The benchmark harnesses use it for servers they did not start
// themselves, like Redis.
func ProcessCPU(pids ...int) (time.Duration, error) { return procCPU("/proc", pids) }

// SelfCPU returns this process's CPU time so far (getrusage).
func SelfCPU() time.Duration { return selfCPU() }

// procStat is what procCPU needs of /proc/PID/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime uint64
}

func readProcStats(procRoot string) (map[int]procStat, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoProc, err)
	}
	out := make(map[int]procStat, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // it exited meanwhile
		}
		if st, ok := parseProcStat(string(b)); ok {
			out[pid] = st
		}
	}
	return out, nil
}

// parseProcStat reads ppid (field 4) and utime, stime, cutime and cstime
// (fields 14 to 17) of /proc/PID/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
func parseProcStat(s string) (procStat, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procStat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	var t [4]uint64
	for k := range t {
		if t[k], err = strconv.ParseUint(f[11+k], 10, 64); err != nil {
			return procStat{}, false
		}
	}
	return procStat{ppid: ppid, utime: t[0], stime: t[1], cutime: t[2], cstime: t[3]}, true
}

// selfCPU is this process's own CPU time (the load generator's).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
