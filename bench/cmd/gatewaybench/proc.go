package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-ml/sluice/bench/internal/tailbuf"
)

// proc is a process this program started; it is only ever signalled by
// its own pid.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *tailbuf.Buffer
	done chan struct{} // closed when the process has been reaped
}

// procs is every process started in this run, stopped in reverse order.
type procs struct {
	mu   sync.Mutex
	list []*proc
}

// start execs bin with args; env entries are added to this process's
// environment. Output goes to a tail buffer kept for error reports.
func (ps *procs) start(name, bin string, args, env []string) (*proc, error) {
	// Not tied to a context: a cancelled run must still stop its processes
	// gracefully (SIGTERM first, in stopAll), not have them killed.
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{name: name, cmd: cmd, log: &tailbuf.Buffer{Max: 16 << 10}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		_ = cmd.Wait() // the exit status is reported through exited()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// stopAll stops every started process, newest first.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for _, p := range slices.Backward(list) {
		p.stop()
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to 10 s, then SIGKILL, and reaps the process.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may have exited in between
	select {
	case <-p.done:
		return
	case <-time.After(10 * time.Second):
	}
	say("%s (pid %d) still running 10 s after SIGTERM; sending SIGKILL", p.name, p.pid())
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls url with GET until it answers 200, the process exits or
// limit passes.
func waitReady(ctx context.Context, p *proc, url string, limit time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close() // only the status matters
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%s); its output:\n%s", p.name, p.cmd.ProcessState, tail(p.log.String(), 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready at %s after %s; its output:\n%s", p.name, url, limit, tail(p.log.String(), 20))
}

// captureProfile starts fetching a CPU profile of length d from a Sluice
// admin address into dir/name.pprof, and returns a function that waits
// for it. An empty dir captures nothing. Failures are reported, not fatal.
func captureProfile(ctx context.Context, dir, admin, name string, d time.Duration) func() {
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		secs := max(int(d.Seconds()), 1)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, secs)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return
		}
		resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
		if err != nil {
			say("profile %s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			say("profile %s: HTTP %d %v", name, resp.StatusCode, err)
			return
		}
		path := filepath.Join(dir, name+".pprof")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			say("profile %s: %v", name, err)
			return
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			say("profile %s: %v", name, err)
			return
		}
		say("wrote %s", path)
	}()
	return func() { <-done }
}

// freePorts asks the kernel for n distinct free 127.0.0.1 ports. They are
// released before use, so another process could take one in between; a
// failed start then fails the part that needed it.
func freePorts(ctx context.Context, n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// userHZ is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100
// on Linux whatever the kernel's HZ).
const userHZ = 100

// procCPU returns the user + system CPU time a process has used so far,
// all threads included, from /proc/PID/stat (10 ms resolution).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the text of
// /proc/PID/stat. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("parse /proc stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 { // f[0] is field 3 (state); utime is field 14
		return 0, errors.New("parse /proc stat: too few fields")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc stat: %w", err)
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// selfNice returns this process's nice value (field 19 of
// /proc/self/stat), which the servers it starts inherit.
func selfNice() (int, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("parse /proc stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 17 {
		return 0, errors.New("parse /proc stat: too few fields")
	}
	return strconv.Atoi(f[16])
}

// selfCPU is this process's user + system CPU time (microsecond resolution).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU returns the CPU time all CPUs have spent busy (user, nice,
// system, irq, softirq, steal) since boot, from the first line of
// /proc/stat.
func machineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineCPU(string(b))
}

func parseMachineCPU(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, errors.New("parse /proc/stat: no cpu line")
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/stat: %w", err)
		}
		busy += v
	}
	return time.Duration(busy) * time.Second / userHZ, nil
}

// quietGate holds measured phases back while other work keeps the
// machine busy: on a shared machine a phase that starts during someone's
// build measures the build.
type quietGate struct {
	limit   float64       // CPUs busy at most (whole machine, 0.5 s samples)
	maxWait time.Duration // per phase; then the phase starts anyway
	budget  time.Duration // in all; once spent, phases start without waiting
	mu      sync.Mutex
	waited  time.Duration // guarded by mu
	noisy   int           // phases started above the limit; guarded by mu
}

// wait returns once the machine has been quiet for one 0.5 s sample, or
// after maxWait. Our own servers are idle between phases, so what it
// sees busy is other work.
func (q *quietGate) wait(ctx context.Context) {
	if q == nil || q.limit <= 0 {
		return
	}
	q.mu.Lock()
	left := q.budget - q.waited
	q.mu.Unlock()
	if left <= 0 {
		q.mu.Lock()
		q.noisy++ // not checked: counts as not quiet
		q.mu.Unlock()
		return
	}
	maxWait := min(q.maxWait, left)
	t0 := time.Now()
	quiet := false
	for time.Since(t0) < maxWait && ctx.Err() == nil {
		a, err1 := machineCPU()
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		b, err2 := machineCPU()
		if err1 != nil || err2 != nil {
			return // no /proc/stat: nothing to gate on
		}
		if (b-a).Seconds()/0.5 <= q.limit {
			quiet = true
			break
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waited += time.Since(t0)
	if !quiet {
		q.noisy++
	}
}

// Special pids of a cpuMeter.
const (
	pidSelf    = 0  // this process
	pidMachine = -1 // every CPU, whatever runs on it
)

// cpuMeter snapshots the CPU time of several processes around a measured
// phase.
type cpuMeter struct {
	pids  map[string]int
	start map[string]time.Duration
	t0    time.Time
}

func newCPUMeter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]time.Duration{}, t0: time.Now()}
	for name, pid := range pids {
		m.start[name] = cpuOf(pid)
	}
	return m
}

func cpuOf(pid int) time.Duration {
	var (
		d   time.Duration
		err error
	)
	switch pid {
	case pidSelf:
		return selfCPU()
	case pidMachine:
		d, err = machineCPU()
	default:
		d, err = procCPU(pid)
	}
	if err != nil {
		return -1
	}
	return d
}

// since returns each process's CPU time used since newCPUMeter, and the
// wall time passed; a process whose stat could not be read is left out.
func (m *cpuMeter) since() (map[string]time.Duration, time.Duration) {
	out := map[string]time.Duration{}
	for name, pid := range m.pids {
		now := cpuOf(pid)
		if now < 0 || m.start[name] < 0 {
			continue
		}
		out[name] = now - m.start[name]
	}
	return out, time.Since(m.t0)
}

// otherCores is how many CPUs, on average over wall, were busy with
// anything but the named processes: cpu must hold cpuMachine.
func otherCores(cpu map[string]time.Duration, wall time.Duration) float64 {
	all, ok := cpu[cpuMachine]
	if !ok || wall <= 0 {
		return -1
	}
	for name, d := range cpu {
		if name != cpuMachine {
			all -= d
		}
	}
	return max(all.Seconds()/wall.Seconds(), 0)
}
