// Command torchbench is the PyTorch benchmark of issue 14. In one run, on
// one machine, it drives parcel ETA served by Sluice as a TorchScript model
// and as state_dict + model.py (each with dynamic batching off and on), as
// the ONNX model, and by the Flask + gunicorn + PyTorch peer, all with
// `sluice perf` over HTTP JSON, at several concurrencies and at fixed
// offered rates. Server CPU per inference comes from /proc: the Sluice
// process and its Python workers, gunicorn's master and its workers. It
// writes a markdown report with the two targets of issue 14 marked met or
// not met. bench/torch.sh starts the servers and calls this program.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-ml/sluice/bench/internal/machine"
)

type config struct {
	SluiceBin   string
	SluiceHTTP  string
	SluicePID   int
	PeerHTTP    string
	PeerPID     int
	PeerModel   string
	Window      time.Duration
	Trials      int
	Levels      []int
	Rates       []float64
	RequestFile string
	PerfTimeout time.Duration
	ProcRoot    string
	Setup       string
	Versions    string
	Command     string
	Out         string
}

func main() {
	var cfg config
	var levels, rates string
	fs := flag.NewFlagSet("torchbench", flag.ExitOnError)
	fs.StringVar(&cfg.SluiceBin, "sluice-bin", "bin/sluice", "the sluice binary (sluice perf is the load generator)")
	fs.StringVar(&cfg.SluiceHTTP, "sluice-http", "", "Sluice HTTP HOST:PORT")
	fs.IntVar(&cfg.SluicePID, "sluice-pid", 0, "Sluice's pid (its Python workers are its children)")
	fs.StringVar(&cfg.PeerHTTP, "peer-http", "", "Flask peer HOST:PORT")
	fs.IntVar(&cfg.PeerPID, "peer-pid", 0, "gunicorn master's pid (its workers are its children)")
	fs.StringVar(&cfg.PeerModel, "peer-model", "parcel_eta", "the model name the peer serves")
	fs.DurationVar(&cfg.Window, "window", 2*time.Second, "sluice perf measurement window")
	fs.IntVar(&cfg.Trials, "max-trials", 4, "sluice perf windows per level at most")
	fs.StringVar(&levels, "concurrency", "1,8,32", "closed-loop concurrency levels")
	fs.StringVar(&rates, "rates", "200", "fixed offered rates in requests/s (open loop); empty for none")
	fs.StringVar(&cfg.RequestFile, "request", "examples/requests/parcel_eta.json", "KServe v2 JSON request every request repeats")
	fs.DurationVar(&cfg.PerfTimeout, "perf-timeout", time.Minute, "kill one sluice perf run after this long")
	fs.StringVar(&cfg.ProcRoot, "proc", "/proc", "procfs root")
	fs.StringVar(&cfg.Setup, "setup", "", "how the servers were configured, for the report")
	fs.StringVar(&cfg.Versions, "versions", "", "torch and Python versions, for the report")
	fs.StringVar(&cfg.Command, "command", "", "the command line to record (default: this program's)")
	fs.StringVar(&cfg.Out, "out", "", "write the markdown report here as well as to stdout")
	_ = fs.Parse(os.Args[1:])
	if cfg.Command == "" {
		cfg.Command = strings.Join(os.Args, " ")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var err error
	if cfg.Levels, err = parseInts(levels); err == nil {
		cfg.Rates, err = parseFloats(rates)
	}
	if err == nil && (cfg.SluiceHTTP == "" || cfg.SluicePID <= 0 || cfg.PeerHTTP == "" || cfg.PeerPID <= 0) {
		err = fmt.Errorf("need -sluice-http, -sluice-pid, -peer-http and -peer-pid")
	}
	if err != nil {
		logger.Error("torchbench: bad flags", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, logger)
	stop()
	if err != nil {
		logger.Error("torchbench failed", "err", err)
		os.Exit(1)
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("parse level %q: want a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("parse rate %q: want a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// rowSpecs lists the rows in report order. The model names are the ones
// bench/torch.sh gives its temporary repository.
func rowSpecs(cfg config) []rowSpec {
	s := func(label, format, batching, model string) rowSpec {
		return rowSpec{Label: label, Format: format, Batching: batching, Model: model, URL: cfg.SluiceHTTP, PID: cfg.SluicePID}
	}
	return []rowSpec{
		s("Sluice, TorchScript in-process (libtorch), batching off", "TorchScript", "off", "parcel_eta_ts"),
		s("Sluice, TorchScript in-process (libtorch), batching on", "TorchScript", "on", "parcel_eta_ts_batched"),
		s("Sluice, TorchScript via Python worker, batching off", "TorchScript", "off", "parcel_eta_ts_worker"),
		s("Sluice, TorchScript via Python worker, batching on", "TorchScript", "on", "parcel_eta_ts_worker_batched"),
		s("Sluice, state_dict + model.py, batching off", "state_dict", "off", "parcel_eta_torch"),
		s("Sluice, state_dict + model.py, batching on", "state_dict", "on", "parcel_eta_torch_batched"),
		s("Sluice, ONNX (parcel_eta as shipped)", "ONNX", "on", "parcel_eta"),
		{Label: "Flask + gunicorn + PyTorch (peer)", Format: "peer", Batching: "n/a", Model: cfg.PeerModel, URL: cfg.PeerHTTP, PID: cfg.PeerPID, IsPeer: true},
	}
}

// measured is a row with its results, concurrency levels first, then rates.
type measured struct {
	rowSpec
	Results []result
}

func (m *measured) at(l load) (result, bool) {
	for _, r := range m.Results {
		if r.Load == l && r.Err == "" {
			return r, true
		}
	}
	return result{}, false
}

func run(ctx context.Context, cfg config, logger *slog.Logger) error {
	rep := &report{Cfg: cfg, Started: time.Now().UTC(), Machine: machine.Read(ctx), LoadStart: machine.LoadAvg()}
	var loads []load
	for _, c := range cfg.Levels {
		loads = append(loads, load{Concurrency: c})
	}
	for _, r := range cfg.Rates {
		loads = append(loads, load{Rate: r})
	}
	// Levels outside, systems inside: a slow drift of the machine's load
	// (other work on it) hits every system at a level about equally.
	specs := rowSpecs(cfg)
	rows := make([]measured, len(specs))
	for i, s := range specs {
		rows[i].rowSpec = s
	}
	for _, l := range loads {
		for i := range rows {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("run benchmark: %w", err)
			}
			logger.Info("measuring", "row", rows[i].Label, "load", l.String())
			res := runLevel(ctx, cfg, rows[i].rowSpec, l)
			if res.Err != "" {
				logger.Warn("level failed", "row", rows[i].Label, "load", l.String(), "err", res.Err)
			}
			rows[i].Results = append(rows[i].Results, res)
		}
	}
	rep.Rows = rows
	rep.Finished = time.Now().UTC()
	rep.LoadEnd = machine.LoadAvg()
	md := rep.markdown()
	fmt.Print(md)
	if cfg.Out != "" {
		if err := os.WriteFile(cfg.Out, []byte(md), 0o644); err != nil { //nolint:gosec // a report, world-readable by design
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}
