package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// fmtUs prints a latency in whole microseconds ("–" for none).
func fmtUs(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return strconv.FormatInt(d.Microseconds(), 10)
}

func fmtRate(v float64) string {
	switch {
	case v <= 0:
		return "–"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func fmtRatio(r float64) string {
	switch {
	case r <= 0:
		return "n/a"
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	default:
		return fmt.Sprintf("%.2f×", r)
	}
}

// median returns the median of ds (the mean of the middle two for an even
// count).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func renderMarkdown(rep *report) string {
	var b strings.Builder
	cfg := rep.Cfg
	m := rep.Machine
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("# Serving benchmark: Sluice vs raw ONNX Runtime vs Flask (parcel_eta, route_ranker)\n\n")
	w("- Date (UTC): %s – %s\n", rep.Started.Format("2006-01-02 15:04:05"), rep.Finished.Format("15:04:05"))
	w("- Machine: %d CPUs (`nproc`), %s, %s RAM, Linux %s, %s\n", m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion)
	w("- Load average (1/5/15 min): %s at start, %s at end\n", rep.LoadStart, rep.LoadEnd)
	w("- Git commit: %s\n", m.Commit)
	w("- Command: `%s`\n", cfg.Command)
	w("- Load generator: `sluice perf` (closed loop, concurrency %s, %s windows, stable when 3 consecutive windows agree within 10%% in throughput and average latency, at most %d windows per level), input rows from `%s` (batch 1 per request)\n",
		cfg.Levels, cfg.Window, cfg.Trials, cfg.RequestFile)
	w("- Dynamic batching on: model `%s`, same files as `%s` plus `%s` (max_batch_size 128, one instance)\n\n",
		cfg.BatchedModel, cfg.Model, cfg.BatchingDesc)
	if cfg.ShippedModel != "" {
		w("- As shipped: model `%s` with the settings of `examples/models/%s/config.pbtxt` (its own dynamic batching block); batching off is the same files without a dynamic_batching block\n", cfg.ShippedModel, cfg.ShippedModel)
	}
	if cfg.RankerModel != "" {
		w("- Compute-bound model: `%s` (dynamic batching as shipped) and `%s` (without), rows of `%s`, concurrency %s\n", cfg.RankerModel, cfg.RankerUnbatched, cfg.RankerRequest, cfg.RankerLevels)
	}
	w("- Server CPU per inference: user + system time of the server's processes (gunicorn's master and workers for the peer) from `/proc/PID/stat` over the reported windows (`sluice perf --server-pid`), divided by the inferences completed in them; the load generator's own beside it\n")
	w("\n**The load generator and every server share this machine's %d cores.** Compare ratios measured in this run; do not compare absolute numbers across runs.\n\n", m.CPUs)

	renderTargets(w, "Targets (issue 13)", evaluateTargets13(rep))
	renderCPU(w, rep)

	renderTargets(w, "Targets (issue 3)", evaluateTargets(rep))

	if len(rep.ORT) > 0 {
		w("## Raw ONNX Runtime in-process (the limit)\n\n")
		w("Sluice's ONNX Runtime backend loaded into the harness, one session (intra-op threads 1, as served), one caller executing back to back for %s: no network, no encoding, no scheduler. \"infer/s\" counts rows.\n\n", cfg.ORTTime)
		renderORTTable(w, rep.ORT)
		if c := rep.ORTCold; c != nil && c.Calls > 0 {
			w("Cold cache: the same batch-1 call with %d MiB of other memory written between calls (untimed), as a server's other work evicts the model's weights between requests: p50 %s µs, p99 %s µs.\n\n",
				c.Thrash>>20, fmtUs(percentile(c.Latencies, 0.5)), fmtUs(percentile(c.Latencies, 0.99)))
		}
	}
	if len(rep.RankerORT) > 0 {
		w("## Raw ONNX Runtime in-process, route_ranker (compute-bound)\n\n")
		renderORTTable(w, rep.RankerORT)
	}

	if len(rep.Rows) > 0 {
		renderRows(w, rep)
	}

	renderStartup(w, rep)

	w("## Notes\n\n")
	w("- Flask peer: %s, serving a TorchScript copy of the same weights; it implements inference and readiness only, so `sluice perf` takes input names and shapes from the request file and reports its server columns as n/a. gunicorn's sync workers close the connection after every answer, so each peer request also pays a TCP connect.\n", cfg.PeerDesc)
	w("- Closed loop hides queueing at saturation (a slow answer delays the next send); `sluice perf --request-rate-range` measures latency at a fixed offered rate.\n")
	if busy := max(firstLoad(rep.LoadStart), firstLoad(rep.LoadEnd)); m.CPUs > 0 && busy > float64(m.CPUs) {
		w("- The machine was busy: the 1-minute load average reached %.1f on %d cores (other jobs were running), so absolute numbers are depressed and noisier than usual, and levels may be marked unstable; ratios are still same-run comparisons, but rerun on a quiet machine before drawing conclusions.\n", busy, m.CPUs)
	}
	for _, n := range rep.Notes {
		w("- %s\n", n)
	}
	return b.String()
}

// renderTargets writes one table of targets with their notes.
func renderTargets(w func(string, ...any), title string, targets []target) {
	w("## %s\n\n", title)
	w("| # | target | measured | goal | verdict |\n|---|---|---|---|---|\n")
	for i, t := range targets {
		w("| %d | %s | %s | %s | %s |\n", i+1, t.Name, t.Measured, t.Goal, t.verdict())
	}
	w("\n")
	for i, t := range targets {
		if t.Note != "" {
			w("%d. %s\n", i+1, t.Note)
		}
	}
	w("\n")
}

// renderORTTable writes the raw ONNX Runtime rows, each batch size's
// throughput against batch 1's.
func renderORTTable(w func(string, ...any), rows []ortResult) {
	w("| batch | executions/s | infer/s | p50 µs | p99 µs | vs batch 1 (infer/s) |\n|---|---|---|---|---|---|\n")
	base := 0.0
	for _, r := range rows {
		if r.Batch == 1 {
			base = r.InferPerSec()
		}
	}
	for _, r := range rows {
		ratio := "n/a"
		if base > 0 {
			ratio = fmtRatio(r.InferPerSec() / base)
		}
		w("| %d | %s | %s | %s | %s | %s |\n", r.Batch, fmtRate(r.CallsPerSec()), fmtRate(r.InferPerSec()),
			fmtUs(percentile(r.Latencies, 0.5)), fmtUs(percentile(r.Latencies, 0.99)), ratio)
	}
	w("\n")
}

// renderRows writes the throughput table, every level and the commands.
func renderRows(w func(string, ...any), rep *report) {
	levels, _ := parseInts(rep.Cfg.Levels)
	w("## Throughput, inferences/s (closed loop, batch 1 per request)\n\n")
	w("| system | transport | dynamic batching |")
	for _, c := range levels {
		w(" c=%d |", c)
	}
	w("\n|---|---|---|%s\n", strings.Repeat("---|", len(levels)))
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Rate > 0 {
			continue // in the fixed-rate table
		}
		w("| %s | %s | %s |", rowSystem(r), r.Transport, r.Batching)
		for _, c := range levels {
			l, ok := r.at(c)
			if !ok {
				w(" – |")
				continue
			}
			w(" %s |", fmtRate(l.Throughput))
		}
		w("\n")
	}
	w("\n## Every level\n\n")
	w("Latencies are client-side, µs. Server queue and compute are the statistics extension's per-request averages over the stable windows (n/a: the server has no statistics); avg batch is inferences per model execution. CPU columns are µs of CPU time per inference: the server's processes and the load generator (– : not measured). A level \"r/s\" is open loop at that rate.\n\n")
	w("| system | transport | batching | c | infer/s | p50 | p90 | p99 | avg | server queue | server compute | avg batch | errors | stable | server CPU | load gen CPU |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range rep.Rows {
		r := &rep.Rows[i]
		for _, l := range r.Levels {
			queue, compute, batch := "n/a", "n/a", "n/a"
			if l.HasServer {
				queue, compute, batch = strconv.FormatInt(l.Queue.Microseconds(), 10),
					strconv.FormatInt(l.Compute.Microseconds(), 10), fmt.Sprintf("%.1f", l.AvgBatch)
			}
			stable := "yes"
			if !l.Stable {
				stable = "no"
			}
			lv := strconv.Itoa(l.Concurrency)
			if l.Concurrency == 0 {
				rate := l.Rate
				if rate == 0 {
					rate = r.Rate
				}
				lv = fmt.Sprintf("%g/s", rate)
			}
			srvCPU := "–"
			if l.HasCPU {
				srvCPU = fmtCPU(l.ServerCPU)
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s |\n",
				rowSystem(r), r.Transport, r.Batching, lv, fmtRate(l.Throughput), fmtUs(l.P50), fmtUs(l.P90),
				fmtUs(l.P99), fmtUs(l.Avg), queue, compute, batch, l.Errors, stable, srvCPU, fmtCPU(l.ClientCPU))
		}
		if r.Err != "" {
			w("| %s | %s | %s | – | failed: %s | | | | | | | | | | | |\n", rowSystem(r), r.Transport, r.Batching, oneLine(r.Err))
		}
	}
	w("\nCommands (one per row):\n\n```sh\n")
	for _, r := range rep.Rows {
		w("%s\n", r.Command)
	}
	w("```\n\n")
}

