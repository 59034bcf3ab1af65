// Command featurebench measures online feature reads (1 and 100 entities
// × 10 and 50 features) from the embedded and Redis online stores: the
// bare store, the in-process serving API and HTTP /get-online-features,
// next to a raw go-redis pipeline fetching the same keys (the floor). It
// also measures materialization throughput. It writes a Markdown report.
//
// It builds a throw-away feature repository in a temporary directory
// (Parquet sources, two views), materializes it into a fresh embedded
// store and into Redis under a random project prefix, and deletes that
// prefix when done (never FLUSHALL).
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/materialize"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/servingapi"
	"github.com/sluice-ml/sluice/internal/perf"
)

type config struct {
	out       string
	redisAddr string
	matRows   int
	entities  int
	iters     int
	seconds   float64
	// cpuProfile, when set, receives a CPU profile of the measured calls
	// of the row profileRow ("store/path/shape"), client and server alike.
	cpuProfile, profileRow string
}

func main() {
	var c config
	flag.StringVar(&c.out, "out", "bench/results/features.md", "report file ('-' for stdout only)")
	flag.StringVar(&c.redisAddr, "redis", envOr("SLUICE_REDIS_ADDR", "127.0.0.1:6379"), "Redis address ('' to leave Redis out)")
	flag.IntVar(&c.matRows, "mat-rows", 200_000, "rows of the 10-feature view's source (materialization throughput)")
	flag.IntVar(&c.entities, "entities", 10_000, "rows (entities) of the 50-feature view's source")
	flag.IntVar(&c.iters, "iters", 5000, "measured calls per row at most")
	flag.Float64Var(&c.seconds, "seconds", 2, "measured seconds per row at most")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of one row's measured calls to this file")
	flag.StringVar(&c.profileRow, "profile-row", "embedded/HTTP/100×50", "the row -cpuprofile profiles: store/path/shape")
	flag.Parse()
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "featurebench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func say(format string, args ...any) { fmt.Fprintf(os.Stderr, "featurebench: "+format+"\n", args...) }

// writeRepo writes feature_store.yaml, the definitions and two sources.
func writeRepo(dir string, c config, now time.Time) error {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o750); err != nil {
		return err
	}
	cfg := "project: featurebench\nonline_store: {type: embedded, path: data/online.db}\noffline_store: {type: file}\n"
	if err := os.WriteFile(filepath.Join(dir, "feature_store.yaml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	var defs strings.Builder
	defs.WriteString("entities:\n  - {name: user, join_keys: [user_id], value_type: Int64}\nsources:\n")
	defs.WriteString("  - {name: s10, path: data/f10.parquet, timestamp_field: event_timestamp}\n")
	defs.WriteString("  - {name: s50, path: data/f50.parquet, timestamp_field: event_timestamp}\nfeature_views:\n")
	for _, n := range []int{10, 50} {
		fmt.Fprintf(&defs, "  - name: f%d\n    entities: [user]\n    source: s%d\n    ttl: 30d\n    schema:\n", n, n)
		for i := range n {
			fmt.Fprintf(&defs, "      - {name: x%02d, dtype: Float32}\n", i)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "features.yaml"), []byte(defs.String()), 0o600); err != nil {
		return err
	}
	for _, v := range []struct{ n, rows int }{{10, c.matRows}, {50, c.entities}} {
		if err := writeSource(filepath.Join(dir, "data", fmt.Sprintf("f%d.parquet", v.n)), v.n, v.rows, now); err != nil {
			return err
		}
	}
	return nil
}

func writeSource(path string, nfeat, rows int, now time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cols := []offline.Column{{Name: "user_id", Type: feature.Type{Kind: feature.KindInt64}}, {Name: "event_timestamp", Type: feature.Type{Kind: feature.KindUnixTimestamp}}}
	for i := range nfeat {
		cols = append(cols, offline.Column{Name: fmt.Sprintf("x%02d", i), Type: feature.Type{Kind: feature.KindFloat32}})
	}
	w, err := offline.NewWriter(f, cols)
	if err != nil {
		return err
	}
	vals := make([]feature.Value, len(cols))
	base := now.Add(-time.Hour).UnixNano()
	for r := range rows {
		vals[0] = feature.Value{I64: int64(r)}
		vals[1] = feature.Value{I64: base + int64(r)}
		for i := range nfeat {
			vals[2+i] = feature.Value{F64: float64(r%1000) + float64(i)/100}
		}
		if err := w.Write(vals); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

type fixedRepo struct{ r *registry.Repo }

func (f fixedRepo) Current() *registry.Repo { return f.r }

// row is one measured line of the report.
type row struct {
	store, path, shape string
	p50, p99, mean     time.Duration
	n                  int
	note               string
	// cpu is this process's CPU time per call (client and, in-process,
	// server alike); redisCPU the Redis server's, when its pid is known.
	cpu, redisCPU time.Duration
	hasRedisCPU   bool
}

// cpuMeter reads the CPU time of this process and of the Redis server
// around a measured loop.
type cpuMeter struct {
	redisPID int // 0: unknown
}

type cpuReading struct {
	self, redis time.Duration
	redisOK     bool
}

func (m cpuMeter) read() cpuReading {
	r := cpuReading{self: perf.SelfCPU()}
	if m.redisPID > 0 {
		d, err := perf.ProcessCPU(m.redisPID)
		r.redis, r.redisOK = d, err == nil
	}
	return r
}

func measure(c config, m cpuMeter, profile string, fn func() error) (p50, p99, mean time.Duration, n int, cpu [2]time.Duration, redisOK bool, err error) {
	for range 200 { // warm up
		if err := fn(); err != nil {
			return 0, 0, 0, 0, cpu, false, err
		}
	}
	if profile != "" {
		stop, err := startProfile(profile)
		if err != nil {
			return 0, 0, 0, 0, cpu, false, err
		}
		defer stop()
	}
	before := m.read()
	ds := make([]time.Duration, 0, c.iters)
	deadline := time.Now().Add(time.Duration(c.seconds * float64(time.Second)))
	var total time.Duration
	for len(ds) < c.iters && (len(ds) < 100 || time.Now().Before(deadline)) {
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, 0, 0, 0, cpu, false, err
		}
		d := time.Since(t0)
		ds = append(ds, d)
		total += d
	}
	after := m.read()
	calls := time.Duration(len(ds))
	cpu[0] = (after.self - before.self) / calls
	redisOK = before.redisOK && after.redisOK
	if redisOK {
		cpu[1] = (after.redis - before.redis) / calls
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[(len(ds)*99)/100], total / calls, len(ds), cpu, redisOK, nil
}

// startProfile starts a CPU profile into the file path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			say("close %s: %v", path, err)
		}
		say("wrote CPU profile %s", path)
	}, nil
}

// redisPID asks Redis for its process id (INFO server), so that its CPU
// time can be read from /proc when it runs on this machine; 0 when that
// is not possible.
func redisPID(ctx context.Context, c *goredis.Client, addr string) int {
	if host, _, err := net.SplitHostPort(addr); err != nil || !net.ParseIP(host).IsLoopback() {
		return 0 // not on this machine: its /proc entry is not ours to read
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				return 0
			}
			if _, err := perf.ProcessCPU(pid); err != nil {
				return 0 // another machine's Redis behind a loopback address (a tunnel)
			}
			return pid
		}
	}
	return 0
}

