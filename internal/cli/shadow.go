package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/kserve"
	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/release/diff"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/release/replay"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// exitGatesFailed is the exit code of `shadow diff` when a gate failed
// (1 is an error, 2 a usage error), so CI can tell a regression from a
// broken pipeline.
const exitGatesFailed = 3

// The stream and subject prefix a replay publishes to by default. They
// differ from the recordings' (record.DefaultStream), because JetStream
// streams may not share subjects and a replay keeps the recorded
// service names.
const (
	replayStream        = "SLUICE_REPLAYS"
	replaySubjectPrefix = "sluice.replays"
)

// shadowEnv is what the shadow commands take from their environment;
// tests replace it.
type shadowEnv struct {
	// isTerminal reports whether the progress bar may be drawn on w.
	isTerminal func(w io.Writer) bool
	// progressEvery is the interval between progress bar redraws.
	progressEvery time.Duration
}

func newShadowCmd() *cobra.Command {
	return newShadowCmdWith(shadowEnv{isTerminal: stderrIsTerminal, progressEvery: 200 * time.Millisecond})
}

func newShadowCmdWith(env shadowEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shadow",
		Short: "Replay recorded traffic and compare model versions",
		Long: `Work with shadow-traffic recordings (JSONL files or a NATS JetStream stream):

  sluice shadow replay   send a recording's requests to an endpoint again, recording the answers
  sluice shadow diff     compare two arms of a recording, or two recordings, and gate on the result

A recording is named by a file, a directory of rotated *.jsonl files, a glob,
or nats://HOST:PORT/STREAM[?service=NAME&prefix=SUBJECT_PREFIX]. The stream
defaults to SLUICE_RECORDINGS (prefix sluice.recordings); a stream named
SLUICE_REPLAYS defaults to the prefix sluice.replays.`,
	}
	cmd.AddCommand(newShadowReplayCmd(env), newShadowDiffCmd())
	return cmd
}

// recordingFlags select the records read from a recording.
type recordingFlags struct {
	since, until string
	service      string
	skipBad      bool
}

func (f *recordingFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.since, "since", "", "read records at or after this time (RFC 3339, a date, now or now-DURATION)")
	cmd.Flags().StringVar(&f.until, "until", "", "read records before this time")
	cmd.Flags().StringVar(&f.service, "service", "", "read only this service's records")
	cmd.Flags().BoolVar(&f.skipBad, "skip-bad", false, "skip malformed records instead of failing")
}

func (f *recordingFlags) readOptions(now time.Time) (record.ReadOptions, error) {
	ro := record.ReadOptions{Service: f.service, SkipBad: f.skipBad}
	var err error
	if f.since != "" {
		if ro.From, err = parseMaterializeTime(f.since, now); err != nil {
			return ro, fmt.Errorf("--since: %w", err)
		}
	}
	if f.until != "" {
		if ro.To, err = parseMaterializeTime(f.until, now); err != nil {
			return ro, fmt.Errorf("--until: %w", err)
		}
	}
	if !ro.From.IsZero() && !ro.To.IsZero() && !ro.From.Before(ro.To) {
		return ro, errors.New("--since must be before --until")
	}
	return ro, nil
}

// natsLocation is a parsed nats:// recording location.
type natsLocation struct {
	opts    record.NATSOptions
	service string
}

// parseNATSLocation parses nats://[user:pass@]host:port[/STREAM][?service=X&prefix=P].
// ok is false when spec is not a nats:// URL.
func parseNATSLocation(spec, defaultStream string) (loc natsLocation, ok bool, err error) {
	if !strings.HasPrefix(strings.ToLower(spec), "nats://") {
		return loc, false, nil
	}
	u, err := url.Parse(spec)
	if err != nil {
		return loc, true, fmt.Errorf("recording %q: %w", spec, err)
	}
	if u.Host == "" {
		return loc, true, fmt.Errorf("recording %q: no host", spec)
	}
	stream := strings.Trim(u.Path, "/")
	if strings.Contains(stream, "/") {
		return loc, true, fmt.Errorf("recording %q: want nats://HOST:PORT/STREAM", spec)
	}
	if stream == "" {
		stream = defaultStream
	}
	q := u.Query()
	for k := range q {
		if k != "service" && k != "prefix" {
			return loc, true, fmt.Errorf("recording %q: unknown parameter %q (want service or prefix)", spec, k)
		}
	}
	prefix := q.Get("prefix")
	if prefix == "" {
		prefix = record.DefaultSubjectPrefix
		if stream == replayStream {
			prefix = replaySubjectPrefix
		}
	}
	conn := url.URL{Scheme: "nats", User: u.User, Host: u.Host}
	return natsLocation{
		opts:    record.NATSOptions{URL: conn.String(), Stream: stream, SubjectPrefix: prefix},
		service: q.Get("service"),
	}, true, nil
}