// renderStartup writes the start-up times.
func renderStartup(w func(string, ...any), rep *report) {
	cfg := rep.Cfg
	w("## Start-up\n\n")
	w("Time from exec of `%s serve --model-repository %s` to the first 200 from `/v2/health/ready` (polled every 5 ms), each run on fresh ports.\n\n", cfg.SluiceBin, cfg.StartupRepo)
	if len(rep.Startup) > 0 {
		all := make([]string, len(rep.Startup))
		var worst time.Duration
		for i, d := range rep.Startup {
			all[i] = fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
			worst = max(worst, d)
		}
		goal := "meets"
		if median(rep.Startup) >= 2*time.Second {
			goal = "misses"
		}
		w("| runs ok | median ms | max ms | all runs ms | goal < 2 s |\n|---|---|---|---|---|\n")
		w("| %d/%d | %.1f | %.1f | %s | %s |\n\n", len(rep.Startup), len(rep.Startup)+len(rep.StartErrs),
			float64(median(rep.Startup))/float64(time.Millisecond), float64(worst)/float64(time.Millisecond), strings.Join(all, ", "), goal)
	} else {
		w("Not measured.\n\n")
	}
	for _, e := range rep.StartErrs {
		w("- start-up run failed: %s\n", oneLine(e))
	}
}

