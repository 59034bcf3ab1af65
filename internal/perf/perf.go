package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Measurement modes (perf_analyzer's --measurement-mode).
const (
	// TimeWindows ends a window after MeasurementInterval.
	TimeWindows = "time_windows"
	// CountWindows ends a window after MeasurementRequestCount requests
	// complete (or after CountWindowLimit × MeasurementInterval).
	CountWindows = "count_windows"
)

// CountWindowLimit bounds a count window at this many measurement
// intervals, so a stalled server cannot hold a window open forever.
const CountWindowLimit = 10

// Options configure a run. Zero values take perf_analyzer's defaults where
// it has them.
type Options struct {
	Model   string
	Version string // empty: the server's choice
	// URL is HOST:PORT (an http:// prefix is accepted for HTTP).
	URL      string
	Protocol string // ProtocolHTTP (default) or ProtocolGRPC
	// Concurrency lists the closed-loop levels; RequestRate the open-loop
	// ones (requests per second). Exactly one may be set; neither means
	// concurrency 1.
	Concurrency  []int
	RequestRate  []float64
	Distribution Distribution // open loop; default Constant
	Batch        int          // default 1
	// InputData is a KServe v2 JSON request file, InputRandom (default) or
	// InputZero.
	InputData string
	// Shapes sets variable input dims (without the batch dimension).
	Shapes map[string]infer.Shape
	// Binary uses the HTTP binary-tensor extension instead of JSON.
	Binary bool

	MeasurementMode         string        // default TimeWindows
	MeasurementInterval     time.Duration // default 5 s
	MeasurementRequestCount int           // default 50
	StabilityPercentage     float64       // default 10
	MaxTrials               int           // default 10
	// Percentile is the latency percentile the stability rule watches; 0
	// watches the average (perf_analyzer's default).
	Percentile int
	// RequestTimeout bounds each request; default 30 s.
	RequestTimeout time.Duration
	// MaxInFlight caps outstanding open-loop requests; default 256.
	MaxInFlight int
	// Seed makes random inputs and Poisson arrivals repeatable; default 1.
	Seed uint64
	// ServerPIDs are the server's processes, on this machine: their CPU
	// time (every thread, and every descendant process, like gunicorn's
	// workers) over the reported windows gives Result.ServerCPU. Empty:
	// not measured.
	ServerPIDs []int

	// Service, when set, measures a gateway service instead of a model:
	// POST /v1/services/<Service>:predict on URL (HTTP only), with bodies
	// from ServiceBody, a JSON template in which each {{rand LO HI}} is a
	// random integer drawn per request. The gateway has no statistics
	// extension, so the server columns are empty.
	Service     string
	ServiceBody []byte
	// Header is added to every request to a gateway service (an API key,
	// for instance).
	Header http.Header

	// Progress receives one line per measurement window; nil discards.
	Progress io.Writer
	// Logger receives notes (e.g. missing metadata or statistics); nil
	// discards.
	Logger *slog.Logger
}

// ServerSplit is the server-side view of the stable windows, from the
// statistics extension's deltas: average time per request in each phase.
type ServerSplit struct {
	Requests      uint64 // inference requests the server completed (success count)
	Inferences    uint64 // inference_count delta (requests × batch)
	Executions    uint64 // execution_count delta (model executions, i.e. batches)
	Request       time.Duration
	Queue         time.Duration
	ComputeInput  time.Duration
	ComputeInfer  time.Duration
	ComputeOutput time.Duration
}

// Overhead is the server's request time not spent queued or computing.
func (s ServerSplit) Overhead() time.Duration {
	return max(0, s.Request-s.Queue-s.ComputeInput-s.ComputeInfer-s.ComputeOutput)
}

// AvgBatch is the average executed batch size (inferences per execution).
func (s ServerSplit) AvgBatch() float64 {
	if s.Executions == 0 {
		return 0
	}
	return float64(s.Inferences) / float64(s.Executions)
}

// Result is one load level's measurement.
type Result struct {
	Concurrency int     // closed loop; 0 for open loop
	RequestRate float64 // open loop; 0 for closed loop
	Batch       int
	// Throughput is completed inferences per second (requests × batch).
	Throughput float64
	P50        time.Duration
	P90        time.Duration
	P95        time.Duration
	P99        time.Duration
	Avg        time.Duration
	Requests   int // successful requests in the reported windows
	Errors     int // failed requests in the reported windows
	FirstError string
	Windows    int  // windows measured at this level
	Stable     bool // false: MaxTrials reached without three agreeing windows
	// Server is nil when the server has no statistics extension.
	Server *ServerSplit
	// ServerCPU is the CPU time the ServerPIDs used over the reported
	// windows (0 when not measured), ClientCPU this load generator's.
	// /proc counts in 10 ms ticks, so short windows at low rates are
	// coarse.
	ServerCPU, ClientCPU time.Duration
	// CPUMeasured says ServerCPU was measured.
	CPUMeasured bool
}

// CPUPerInference divides d by the inferences completed in the reported
// windows (successful and failed requests, times the batch size); 0 when
// none completed.
func (r Result) CPUPerInference(d time.Duration) time.Duration {
	n := (r.Requests + r.Errors) * max(r.Batch, 1)
	if n == 0 {
		return 0
	}
	return d / time.Duration(n)
}

// Run measures every load level in turn and returns one Result per level.
// When ctx is cancelled it stops at once and returns the levels finished
// so far with ctx's error.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	o, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	logger := o.Logger
	var c client
	switch o.Protocol {
	case ProtocolHTTP:
		c = newHTTPClient(o.URL, max(o.MaxInFlight, maxLevel(o.Concurrency))+8)
	case ProtocolGRPC:
		gc, err := newGRPCClient(o.URL)
		if err != nil {
			return nil, err
		}
		c = gc
	}
	defer func() { _ = c.close() }()
	if o.Service != "" {
		return runService(ctx, o, c.(*httpClient))
	}

	var file []infer.Tensor
	if o.InputData != InputRandom && o.InputData != InputZero {
		if file, err = ReadRequestFile(o.InputData); err != nil {
			return nil, err
		}
	}
	info, err := c.modelInfo(ctx, o.Model, o.Version)
	if err != nil {
		if !errors.Is(err, ErrUnsupported) {
			return nil, fmt.Errorf("get model metadata: %w", err)
		}
		logger.Warn("the server has no model metadata endpoint", "err", err)
		info = nil
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed+1)) //nolint:gosec // test data, not secrets: repeatable by design
	inputs, notes, err := resolveInputs(info, o.Batch, o.InputData, file, o.Shapes, rng)
	if err != nil {
		return nil, err
	}
	for _, n := range notes {
		logger.Warn("input data", "note", n)
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, "perf: note:", n)
		}
	}
	send, err := c.sender(o.Model, o.Version, inputs, o.Binary)
	if err != nil {
		return nil, err
	}
	if err := firstRequest(ctx, o, send); err != nil {
		return nil, err
	}
	r := &runner{o: o, c: c, send: send, statsOK: true}
	if len(o.ServerPIDs) > 0 {
		if _, err := procCPU("/proc", o.ServerPIDs); err != nil {
			return nil, fmt.Errorf("server CPU: %w", err)
		}
	}
	if _, err := c.stats(ctx, o.Model, o.Version); err != nil {
		r.statsOK = false
		logger.Warn("server-side statistics unavailable; the server split is reported as n/a", "err", err)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "perf: note: server statistics unavailable (%v); server columns are n/a\n", err)
		}
	}

	return r.levels(ctx)
}