// openRecording opens the recording named by spec: a nats:// stream, a
// JSONL file, directory or glob, or the same on object storage (s3://,
// gs://, as://, read in place). A service in the nats URL applies unless
// ro names one.
func openRecording(ctx context.Context, spec string, ro record.ReadOptions) (record.Source, error) {
	loc, isNATS, err := parseNATSLocation(spec, record.DefaultStream)
	if err != nil {
		return nil, err
	}
	if !isNATS {
		return record.Open(ctx, spec, ro)
	}
	if ro.Service == "" {
		ro.Service = loc.service
	}
	return record.OpenStream(ctx, loc.opts, record.StreamOptions{ReadOptions: ro})
}

// openRecordingSink opens where a replay goes: a nats:// stream (default
// SLUICE_REPLAYS), or a directory of rotated JSONL files named replay-*.
func openRecordingSink(ctx context.Context, spec string, logger *slog.Logger) (record.Sink, error) {
	loc, isNATS, err := parseNATSLocation(spec, replayStream)
	if err != nil {
		return nil, err
	}
	if isNATS {
		if loc.service != "" {
			return nil, fmt.Errorf("--out %q: a service applies to reading only", spec)
		}
		return record.NewNATSSink(ctx, loc.opts, logger, nil)
	}
	if objstore.IsURI(spec) {
		return nil, fmt.Errorf("--out %s: a replay writes to a local directory or a nats:// stream; archive the directory to object storage with gateway.recording.archive or copy it", spec)
	}
	if fi, err := os.Stat(spec); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("--out %s is a file; want a directory", spec)
	}
	return record.NewFileSink(record.FileOptions{Dir: spec, Base: "replay"}, logger)
}

// sameLocation reports whether two recording locations name the same
// files or stream.
func sameLocation(a, b string) bool {
	la, na, _ := parseNATSLocation(a, record.DefaultStream)
	lb, nb, _ := parseNATSLocation(b, replayStream)
	if na || nb {
		return na && nb && la.opts.URL == lb.opts.URL && la.opts.Stream == lb.opts.Stream
	}
	if objstore.IsURI(a) || objstore.IsURI(b) {
		return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
	}
	abs := func(p string) string {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			p = filepath.Dir(p)
		}
		p, _ = filepath.Abs(p)
		return filepath.Clean(p)
	}
	return abs(a) == abs(b)
}

