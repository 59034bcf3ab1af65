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
// `sluice perf` over every concurrency level (or at one fixed rate).
type rowSpec struct {
	System    string // "Sluice" or the peer's description
	Transport string // "gRPC", "HTTP JSON", "HTTP binary"
	Batching  string // "on", "off", "as shipped", or "n/a" for the peer
	Model     string
	Protocol  string // sluice perf -i
	URL       string
	Binary    bool
	IsPeer    bool
	// Group is the model family the row belongs to when it is not the
	// main one (parcel_eta): "route_ranker" for the compute-bound rows.
	Group string
	// Levels replaces cfg.Levels when set.
	Levels string
	// Rate > 0 drives the row open loop at that many requests a second
	// instead of at the concurrency levels.
	Rate float64
	// Request replaces cfg.RequestFile when set.
	Request string
	// PIDs are the server's processes: sluice perf reports their CPU time
	// per inference (--server-pid).
	PIDs []int
	// Trivial marks the trivial Go server's row.
	Trivial bool
}

func (s rowSpec) label() string {
	l := fmt.Sprintf("%s, %s, batching %s", s.System, s.Transport, s.Batching)
	if s.Rate > 0 {
		l += fmt.Sprintf(", %g/s", s.Rate)
	}
	return l
}

// perfArgs are the sluice perf arguments for the row, without -f.
func (s rowSpec) perfArgs(cfg config) []string {
	levels, request := cfg.Levels, cfg.RequestFile
	if s.Levels != "" {
		levels = s.Levels
	}
	if s.Request != "" {
		request = s.Request
	}
	load := []string{"--concurrency-range", levels}
	if s.Rate > 0 {
		load = []string{"--request-rate-range", strconv.FormatFloat(s.Rate, 'f', -1, 64)}
	}
	args := []string{"perf", "-m", s.Model, "-u", s.URL, "-i", s.Protocol}
	args = append(args, load...)
	args = append(args, "--input-data", request,
		"--measurement-interval", strconv.FormatInt(cfg.Window.Milliseconds(), 10),
		"--max-trials", strconv.Itoa(cfg.Trials), "--request-timeout", "10s",
	)
	if s.Binary {
		args = append(args, "--binary")
	}
	for _, pid := range s.PIDs {
		args = append(args, "--server-pid", strconv.Itoa(pid))
	}
	return args
}

// pids is a row's --server-pid list: the one pid when it is known.
func pids(pid int) []int {
	if pid <= 0 {
		return nil
	}
	return []int{pid}
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
			spec.PIDs = pids(cfg.SluicePID)
			out = append(out, spec)
		}
	}
	if cfg.PeerHTTP != "" {
		out = append(out, rowSpec{
			System: cfg.PeerDesc, Transport: "HTTP JSON", Batching: "n/a",
			Model: cfg.peerModel(), Protocol: "http", URL: cfg.PeerHTTP, IsPeer: true, PIDs: pids(cfg.PeerPID),
		})
	}
	return append(out, moreRowSpecs(cfg)...)
}

