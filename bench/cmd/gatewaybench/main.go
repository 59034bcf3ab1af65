// Command gatewaybench measures the Sluice gateway in one run, on one
// machine, next to its peers, and writes bench/results/gateway.md:
//
//   - the proxy hop: the same KServe v2 infer request (examples/requests,
//     parcel_eta) at a fixed rate, open loop, sent directly to a
//     `sluice model-server`, through HAProxy with bench/peers/haproxy.cfg,
//     and through the Sluice gateway's KServe v2 passthrough (API-key auth,
//     rate limit, route); the latency each proxy adds over direct calls, and
//     each process's CPU time per request;
//   - the full chain: `sluice serve -c` with the model server, the feature
//     server on a Redis online store and the gateway's parcel-eta service,
//     driven through POST /v1/services/parcel-eta:predict at rising rates.
//
// The load generator is its own: open loop (request i is sent at
// start + i/rate whatever earlier requests are doing), latency counted
// from the scheduled send time. Every process it starts is stopped by pid;
// the Redis keys it writes live under a random project prefix and are
// deleted (SCAN + UNLINK) at the end. bench/run.sh calls it; see
// bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	SluiceBin    string
	HAProxy      string
	PeersDir     string
	RedisAddr    string
	Model        string
	Request      string
	Seconds      float64
	Rounds       int
	HopRates     string
	ChainRates   string
	ChainSeconds float64
	Warmup       time.Duration
	WarmupRate   float64
	Timeout      time.Duration
	MaxInFlight  int
	Users        int
	Packages     int
	Routes       int
	Days         int
	QuietCPUs    float64
	QuietWait    time.Duration
	QuietBudget  time.Duration
	ProfileDir   string
	Parts        string
	Out          string
	Command      string
}

func main() {
	var c config
	fs := flag.NewFlagSet("gatewaybench", flag.ExitOnError)
	fs.StringVar(&c.SluiceBin, "sluice-bin", "", "sluice binary (default: go build ./cmd/sluice into a temporary folder)")
	fs.StringVar(&c.HAProxy, "haproxy", "haproxy", "HAProxy binary ('' leaves the HAProxy rows out)")
	fs.StringVar(&c.PeersDir, "peers", "bench/peers", "folder holding haproxy.cfg")
	fs.StringVar(&c.RedisAddr, "redis", envOr("SLUICE_REDIS_ADDR", "127.0.0.1:6379"), "Redis for the full chain's online store ('' leaves the full chain out)")
	fs.StringVar(&c.Model, "model", "parcel_eta", "model of the hop comparison (a folder of examples/models)")
	fs.StringVar(&c.Request, "request", "examples/requests/parcel_eta.json", "KServe v2 JSON body of every hop request")
	fs.Float64Var(&c.Seconds, "seconds", 10, "measured seconds per target and rate in the hop comparison (split over -rounds)")
	fs.IntVar(&c.Rounds, "rounds", 5, "hop comparison rounds; each runs every target once, in a rotated order")
	fs.StringVar(&c.HopRates, "hop-rates", "1000,2000", "requests/s of the hop comparison")
	fs.StringVar(&c.ChainRates, "chain-rates", "500,1000,2000,3000,4000", "requests/s of the full chain, rising")
	fs.Float64Var(&c.ChainSeconds, "chain-seconds", 6, "measured seconds per full-chain rate")
	fs.DurationVar(&c.Warmup, "warmup", 2*time.Second, "warm-up before every measured phase")
	fs.Float64Var(&c.WarmupRate, "warmup-rate", 500, "requests/s of the warm-up")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "per-request timeout")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", 2048, "outstanding requests at most; beyond, sends wait (and count as late)")
	fs.IntVar(&c.Users, "users", 10_000, "users of the full chain's generated data")
	fs.IntVar(&c.Packages, "packages", 20_000, "packages of the full chain's generated data")
	fs.IntVar(&c.Routes, "routes", 20_000, "routes of the full chain's generated data")
	fs.IntVar(&c.Days, "days", 30, "days of history of the full chain's generated data")
	fs.Float64Var(&c.QuietCPUs, "quiet-cpus", 0.25, "before each phase, wait until the machine's busy CPUs drop to this (0: do not wait)")
	fs.DurationVar(&c.QuietWait, "quiet-wait", 20*time.Second, "longest wait for a quiet machine before a phase, which then starts anyway")
	fs.DurationVar(&c.QuietBudget, "quiet-budget", 2*time.Minute, "longest wait for a quiet machine over the whole run")
	fs.StringVar(&c.ProfileDir, "profile-dir", "", "save CPU profiles of the gateway process (its admin /debug/pprof/profile) taken during the first round of each hop rate and each full-chain rate here ('': none)")
	fs.StringVar(&c.Parts, "parts", "hop,chain", "what to measure: hop, chain or both")
	fs.StringVar(&c.Out, "out", "bench/results/gateway.md", "report file ('-': stdout only)")
	fs.StringVar(&c.Command, "command", "", "the command line to record in the report (default: this program's)")
	_ = fs.Parse(os.Args[1:])
	if c.Command == "" {
		c.Command = strings.Join(append([]string{"go run ./bench/cmd/gatewaybench"}, os.Args[1:]...), " ")
	}
	// The load generator allocates per request on a small heap; the default
	// GOGC would collect every few milliseconds at 2,000 requests/s, and
	// each collection delays sends and answers it is timing.
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gatewaybench: "+format+"\n", args...)
}

