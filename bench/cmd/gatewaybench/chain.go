package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

// chainRow is the full chain at one offered rate.
type chainRow struct {
	Rate float64
	Res  loadResult
	CPU  map[string]time.Duration
	Wall time.Duration
}

func (r *chainRow) cpuPerReq(name string) float64 {
	d, ok := r.CPU[name]
	if !ok || r.Res.Sent == 0 {
		return -1
	}
	return float64(d.Microseconds()) / float64(r.Res.Sent)
}

// chainResult is the full-chain sweep.
type chainResult struct {
	Rows      []chainRow
	Project   string
	Prefix    string
	GenCmd    string
	GenTime   time.Duration
	MatCmd    string
	MatTime   time.Duration
	Keys      int
	ServeCmd  string
	Entities  map[string]int // join key → ids picked (features present)
	Generated map[string]int // join key → ids generated
	Stopped   string
	Cleanup   string
	Notes     []string
}

// redisPrefix is where the online store keeps a project's keys.
func redisPrefix(project string) string { return "sluice:" + project + ":" }

// countKeys counts the keys matching prefix* with SCAN.
func countKeys(ctx context.Context, rc *goredis.Client, prefix string) (int, error) {
	n := 0
	iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	return n, iter.Err()
}

// deleteKeys removes the keys matching prefix* with SCAN + UNLINK and
// returns how many it removed.
func deleteKeys(ctx context.Context, rc *goredis.Client, prefix string) (int, error) {
	n := 0
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := rc.Unlink(ctx, batch...).Err()
		n += len(batch)
		batch = batch[:0]
		return err
	}
	iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// redisPID returns the Redis server's pid from INFO server, or 0.
func redisPID(ctx context.Context, rc *goredis.Client) int {
	info, err := rc.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			if _, err := procCPU(pid); err != nil {
				return 0 // another machine or namespace
			}
			return pid
		}
	}
	return 0
}

// writeFeatureRepo copies the example's feature definitions into frepo,
// with a feature_store.yaml of its own: project (so Redis keys live under
// sluice:<project>:) and a Redis online store at addr.
func writeFeatureRepo(frepo, project, addr string) error {
	src := filepath.Join("examples", "parcel-eta", "features")
	if err := os.MkdirAll(filepath.Join(frepo, "data"), 0o750); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") || e.Name() == "feature_store.yaml" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		//nolint:gosec // G703: e.Name() comes from listing the example's own folder
		if err := os.WriteFile(filepath.Join(frepo, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	fs := fmt.Sprintf(`# gatewaybench: the parcel-eta example's repository on Redis, under a project of its own.
project: %s
registry: data/registry.json
provider: local
online_store:
  type: redis
  redis_type: standalone
  addrs: ["%s"]
offline_store:
  type: file
`, project, addr)
	return os.WriteFile(filepath.Join(frepo, "feature_store.yaml"), []byte(fs), 0o600)
}

// chainYAML builds the sluice.yaml of the full chain: the model server,
// the feature server on frepo, and the gateway with the parcel-eta service
// and backends copied from examples/parcel-eta/sluice.yaml, and one client
// with a rate limit far above the offered load.
func chainYAML(modelRepo, frepo string, ports []int, keySum string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join("examples", "parcel-eta", "sluice.yaml"))
	if err != nil {
		return nil, err
	}
	var ex map[string]any
	if err := yaml.Unmarshal(b, &ex); err != nil {
		return nil, fmt.Errorf("parse the example: %w", err)
	}
	gw, _ := ex["gateway"].(map[string]any)
	if gw == nil {
		return nil, errors.New("the example has no gateway section")
	}
	var svc any
	svcs, _ := gw["services"].([]any)
	for _, s := range svcs {
		if m, ok := s.(map[string]any); ok && m["name"] == "parcel-eta" {
			svc = m
		}
	}
	if svc == nil {
		return nil, errors.New("the example has no parcel-eta service")
	}
	out := map[string]any{
		"model_server": map[string]any{
			"model_repository": []string{modelRepo}, "address": "127.0.0.1",
			"http_port": ports[0], "grpc_port": ports[1], "metrics_port": ports[2], "control_mode": "none",
		},
		"feature_server": map[string]any{"repo": frepo, "address": "127.0.0.1", "port": ports[3]},
		"gateway": map[string]any{
			"listen": fmt.Sprintf("127.0.0.1:%d", ports[4]), "admin": fmt.Sprintf("127.0.0.1:%d", ports[5]),
			"drain_period": "0s",
			"clients": []any{map[string]any{
				"id": "gatewaybench", "api_key_sha256": keySum,
				"rate_limit": map[string]any{"requests_per_second": 1_000_000, "burst": 1_000_000},
			}},
			"services": []any{svc},
			"backends": gw["backends"],
		},
	}
	return yaml.Marshal(out)
}

// presentIDs asks the feature server which of the ids 1..n have a present
// (stored and fresh) value of feature, in batches.
func presentIDs(ctx context.Context, fsURL, joinKey, feature string, n int) ([]int64, error) {
	var out []int64
	c := &http.Client{Timeout: 10 * time.Second}
	for lo := 1; lo <= n; lo += 1000 {
		ids := make([]int64, 0, 1000)
		for id := lo; id <= n && id < lo+1000; id++ {
			ids = append(ids, int64(id))
		}
		body, _ := json.Marshal(map[string]any{"features": []string{feature}, "entities": map[string]any{joinKey: ids}})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fsURL+"/get-online-features", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read above
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("get-online-features: HTTP %d: %s", resp.StatusCode, b)
		}
		var r struct {
			Results []struct {
				Statuses []string `json:"statuses"`
			} `json:"results"`
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Results) == 0 {
			return nil, fmt.Errorf("get-online-features: unexpected answer %.200s", b)
		}
		st := r.Results[len(r.Results)-1].Statuses // the join key comes first, the feature last
		for i, s := range st {
			if s == "PRESENT" && i < len(ids) {
				out = append(out, ids[i])
			}
		}
	}
	return out, nil
}