// rowSystem names a row's system, with its model when it is not the main
// one.
func rowSystem(r *perfRow) string {
	if r.Group != "" {
		return r.System + " (" + r.Group + ")"
	}
	return r.System
}

// renderCPU writes the CPU-per-inference summary: every server at c=32
// and at the fixed rates.
func renderCPU(w func(string, ...any), rep *report) {
	type cell struct {
		name string
		l    level
	}
	var cells []cell
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Rate > 0 {
			if len(r.Levels) > 0 && r.Levels[0].HasCPU {
				cells = append(cells, cell{fmt.Sprintf("%s, %s, batching %s, %g/s", rowSystem(r), r.Transport, r.Batching, r.Rate), r.Levels[0]})
			}
			continue
		}
		if l, ok := r.at(32); ok && l.HasCPU {
			cells = append(cells, cell{fmt.Sprintf("%s, %s, batching %s, c=32", rowSystem(r), r.Transport, r.Batching), l})
		}
	}
	if len(cells) == 0 {
		return
	}
	w("## Server CPU per inference\n\n")
	w("µs of CPU time per inference over each level's reported windows, from `/proc` (10 ms ticks), at c=32 and at the fixed rates; the load generator's beside it.\n\n")
	w("| row | infer/s | server CPU µs | load gen CPU µs | server cores busy |\n|---|---|---|---|---|\n")
	for _, c := range cells {
		w("| %s | %s | %s | %s | %.2f |\n", c.name, fmtRate(c.l.Throughput), fmtCPU(c.l.ServerCPU), fmtCPU(c.l.ClientCPU),
			c.l.Throughput*float64(c.l.ServerCPU)/float64(time.Second))
	}
	w("\n")
}

// firstLoad parses the 1-minute figure of a loadAvg string (0 if unknown).
func firstLoad(s string) float64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
