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

// rowSpec is one server row: a system driven through one transport with
// `sluice perf` over every concurrency level.
type rowSpec struct {
	System    string // "Sluice" or the peer's description
	Transport string // "gRPC", "HTTP JSON", "HTTP binary"
	Batching  string // "on", "off", or "n/a" for the peer
	Model     string
	Protocol  string // sluice perf -i
	URL       string
	Binary    bool
	IsPeer    bool
}

func (s rowSpec) label() string {
	return fmt.Sprintf("%s, %s, batching %s", s.System, s.Transport, s.Batching)
}

// perfArgs are the sluice perf arguments for the row, without -f.
func (s rowSpec) perfArgs(cfg config) []string {
	args := []string{
		"perf", "-m", s.Model, "-u", s.URL, "-i", s.Protocol,
		"--concurrency-range", cfg.Levels, "--input-data", cfg.RequestFile,
		"--measurement-interval", strconv.FormatInt(cfg.Window.Milliseconds(), 10),
		"--max-trials", strconv.Itoa(cfg.Trials), "--request-timeout", "10s",
	}
	if s.Binary {
		args = append(args, "--binary")
	}
	return args
}

// rowSpecs lists the server rows the configuration asks for.
func rowSpecs(cfg config) []rowSpec {
	var out []rowSpec
	models := []struct{ name, batching string }{{cfg.Model, "off"}}
	if cfg.BatchedModel != "" {
		models = append(models, struct{ name, batching string }{cfg.BatchedModel, "on"})
	}
	for t := range strings.SplitSeq(cfg.Transports, ",") {
		for _, m := range models {
			spec := rowSpec{System: "Sluice", Batching: m.batching, Model: m.name}
			switch strings.TrimSpace(t) {
			case "grpc":
				if cfg.SluiceGRPC == "" {
					continue
				}
				spec.Transport, spec.Protocol, spec.URL = "gRPC", "grpc", cfg.SluiceGRPC
			case "http-json":
				if cfg.SluiceHTTP == "" {
					continue
				}
				spec.Transport, spec.Protocol, spec.URL = "HTTP JSON", "http", cfg.SluiceHTTP
			case "http-binary":
				if cfg.SluiceHTTP == "" {
					continue
				}
				spec.Transport, spec.Protocol, spec.URL, spec.Binary = "HTTP binary", "http", cfg.SluiceHTTP, true
			default:
				continue
			}
			out = append(out, spec)
		}
	}
	if cfg.PeerHTTP != "" {
		out = append(out, rowSpec{
			System: cfg.PeerDesc, Transport: "HTTP JSON", Batching: "n/a",
			Model: cfg.Model, Protocol: "http", URL: cfg.PeerHTTP, IsPeer: true,
		})
	}
	return out
}

// level is one concurrency level of a row, as sluice perf's CSV gives it.
type level struct {
	Concurrency int
	Throughput  float64 // inferences per second
	P50         time.Duration
	P90         time.Duration
	P95         time.Duration
	P99         time.Duration
	Avg         time.Duration
	HasServer   bool
	Queue       time.Duration
	Compute     time.Duration // compute input + infer + output
	AvgBatch    float64
	Errors      int
	Stable      bool
}

// perfRow is a measured row.
type perfRow struct {
	rowSpec
	Command string
	Levels  []level
	Err     string
}

// at returns the row's level at concurrency c.
func (r *perfRow) at(c int) (level, bool) {
	if r == nil {
		return level{}, false
	}
	for _, l := range r.Levels {
		if l.Concurrency == c {
			return l, true
		}
	}
	return level{}, false
}

// runPerf runs `sluice perf` for one row (its progress lines go to this
// program's stderr) and reads back its CSV.
func runPerf(ctx context.Context, cfg config, spec rowSpec) perfRow {
	row := perfRow{rowSpec: spec}
	dir, err := os.MkdirTemp("", "modelbench-")
	if err != nil {
		row.Err = err.Error()
		return row
	}
	defer os.RemoveAll(dir)
	csvPath := filepath.Join(dir, "perf.csv")
	args := append(spec.perfArgs(cfg), "-f", csvPath)
	row.Command = cfg.SluiceBin + " " + strings.Join(spec.perfArgs(cfg), " ") + " -f out.csv"
	pctx, cancel := context.WithTimeout(ctx, cfg.PerfTimeout)
	defer cancel()
	cmd := exec.CommandContext(pctx, cfg.SluiceBin, args...) //nolint:gosec // the operator's -sluice-bin, by design
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	raw, err := os.ReadFile(csvPath)
	if err == nil {
		row.Levels, err = parsePerfCSV(string(raw))
	}
	switch {
	case runErr != nil && pctx.Err() != nil:
		row.Err = fmt.Sprintf("sluice perf did not finish within %s", cfg.PerfTimeout)
	case runErr != nil:
		row.Err = fmt.Sprintf("sluice perf: %v", runErr)
	case err != nil:
		row.Err = fmt.Sprintf("read sluice perf CSV: %v", err)
	}
	return row
}

var errCSV = errors.New("unexpected sluice perf CSV")

// parsePerfCSV reads the closed-loop CSV that `sluice perf -f` writes.
func parsePerfCSV(s string) ([]level, error) {
	rows, err := csv.NewReader(strings.NewReader(s)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCSV, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: empty", errCSV)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, need := range []string{
		"Concurrency", "Inferences/Second", "p50 latency", "p99 latency", "Avg latency",
		"Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Server Avg Batch", "Errors", "Stable",
	} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%w: no column %q", errCSV, need)
		}
	}
	var out []level
	for _, r := range rows[1:] {
		if len(r) != len(rows[0]) {
			return nil, fmt.Errorf("%w: ragged row", errCSV)
		}
		get := func(name string) string { return r[col[name]] }
		us := func(name string) time.Duration {
			n, _ := strconv.ParseInt(get(name), 10, 64)
			return time.Duration(n) * time.Microsecond
		}
		var l level
		var err error
		if l.Concurrency, err = strconv.Atoi(get("Concurrency")); err != nil {
			return nil, fmt.Errorf("%w: concurrency %q", errCSV, get("Concurrency"))
		}
		if l.Throughput, err = strconv.ParseFloat(get("Inferences/Second"), 64); err != nil {
			return nil, fmt.Errorf("%w: throughput %q", errCSV, get("Inferences/Second"))
		}
		l.P50, l.P99, l.Avg = us("p50 latency"), us("p99 latency"), us("Avg latency")
		if _, ok := col["p90 latency"]; ok {
			l.P90 = us("p90 latency")
		}
		if _, ok := col["p95 latency"]; ok {
			l.P95 = us("p95 latency")
		}
		if get("Server Queue") != "" {
			l.HasServer = true
			l.Queue = us("Server Queue")
			l.Compute = us("Server Compute Input") + us("Server Compute Infer") + us("Server Compute Output")
			l.AvgBatch, _ = strconv.ParseFloat(get("Server Avg Batch"), 64)
		}
		l.Errors, _ = strconv.Atoi(get("Errors"))
		l.Stable = get("Stable") == "true"
		out = append(out, l)
	}
	return out, nil
}