// firstRequest sends one request before measuring: a model or input
// problem fails here, with the server's message, instead of as a window
// full of errors.
func firstRequest(ctx context.Context, o Options, send sender) error {
	pctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
	defer cancel()
	if err := send(pctx); err != nil {
		return fmt.Errorf("first inference request: %w", err)
	}
	return nil
}

// runService is Run for a gateway service: no model metadata and no
// server statistics.
func runService(ctx context.Context, o Options, c *httpClient) ([]Result, error) {
	t, err := parseBodyTemplate(o.ServiceBody)
	if err != nil {
		return nil, err
	}
	send := c.serviceSender(o.Service, t, o.Header, o.Seed)
	if err := firstRequest(ctx, o, send); err != nil {
		return nil, err
	}
	if len(o.ServerPIDs) > 0 {
		if _, err := procCPU("/proc", o.ServerPIDs); err != nil {
			return nil, fmt.Errorf("server CPU: %w", err)
		}
	}
	if o.Progress != nil {
		fmt.Fprintln(o.Progress, "perf: note: a gateway service has no statistics extension; server columns are n/a")
	}
	r := &runner{o: o, c: c, send: send}
	return r.levels(ctx)
}

// levels measures every load level in turn.
func (r *runner) levels(ctx context.Context) ([]Result, error) {
	o := r.o
	var results []Result
	if len(o.RequestRate) > 0 {
		for _, rate := range o.RequestRate {
			res, err := r.level(ctx, 0, rate)
			if err != nil {
				return results, err
			}
			results = append(results, res)
		}
		return results, nil
	}
	for _, conc := range o.Concurrency {
		res, err := r.level(ctx, conc, 0)
		if err != nil {
			return results, err
		}
		results = append(results, res)
	}
	return results, nil
}