// classifyPredict labels a predict answer: 200 by its source, errors by
// their reason.
func classifyPredict(status int, body []byte) (bool, string) {
	var r struct {
		Source string `json:"source"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(body, &r) // a body that is not JSON keeps empty labels
	if status == http.StatusOK {
		return true, "HTTP 200 source=" + r.Source
	}
	if r.Reason != "" {
		return false, fmt.Sprintf("HTTP %d %s", status, r.Reason)
	}
	return false, fmt.Sprintf("HTTP %d", status)
}

// runTool runs a helper command to completion and returns its output.
func runTool(ctx context.Context, limit time.Duration, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, tail(string(out), 20))
	}
	return string(out), nil
}

// runChain generates the example's feature data, materializes it into
// Redis, starts `sluice serve -c` with the whole chain and sweeps the
// rates. The Redis keys are deleted whatever happens.
func runChain(ctx context.Context, c config, rates []float64, dir string, ps *procs, gate *quietGate) (*chainResult, error) {
	var rb [6]byte
	_, _ = rand.Read(rb[:]) // crypto/rand never fails on Linux
	project := "gatewaybench_" + hex.EncodeToString(rb[:])
	ch := &chainResult{
		Project: project, Prefix: redisPrefix(project),
		Generated: map[string]int{"user_id": c.Users, "package_id": c.Packages, "route_id": c.Routes},
	}

	rc := goredis.NewClient(&goredis.Options{Addr: c.RedisAddr, DisableIdentity: true})
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		return ch, fmt.Errorf("redis at %s: %w", c.RedisAddr, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := deleteKeys(cctx, rc, ch.Prefix)
		left, err2 := countKeys(cctx, rc, ch.Prefix)
		ch.Cleanup = fmt.Sprintf("SCAN + UNLINK on `%s*`: %d keys deleted, %d left", ch.Prefix, n, left)
		if err := errors.Join(err, err2); err != nil {
			ch.Cleanup += " (error: " + err.Error() + ")"
		}
		say("%s", ch.Cleanup)
	}()

	frepo, err := prepareChainData(ctx, c, dir, ch, rc)
	if err != nil {
		return ch, err
	}
	modelRepo := filepath.Join(dir, "chain-models")
	if err := copyModel("parcel_eta", modelRepo); err != nil {
		return ch, fmt.Errorf("copy model: %w", err)
	}
	ports, err := freePorts(ctx, 6)
	if err != nil {
		return ch, err
	}
	key, keySum := apiKey()
	y, err := chainYAML(modelRepo, frepo, ports, keySum)
	if err != nil {
		return ch, err
	}
	file := filepath.Join(dir, "chain.yaml")
	if err := os.WriteFile(file, y, 0o600); err != nil {
		return ch, err
	}
	args := []string{"serve", "-c", file, "--log-format", "text"}
	if help, _ := runTool(ctx, 10*time.Second, c.SluiceBin, "serve", "--help"); strings.Contains(help, "--materialize") {
		args = append(args, "--materialize=false") // materialized above, timed on its own
	}
	ch.ServeCmd = "sluice " + strings.Join(args, " ")
	say("starting %s", ch.ServeCmd)
	sl, err := ps.start("sluice serve", c.SluiceBin, args, nil)
	if err != nil {
		return ch, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[4])
	if err := waitReady(ctx, sl, "http://"+listen+"/ready", 2*time.Minute); err != nil {
		return ch, err
	}

	fsURL := fmt.Sprintf("http://127.0.0.1:%d", ports[3])
	ids, err := pickChainIDs(ctx, c, fsURL, ch)
	if err != nil {
		return ch, err
	}
	bodies := chainBodies(ids)
	url := "http://" + listen + "/v1/services/parcel-eta:predict"
	header := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + key}}
	if err := postOnce(ctx, newClient(4, c.Timeout), url, header, bodies[0]); err != nil {
		return ch, fmt.Errorf("first predict: %w", err)
	}
	load, err := newRawClient(url, c.MaxInFlight, c.Timeout)
	if err != nil {
		return ch, err
	}
	defer load.closeIdle()

	pids := map[string]int{cpuSluice: sl.pid(), cpuLoadgen: pidSelf, cpuMachine: pidMachine}
	if pid := redisPID(ctx, rc); pid != 0 {
		pids[cpuRedis] = pid
	}
	spec := loadSpec{
		URL: url, Header: header, Body: func(i int) []byte { return bodies[i%len(bodies)] },
		MaxInFlight: c.MaxInFlight, Classify: classifyPredict,
	}
	return ch, sweepChain(ctx, c, rates, ch, load, spec, pids, gate, fmt.Sprintf("127.0.0.1:%d", ports[5]))
}

// prepareChainData writes the feature repository, generates the
// example's feature data, applies the repository and materializes it into
// Redis, timing both, and returns the repository's folder.
func prepareChainData(ctx context.Context, c config, dir string, ch *chainResult, rc *goredis.Client) (string, error) {
	frepo := filepath.Join(dir, "features")
	if err := writeFeatureRepo(frepo, ch.Project, c.RedisAddr); err != nil {
		return "", fmt.Errorf("write the feature repository: %w", err)
	}
	gen := filepath.Join(dir, "gen")
	if _, err := runTool(ctx, 5*time.Minute, "go", "build", "-o", gen, "./examples/parcel-eta/features/gen"); err != nil {
		return "", err
	}
	genArgs := []string{
		"-out", filepath.Join(frepo, "data"), "-users", strconv.Itoa(c.Users), "-packages", strconv.Itoa(c.Packages),
		"-routes", strconv.Itoa(c.Routes), "-days", strconv.Itoa(c.Days),
	}
	ch.GenCmd = fmt.Sprintf("go run ./examples/parcel-eta/features/gen -out DIR/data -users %d -packages %d -routes %d -days %d", c.Users, c.Packages, c.Routes, c.Days)
	say("generating feature data: %s", ch.GenCmd)
	t0 := time.Now()
	if _, err := runTool(ctx, 5*time.Minute, gen, genArgs...); err != nil {
		return "", err
	}
	ch.GenTime = time.Since(t0)
	if _, err := runTool(ctx, time.Minute, c.SluiceBin, "features", "apply", "--repo", frepo); err != nil {
		return "", err
	}
	window := fmt.Sprintf("now-%dh", c.Days*24+24)
	ch.MatCmd = fmt.Sprintf("sluice features apply --repo DIR && sluice features materialize %s now --repo DIR --no-progress", window)
	say("materializing into Redis under %s*", ch.Prefix)
	t0 = time.Now()
	if _, err := runTool(ctx, 10*time.Minute, c.SluiceBin, "features", "materialize", window, "now", "--repo", frepo, "--no-progress"); err != nil {
		return "", err
	}
	ch.MatTime = time.Since(t0)
	if n, err := countKeys(ctx, rc, ch.Prefix); err == nil {
		ch.Keys = n
	}

	return frepo, nil
}

// pickChainIDs picks, for each entity key, the ids that have fresh
// features; where none has, requests use ids 1..n (noted in ch).
func pickChainIDs(ctx context.Context, c config, fsURL string, ch *chainResult) (map[string][]int64, error) {
	ch.Entities = map[string]int{}
	ids := map[string][]int64{}
	for _, q := range []struct {
		key, feature string
		n            int
	}{{"user_id", "user_stats:u_f00", c.Users}, {"package_id", "package_features:weight_kg", c.Packages}, {"route_id", "route_features:distance_km", c.Routes}} {
		got, err := presentIDs(ctx, fsURL, q.key, q.feature, q.n)
		if err != nil {
			return nil, fmt.Errorf("pick %s: %w", q.key, err)
		}
		if len(got) == 0 {
			ch.Notes = append(ch.Notes, fmt.Sprintf("No %s has a fresh %s; requests use ids 1..%d, whose features come back missing or expired.", q.key, q.feature, q.n))
			for id := 1; id <= q.n; id++ {
				got = append(got, int64(id))
			}
		} else {
			ch.Entities[q.key] = len(got)
		}
		ids[q.key] = got
	}
	return ids, nil
}

// chainBodies makes the predict request bodies, from a fixed seed so that
// every run sends the same request mix.
func chainBodies(ids map[string][]int64) [][]byte {
	rng := mrand.New(mrand.NewPCG(1, 2)) //nolint:gosec // G404: a fixed seed, so every run sends the same request mix
	bodies := make([][]byte, 4096)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"user_id": %d, "package_id": %d, "route_id": %d, "base_eta": %.1f, "route_delay_factor": %.2f}`,
			ids["user_id"][rng.IntN(len(ids["user_id"]))], ids["package_id"][rng.IntN(len(ids["package_id"]))],
			ids["route_id"][rng.IntN(len(ids["route_id"]))], 10+50*rng.Float64(), rng.Float64())
	}
	return bodies
}