// parseHeaderFlags parses "Name: value" flags.
func parseHeaderFlags(vals []string) (http.Header, error) {
	h := http.Header{}
	for _, v := range vals {
		name, value, ok := strings.Cut(v, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("--header %q: want \"Name: value\"", v)
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h, nil
}

type shadowReplayFlags struct {
	recordingFlags
	from, out             string
	toGRPC, toHTTP, toSvc string
	model, version        string
	rate                  float64
	concurrency           int
	timeout               time.Duration
	headers               []string
	logLevel              string
	noProgress            bool
	env                   shadowEnv
	closeTimeout          time.Duration
}

func newShadowReplayCmd(env shadowEnv) *cobra.Command {
	f := &shadowReplayFlags{env: env, closeTimeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "replay --from RECORDING (--to-grpc ADDR | --to-http URL | --to-service URL) --out DIR|nats://...",
		Short: "Send a recording's requests to an endpoint again and record the answers",
		Long: `Replay a recording against a KServe v2 endpoint or a Sluice inference service
at a chosen rate, producing a new recording in the same order as the input.

  --to-grpc HOST:PORT   KServe v2 gRPC (sluice model-server, Triton): sends the
                        recorded model inputs to --model/--version, or to each
                        record's primary model and version
  --to-http URL         KServe v2 HTTP: POST URL/v2/models/M[/versions/V]/infer
  --to-service URL      a Sluice inference service, e.g.
                        http://gateway:8080/v1/services/parcel-eta:predict
                        ({service} in URL becomes each record's service): posts
                        the recorded request body and headers; the new
                        recording holds the service's output names

Each new record keeps the request id, time, headers, request, features and
inputs, and holds one arm, "primary", with the answer, its status and latency.
Compare it with the original with:

  sluice shadow diff --recording ORIGINAL --against REPLAY --out report/

A progress bar is drawn on stderr when it is a terminal; a summary line is
always printed. Interrupting the replay writes every record already answered.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "recording to replay (file, directory, glob or nats://HOST:PORT/STREAM)")
	fl.StringVar(&f.out, "out", "", "where the new recording goes: a directory, or nats://HOST:PORT[/STREAM] (default stream SLUICE_REPLAYS)")
	fl.StringVar(&f.toGRPC, "to-grpc", "", "KServe v2 gRPC endpoint HOST:PORT")
	fl.StringVar(&f.toHTTP, "to-http", "", "KServe v2 HTTP endpoint URL")
	fl.StringVar(&f.toSvc, "to-service", "", "Sluice inference service URL")
	fl.StringVar(&f.model, "model", "", "model to call (KServe targets; default: each record's primary model)")
	fl.StringVar(&f.version, "version", "", "model version to call (default: each record's primary version, unless --model is set)")
	fl.Float64Var(&f.rate, "rate", 100, "requests started per second (0: no limit)")
	fl.IntVar(&f.concurrency, "concurrency", replay.DefaultConcurrency, "requests in flight at most")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "timeout of one request (a request that takes longer is recorded as a 504)")
	fl.StringArrayVar(&f.headers, "header", nil, `extra HTTP header "Name: value" for --to-http and --to-service (repeatable)`)
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fl.BoolVar(&f.noProgress, "no-progress", false, "do not draw the progress bar")
	return cmd
}

// check checks the flags that need no reading: the recording, the output
// and exactly one target, and the pacing limits.
func (f *shadowReplayFlags) check() error {
	if f.from == "" || f.out == "" {
		return errors.New("shadow replay: --from and --out are required")
	}
	targets := 0
	for _, t := range []string{f.toGRPC, f.toHTTP, f.toSvc} {
		if t != "" {
			targets++
		}
	}
	if targets != 1 {
		return errors.New("shadow replay: give exactly one of --to-grpc, --to-http and --to-service")
	}
	if f.toSvc != "" && (f.model != "" || f.version != "") {
		return errors.New("shadow replay: --model and --version apply to --to-grpc and --to-http only")
	}
	if f.rate < 0 || f.concurrency < 1 || f.timeout <= 0 {
		return errors.New("shadow replay: --rate must not be negative, --concurrency and --timeout must be positive")
	}
	if sameLocation(f.from, f.out) {
		return fmt.Errorf("shadow replay: --out %s is the recording being replayed", f.out)
	}
	return nil
}

// target is the replay's target (--to-grpc, --to-http or --to-service)
// and the function that releases it.
func (f *shadowReplayFlags) target(logger *slog.Logger, header http.Header) (replay.Target, func(), error) {
	model := replay.Model{Name: f.model, Version: f.version}
	hopts := replay.HTTPOptions{Header: header}
	switch {
	case f.toGRPC != "":
		client := kserve.New(kserve.Options{}, logger)
		return replay.NewGRPCTarget(client, f.toGRPC, model), func() { _ = client.Close() }, nil
	case f.toHTTP != "":
		t, err := replay.NewHTTPTarget(f.toHTTP, model, hopts)
		return t, func() {}, err
	default:
		t, err := replay.NewServiceTarget(f.toSvc, hopts)
		return t, func() {}, err
	}
}

// run replays a recording against the target and writes what it
// answered to the output recording.
func (f *shadowReplayFlags) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	usage := func(err error) error { return &exitError{code: 2, err: err} }
	if err := f.check(); err != nil {
		return usage(err)
	}
	ro, err := f.readOptions(time.Now())
	if err != nil {
		return usage(err)
	}
	header, err := parseHeaderFlags(f.headers)
	if err != nil {
		return usage(err)
	}
	logger, err := telemetry.NewLogger(stderr, telemetry.LogOptions{Format: "text", Level: f.logLevel})
	if err != nil {
		return usage(err)
	}

	target, closeTarget, err := f.target(logger, header)
	if err != nil {
		return usage(err)
	}
	defer closeTarget()

	showBar := !f.noProgress && f.env.isTerminal(stderr)
	total := 0
	if showBar {
		// A file recording is counted first, so the bar can show how far
		// along the replay is; a stream's length shows once it is read.
		if _, isNATS, _ := parseNATSLocation(f.from, ""); !isNATS {
			if total, err = countRecords(ctx, f.from, ro); err != nil {
				return &exitError{code: 1, err: err}
			}
		}
	}
	src, err := openRecording(ctx, f.from, ro)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	defer func() { _ = src.Close() }()
	sink, err := openRecordingSink(ctx, f.out, logger)
	if err != nil {
		return &exitError{code: 1, err: err}
	}

	bar := &progressBar{w: stderr, show: showBar}
	rp, err := replay.New(target, replay.Options{
		Rate: f.rate, Concurrency: f.concurrency, Timeout: f.timeout, Total: total,
		Progress: bar.update, ProgressEvery: f.env.progressEvery,
	}, logger, nil)
	if err != nil {
		_ = sink.Close(context.WithoutCancel(ctx))
		return usage(err)
	}
	st, runErr := rp.Run(ctx, src, sink)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.closeTimeout)
	defer cancel()
	closeErr := sink.Close(closeCtx)
	fmt.Fprintln(stderr, replaySummary(st, f.out))
	if err := errors.Join(runErr, closeErr); err != nil {
		if ctx.Err() != nil && errors.Is(runErr, context.Cause(ctx)) && closeErr == nil {
			return &exitError{code: 1, err: fmt.Errorf("replay interrupted; the %d records answered before are in %s", st.Written, f.out)}
		}
		return &exitError{code: 1, err: err}
	}
	return nil
}

// countRecords counts the records a file recording yields with ro.
func countRecords(ctx context.Context, spec string, ro record.ReadOptions) (int, error) {
	src, err := openRecording(ctx, spec, ro)
	if err != nil {
		return 0, err
	}
	defer func() { _ = src.Close() }()
	n := 0
	for {
		_, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// replaySummary is the line printed when a replay ends.
func replaySummary(st replay.Stats, out string) string {
	rate := 0.0
	if s := st.Elapsed.Seconds(); s > 0 {
		rate = float64(st.Replayed) / s
	}
	line := fmt.Sprintf("replayed %s records in %s (%.1f/s), %s errors, %s written to %s",
		thousands(st.Replayed), st.Elapsed.Round(time.Millisecond), rate, thousands(st.Errors), thousands(st.Written), out)
	if st.Aborted > 0 {
		line += fmt.Sprintf(", %s not replayed (stopped)", thousands(st.Aborted))
	}
	return line
}

// progressBar draws replay progress on one terminal line.
type progressBar struct {
	w    io.Writer
	show bool
}

func (b *progressBar) update(p replay.Progress) {
	if !b.show {
		return
	}
	fmt.Fprintf(b.w, "\r%s\x1b[K", renderProgress(p, 30))
	if p.Final {
		fmt.Fprintln(b.w)
	}
}

// renderProgress formats p: a bar of width cells when the total is known,
// else a count.
func renderProgress(p replay.Progress, width int) string {
	var s strings.Builder
	if p.Total > 0 {
		frac := min(float64(p.Done)/float64(p.Total), 1)
		filled := int(frac * float64(width))
		s.WriteString("[")
		s.WriteString(strings.Repeat("=", filled))
		if filled < width {
			s.WriteString(">")
			s.WriteString(strings.Repeat(" ", width-filled-1))
		}
		fmt.Fprintf(&s, "] %s/%s %3.0f%%", thousands(p.Done), thousands(p.Total), 100*frac)
	} else {
		fmt.Fprintf(&s, "%s replayed", thousands(p.Done))
	}
	fmt.Fprintf(&s, "  %.1f/s  %s errors", p.Rate, thousands(p.Errors))
	if p.Total > 0 && p.Rate > 0 && p.Done < p.Total && !p.Final {
		eta := time.Duration(float64(p.Total-p.Done) / p.Rate * float64(time.Second))
		fmt.Fprintf(&s, "  ETA %s", eta.Round(time.Second))
	}
	return s.String()
}

// stderrIsTerminal reports whether w is a terminal (a character device).
func stderrIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// thousands formats n with thousands separators.
func thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

type shadowDiffFlags struct {
	recordingFlags
	recording, against, out string
	arms, labels            string
	slices, outputs         []string
	minEffects              []string
	json                    bool
	opts                    diff.Options
}

func newShadowDiffCmd() *cobra.Command {
	f := &shadowDiffFlags{}
	cmd := &cobra.Command{
		Use:   "diff --recording RECORDING [--against RECORDING] --out DIR",
		Short: "Compare two arms of a recording, or two recordings, and write report.html and report.json",
		Long: `Compare the primary and shadow arms of each record in --recording, or the
primary arms of two recordings joined by request id (--against, e.g. a replay),
and write DIR/report.json and DIR/report.html (self-contained, with plots).

Per output: per-request difference Δ = B − A with |Δ| > --threshold counted as
significant, a two-sample Kolmogorov–Smirnov test, histograms and CDFs. Also
latency p50/p95/p99 per side, error rates, the worst examples with their
headers and features, and every figure broken down by each --slice key, e.g.
--slice header:x-region --slice feature:route_features__distance_km@2,5,10.

The ks gate fails an output when p < --ks-alpha and the distributions are
further apart than the output's minimum effect: --min-effect OUTPUT=VALUE
(output units) or OUTPUT=VALUEsigma, else --ks-min-effect, else
--ks-min-effect-sigma (0.1) standard deviations of side A's values. A
significant shift below the minimum passes but is printed as "significant but
below the minimum effect"; --ks-report-only reports shifts above it without
failing.

Exit status: 0 when every gate passes, 3 when a gate fails (the failed gates
are printed), 1 on errors, 2 on invalid flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.recording, "recording", "", "recording to analyse (side A; both sides without --against)")
	fl.StringVar(&f.against, "against", "", "second recording, joined by request id (side B)")
	fl.StringVar(&f.out, "out", "", "directory for report.json and report.html")
	fl.StringVar(&f.arms, "arms", "", `arms compared, "A,B" (default: primary,shadow; primary,primary with --against)`)
	fl.StringVar(&f.labels, "labels", "", `names of the sides in the report, "A,B"`)
	fl.StringArrayVar(&f.slices, "slice", nil, "break the figures down by [header:|feature:|request:]NAME[@EDGE,...] (repeatable)")
	fl.StringSliceVar(&f.outputs, "outputs", nil, "outputs to compare (default: every numeric output both sides returned)")
	fl.Float64Var(&f.opts.Threshold, "threshold", diff.DefaultThreshold, "|Δ| above which a request deviates significantly")
	fl.BoolVar(&f.opts.Relative, "relative", false, "use the relative difference (B − A)/|A|")
	fl.Float64Var(&f.opts.KSAlpha, "ks-alpha", diff.DefaultKSAlpha, "KS p-value below which the ks gate fails (negative: off)")
	fl.Float64Var(&f.opts.KSMinEffect, "ks-min-effect", 0, "the ks gate's minimum effect for every output, in output units: it fails only when the distributions' percentiles are on average further apart than this (0: --ks-min-effect-sigma; negative: any difference)")
	fl.Float64Var(&f.opts.KSMinEffectSigma, "ks-min-effect-sigma", diff.DefaultKSMinEffectSigma, "the ks gate's default minimum effect, in standard deviations of side A (the stable arm) of each output")
	fl.StringArrayVar(&f.minEffects, "min-effect", nil, "one output's minimum effect: OUTPUT=VALUE (output units) or OUTPUT=VALUEsigma (standard deviations of side A); repeatable")
	fl.BoolVar(&f.opts.KSReportOnly, "ks-report-only", false, "a significant shift above the minimum effect is reported (warning) but does not fail the ks gate")
	fl.BoolVar(&f.json, "json", false, "print report.json on stdout instead of the short verdict")
	fl.IntVar(&f.opts.MinLatencySliceCount, "min-latency-slice-count", diff.DefaultMinLatencySliceCount, "requests each side of a slice needs for its p95 latency to be gated")
	fl.Float64Var(&f.opts.MaxSignificantShare, "max-significant-share", diff.DefaultMaxSignificantShare, "share of significant deviations above which the gate fails (negative: off)")
	fl.Float64Var(&f.opts.MaxP95Regression, "max-p95-regression", diff.DefaultMaxP95Regression, "relative p95 latency increase above which the gate fails (negative: off)")
	fl.Float64Var(&f.opts.MinP95IncreaseMS, "min-p95-increase-ms", 0, "p95 increase in ms the latency gate ignores")
	fl.Float64Var(&f.opts.MaxErrorRateIncrease, "max-error-rate-increase", diff.DefaultMaxErrorRateIncrease, "error-rate increase (0.01 = 1 point) above which the gate fails (negative: off)")
	fl.IntVar(&f.opts.MinSliceCount, "min-slice-count", diff.DefaultMinSliceCount, "compared requests a slice needs for its gates to count")
	fl.IntVar(&f.opts.WorstN, "worst", diff.DefaultWorstN, "worst examples listed per output")
	return cmd
}

func (f *shadowDiffFlags) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	usage := func(err error) error { return &exitError{code: 2, err: err} }
	if f.recording == "" || f.out == "" {
		return usage(errors.New("shadow diff: --recording and --out are required"))
	}
	in := diff.Input{}
	var err error
	if in.ArmA, in.ArmB, err = armPair("--arms", f.arms); err != nil {
		return usage(err)
	}
	if in.LabelA, in.LabelB, err = armPair("--labels", f.labels); err != nil {
		return usage(err)
	}
	opts := f.opts
	opts.Outputs = f.outputs
	for _, s := range f.minEffects {
		name, m, err := diff.ParseMinEffect(s)
		if err != nil {
			return usage(err)
		}
		if opts.MinEffects == nil {
			opts.MinEffects = map[string]diff.MinEffect{}
		}
		opts.MinEffects[name] = m
	}
	for _, s := range f.slices {
		k, err := diff.ParseSliceKey(s)
		if err != nil {
			return usage(err)
		}
		opts.Slices = append(opts.Slices, k)
	}
	if err := opts.Validate(); err != nil {
		return usage(err)
	}
	ro, err := f.readOptions(time.Now())
	if err != nil {
		return usage(err)
	}
	if in.A, err = openRecording(ctx, f.recording, ro); err != nil {
		return &exitError{code: 1, err: err}
	}
	defer func() { _ = in.A.Close() }()
	if f.against != "" {
		if in.B, err = openRecording(ctx, f.against, ro); err != nil {
			return &exitError{code: 1, err: err}
		}
		defer func() { _ = in.B.Close() }()
	}
	res, err := diff.Analyze(ctx, in, opts)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if err := diff.Write(f.out, res); err != nil {
		return &exitError{code: 1, err: err}
	}
	if f.json {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return &exitError{code: 1, err: err}
		}
	} else {
		printVerdict(cmd.OutOrStdout(), res, filepath.Join(f.out, diff.HTMLFile))
	}
	if !res.Passed {
		return &exitError{code: exitGatesFailed, err: fmt.Errorf("%d diff gate(s) failed", len(res.Failed))}
	}
	return nil
}