func maxLevel(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// withDefaults validates opts and fills in defaults.
func withDefaults(o Options) (Options, error) {
	for _, step := range []func(*Options) error{checkTarget, transportDefaults, loadDefaults, measurementDefaults} {
		if err := step(&o); err != nil {
			return o, err
		}
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 256
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// checkTarget checks that o names one model or one gateway service, and
// what a service call allows.
func checkTarget(o *Options) error {
	if o.Service == "" {
		if o.Model == "" {
			return errors.New("a model name is required (-m), or a gateway service (--service)")
		}
		return nil
	}
	switch {
	case o.Model != "":
		return errors.New("give a model (-m) or a gateway service (--service), not both")
	case o.Protocol == ProtocolGRPC:
		return errors.New("a gateway service is measured over HTTP (-i http)")
	case o.Binary:
		return errors.New("--binary applies to models; a gateway service takes a JSON body")
	case o.Batch > 1:
		return errors.New("a gateway service call is one prediction: batch size 1")
	case len(o.ServiceBody) == 0:
		return errors.New("a gateway service needs a request body template (--service-body)")
	}
	return nil
}

// transportDefaults fills in and checks the protocol and the URL.
func transportDefaults(o *Options) error {
	if o.Protocol == "" {
		o.Protocol = ProtocolHTTP
	}
	if o.Protocol != ProtocolHTTP && o.Protocol != ProtocolGRPC {
		return fmt.Errorf("unknown protocol %q (want http or grpc)", o.Protocol)
	}
	if o.URL == "" {
		o.URL = "localhost:8000"
		if o.Protocol == ProtocolGRPC {
			o.URL = "localhost:8001"
		}
	}
	if o.Binary && o.Protocol != ProtocolHTTP {
		return errors.New("--binary applies to HTTP only (gRPC always sends raw tensors)")
	}
	return nil
}

// loadDefaults fills in and checks the load levels, the request
// distribution, the batch size and the input data.
func loadDefaults(o *Options) error {
	if len(o.Concurrency) > 0 && len(o.RequestRate) > 0 {
		return errors.New("give either a concurrency range or a request-rate range, not both")
	}
	if len(o.Concurrency) == 0 && len(o.RequestRate) == 0 {
		o.Concurrency = []int{1}
	}
	for _, c := range o.Concurrency {
		if c <= 0 || c > 100_000 {
			return fmt.Errorf("concurrency %d is out of range (1..100000)", c)
		}
	}
	if o.Distribution == "" {
		o.Distribution = Constant
	}
	if o.Distribution != Constant && o.Distribution != Poisson {
		return fmt.Errorf("unknown request distribution %q (want constant or poisson)", o.Distribution)
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.Batch < 0 {
		return fmt.Errorf("batch size %d must be positive", o.Batch)
	}
	if o.InputData == "" {
		o.InputData = InputRandom
	}
	return nil
}

// measurementDefaults fills in and checks how windows are measured and
// when a measurement is stable.
func measurementDefaults(o *Options) error {
	if o.MeasurementMode == "" {
		o.MeasurementMode = TimeWindows
	}
	if o.MeasurementMode != TimeWindows && o.MeasurementMode != CountWindows {
		return fmt.Errorf("unknown measurement mode %q (want time_windows or count_windows)", o.MeasurementMode)
	}
	if o.MeasurementInterval == 0 {
		o.MeasurementInterval = 5 * time.Second
	}
	if o.MeasurementInterval < time.Millisecond {
		return fmt.Errorf("measurement interval %s is too short", o.MeasurementInterval)
	}
	if o.MeasurementRequestCount == 0 {
		o.MeasurementRequestCount = 50
	}
	if o.MeasurementRequestCount < 0 {
		return errors.New("measurement request count must be positive")
	}
	if o.StabilityPercentage == 0 {
		o.StabilityPercentage = 10
	}
	if o.StabilityPercentage < 0 {
		return errors.New("stability percentage must be positive")
	}
	if o.MaxTrials == 0 {
		o.MaxTrials = 10
	}
	if o.MaxTrials < StabilityWindows {
		return fmt.Errorf("max trials must be at least %d", StabilityWindows)
	}
	if o.Percentile < 0 || o.Percentile > 100 {
		return fmt.Errorf("percentile %d is out of range (1..99, or 0 for the average)", o.Percentile)
	}
	return nil
}

// runner measures load levels against one prepared request.
type runner struct {
	o       Options
	c       client
	send    sender
	statsOK bool
}

func (r *runner) call(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.RequestTimeout)
	defer cancel()
	return r.send(ctx)
}

// level drives one load level (conc > 0: closed loop; else open loop at
// rate) and measures windows until they are stable or MaxTrials is reached.
func (r *runner) level(ctx context.Context, conc int, rate float64) (Result, error) {
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	rec := &recorder{}
	var wg sync.WaitGroup
	if conc > 0 {
		for range conc {
			wg.Go(func() {
				for lctx.Err() == nil {
					t0 := time.Now()
					err := r.call(lctx)
					if lctx.Err() != nil {
						return // the level ended mid-request; not a server error
					}
					rec.add(time.Since(t0), err)
				}
			})
		}
	} else {
		sched, err := newSchedule(r.o.Distribution, rate, r.o.Seed)
		if err != nil {
			return Result{}, err
		}
		wg.Go(func() { r.dispatch(lctx, sched, rec) })
	}
	// However the level ends, stop its goroutines before returning.
	defer func() { stop(); wg.Wait() }()

	var windows []window
	var snaps []*StatsSnapshot
	snap := func() *StatsSnapshot {
		if !r.statsOK {
			return nil
		}
		s, err := r.c.stats(ctx, r.o.Model, r.o.Version)
		if err != nil {
			r.o.Logger.Warn("statistics request failed", "err", err)
			return nil
		}
		return &s
	}
	// cpu[i] is the server's and this process's CPU at the start of
	// window i (and, last, at the end of the last one).
	type cpuSnap struct {
		server, client time.Duration
		ok             bool
	}
	var cpus []cpuSnap
	cpuNow := func() cpuSnap {
		c := cpuSnap{client: selfCPU()}
		if len(r.o.ServerPIDs) > 0 {
			var err error
			c.server, err = procCPU("/proc", r.o.ServerPIDs)
			c.ok = err == nil
			if err != nil {
				r.o.Logger.Warn("server CPU unreadable", "err", err)
			}
		}
		return c
	}
	rec.take() // discard anything before the first window
	snaps = append(snaps, snap())
	cpus = append(cpus, cpuNow())
	start := time.Now()
	for trial := 1; trial <= r.o.MaxTrials; trial++ {
		if err := r.wait(ctx, rec, start); err != nil {
			return Result{}, err
		}
		end := time.Now()
		lat, errs, firstErr := rec.take()
		w := window{Elapsed: end.Sub(start), Latencies: lat, Errors: errs, FirstErr: firstErr}
		start = end
		windows = append(windows, w)
		cpus = append(cpus, cpuNow())
		snaps = append(snaps, snap())
		r.progress(conc, rate, trial, w)
		if stable(windows, r.o.Batch, r.o.StabilityPercentage, r.o.Percentile) {
			break
		}
	}
	n := min(StabilityWindows, len(windows))
	last := windows[len(windows)-n:]
	m := mergeWindows(last)
	res := Result{
		Concurrency: conc, RequestRate: rate, Batch: r.o.Batch,
		Throughput: m.throughput(r.o.Batch),
		P50:        percentile(m.Latencies, 0.50), P90: percentile(m.Latencies, 0.90),
		P95: percentile(m.Latencies, 0.95), P99: percentile(m.Latencies, 0.99),
		Avg: mean(m.Latencies), Requests: len(m.Latencies), Errors: m.Errors, FirstError: m.FirstErr,
		Windows: len(windows), Stable: stable(windows, r.o.Batch, r.o.StabilityPercentage, r.o.Percentile),
	}
	from, to := snaps[len(snaps)-1-n], snaps[len(snaps)-1]
	if from != nil && to != nil {
		res.Server = split(*from, *to)
	}
	c0, c1 := cpus[len(cpus)-1-n], cpus[len(cpus)-1]
	res.ClientCPU = c1.client - c0.client
	if c0.ok && c1.ok {
		res.ServerCPU, res.CPUMeasured = c1.server-c0.server, true
	}
	return res, nil
}

// wait blocks until the current window ends: after MeasurementInterval, or
// in count mode once MeasurementRequestCount requests have completed
// (bounded by CountWindowLimit intervals).
func (r *runner) wait(ctx context.Context, rec *recorder, start time.Time) error {
	if r.o.MeasurementMode == TimeWindows {
		t := time.NewTimer(time.Until(start.Add(r.o.MeasurementInterval)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	deadline := start.Add(CountWindowLimit * r.o.MeasurementInterval)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for rec.count() < r.o.MeasurementRequestCount && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// dispatch releases open-loop arrivals on the schedule until ctx ends;
// when it wakes late it releases every overdue arrival at once, so the
// offered rate holds. Each request's latency counts from its release, so a
// wait for a free slot (MaxInFlight) behind a slow server is charged to the
// latency rather than hidden; the generator's own timer lateness is not.
func (r *runner) dispatch(ctx context.Context, sched *schedule, rec *recorder) {
	slots := make(chan struct{}, r.o.MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	due := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for ctx.Err() == nil {
		due = due.Add(sched.next())
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		released := time.Now()
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-slots }()
			err := r.call(ctx)
			if ctx.Err() != nil {
				return
			}
			rec.add(time.Since(released), err)
		})
	}
}

func (r *runner) progress(conc int, rate float64, trial int, w window) {
	if r.o.Progress == nil {
		return
	}
	level := fmt.Sprintf("concurrency %d", conc)
	if conc == 0 {
		level = fmt.Sprintf("request rate %g/s", rate)
	}
	pct := r.o.Percentile
	if pct == 0 {
		pct = 99
	}
	fmt.Fprintf(r.o.Progress, "perf: %s, window %d/%d: %.1f infer/s, avg %s, p%d %s, errors %d\n",
		level, trial, r.o.MaxTrials, w.throughput(r.o.Batch), us(mean(w.Latencies)),
		pct, us(w.stabilizer(pct)), w.Errors)
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// split turns two statistics snapshots into per-request averages.
func split(from, to StatsSnapshot) *ServerSplit {
	per := func(a, b Duration) time.Duration {
		if b.Count <= a.Count || b.Ns < a.Ns {
			return 0
		}
		return time.Duration((b.Ns - a.Ns) / (b.Count - a.Count))
	}
	sub := func(a, b uint64) uint64 {
		if b < a {
			return 0
		}
		return b - a
	}
	return &ServerSplit{
		Requests:      sub(from.Success.Count, to.Success.Count),
		Inferences:    sub(from.InferenceCount, to.InferenceCount),
		Executions:    sub(from.ExecutionCount, to.ExecutionCount),
		Request:       per(from.Success, to.Success),
		Queue:         per(from.Queue, to.Queue),
		ComputeInput:  per(from.ComputeInput, to.ComputeInput),
		ComputeInfer:  per(from.ComputeInfer, to.ComputeInfer),
		ComputeOutput: per(from.ComputeOutput, to.ComputeOutput),
	}
}
