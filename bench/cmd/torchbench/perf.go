package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// rowSpec is one system the harness drives: a Sluice model or the peer.
type rowSpec struct {
	Label    string // "Sluice, TorchScript, batching on"
	Format   string // "TorchScript", "state_dict", "ONNX", "peer"
	Batching string // "on", "off", "n/a"
	Model    string
	URL      string // HOST:PORT, KServe v2 HTTP
	PID      int    // root of the server's process tree
	IsPeer   bool
}

// load is one level: a concurrency (closed loop) or a rate (open loop).
type load struct {
	Concurrency int     // > 0: closed loop
	Rate        float64 // > 0: open loop, requests/s
}

func (l load) String() string {
	if l.Concurrency > 0 {
		return fmt.Sprintf("c=%d", l.Concurrency)
	}
	return fmt.Sprintf("%g/s", l.Rate)
}

// result is one row at one level.
type result struct {
	Load       load
	Throughput float64 // inferences (requests) per second
	P50, P99   time.Duration
	AvgBatch   float64 // Sluice's statistics extension; 0 when absent
	Errors     int
	Requests   int
	Stable     bool
	ServerCPU  time.Duration // per inference, from sluice perf --server-pid
	ClientCPU  time.Duration // sluice perf's own, per inference
	Split      treeCPU       // the tree's CPU over the whole perf run (warm-up included)
	Command    string
	Err        string
}

// perfArgs are the sluice perf arguments for a row at a level, without -f.
func perfArgs(cfg config, r rowSpec, l load) []string {
	args := []string{
		"perf", "-m", r.Model, "-u", r.URL, "-i", "http",
		"--input-data", cfg.RequestFile,
		"--measurement-interval", strconv.FormatInt(cfg.Window.Milliseconds(), 10),
		"--max-trials", strconv.Itoa(cfg.Trials), "--request-timeout", "10s",
		"--server-pid", strconv.Itoa(r.PID),
	}
	if l.Concurrency > 0 {
		return append(args, "--concurrency-range", strconv.Itoa(l.Concurrency))
	}
	return append(args, "--request-rate-range", strconv.FormatFloat(l.Rate, 'f', -1, 64),
		"--request-distribution", "poisson")
}

// runLevel runs sluice perf once and snapshots the server's process tree
// around it.
func runLevel(ctx context.Context, cfg config, r rowSpec, l load) result {
	res := result{Load: l}
	args := perfArgs(cfg, r, l)
	res.Command = cfg.SluiceBin + " " + strings.Join(args, " ")
	dir, err := os.MkdirTemp("", "torchbench-")
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	csvPath := filepath.Join(dir, "perf.csv")
	before, errBefore := readTree(cfg.ProcRoot, r.PID)
	pctx, cancel := context.WithTimeout(ctx, cfg.PerfTimeout)
	defer cancel()
	cmd := exec.CommandContext(pctx, cfg.SluiceBin, append(args, "-f", csvPath, "--verbose-csv")...) //nolint:gosec // the operator's -sluice-bin, by design
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	after, errAfter := readTree(cfg.ProcRoot, r.PID)
	if errBefore == nil && errAfter == nil {
		res.Split = after.sub(before)
	}
	raw, err := os.ReadFile(csvPath)
	if err == nil {
		err = parsePerfCSV(string(raw), &res)
	}
	switch {
	case runErr != nil && pctx.Err() != nil:
		res.Err = fmt.Sprintf("sluice perf did not finish within %s", cfg.PerfTimeout)
	case runErr != nil:
		res.Err = fmt.Sprintf("sluice perf: %v", runErr)
	case err != nil:
		res.Err = fmt.Sprintf("read sluice perf CSV: %v", err)
	case errAfter != nil:
		res.Err = errAfter.Error()
	}
	return res
}

var errCSV = errors.New("unexpected sluice perf CSV")

// parsePerfCSV fills res from the CSV of a single-level sluice perf run
// (closed or open loop).
func parsePerfCSV(s string, res *result) error {
	rows, err := csv.NewReader(strings.NewReader(s)).ReadAll()
	if err != nil {
		return fmt.Errorf("%w: %w", errCSV, err)
	}
	if len(rows) != 2 {
		return fmt.Errorf("%w: %d rows, want a header and one level", errCSV, len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, need := range []string{
		"Inferences/Second", "p50 latency", "p99 latency", "Server Avg Batch",
		"Requests", "Errors", "Stable", "Server CPU per Inference", "Client CPU per Inference",
	} {
		if _, ok := col[need]; !ok {
			return fmt.Errorf("%w: no column %q", errCSV, need)
		}
	}
	r := rows[1]
	if len(r) != len(rows[0]) {
		return fmt.Errorf("%w: ragged row", errCSV)
	}
	get := func(name string) string { return r[col[name]] }
	us := func(name string) time.Duration {
		v, _ := strconv.ParseFloat(get(name), 64)
		return time.Duration(v * float64(time.Microsecond))
	}
	if res.Throughput, err = strconv.ParseFloat(get("Inferences/Second"), 64); err != nil {
		return fmt.Errorf("%w: throughput %q", errCSV, get("Inferences/Second"))
	}
	if get("Server CPU per Inference") == "" {
		return fmt.Errorf("%w: no server CPU (was --server-pid honoured?)", errCSV)
	}
	res.P50, res.P99 = us("p50 latency"), us("p99 latency")
	res.ServerCPU, res.ClientCPU = us("Server CPU per Inference"), us("Client CPU per Inference")
	res.AvgBatch, _ = strconv.ParseFloat(get("Server Avg Batch"), 64)
	res.Requests, _ = strconv.Atoi(get("Requests"))
	res.Errors, _ = strconv.Atoi(get("Errors"))
	res.Stable = get("Stable") == "true"
	return nil
}