type shape struct{ ents, feats int }

func (s shape) String() string { return fmt.Sprintf("%d×%d", s.ents, s.feats) }

var shapes = []shape{{1, 10}, {1, 50}, {100, 10}, {100, 50}}

// run writes a feature repository, materializes it into each online
// store, measures reads of each shape through each path, and writes the
// report.
func run(ctx context.Context, c config) error {
	dir, err := os.MkdirTemp("", "featurebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	now := time.Now()
	say("writing sources (%d + %d rows)", c.matRows, c.entities)
	if err := writeRepo(dir, c, now); err != nil {
		return fmt.Errorf("write repository: %w", err)
	}
	repo, err := registry.Load(ctx, dir)
	if err != nil {
		return fmt.Errorf("load repository: %w", err)
	}
	b := &benchRun{ctx: ctx, c: c, repo: repo}
	defer b.close()
	if err := b.openTargets(dir); err != nil {
		return err
	}
	matRows, err := b.materialize(now.Add(-2*time.Hour), now)
	if err != nil {
		return err
	}
	if b.raw != nil {
		b.meter.redisPID = redisPID(ctx, b.raw, c.redisAddr)
	}
	for _, tg := range b.targets {
		if err := b.measureTarget(tg); err != nil {
			return err
		}
	}
	return writeReport(c, b.rows, matRows, b.rs != nil)
}

// target is an online store under test.
type target struct {
	name  string
	store online.Store
}

// benchRun is one run's stores and the rows measured so far.
type benchRun struct {
	ctx     context.Context
	c       config
	repo    *registry.Repo
	targets []target
	rs      *redis.Store    // nil without Redis
	raw     *goredis.Client // a plain client of the same Redis, for the raw pipeline rows
	prefix  string          // the run's Redis key prefix
	closers []func()        // run in reverse order by close
	meter   cpuMeter
	rows    []row
}

// close releases what openTargets opened, the last first.
func (b *benchRun) close() {
	for _, v := range slices.Backward(b.closers) {
		v()
	}
}

// openTargets opens the embedded store in dir and, when an address is
// set and Redis answers there, a Redis store under a fresh key prefix
// (deleted on close); without Redis its rows are left out.
func (b *benchRun) openTargets(dir string) error {
	emb, err := embedded.Open(filepath.Join(dir, "data", "online.db"), embedded.Options{})
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func() { _ = emb.Close() })
	b.targets = append(b.targets, target{"embedded", emb})
	if b.c.redisAddr == "" {
		return nil
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	b.prefix = "featurebench:" + hex.EncodeToString(r[:]) + ":"
	rs, err := redis.Open(b.ctx, "", redis.Options{Addrs: []string{b.c.redisAddr}, KeyPrefix: b.prefix})
	if err != nil {
		say("redis at %s: %v; Redis rows left out", b.c.redisAddr, err)
		return nil
	}
	b.rs = rs
	b.closers = append(b.closers, func() {
		if err := rs.DeletePrefix(context.Background()); err != nil {
			say("delete %s*: %v", b.prefix, err)
		}
		if err := rs.Close(); err != nil {
			say("close redis: %v", err)
		}
	})
	b.targets = append(b.targets, target{"redis", rs})
	b.raw = goredis.NewClient(&goredis.Options{Addr: b.c.redisAddr, DisableIdentity: true})
	b.closers = append(b.closers, func() { _ = b.raw.Close() })
	return nil
}

// materialize materializes the window [start, end] into every target and
// returns a row per view and target.
func (b *benchRun) materialize(start, end time.Time) ([]row, error) {
	var matRows []row
	for _, tg := range b.targets {
		m := materialize.New(b.repo, tg.store, materialize.Options{}, nil, nil)
		say("materializing into %s", tg.name)
		rep, err := m.Run(b.ctx, start, end, nil, false)
		if err != nil {
			return nil, fmt.Errorf("materialize into %s: %w", tg.name, err)
		}
		for _, v := range rep.Views {
			if v.Err != nil {
				return nil, fmt.Errorf("materialize %s into %s: %w", v.View, tg.name, v.Err)
			}
			matRows = append(matRows, row{store: tg.name, path: v.View, n: int(v.RowsRead), mean: v.Duration, note: fmt.Sprintf("%.0f", v.RowsPerSecond())})
		}
	}
	return matRows, nil
}

// add measures fn as path on store with shape s and adds its row.
func (b *benchRun) add(store, path string, s shape, fn func() error) error {
	m := b.meter
	if store != "redis" {
		m.redisPID = 0
	}
	profile := ""
	if b.c.cpuProfile != "" && b.c.profileRow == store+"/"+path+"/"+s.String() {
		profile = b.c.cpuProfile
	}
	p50, p99, mean, n, cpu, redisOK, err := measure(b.c, m, profile, fn)
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", store, path, s, err)
	}
	say("%-8s %-22s %-6s p50 %-10s p99 %s", store, path, s, p50, p99)
	b.rows = append(b.rows, row{
		store: store, path: path, shape: s.String(), p50: p50, p99: p99, mean: mean, n: n,
		cpu: cpu[0], redisCPU: cpu[1], hasRedisCPU: redisOK,
	})
	return nil
}

