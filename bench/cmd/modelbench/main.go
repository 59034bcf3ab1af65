// Command modelbench is the benchmark harness behind `make bench`. In one
// run, on one machine, it measures parcel_eta side by side:
//
//   - raw ONNX Runtime in-process (Sluice's own backend called directly) at
//     batch 1 and at the batch sizes the dynamic batcher forms: the limit;
//   - Sluice over gRPC, HTTP JSON and HTTP binary tensors, with dynamic
//     batching off and on, at several concurrencies;
//   - the Flask + gunicorn + PyTorch peer over HTTP JSON;
//
// driving every server with the same load generator, `sluice perf`, and
// writes a markdown report with the four target ratios of issue 3. It also
// measures Sluice's start-up time. bench/run.sh starts the servers and
// calls this program; see bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-ml/sluice/bench/internal/machine"
)

type config struct {
	Window       time.Duration // sluice perf --measurement-interval
	Trials       int           // sluice perf --max-trials
	Levels       string        // sluice perf --concurrency-range
	PerfTimeout  time.Duration // bound on one sluice perf invocation
	ORTBatches   string
	ORTTime      time.Duration
	RequestFile  string
	ONNXModel    string
	ORTLibrary   string
	SkipORT      bool
	SluiceBin    string
	SluiceHTTP   string
	SluiceGRPC   string
	Model        string
	BatchedModel string
	BatchingDesc string
	Transports   string
	PeerHTTP     string
	PeerDesc     string
	StartupRepo  string
	StartupRuns  int
	StartupLimit time.Duration
	Out          string
	Command      string

	// Issue 13: CPU per inference, fixed rates, the compute-bound model.
	SluicePID       int    // the sluice serve process (--server-pid)
	PeerPID         int    // the peer's root process (gunicorn's master)
	PeerModel       string // the model name the peer (and the trivial server) answers to; "" = Model
	TrivialHTTP     string // a trivial Go net/http server (bench/cmd/trivialserver)
	TrivialPID      int
	ShippedModel    string // parcel_eta with the dynamic batching settings it ships with
	Rates           string // fixed request rates of the open-loop rows
	ColdCacheMiB    int    // memory touched between the calls of the cold-cache raw row (0: no row)
	RankerModel     string // route_ranker as shipped (dynamic batching on)
	RankerUnbatched string // the same without dynamic batching
	RankerLevels    string
	RankerRequest   string
	RankerONNX      string
	RankerBatches   string
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("modelbench", flag.ExitOnError)
	fs.DurationVar(&cfg.Window, "window", 2*time.Second, "sluice perf measurement window")
	fs.IntVar(&cfg.Trials, "max-trials", 5, "sluice perf windows per level at most")
	fs.StringVar(&cfg.Levels, "concurrency", "1,8,32,64", "concurrency levels for every server row")
	fs.DurationVar(&cfg.PerfTimeout, "perf-timeout", 3*time.Minute, "kill one sluice perf run after this long")
	fs.StringVar(&cfg.ORTBatches, "ort-batches", "1,8,32,64", "batch sizes of the raw ONNX Runtime rows")
	fs.DurationVar(&cfg.ORTTime, "ort-time", 2*time.Second, "measurement time of each raw ONNX Runtime row")
	fs.StringVar(&cfg.RequestFile, "request", "examples/requests/parcel_eta.json", "KServe v2 JSON request whose rows make up every request")
	fs.StringVar(&cfg.ONNXModel, "onnx-model", "examples/models/parcel_eta/2/model.onnx", "ONNX file for the in-process rows")
	fs.StringVar(&cfg.ORTLibrary, "onnxruntime-lib", "", "libonnxruntime.so.1 (default: onnxruntime.FindLibrary)")
	fs.BoolVar(&cfg.SkipORT, "skip-ort", false, "leave out the raw ONNX Runtime rows")
	fs.StringVar(&cfg.SluiceBin, "sluice-bin", "bin/sluice", "the sluice binary: load generator (sluice perf) and start-up subject")
	fs.StringVar(&cfg.SluiceHTTP, "sluice-http", "", "Sluice HTTP HOST:PORT (empty: no Sluice HTTP rows)")
	fs.StringVar(&cfg.SluiceGRPC, "sluice-grpc", "", "Sluice gRPC HOST:PORT (empty: no Sluice gRPC rows)")
	fs.StringVar(&cfg.Model, "model", "parcel_eta", "model name with dynamic batching off")
	fs.StringVar(&cfg.BatchedModel, "batched-model", "parcel_eta_batched", "model name with dynamic batching on (empty: no batching rows)")
	fs.StringVar(&cfg.BatchingDesc, "batching-desc", "dynamic_batching { max_queue_delay_microseconds: 1000 }", "the batched model's setting, for the report")
	fs.StringVar(&cfg.Transports, "transports", "grpc,http-json,http-binary", "Sluice transports to measure")
	fs.StringVar(&cfg.PeerHTTP, "peer-http", "", "Flask peer HOST:PORT (empty: no peer row)")
	fs.StringVar(&cfg.PeerDesc, "peer-desc", "Flask + gunicorn + PyTorch", "how the peer is described in the report")
	fs.StringVar(&cfg.StartupRepo, "model-repository", "examples/models", "model repository for the start-up measurement")
	fs.IntVar(&cfg.StartupRuns, "startup-runs", 5, "start-up measurements (0: skip)")
	fs.DurationVar(&cfg.StartupLimit, "startup-limit", 30*time.Second, "give up on one start-up after this long")
	fs.StringVar(&cfg.Out, "out", "", "write the markdown report here as well as to stdout")
	fs.StringVar(&cfg.Command, "command", "", "the command line to record in the report (default: this program's)")
	fs.IntVar(&cfg.SluicePID, "sluice-pid", 0, "pid of the Sluice server, for its CPU per inference (0: not measured)")
	fs.StringVar(&cfg.PeerModel, "peer-model", "", "model name the peer serves (default: -model)")
	fs.IntVar(&cfg.PeerPID, "peer-pid", 0, "pid of the peer's root process (gunicorn's master; its workers are counted with it)")
	fs.StringVar(&cfg.TrivialHTTP, "trivial-http", "", "HOST:PORT of a trivial Go net/http server, measured at the fixed rates (empty: no row)")
	fs.IntVar(&cfg.TrivialPID, "trivial-pid", 0, "pid of the trivial server")
	fs.StringVar(&cfg.ShippedModel, "shipped-model", "", "parcel_eta as shipped in examples/ (its own dynamic batching settings); empty: no such rows")
	fs.StringVar(&cfg.Rates, "rates", "", "fixed request rates (open loop) for Sluice, the peer and the trivial server, e.g. 1000")
	fs.IntVar(&cfg.ColdCacheMiB, "cold-cache-mib", 8, "MiB of memory the raw ONNX Runtime cold-cache row touches between calls (0: no such row)")
	fs.StringVar(&cfg.RankerModel, "ranker-model", "", "the compute-bound model with dynamic batching (empty: no such rows)")
	fs.StringVar(&cfg.RankerUnbatched, "ranker-unbatched", "", "the compute-bound model without dynamic batching")
	fs.StringVar(&cfg.RankerLevels, "ranker-levels", "1,8,32", "concurrency levels of the compute-bound rows")
	fs.StringVar(&cfg.RankerRequest, "ranker-request", "examples/requests/route_ranker.json", "request file of the compute-bound rows")
	fs.StringVar(&cfg.RankerONNX, "ranker-onnx", "examples/models/route_ranker/1/model.onnx", "ONNX file of the compute-bound raw rows")
	fs.StringVar(&cfg.RankerBatches, "ranker-batches", "1,4,8,16,32,64", "batch sizes of the compute-bound raw rows")
	_ = fs.Parse(os.Args[1:])
	if cfg.Command == "" {
		cfg.Command = strings.Join(os.Args, " ")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg, logger)
	stop()
	if err != nil {
		logger.Error("modelbench failed", "err", err)
		os.Exit(1)
	}
}