// sweepChain runs the load at each rate in turn, after a warm-up, with
// the processes' CPU time (and a profile, when asked for) of each, and
// stops when a rate is not kept up with.
func sweepChain(ctx context.Context, c config, rates []float64, ch *chainResult, load *rawClient, spec loadSpec,
	pids map[string]int, gate *quietGate, admin string,
) error {
	for _, rate := range rates {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		gate.wait(ctx)
		warm := spec
		warm.Rate, warm.Duration = c.WarmupRate, c.Warmup
		_ = runLoad(ctx, load, warm) // not reported
		m := newCPUMeter(pids)
		s := spec
		s.Rate, s.Duration = rate, time.Duration(c.ChainSeconds*float64(time.Second))
		prof := captureProfile(ctx, c.ProfileDir, admin, fmt.Sprintf("chain-%.0f", rate), s.Duration)
		res := runLoad(ctx, load, s)
		prof()
		used, wall := m.since()
		row := chainRow{Rate: rate, Res: res, CPU: used, Wall: wall}
		ch.Rows = append(ch.Rows, row)
		say("chain %5.0f/s: sent %d ok %d (%.0f/s) late %d p50 %s p99 %s %v", rate, res.Sent, res.OK, res.Throughput(), res.Late, pct(res.Latency, 0.5), pct(res.Latency, 0.99), res.Outcomes)
		if res.Throughput() < 0.8*rate || res.Errors()*10 > res.Sent {
			if rate != rates[len(rates)-1] {
				ch.Stopped = fmt.Sprintf("The sweep stopped after %.0f/s: it achieved %.0f successful predictions/s (below 80%% of the offered rate) or more than 10%% of requests failed, so higher rates would only add queueing.", rate, res.Throughput())
			}
			break
		}
	}
	return nil
}