// report is everything the markdown needs.
type report struct {
	Cfg       config
	Started   time.Time
	Finished  time.Time
	LoadStart string
	LoadEnd   string
	Machine   string
	Hop       *hopResult
	Chain     *chainResult
	Gate      *quietGate
	Notes     []string
}

func run(ctx context.Context, c config) error {
	hopRates, err := parseRates(c.HopRates)
	if err != nil {
		return fmt.Errorf("-hop-rates: %w", err)
	}
	chainRates, err := parseRates(c.ChainRates)
	if err != nil {
		return fmt.Errorf("-chain-rates: %w", err)
	}
	if c.Rounds < 1 || c.Seconds <= 0 || c.ChainSeconds <= 0 {
		return fmt.Errorf("-rounds, -seconds and -chain-seconds must be positive")
	}
	dir, err := os.MkdirTemp("", "gatewaybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var ps procs
	defer ps.stopAll()

	if c.SluiceBin == "" {
		c.SluiceBin = filepath.Join(dir, "sluice")
		say("building sluice")
		//nolint:gosec // G204: a fixed go build of this repository's command
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", c.SluiceBin, "./cmd/sluice").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/sluice: %w\n%s", err, out)
		}
	}
	if abs, err := filepath.Abs(c.SluiceBin); err == nil {
		c.SluiceBin = abs
	}

	rep := &report{
		Cfg: c, Started: time.Now().UTC(), LoadStart: loadAvg(), Machine: machine(ctx),
		Gate: &quietGate{limit: c.QuietCPUs, maxWait: c.QuietWait, budget: c.QuietBudget},
	}
	parts := map[string]bool{}
	for p := range strings.SplitSeq(c.Parts, ",") {
		parts[strings.TrimSpace(p)] = true
	}
	if parts["hop"] {
		h, err := runHop(ctx, c, hopRates, dir, &ps, rep.Gate)
		if err != nil {
			say("hop comparison failed: %v", err)
			rep.Notes = append(rep.Notes, "The hop comparison failed: "+err.Error())
		}
		rep.Hop = h
		ps.stopAll()
	}
	if parts["chain"] && ctx.Err() == nil {
		if c.RedisAddr == "" {
			rep.Notes = append(rep.Notes, "The full chain was left out: no Redis (-redis '').")
		} else {
			ch, err := runChain(ctx, c, chainRates, dir, &ps, rep.Gate)
			if err != nil {
				say("full chain failed: %v", err)
				rep.Notes = append(rep.Notes, "The full chain failed: "+err.Error())
			}
			rep.Chain = ch
		}
		ps.stopAll()
	}
	if ctx.Err() != nil {
		rep.Notes = append(rep.Notes, "The run was interrupted; some rows are missing or short.")
	}
	rep.Finished = time.Now().UTC()
	rep.LoadEnd = loadAvg()

	md := scrubPaths(render(rep), dir)
	fmt.Print(md)
	if c.Out != "-" {
		if err := os.MkdirAll(filepath.Dir(c.Out), 0o750); err != nil {
			return err
		}
		//nolint:gosec // G306: the report is a Markdown file meant to be committed and read by everyone (bench/results/)
		if err := os.WriteFile(c.Out, []byte(md), 0o644); err != nil {
			return err
		}
		say("wrote %s", c.Out)
	}
	return nil
}

// scrubPaths keeps this machine's paths out of the report, which is
// committed: the temporary folder becomes $TMP and the working directory
// (the repository root) disappears.
func scrubPaths(md, tmp string) string {
	md = strings.ReplaceAll(md, tmp, "$TMP")
	if wd, err := os.Getwd(); err == nil && wd != "/" {
		md = strings.ReplaceAll(md, wd+"/", "")
	}
	return md
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for p := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive rate", p)
		}
		out = append(out, v)
	}
	return out, nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
