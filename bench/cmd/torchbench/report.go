package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/bench/internal/machine"
)

// saturation is the concurrency the targets are judged at.
const saturation = 32

// Target thresholds of issue 14.
const (
	maxCPURatio        = 0.5 // Sluice CPU per inference / the peer's, at c=32
	minThroughputRatio = 2.0 // Sluice (batching on) / the peer, at c=32
)

type report struct {
	Cfg       config
	Started   time.Time
	Finished  time.Time
	Machine   machine.Info
	LoadStart string
	LoadEnd   string
	Rows      []measured
}

// verdict is one target judged on one row.
type verdict struct {
	Row    string
	Met    bool
	Reason string
}

func (r *report) peer() *measured {
	for i := range r.Rows {
		if r.Rows[i].IsPeer {
			return &r.Rows[i]
		}
	}
	return nil
}

// cpuVerdicts judges "≤ 1/2 of the peer's CPU per inference at c=32" on
// every PyTorch row.
func (r *report) cpuVerdicts() []verdict {
	return r.judge(false, func(s, p result) (bool, string) {
		ratio := float64(s.ServerCPU) / float64(p.ServerCPU)
		return ratio <= maxCPURatio, fmt.Sprintf("%s vs %s per inference: %.2f× the peer's (target ≤ %.2f×)",
			us(s.ServerCPU), us(p.ServerCPU), ratio, maxCPURatio)
	})
}

// throughputVerdicts judges "with dynamic batching on, ≥ 2× the peer's
// throughput at c=32" on the batching-on PyTorch rows.
func (r *report) throughputVerdicts() []verdict {
	return r.judge(true, func(s, p result) (bool, string) {
		ratio := s.Throughput / p.Throughput
		return ratio >= minThroughputRatio, fmt.Sprintf("%.0f vs %.0f inferences/s: %.2f× the peer (target ≥ %.1f×)",
			s.Throughput, p.Throughput, ratio, minThroughputRatio)
	})
}

func (r *report) judge(batchedOnly bool, f func(s, p result) (bool, string)) []verdict {
	var out []verdict
	peer := r.peer()
	pr, pok := peer.at(load{Concurrency: saturation})
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.IsPeer || row.Format == "ONNX" || (batchedOnly && row.Batching != "on") {
			continue
		}
		v := verdict{Row: row.Label}
		sr, sok := row.at(load{Concurrency: saturation})
		switch {
		case !pok:
			v.Reason = fmt.Sprintf("the peer has no result at c=%d", saturation)
		case !sok:
			v.Reason = fmt.Sprintf("this row has no result at c=%d", saturation)
		case sr.Errors > 0 || pr.Errors > 0:
			v.Reason = fmt.Sprintf("errors at c=%d (Sluice %d, peer %d)", saturation, sr.Errors, pr.Errors)
		default:
			v.Met, v.Reason = f(sr, pr)
		}
		out = append(out, v)
	}
	return out
}

// overall is met when every verdict with batching on is met: the
// configuration a user serving PyTorch through Sluice would pick.
func overall(vs []verdict) string {
	on, met := 0, 0
	for _, v := range vs {
		if strings.Contains(v.Row, "batching on") {
			on++
			if v.Met {
				met++
			}
		}
	}
	if on > 0 && met == on {
		return "**met**"
	}
	return "**not met**"
}

func metWord(b bool) string {
	if b {
		return "met"
	}
	return "not met"
}

func us(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + " µs"
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
}