// measureTarget measures every shape read from tg, through a serving
// server of its own (in process and over HTTP).
func (b *benchRun) measureTarget(tg target) error {
	srv := serving.New(fixedRepo{b.repo}, tg.store, serving.Options{}, nil, nil)
	hs := httptest.NewServer(servingapi.NewHandler(srv, servingapi.HandlerOptions{}, nil, nil))
	defer hs.Close()
	for _, s := range shapes {
		if err := b.measureShape(tg, srv, hs, s); err != nil {
			return err
		}
	}
	return nil
}

// measureShape measures reads of shape s from tg: the store's Read, the
// in-process server, HTTP, and for Redis a raw go-redis pipeline.
func (b *benchRun) measureShape(tg target, srv *serving.Server, hs *httptest.Server, s shape) error {
	ctx, c := b.ctx, b.c
	keys := make([]online.Key, s.ents)
	ids := make([]feature.Value, s.ents)
	jsonIDs := make([]int64, s.ents)
	for i := range s.ents {
		id := int64((i * 97) % c.entities)
		ids[i], jsonIDs[i] = feature.Value{I64: id}, id
		ek, _ := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: id}})
		keys[i] = online.Key{View: fmt.Sprintf("f%d", s.feats), Entity: ek}
	}
	refs := make([]string, s.feats)
	for i := range refs {
		refs[i] = fmt.Sprintf("f%d:x%02d", s.feats, i)
	}
	if err := b.add(tg.name, "store.Read", s, func() error {
		res, err := tg.store.Read(ctx, keys)
		if err == nil && !res[0].Found {
			err = fmt.Errorf("key not found")
		}
		return err
	}); err != nil {
		return err
	}
	if err := b.add(tg.name, "in-process serving", s, func() error {
		_, err := srv.GetOnlineFeatures(ctx, &serving.Request{Features: refs, Entities: map[string][]feature.Value{"user_id": ids}})
		return err
	}); err != nil {
		return err
	}
	if err := b.add(tg.name, "in-process serving + Release", s, func() error {
		resp, err := srv.GetOnlineFeatures(ctx, &serving.Request{Features: refs, Entities: map[string][]feature.Value{"user_id": ids}})
		if err == nil {
			srv.Release(resp)
		}
		return err
	}); err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"features": refs, "entities": map[string]any{"user_id": jsonIDs}})
	client := hs.Client()
	if err := b.add(tg.name, "HTTP", s, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/get-online-features", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close() // drained above; nothing left to lose
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		return err
	}
	if tg.name != "redis" || b.raw == nil {
		return nil
	}
	rawKeys := make([]string, len(keys))
	for i, k := range keys {
		rawKeys[i] = b.prefix + "v:" + k.View + ":" + string(k.Entity)
	}
	return b.add("redis", "raw go-redis pipeline", s, func() error {
		pipe := b.raw.Pipeline()
		cmds := make([]*goredis.StringCmd, len(rawKeys))
		for i, k := range rawKeys {
			cmds[i] = pipe.Get(ctx, k)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// writeReport prints the report and, unless out is "-", writes it to the
// out file with the sections of the old one that are kept.
func writeReport(c config, rows, matRows []row, haveRedis bool) error {
	report := render(c, rows, matRows, haveRedis)
	if c.out != "-" {
		report += keptSections(c.out)
	}
	fmt.Print(report)
	if c.out != "-" {
		//nolint:gosec // G306: the report is a Markdown file meant to be committed and read by everyone (bench/results/), like any file an editor writes
		if err := os.WriteFile(c.out, []byte(report), 0o644); err != nil {
			return err
		}
		say("wrote %s", c.out)
	}
	return nil
}

func find(rows []row, store, path, s string) (row, bool) {
	for _, r := range rows {
		if r.store == store && r.path == path && r.shape == s {
			return r, true
		}
	}
	return row{}, false
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1e3) }

func render(c config, rows, mat []row, haveRedis bool) string {
	var b strings.Builder
	cpu := runtime.NumCPU()
	fmt.Fprintf(&b, "# Feature store benchmark\n\nGenerated by `go run ./bench/cmd/featurebench` (from `bench/run.sh`) on %s, %s/%s, %d CPUs, %s. ", time.Now().UTC().Format("2006-01-02"), runtime.GOOS, runtime.GOARCH, cpu, runtime.Version())
	fmt.Fprintf(&b, "One client, sequential calls (closed loop, concurrency 1), at most %d calls or %.1f s per row after 200 warm-up calls. Entities: int64 join key; features: Float32. Redis: %s.\n\n", c.iters, c.seconds, map[bool]string{true: c.redisAddr, false: "not available"}[haveRedis])
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "Load average when the report was written: %s (tail latencies on a busy machine measure the scheduler as much as Sluice; compare p50s across rows, and rerun on an idle machine for the targets).\n\n", strings.Join(strings.Fields(string(la))[:3], " "))
	}
	b.WriteString("`store.Read` is the bare online store; `in-process serving` adds the GetOnlineFeatures assembly (plan, freshness, decode), the answer left to the collector; `+ Release` gives each answer back (Server.Release), as the HTTP and gRPC edges do, so the next read reuses its memory; `HTTP` is POST /get-online-features on a loopback httptest server, client and server: the client's request (its JSON body encoded once, before the loop), the server's handler, and the client reading the whole answer, which it does not decode; `raw go-redis pipeline` GETs the same keys with go-redis and decodes nothing (the floor).\n\n")
	b.WriteString("CPU is µs of CPU time per call over each row's measured calls: *Sluice CPU* is this whole process (`getrusage`): the client, and for the in-process rows the store, serving and the loopback HTTP server too, all in one process; *Redis CPU* is the Redis server's, from `/proc/PID/stat` (pid from `INFO server`; 10 ms ticks), shown when Redis runs on this machine.\n\n")
	b.WriteString("## Online reads (µs)\n\n| store | path | entities×features | p50 | p99 | mean | calls | p99 / raw pipeline p99 | Sluice CPU | Redis CPU |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio := ""
		if raw, ok := find(rows, "redis", "raw go-redis pipeline", r.shape); ok && r.store == "redis" && r.path != "raw go-redis pipeline" {
			ratio = fmt.Sprintf("%.2f×", float64(r.p99)/float64(raw.p99))
		}
		redisCPU := "–"
		if r.hasRedisCPU {
			redisCPU = us(r.redisCPU)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | %s | %s | %s |\n", r.store, r.path, r.shape, us(r.p50), us(r.p99), us(r.mean), r.n, ratio, us(r.cpu), redisCPU)
	}
	b.WriteString("\n## Materialization (Parquet source → online store)\n\n| store | view | rows | seconds | rows/s |\n|---|---|---:|---:|---:|\n")
	for _, r := range mat {
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f | %s |\n", r.store, r.path, r.n, r.mean.Seconds(), r.note)
	}
	b.WriteString("\n## Targets\n\n| target | measured | verdict |\n|---|---|---|\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "not met"
	}
	if h, ok := find(rows, "redis", "HTTP", "1×50"); ok {
		fmt.Fprintf(&b, "| Redis, 1×50 over HTTP: p99 ≤ 2 ms | p99 %s µs | %s |\n", us(h.p99), verdict(h.p99 <= 2*time.Millisecond))
		if raw, ok := find(rows, "redis", "raw go-redis pipeline", "1×50"); ok {
			fmt.Fprintf(&b, "| Redis, 1×50 over HTTP: p99 ≤ 2× raw pipeline p99 | %s µs vs %s µs (%.2f×) | %s |\n", us(h.p99), us(raw.p99), float64(h.p99)/float64(raw.p99), verdict(h.p99 <= 2*raw.p99))
			fmt.Fprintf(&b, "| Redis, 1×50 over HTTP: p99 ≤ 3× raw pipeline p99 (issue 13) | %s µs vs %s µs (%.2f×) | %s |\n", us(h.p99), us(raw.p99), float64(h.p99)/float64(raw.p99), verdict(h.p99 <= 3*raw.p99))
		}
	} else {
		b.WriteString("| Redis, 1×50 over HTTP: p99 ≤ 2 ms and ≤ 2× raw pipeline p99 | not measured (no Redis) | not measured |\n")
	}
	if e, ok := find(rows, "embedded", "in-process serving", "1×50"); ok {
		fmt.Fprintf(&b, "| Embedded, in-process (serving API), 1×50: p99 ≤ 100 µs | p99 %s µs | %s |\n", us(e.p99), verdict(e.p99 <= 100*time.Microsecond))
	}
	for _, r := range mat {
		if r.store == "embedded" && r.path == "f10" {
			var rps float64
			_, _ = fmt.Sscan(r.note, &rps) // an unparsable note leaves rps at 0: the target reads as missed
			fmt.Fprintf(&b, "| Materialization into embedded ≥ 200k rows/s | %s rows/s (%d rows, 10 features) | %s |\n", r.note, r.n, verdict(rps >= 200_000))
		}
	}
	return b.String()
}
