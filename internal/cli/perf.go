package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/perf"
)

// perfFlags are `sluice perf`'s flags; names follow perf_analyzer's.
type perfFlags struct {
	model, version, url, protocol    string
	concurrency, rate, distribution  string
	batch                            int
	inputData                        string
	shapes                           []string
	binary                           bool
	mode                             string
	intervalMs, requestCount, trials int
	stability                        float64
	percentile, maxInFlight          int
	timeout                          time.Duration
	csvFile                          string
	verboseCSV                       bool
	service, serviceBody             string
	headers                          []string
	seed                             uint64
	serverPIDs                       []int
}

func newPerfCmd() *cobra.Command {
	f := &perfFlags{}
	cmd := &cobra.Command{
		Use:   "perf -m MODEL",
		Short: "Measure a KServe v2 server's throughput and latency (perf_analyzer-style load generator)",
		Long: `perf drives any KServe v2 server (Sluice, Triton, or a peer) with inference
requests and reports throughput, client latency percentiles and the server-side
split (queue, compute) from the statistics extension.

Closed loop:  --concurrency-range START:END:STEP   (N requests always outstanding)
Open loop:    --request-rate-range START:END:STEP  (arrivals on a schedule, latency
              counted from each arrival's scheduled time)

At each level, windows are measured until 3 consecutive windows agree within
--stability-percentage in throughput and latency (or --max-trials is reached:
the level is reported as unstable). A progress line per window goes to stderr,
the summary table to stdout, and -f writes CSV.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPerf(cmd.Context(), cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.model, "model-name", "m", "", "model to measure (required)")
	fl.StringVarP(&f.version, "model-version", "x", "", "model version (default: the server's choice)")
	fl.StringVarP(&f.url, "url", "u", "", "server HOST:PORT (default localhost:8000 for http, localhost:8001 for grpc)")
	fl.StringVarP(&f.protocol, "protocol", "i", perf.ProtocolHTTP, "protocol: http or grpc")
	fl.StringVar(&f.concurrency, "concurrency-range", "", "closed-loop levels START:END:STEP, or a list 1,8,32 (default 1)")
	fl.StringVar(&f.rate, "request-rate-range", "", "open-loop request rates START:END:STEP (requests/s), or a list")
	fl.StringVar(&f.distribution, "request-distribution", string(perf.Constant), "open-loop arrivals: constant or poisson")
	fl.IntVarP(&f.batch, "batch-size", "b", 1, "batch size of each request")
	fl.StringVar(&f.inputData, "input-data", perf.InputRandom, "input values: random, zero, or a KServe v2 JSON request file (tiled to the batch size)")
	fl.StringArrayVar(&f.shapes, "shape", nil, "shape of a variable-size input as NAME:D1,D2,... (without the batch dim); may repeat")
	fl.BoolVar(&f.binary, "binary", false, "HTTP: send and receive tensors with the binary-tensor extension instead of JSON")
	fl.StringVar(&f.mode, "measurement-mode", perf.TimeWindows, "window kind: time_windows or count_windows")
	fl.IntVarP(&f.intervalMs, "measurement-interval", "p", 5000, "time window length in milliseconds")
	fl.IntVar(&f.requestCount, "measurement-request-count", 50, "requests per window in count_windows mode")
	fl.Float64VarP(&f.stability, "stability-percentage", "s", 10, "allowed spread (%) across 3 windows for a stable level")
	fl.IntVarP(&f.trials, "max-trials", "r", 10, "most windows per level before it is reported unstable")
	fl.IntVar(&f.percentile, "percentile", 0, "latency percentile the stability rule watches (default: average latency)")
	fl.DurationVar(&f.timeout, "request-timeout", 30*time.Second, "timeout of each request")
	fl.IntVar(&f.maxInFlight, "max-in-flight", 256, "open loop: most requests outstanding at once")
	fl.StringVarP(&f.csvFile, "filename", "f", "", "write the results as CSV to this file, in perf_analyzer's columns")
	fl.BoolVar(&f.verboseCSV, "verbose-csv", false, "with -f: add Sluice's columns after perf_analyzer's (avg latency, batch, server overhead and avg batch, requests, errors, stable, CPU per inference)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed for random inputs and Poisson arrivals")
	fl.StringVar(&f.service, "service", "", "measure a gateway service instead of a model: POST /v1/services/NAME:predict on -u (the gateway's address)")
	fl.StringVar(&f.serviceBody, "service-body", "", "with --service: a JSON request body; each {{rand LO HI}} in it is a random integer drawn per request")
	fl.StringArrayVarP(&f.headers, "header", "H", nil, "with --service: an HTTP header 'Name: value' on every request (e.g. 'Authorization: Bearer KEY'); may repeat")
	fl.IntSliceVar(&f.serverPIDs, "server-pid", nil, "a local server process (with its child processes) whose CPU time per inference to report, from /proc; may repeat")
	return cmd
}

// options are perf's options from the flags; a bad flag is exit code 2.
func (f *perfFlags) options(cmd *cobra.Command) (perf.Options, error) {
	if f.model == "" && f.service == "" {
		return perf.Options{}, &exitError{code: 2, err: errors.New("perf: -m MODEL (or --service NAME for a gateway service) is required")}
	}
	opts := perf.Options{
		Model: f.model, Version: f.version, URL: f.url, Protocol: f.protocol,
		Distribution: perf.Distribution(f.distribution), Batch: f.batch, InputData: f.inputData,
		Binary: f.binary, MeasurementMode: f.mode,
		MeasurementInterval:     time.Duration(f.intervalMs) * time.Millisecond,
		MeasurementRequestCount: f.requestCount, StabilityPercentage: f.stability, MaxTrials: f.trials,
		Percentile: f.percentile, RequestTimeout: f.timeout, MaxInFlight: f.maxInFlight, Seed: f.seed,
		ServerPIDs: f.serverPIDs, Service: f.service,
		Progress: cmd.ErrOrStderr(),
		Logger:   slog.New(slog.DiscardHandler),
	}
	if f.intervalMs <= 0 || f.batch <= 0 || f.requestCount <= 0 || f.trials <= 0 || f.maxInFlight <= 0 || f.stability <= 0 {
		return perf.Options{}, &exitError{code: 2, err: errors.New("perf: measurement interval, batch size, request count, max trials, max in-flight and stability percentage must be positive")}
	}
	if f.service != "" {
		body, err := os.ReadFile(f.serviceBody)
		if f.serviceBody == "" {
			err = errors.New("--service needs --service-body FILE: the JSON request, with {{rand LO HI}} for random ids")
		}
		if err != nil {
			return perf.Options{}, &exitError{code: 2, err: fmt.Errorf("perf: %w", err)}
		}
		opts.ServiceBody = body
	}
	if err := f.workload(&opts); err != nil {
		return perf.Options{}, err
	}
	return opts, nil
}

// workload adds the headers, load levels and input shapes to opts.
func (f *perfFlags) workload(opts *perf.Options) error {
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return &exitError{code: 2, err: fmt.Errorf("perf: -H %q: want 'Name: value'", h)}
		}
		if opts.Header == nil {
			opts.Header = http.Header{}
		}
		opts.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if f.concurrency != "" {
		levels, err := perf.ParseRange(f.concurrency, true)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("perf: --concurrency-range: %w", err)}
		}
		for _, l := range levels {
			opts.Concurrency = append(opts.Concurrency, int(l))
		}
	}
	if f.rate != "" {
		levels, err := perf.ParseRange(f.rate, false)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("perf: --request-rate-range: %w", err)}
		}
		opts.RequestRate = levels
	}
	if len(f.shapes) > 0 {
		opts.Shapes = map[string]infer.Shape{}
		for _, s := range f.shapes {
			name, dims, err := perf.ParseShape(s)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("perf: --shape: %w", err)}
			}
			opts.Shapes[name] = dims
		}
	}
	return nil
}

func runPerf(ctx context.Context, cmd *cobra.Command, f *perfFlags) error {
	opts, err := f.options(cmd)
	if err != nil {
		return err
	}
	results, runErr := perf.Run(ctx, opts)
	if len(results) > 0 {
		if err := perf.WriteSummary(cmd.OutOrStdout(), results); err != nil {
			return err
		}
	}
	if f.csvFile != "" && (len(results) > 0 || runErr == nil) {
		if err := writePerfCSV(f.csvFile, results, f.verboseCSV); err != nil {
			return err
		}
	}
	if runErr != nil {
		if ctx.Err() != nil {
			return &exitError{code: 130, err: fmt.Errorf("perf: interrupted after %d level(s)", len(results))}
		}
		return fmt.Errorf("perf: %w", runErr)
	}
	return nil
}

func writePerfCSV(path string, results []perf.Result, verbose bool) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create CSV file: %w", err)
	}
	if err := perf.WriteCSV(out, results, verbose); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("close CSV file: %w", err)
	}
	return nil
}