// report is everything the markdown needs.
type report struct {
	Cfg       config
	Started   time.Time
	Finished  time.Time
	Machine   machine.Info
	LoadStart string
	LoadEnd   string
	ORT       []ortResult
	// ORTCold is raw ONNX Runtime at batch 1 with other memory touched
	// between calls, as a server's other work does; nil when not measured.
	ORTCold   *ortResult
	RankerORT []ortResult // the compute-bound model's raw rows
	Rows      []perfRow
	Startup   []time.Duration
	StartErrs []string
	Notes     []string
}

func run(ctx context.Context, cfg config, logger *slog.Logger) error {
	rep := &report{Cfg: cfg, Started: time.Now().UTC(), Machine: machine.Read(ctx), LoadStart: machine.LoadAvg()}

	// Start-up first, while the machine is not yet hot from load.
	for i := range cfg.StartupRuns {
		d, err := measureStartup(ctx, cfg.SluiceBin, []string{cfg.StartupRepo}, cfg.StartupLimit)
		if err != nil {
			logger.Warn("start-up run failed", "run", i+1, "err", err)
			rep.StartErrs = append(rep.StartErrs, err.Error())
			continue
		}
		logger.Info("start-up", "run", i+1, "ready_after", d)
		rep.Startup = append(rep.Startup, d)
	}

	if !cfg.SkipORT && ctx.Err() == nil {
		batches, err := parseInts(cfg.ORTBatches)
		if err != nil {
			return fmt.Errorf("parse -ort-batches: %w", err)
		}
		res, err := measureORT(ctx, cfg, batches, logger)
		if err != nil {
			rep.Notes = append(rep.Notes, "Raw ONNX Runtime rows left out: "+err.Error())
		}
		rep.ORT, rep.ORTCold, rep.RankerORT = res.main, res.cold, res.ranker
	}

	for _, spec := range rowSpecs(cfg) {
		if ctx.Err() != nil {
			break
		}
		logger.Info("measuring with sluice perf", "row", spec.label())
		row := runPerf(ctx, cfg, spec)
		if row.Err != "" {
			logger.Warn("sluice perf failed", "row", spec.label(), "err", row.Err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.Finished = time.Now().UTC()
	rep.LoadEnd = machine.LoadAvg()
	if ctx.Err() != nil {
		rep.Notes = append(rep.Notes, "The run was interrupted; some rows are missing or short.")
	}

	md := renderMarkdown(rep)
	fmt.Print(md)
	if cfg.Out != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o750); err != nil {
			return fmt.Errorf("create results folder: %w", err)
		}
		if err := os.WriteFile(cfg.Out, []byte(md), 0o600); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		logger.Info("report written", "path", cfg.Out)
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive whole number", p)
		}
		out = append(out, n)
	}
	return out, nil
}