// moreRowSpecs are the rows of issue 13's targets, each only when its
// server or model is given: parcel_eta as shipped (its own dynamic
// batching settings) over gRPC and HTTP JSON; every server at the fixed
// rates; route_ranker, the compute-bound model, with dynamic batching off
// and on.
func moreRowSpecs(cfg config) []rowSpec {
	var out []rowSpec
	if cfg.ShippedModel != "" {
		if cfg.SluiceGRPC != "" {
			out = append(out, rowSpec{
				System: "Sluice", Transport: "gRPC", Batching: "as shipped", Model: cfg.ShippedModel,
				Protocol: "grpc", URL: cfg.SluiceGRPC, PIDs: pids(cfg.SluicePID),
			})
		}
		if cfg.SluiceHTTP != "" {
			out = append(out, rowSpec{
				System: "Sluice", Transport: "HTTP JSON", Batching: "as shipped", Model: cfg.ShippedModel,
				Protocol: "http", URL: cfg.SluiceHTTP, PIDs: pids(cfg.SluicePID),
			})
		}
	}
	rates, _ := parseFloats(cfg.Rates)
	for _, rate := range rates {
		if cfg.SluiceHTTP != "" {
			model, batching := cfg.Model, "off"
			if cfg.ShippedModel != "" {
				model, batching = cfg.ShippedModel, "as shipped"
			}
			out = append(out, rowSpec{
				System: "Sluice", Transport: "HTTP JSON", Batching: batching, Model: model,
				Protocol: "http", URL: cfg.SluiceHTTP, Rate: rate, PIDs: pids(cfg.SluicePID),
			})
		}
		if cfg.PeerHTTP != "" {
			out = append(out, rowSpec{
				System: cfg.PeerDesc, Transport: "HTTP JSON", Batching: "n/a", Model: cfg.peerModel(),
				Protocol: "http", URL: cfg.PeerHTTP, IsPeer: true, Rate: rate, PIDs: pids(cfg.PeerPID),
			})
		}
		if cfg.TrivialHTTP != "" {
			out = append(out, rowSpec{
				System: trivialDesc, Transport: "HTTP JSON", Batching: "n/a", Model: cfg.peerModel(),
				Protocol: "http", URL: cfg.TrivialHTTP, Trivial: true, Rate: rate, PIDs: pids(cfg.TrivialPID),
			})
		}
	}
	if cfg.RankerModel != "" && cfg.SluiceGRPC != "" {
		for _, m := range []struct{ name, batching string }{{cfg.RankerUnbatched, "off"}, {cfg.RankerModel, "on"}} {
			if m.name == "" {
				continue
			}
			out = append(out, rowSpec{
				System: "Sluice", Transport: "gRPC", Batching: m.batching, Model: m.name,
				Protocol: "grpc", URL: cfg.SluiceGRPC, Group: rankerGroup, Levels: cfg.RankerLevels,
				Request: cfg.RankerRequest, PIDs: pids(cfg.SluicePID),
			})
		}
	}
	return out
}

// peerModel is the model name the peer and the trivial server answer to.
func (cfg config) peerModel() string {
	if cfg.PeerModel != "" {
		return cfg.PeerModel
	}
	return cfg.Model
}

// rankerGroup names the compute-bound model's rows.
const rankerGroup = "route_ranker"

// trivialDesc describes the trivial Go server in the report.
const trivialDesc = "trivial Go net/http server"

func parseFloats(s string) ([]float64, error) {
	var out []float64
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for p := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// level is one concurrency level of a row, as sluice perf's CSV gives it.
type level struct {
	Concurrency int     // 0 for an open-loop level
	Rate        float64 // requests per second of an open-loop level
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
	// HasCPU says ServerCPU was measured (--server-pid); both are CPU
	// time per inference over the reported windows.
	HasCPU               bool
	ServerCPU, ClientCPU time.Duration
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
	args := append(spec.perfArgs(cfg), "-f", csvPath, "--verbose-csv")
	row.Command = cfg.SluiceBin + " " + strings.Join(spec.perfArgs(cfg), " ") + " -f out.csv --verbose-csv"
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
	first := "Concurrency"
	if _, ok := col[first]; !ok {
		first = "Request Rate"
	}
	for _, need := range []string{
		first, "Inferences/Second", "p50 latency", "p99 latency", "Avg latency",
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
		if first == "Concurrency" {
			if l.Concurrency, err = strconv.Atoi(get(first)); err != nil {
				return nil, fmt.Errorf("%w: concurrency %q", errCSV, get(first))
			}
		} else if l.Rate, err = strconv.ParseFloat(get(first), 64); err != nil {
			return nil, fmt.Errorf("%w: request rate %q", errCSV, get(first))
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
		fracUs := func(name string) (time.Duration, bool) {
			i, ok := col[name]
			if !ok || r[i] == "" {
				return 0, false
			}
			v, err := strconv.ParseFloat(r[i], 64)
			return time.Duration(v * float64(time.Microsecond)), err == nil
		}
		l.ServerCPU, l.HasCPU = fracUs("Server CPU per Inference")
		l.ClientCPU, _ = fracUs("Client CPU per Inference")
		out = append(out, l)
	}
	return out, nil
}
