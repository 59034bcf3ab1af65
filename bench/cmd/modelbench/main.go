// Command modelbench measures Sluice and its peers side by side in one run
// and writes a markdown report: raw ONNX Runtime in-process (the limit),
// Sluice over HTTP JSON, HTTP binary tensors and gRPC, and the Flask +
// gunicorn + PyTorch peer. Each target gets a closed-loop cell (fixed
// concurrency, for throughput) and an open-loop cell (fixed arrival rate, for
// latency at that rate); Sluice's start-up time is measured too.
//
// bench/run.sh starts the servers and calls this program; see bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-ml/sluice/internal/backend/onnxruntime"
)

type config struct {
	Seconds      time.Duration
	Warmup       time.Duration
	Workers      int
	Rate         float64
	OpenWorkers  int
	MaxRequests  int
	Timeout      time.Duration
	Model        string
	RequestFile  string
	ONNXModel    string
	SluiceHTTP   string
	SluiceGRPC   string
	PeerHTTP     string
	PeerDesc     string
	SluiceBin    string
	ModelRepo    string
	StartupRuns  int
	Batch32      bool
	Out          string
	Command      string
	SkipORT      bool
	ORTLibrary   string
	StartupLimit time.Duration
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("modelbench", flag.ExitOnError)
	fs.DurationVar(&cfg.Seconds, "duration", 8*time.Second, "how long each cell sends requests")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "closed-loop warm-up per target before its cells (discarded)")
	fs.IntVar(&cfg.Workers, "workers", 8, "closed-loop concurrent workers")
	fs.Float64Var(&cfg.Rate, "rate", 500, "open-loop arrival rate, requests per second")
	fs.IntVar(&cfg.OpenWorkers, "open-workers", 64, "open-loop cap on requests in flight")
	fs.IntVar(&cfg.MaxRequests, "max-requests", 1_000_000, "cap on requests per cell")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "per-request timeout")
	fs.StringVar(&cfg.Model, "model", "parcel_eta", "model name")
	fs.StringVar(&cfg.RequestFile, "request", "examples/requests/parcel_eta.json", "KServe v2 JSON request whose rows make up the workload")
	fs.StringVar(&cfg.ONNXModel, "onnx-model", "examples/models/parcel_eta/2/model.onnx", "ONNX file for the in-process row")
	fs.StringVar(&cfg.ORTLibrary, "onnxruntime-lib", "", "libonnxruntime.so.1 (default: onnxruntime.FindLibrary)")
	fs.BoolVar(&cfg.SkipORT, "skip-ort", false, "leave out the in-process ONNX Runtime row")
	fs.StringVar(&cfg.SluiceHTTP, "sluice-http", "", "Sluice HTTP base URL, e.g. http://127.0.0.1:8000 (empty: skip Sluice rows)")
	fs.StringVar(&cfg.SluiceGRPC, "sluice-grpc", "", "Sluice gRPC address, e.g. 127.0.0.1:8001 (empty: skip the gRPC row)")
	fs.StringVar(&cfg.PeerHTTP, "peer-http", "", "Flask peer base URL (empty: skip the peer rows and ratios)")
	fs.StringVar(&cfg.PeerDesc, "peer-desc", "Flask + gunicorn + PyTorch", "how the peer is described in the table")
	fs.StringVar(&cfg.SluiceBin, "sluice-bin", "bin/sluice", "binary for the start-up measurement")
	fs.StringVar(&cfg.ModelRepo, "model-repository", "examples/models", "model repository for the start-up measurement")
	fs.IntVar(&cfg.StartupRuns, "startup-runs", 5, "start-up measurements (0: skip)")
	fs.DurationVar(&cfg.StartupLimit, "startup-limit", 30*time.Second, "give up on one start-up after this long")
	fs.BoolVar(&cfg.Batch32, "batch32", true, "add batch-32 rows: Sluice binary tensors vs the peer")
	fs.StringVar(&cfg.Out, "out", "", "write the markdown report here as well as to stdout")
	fs.StringVar(&cfg.Command, "command", "", "the command line to record in the report (default: this program's)")
	_ = fs.Parse(os.Args[1:])
	if cfg.Command == "" {
		cfg.Command = strings.Join(os.Args, " ")
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error("modelbench", "err", err)
		os.Exit(1)
	}
}

// measured is one target and its cells.
type measured struct {
	T      *target
	Closed *cellResult
	Open   *cellResult
}

// report is everything the markdown needs.
type report struct {
	Cfg       config
	Started   time.Time
	Finished  time.Time
	Machine   machineInfo
	LoadStart string
	LoadEnd   string
	Batch1    []measured
	Batch32   []measured
	Startup   []time.Duration
	StartErrs []string
	Notes     []string
}