// armPair splits "a,b"; empty gives two empty strings.
func armPair(flag, v string) (a, b string, err error) {
	if v == "" {
		return "", "", nil
	}
	a, b, ok := strings.Cut(v, ",")
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if !ok || a == "" || b == "" || strings.Contains(b, ",") {
		return "", "", fmt.Errorf("%s %q: want two names, \"A,B\"", flag, v)
	}
	return a, b, nil
}

// printVerdict prints the short verdict: pass or fail, the failed gates
// with their figures, the warnings and where the report is.
func printVerdict(w io.Writer, res *diff.Result, html string) {
	c := res.Counts
	what := fmt.Sprintf("%s (%s) vs %s (%s), %s pairs compared", res.A.Label, res.A.Arm, res.B.Label, res.B.Arm, thousands(c.BothOK))
	if res.Passed {
		fmt.Fprintf(w, "PASSED: %s; all %d gates passed\n", what, len(res.Gates))
	} else {
		fmt.Fprintf(w, "FAILED: %s; %d of %d gates failed:\n", what, len(res.Failed), len(res.Gates))
		for _, g := range res.Gates {
			if !g.Passed {
				fmt.Fprintf(w, "  %s: %s\n", g.ID, g.Message)
			}
		}
	}
	for _, warn := range res.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	fmt.Fprintf(w, "report: %s\n", html)
}