func (r *report) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# PyTorch serving benchmark: parcel ETA (issue 14)\n\n")
	fmt.Fprintf(&b, "- Date: %s (%.0f s)\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Finished.Sub(r.Started).Seconds())
	fmt.Fprintf(&b, "- Machine: %d CPUs (%s), %s RAM, Linux %s; %s; %s\n", m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion, r.Cfg.Versions)
	fmt.Fprintf(&b, "- Commit: %s\n", m.Commit)
	fmt.Fprintf(&b, "- Load average (1, 5, 15 min): %s at the start, %s at the end", r.LoadStart, r.LoadEnd)
	if busy(r.LoadStart, m.CPUs) || busy(r.LoadEnd, m.CPUs) {
		fmt.Fprintf(&b, " — **the machine was busy with other work** (load above its %d cores): absolute numbers are low and noisy; the ratios, measured level by level with every system in turn, are what this run says", m.CPUs)
	}
	fmt.Fprintf(&b, "\n- Command: `%s`\n", r.Cfg.Command)
	fmt.Fprintf(&b, "- Setup: %s\n", r.Cfg.Setup)
	fmt.Fprintf(&b, "- Load: `sluice perf` over HTTP JSON (KServe v2; the peer speaks nothing else), every request `%s` (2 rows); %s windows, 3 to %d per level; open-loop levels use Poisson arrivals. The load generator shares the machine with the servers.\n",
		r.Cfg.RequestFile, r.Cfg.Window, r.Cfg.Trials)
	fmt.Fprintf(&b, "- Server CPU per inference: utime + stime from `/proc/<pid>/stat` over the measured windows (`sluice perf --server-pid`), summed over the server's process tree: Sluice's Go process and its Python worker processes (idle workers of the other models included), gunicorn's master and its workers; reaped children included. Per inference = per request.\n\n")

	fmt.Fprintf(&b, "## Targets (c=%d, same run)\n\n", saturation)
	cpu, thr := r.cpuVerdicts(), r.throughputVerdicts()
	fmt.Fprintf(&b, "1. Sluice serving the PyTorch model uses ≤ 1/2 of the Flask peer's CPU per inference at c=%d: %s (judged on the batching-on rows)\n", saturation, overall(cpu))
	for _, v := range cpu {
		fmt.Fprintf(&b, "   - %s: %s — %s\n", v.Row, metWord(v.Met), v.Reason)
	}
	fmt.Fprintf(&b, "2. With dynamic batching on, ≥ 2× the peer's throughput at c=%d: %s\n", saturation, overall(thr))
	for _, v := range thr {
		fmt.Fprintf(&b, "   - %s: %s — %s\n", v.Row, metWord(v.Met), v.Reason)
	}

	fmt.Fprintf(&b, "\n## Throughput and CPU per inference\n\n")
	fmt.Fprintf(&b, "| system | load | inferences/s | × peer | p50 ms | p99 ms | server CPU/inf | × peer | avg batch | errors |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	peer := r.peer()
	for _, l := range r.loads() {
		pr, pok := peer.at(l)
		for i := range r.Rows {
			row := &r.Rows[i]
			res, ok := row.at(l)
			if !ok {
				fmt.Fprintf(&b, "| %s | %s | failed: %s | | | | | | | |\n", row.Label, l, errOf(row, l))
				continue
			}
			tx, cx := "", ""
			if pok && !row.IsPeer && pr.Throughput > 0 && pr.ServerCPU > 0 {
				tx = fmt.Sprintf("%.2f", res.Throughput/pr.Throughput)
				cx = fmt.Sprintf("%.2f", float64(res.ServerCPU)/float64(pr.ServerCPU))
			}
			batch := "n/a"
			if res.AvgBatch > 0 {
				batch = fmt.Sprintf("%.2f", res.AvgBatch)
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %d |\n",
				row.Label, l, res.Throughput, tx, ms(res.P50), ms(res.P99), us(res.ServerCPU), cx, batch, res.Errors)
		}
	}

	fmt.Fprintf(&b, "\n## Where the server CPU goes (c=%d)\n\n", saturation)
	fmt.Fprintf(&b, "Each level's `sluice perf` run (warm-up included) split between the root process (Sluice's Go process; gunicorn's master) and its children (Sluice's Python workers; gunicorn's workers), from `/proc` snapshots around the run, applied to the measured CPU per inference above; the load generator's own CPU per inference beside it (not counted as server CPU).\n\n")
	fmt.Fprintf(&b, "| system | root process/inf | children/inf | children's share | child processes | client CPU/inf |\n|---|---:|---:|---:|---|---:|\n")
	for i := range r.Rows {
		row := &r.Rows[i]
		res, ok := row.at(load{Concurrency: saturation})
		if !ok || res.Requests == 0 {
			continue
		}
		if total := res.Split.Total(); total > 0 {
			// The split covers the whole run; scale it to the measured
			// windows' CPU per inference so the two tables agree.
			share := float64(res.Split.Children) / float64(total)
			root := time.Duration(float64(res.ServerCPU) * (1 - share))
			kids := time.Duration(float64(res.ServerCPU) * share)
			fmt.Fprintf(&b, "| %s | %s | %s | %.0f%% | %s | %s |\n", row.Label, us(root), us(kids), 100*share, comms(res.Split.Comms), us(res.ClientCPU))
		}
	}

	fmt.Fprintf(&b, "\n## Commands\n\nEach level is one `sluice perf` run (`-f out.csv --verbose-csv` added):\n\n```\n")
	seen := map[string]bool{}
	for i := range r.Rows {
		for _, res := range r.Rows[i].Results {
			if !seen[res.Command] {
				seen[res.Command] = true
				fmt.Fprintln(&b, res.Command)
			}
		}
	}
	fmt.Fprintf(&b, "```\n")
	return b.String()
}

func (r *report) loads() []load {
	var out []load
	for _, c := range r.Cfg.Levels {
		out = append(out, load{Concurrency: c})
	}
	for _, v := range r.Cfg.Rates {
		out = append(out, load{Rate: v})
	}
	return out
}

func errOf(m *measured, l load) string {
	for _, r := range m.Results {
		if r.Load == l {
			return strings.ReplaceAll(r.Err, "|", "/")
		}
	}
	return "not run"
}

func comms(c map[string]int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d× %s", c[k], strings.ReplaceAll(k, "|", "/")))
	}
	return strings.Join(parts, ", ")
}

// busy reports whether a load average line's 1-minute figure exceeds the
// core count.
func busy(loadLine string, cpus int) bool {
	f := strings.Fields(loadLine)
	if len(f) == 0 {
		return false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return err == nil && v > float64(cpus)
}