func run(ctx context.Context, cfg config, logger *slog.Logger) error {
	rep := &report{Cfg: cfg, Started: time.Now().UTC(), Machine: readMachine(), LoadStart: loadAvg()}
	outputs := []string{"eta_prediction", "confidence_score"}
	src, err := loadFeatures(cfg.RequestFile)
	if err != nil {
		return err
	}

	// Start-up first, while the machine is not yet hot from load.
	for i := range cfg.StartupRuns {
		d, err := measureStartup(ctx, cfg.SluiceBin, []string{cfg.ModelRepo}, cfg.StartupLimit)
		if err != nil {
			logger.Warn("start-up run failed", "run", i+1, "err", err)
			rep.StartErrs = append(rep.StartErrs, err.Error())
			continue
		}
		logger.Info("start-up", "run", i+1, "ready_after", d)
		rep.Startup = append(rep.Startup, d)
	}

	w1, err := newWorkload(cfg.Model, outputs, src, 1)
	if err != nil {
		return err
	}
	targets1, notes := buildTargets(ctx, cfg, w1, logger, true)
	rep.Notes = append(rep.Notes, notes...)
	rep.Batch1, notes = measureAll(ctx, cfg, targets1, logger, true)
	rep.Notes = append(rep.Notes, notes...)

	if cfg.Batch32 && ctx.Err() == nil {
		w32, err := newWorkload(cfg.Model, outputs, src, 32)
		if err != nil {
			return err
		}
		t32, notes := buildTargets(ctx, cfg, w32, logger, false)
		rep.Notes = append(rep.Notes, notes...)
		rep.Batch32, notes = measureAll(ctx, cfg, t32, logger, false)
		rep.Notes = append(rep.Notes, notes...)
	}
	rep.Finished = time.Now().UTC()
	rep.LoadEnd = loadAvg()
	if ctx.Err() != nil {
		rep.Notes = append(rep.Notes, "The run was interrupted; some cells are missing or short.")
	}

	md := renderMarkdown(rep)
	fmt.Print(md)
	if cfg.Out != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o755); err != nil {
			return fmt.Errorf("create results folder: %w", err)
		}
		if err := os.WriteFile(cfg.Out, []byte(md), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		logger.Info("report written", "path", cfg.Out)
	}
	return nil
}

// buildTargets makes the targets for one workload. With all=false only the
// batch-32 pair (Sluice binary, peer JSON) is built. Targets that cannot be
// set up are left out with a note.
func buildTargets(ctx context.Context, cfg config, w *workload, logger *slog.Logger, all bool) ([]*target, []string) {
	var ts []*target
	var notes []string
	conns := max(cfg.Workers, cfg.OpenWorkers) + 8
	if all && !cfg.SkipORT {
		lib := cfg.ORTLibrary
		var err error
		if lib == "" {
			lib, err = onnxruntime.FindLibrary("")
		}
		var t *target
		if err == nil {
			t, err = ortTarget(ctx, "raw ONNX Runtime in-process (limit)", lib, cfg.ONNXModel, w, logger)
		}
		if err != nil {
			notes = append(notes, "Raw ONNX Runtime row skipped: "+err.Error())
		} else {
			ts = append(ts, t)
		}
	}
	if cfg.SluiceHTTP != "" {
		if all {
			ts = append(ts, jsonTarget("Sluice", cfg.SluiceHTTP, w, newHTTPClient(conns)))
		}
		ts = append(ts, binaryTarget("Sluice", cfg.SluiceHTTP, w, newHTTPClient(conns)))
	}
	if all && cfg.SluiceGRPC != "" {
		t, err := grpcTarget("Sluice", cfg.SluiceGRPC, w)
		if err != nil {
			notes = append(notes, "Sluice gRPC row skipped: "+err.Error())
		} else {
			ts = append(ts, t)
		}
	}
	if cfg.PeerHTTP != "" {
		t := jsonTarget(cfg.PeerDesc, cfg.PeerHTTP, w, newHTTPClient(conns))
		t.IsPeer = true
		ts = append(ts, t)
	}
	return ts, notes
}

// measureAll probes every target, checks they agree, and runs the cells:
// closed loop for all, and open loop too when open is set.
func measureAll(ctx context.Context, cfg config, ts []*target, logger *slog.Logger, open bool) ([]measured, []string) {
	var out []measured
	var notes []string
	var ref []float32
	var refName string
	for _, t := range ts {
		label := fmt.Sprintf("%s, %s, batch %d", t.Row, t.Transport, t.Batch)
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := t.Probe(pctx)
		cancel()
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: left out, probe request failed: %v", label, err))
			_ = t.Close()
			continue
		}
		if len(got) != t.Batch {
			notes = append(notes, fmt.Sprintf("%s: left out, probe returned %d values for batch %d", label, len(got), t.Batch))
			_ = t.Close()
			continue
		}
		if ref == nil {
			ref, refName = got, label
		} else if d := maxAbsDiff(ref, got); d > 1e-3 {
			notes = append(notes, fmt.Sprintf("%s: outputs differ from %s by up to %.3g (eta_prediction)", label, refName, d))
		}

		m := measured{T: t}
		logger.Info("warm-up", "target", label, "for", cfg.Warmup)
		closedLoop(ctx, t.Do, loadConfig{Duration: cfg.Warmup, MaxRequests: cfg.MaxRequests,
			RequestTimeout: cfg.Timeout, Workers: cfg.Workers})

		r := closedLoop(ctx, t.Do, loadConfig{Duration: cfg.Seconds, MaxRequests: cfg.MaxRequests,
			RequestTimeout: cfg.Timeout, Workers: cfg.Workers})
		logger.Info("closed loop", "target", label, "req_per_s", math.Round(r.Throughput()),
			"p50", r.Percentile(0.5), "p99", r.Percentile(0.99), "errors", r.Errors)
		m.Closed = &r
		if open && ctx.Err() == nil {
			r := openLoop(ctx, t.Do, loadConfig{Duration: cfg.Seconds, MaxRequests: cfg.MaxRequests,
				RequestTimeout: cfg.Timeout, Workers: cfg.OpenWorkers, Rate: cfg.Rate, Drain: 5 * time.Second})
			logger.Info("open loop", "target", label, "rate", cfg.Rate, "achieved", math.Round(r.Throughput()),
				"p50", r.Percentile(0.5), "p99", r.Percentile(0.99), "errors", r.Errors, "unsent", r.Unsent)
			m.Open = &r
		}
		if err := t.Close(); err != nil {
			notes = append(notes, fmt.Sprintf("%s: close: %v", label, err))
		}
		out = append(out, m)
		if ctx.Err() != nil {
			break
		}
	}
	return out, notes
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// median returns the median of ds (the mean of the middle two for an even
// count).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
