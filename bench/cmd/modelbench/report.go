package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// machineInfo describes where the run happened.
type machineInfo struct {
	CPUs      int
	CPUModel  string
	MemTotal  string
	Kernel    string
	GoVersion string
	Commit    string
}

func readMachine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), CPUModel: "unknown", MemTotal: "unknown"}
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
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Commit += " (plus uncommitted changes)"
		} else if st, err := exec.Command("git", "status", "--porcelain").Output(); err == nil && len(st) > 0 {
			m.Commit += " (plus untracked files)"
		}
	}
	return m
}

func loadAvg() string {
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

// fmtDur prints a latency in milliseconds with sensible precision.
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "–"
	case ms < 1:
		return fmt.Sprintf("%.3f", ms)
	case ms < 100:
		return fmt.Sprintf("%.2f", ms)
	default:
		return fmt.Sprintf("%.0f", ms)
	}
}

// fmtLag is fmtDur that prints a zero lag as 0 rather than a dash.
func fmtLag(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return fmtDur(d)
}

func fmtRate(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func fmtRatio(num, den float64) string {
	if den <= 0 || num <= 0 {
		return "n/a"
	}
	r := num / den
	switch {
	case r >= 10:
		return fmt.Sprintf("%.0f×", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f×", r)
	default:
		return fmt.Sprintf("%.2g×", r)
	}
}

func peerOf(ms []measured) *measured {
	for i := range ms {
		if ms[i].T.IsPeer {
			return &ms[i]
		}
	}
	return nil
}

func errCell(r *cellResult) string {
	if r.Errors == 0 && r.Unsent == 0 {
		return "0"
	}
	s := strconv.Itoa(r.Errors)
	if r.Unsent > 0 {
		s += fmt.Sprintf(" (+%d unsent)", r.Unsent)
	}
	return s
}

func closedTable(b *strings.Builder, ms []measured) {
	peer := peerOf(ms)
	fmt.Fprintf(b, "| # | system | transport | batch | req/s | rows/s | p50 ms | p90 ms | p99 ms | errors | req/s ÷ peer | p99 ÷ peer |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, m := range ms {
		r := m.Closed
		tp, pp := "n/a", "n/a"
		if peer != nil {
			tp = fmtRatio(r.Throughput(), peer.Closed.Throughput())
			pp = fmtRatio(float64(r.Percentile(0.99)), float64(peer.Closed.Percentile(0.99)))
		}
		fmt.Fprintf(b, "| %d | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			i+1, m.T.Row, m.T.Transport, m.T.Batch, fmtRate(r.Throughput()), fmtRate(r.Throughput()*float64(m.T.Batch)),
			fmtDur(r.Percentile(0.5)), fmtDur(r.Percentile(0.9)), fmtDur(r.Percentile(0.99)), errCell(r), tp, pp)
	}
}

func openTable(b *strings.Builder, ms []measured, rate float64) {
	var peer *cellResult
	if p := peerOf(ms); p != nil {
		peer = p.Open
	}
	fmt.Fprintf(b, "| # | system | transport | offered req/s | achieved req/s | p50 ms | p90 ms | p99 ms | max ms | errors | p99 ÷ peer | generator lag p99 ms |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, m := range ms {
		r := m.Open
		if r == nil {
			continue
		}
		pp := "n/a"
		if peer != nil {
			pp = fmtRatio(float64(r.Percentile(0.99)), float64(peer.Percentile(0.99)))
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			i+1, m.T.Row, m.T.Transport, fmtRate(rate), fmtRate(r.Throughput()),
			fmtDur(r.Percentile(0.5)), fmtDur(r.Percentile(0.9)), fmtDur(r.Percentile(0.99)), fmtDur(r.Percentile(1)),
			errCell(r), pp, fmtLag(percentile(r.Lag, 0.99)))
	}
}

func renderMarkdown(rep *report) string {
	var b strings.Builder
	c := rep.Cfg
	m := rep.Machine
	fmt.Fprintf(&b, "# Model server benchmark: Sluice vs peers (%s)\n\n", c.Model)
	fmt.Fprintf(&b, "- Date (UTC): %s – %s\n", rep.Started.Format("2006-01-02 15:04:05"), rep.Finished.Format("15:04:05"))
	fmt.Fprintf(&b, "- Machine: %d CPUs (`nproc`), %s, %s RAM, Linux %s, %s\n", m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion)
	fmt.Fprintf(&b, "- Load average (1/5/15 min): %s at start, %s at end\n", rep.LoadStart, rep.LoadEnd)
	fmt.Fprintf(&b, "- Git commit: %s\n", m.Commit)
	fmt.Fprintf(&b, "- Command: `%s`\n", c.Command)
	fmt.Fprintf(&b, "- Cells: %s each after a %s warm-up per target, at most %d requests per cell, per-request timeout %s\n\n",
		c.Seconds, c.Warmup, c.MaxRequests, c.Timeout)
	fmt.Fprintf(&b, "**The load generator and every server share this machine's %d cores** (and, on shared CI "+
		"machines, with other jobs). Compare the ratios, which were measured in the same run; "+
		"do not compare absolute numbers across runs. \"peer\" is the %s server.\n\n", m.CPUs, c.PeerDesc)

	if len(rep.Batch1) > 0 {
		fmt.Fprintf(&b, "## Throughput: closed loop, %d workers, batch 1 (load generator and servers share %d cores)\n\n", c.Workers, m.CPUs)
		fmt.Fprintf(&b, "Each worker sends a request, waits for the answer and sends the next. "+
			"Ratios divide by the peer's row: req/s ÷ peer above 1× is faster, p99 ÷ peer below 1× is better.\n\n")
		closedTable(&b, rep.Batch1)
		b.WriteString("\n")
		fmt.Fprintf(&b, "## Latency at a fixed rate: open loop, %s req/s, batch 1 (load generator and servers share %d cores)\n\n", fmtRate(c.Rate), m.CPUs)
		fmt.Fprintf(&b, "Arrivals are scheduled at a fixed rate whatever the answers do (at most %d in flight); "+
			"latency counts from the arrival's release, so time spent queued for a free slot behind a slow server is included. "+
			"\"unsent\" arrivals were still queued when the cell gave up on them. \"generator lag\" is how late the "+
			"load generator released arrivals against the schedule (timer granularity, CPU starvation); it is not "+
			"charged to the server, and a large value means the machine, not the server, was the bottleneck.\n\n", c.OpenWorkers)
		openTable(&b, rep.Batch1, c.Rate)
		b.WriteString("\n")
	}
	if len(rep.Batch32) > 0 {
		fmt.Fprintf(&b, "## Throughput at batch 32: closed loop, %d workers (load generator and servers share %d cores)\n\n", c.Workers, m.CPUs)
		closedTable(&b, rep.Batch32)
		b.WriteString("\n")
	}

	b.WriteString("## Start-up\n\n")
	if c.StartupRuns == 0 {
		b.WriteString("Not measured (`-startup-runs 0`).\n\n")
	} else {
		fmt.Fprintf(&b, "Time from exec of `%s serve --model-repository %s` to the first 200 from `/v2/health/ready` "+
			"(polled every 5 ms), %d runs, each on fresh ports.\n\n", c.SluiceBin, c.ModelRepo, c.StartupRuns)
		if len(rep.Startup) > 0 {
			mx := time.Duration(0)
			parts := make([]string, 0, len(rep.Startup))
			for _, d := range rep.Startup {
				mx = max(mx, d)
				parts = append(parts, fmtDur(d))
			}
			goal := "meets"
			if mx >= 2*time.Second {
				goal = "misses"
			}
			fmt.Fprintf(&b, "| runs ok | median ms | max ms | all runs ms | goal < 2 s |\n|---|---|---|---|---|\n")
			fmt.Fprintf(&b, "| %d/%d | %s | %s | %s | %s |\n\n", len(rep.Startup), c.StartupRuns,
				fmtDur(median(rep.Startup)), fmtDur(mx), strings.Join(parts, ", "), goal)
		}
		for _, e := range rep.StartErrs {
			fmt.Fprintf(&b, "- failed run: %s\n", oneLine(e))
		}
		if len(rep.StartErrs) > 0 {
			b.WriteString("\n")
		}
	}

	b.WriteString("## Notes\n\n")
	fmt.Fprintf(&b, "- Workload: `%s` rows from `%s`, cycled to the batch size; every request is encoded once "+
		"up front, and the client checks only the status (answers are read in full but not decoded). One probe "+
		"request per target is decoded and its `eta_prediction` compared with the first target's.\n", c.Model, c.RequestFile)
	b.WriteString("- Raw ONNX Runtime: Sluice's own ONNX Runtime backend in the load generator's process, one " +
		"session with intra-op threads 1, shared by all workers; no network, no encoding. It is the limit.\n")
	b.WriteString("- Sluice: one instance of the model (its `config.pbtxt`), HTTP keep-alive connections, one " +
		"shared gRPC connection (HTTP/2 streams).\n")
	fmt.Fprintf(&b, "- Peer: %s serving a TorchScript copy of the same weights; gunicorn's sync workers "+
		"close the connection after every answer, so each peer request pays a TCP connect (that is how this "+
		"stack is usually deployed).\n", c.PeerDesc)
	b.WriteString("- Closed loop under-reports tail latency at saturation (a slow answer delays the next send); " +
		"use the open-loop table for latency at a rate.\n")
	if busy := busyNote(rep); busy != "" {
		fmt.Fprintf(&b, "- %s\n", busy)
	}
	for i, m := range rep.Batch1 {
		if m.Open != nil {
			if lag := percentile(m.Open.Lag, 0.99); lag > lagLimit {
				fmt.Fprintf(&b, "- Open-loop row %d (%s, %s): the load generator ran %s late at p99, so it was starved "+
					"of CPU during this cell; treat the row as unreliable.\n", i+1, m.T.Row, m.T.Transport, fmtDur(lag)+" ms")
			}
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", oneLine(n))
	}
	for _, group := range [][]measured{rep.Batch1, rep.Batch32} {
		for _, m := range group {
			for _, r := range []*cellResult{m.Closed, m.Open} {
				if r != nil && r.FirstErr != "" {
					fmt.Fprintf(&b, "- %s, %s, batch %d: first error: %s\n", m.T.Row, m.T.Transport, m.T.Batch, oneLine(r.FirstErr))
				}
			}
		}
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// lagLimit is the generator lag above which an open-loop cell is flagged:
// well beyond timer granularity, so the harness itself was starved.
const lagLimit = 10 * time.Millisecond

// busyNote warns when the load average shows more runnable work than cores
// at the start or end of the run.
func busyNote(rep *report) string {
	worst := 0.0
	for _, la := range []string{rep.LoadStart, rep.LoadEnd} {
		f := strings.Fields(la)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			worst = max(worst, v)
		}
	}
	if rep.Machine.CPUs <= 0 || worst <= float64(rep.Machine.CPUs) {
		return ""
	}
	return fmt.Sprintf("The machine was busy: the 1-minute load average reached %.1f on %d cores (other jobs were running), "+
		"so absolute numbers are depressed and noisier than usual; ratios are still same-run comparisons.", worst, rep.Machine.CPUs)
}
