package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Names of the hop comparison's targets and of the processes whose CPU
// time is measured.
const (
	targetDirect  = "direct"
	targetHAProxy = "HAProxy"
	targetGateway = "Sluice gateway"

	cpuModel   = "model server"
	cpuProxy   = "proxy"
	cpuLoadgen = "load generator"
	cpuSluice  = "sluice"
	cpuRedis   = "redis-server"
	cpuMachine = "machine"
)

// hopTarget is one way to reach the model server.
type hopTarget struct {
	name   string
	url    string
	client *http.Client // net/http, for the one-off checks
	load   *rawClient   // the load generator's connections
	proxy  *proc        // nil for direct calls
	admin  string       // the gateway's admin address, for CPU profiles
}

// roundStat is one round's percentiles of one target.
type roundStat struct{ P50, P99 time.Duration }

// hopRow is one target at one rate, rounds merged.
type hopRow struct {
	Target string
	Rate   float64
	Res    loadResult
	Rounds []roundStat
	// CPU is each process's CPU time over the measured phases, and Wall
	// their length.
	CPU  map[string]time.Duration
	Wall time.Duration
}

// cpuPerReq is a process's CPU µs per sent request, or -1 when unknown.
func (r *hopRow) cpuPerReq(name string) float64 {
	d, ok := r.CPU[name]
	if !ok || r.Res.Sent == 0 {
		return -1
	}
	return float64(d.Microseconds()) / float64(r.Res.Sent)
}

// hopResult is the hop comparison.
type hopResult struct {
	Rows      []hopRow
	BodyBytes int
	// Left says why a target was not measured.
	Left           map[string]string
	HAProxyVersion string
	HAProxyCmd     string
	GatewayYAML    string
	ModelCmd       string
	Notes          []string
}

func (h *hopResult) row(target string, rate float64) (*hopRow, bool) {
	for i := range h.Rows {
		if h.Rows[i].Target == target && h.Rows[i].Rate == rate {
			return &h.Rows[i], true
		}
	}
	return nil, false
}

// apiKey returns a fresh random API key and its hex SHA-256.
func apiKey() (key, sum string) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	key = "gwb-" + hex.EncodeToString(b[:])
	s := sha256.Sum256([]byte(key))
	return key, hex.EncodeToString(s[:])
}

// copyModel copies examples/models/NAME into repo/NAME.
func copyModel(model, repo string) error {
	return os.CopyFS(filepath.Join(repo, model), os.DirFS(filepath.Join("examples", "models", model)))
}

// postOnce sends body to url and returns an error unless it gets 200.
func postOnce(ctx context.Context, c *http.Client, url string, h http.Header, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	maps.Copy(req.Header, h)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read above
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// runHop starts a model server, HAProxy and a gateway-only Sluice in front
// of it, and measures the three side by side at each rate.
func runHop(ctx context.Context, c config, rates []float64, dir string, ps *procs, gate *quietGate) (*hopResult, error) {
	h := &hopResult{Left: map[string]string{}}
	body, err := os.ReadFile(c.Request)
	if err != nil {
		return h, err
	}
	h.BodyBytes = len(body)
	repo := filepath.Join(dir, "hop-models")
	if err := copyModel(c.Model, repo); err != nil {
		return h, fmt.Errorf("copy model: %w", err)
	}
	ports, err := freePorts(ctx, 6)
	if err != nil {
		return h, err
	}
	msHTTP := fmt.Sprintf("127.0.0.1:%d", ports[0])
	msArgs := []string{
		"model-server", "--model-repository", repo, "--address", "127.0.0.1",
		"--http-port", strconv.Itoa(ports[0]), "--grpc-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]), "--log-level", "warn",
	}
	h.ModelCmd = "sluice " + strings.Join(msArgs, " ")
	say("starting the model server on %s", msHTTP)
	ms, err := ps.start("model server", c.SluiceBin, msArgs, nil)
	if err != nil {
		return h, err
	}
	if err := waitReady(ctx, ms, "http://"+msHTTP+"/v2/health/ready", 60*time.Second); err != nil {
		return h, err
	}
	path := "/v2/models/" + c.Model + "/infer"
	key, keySum := apiKey()
	header := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + key}}
	client := func() *http.Client { return newClient(c.MaxInFlight, c.Timeout) }
	targets := []hopTarget{{name: targetDirect, url: "http://" + msHTTP + path, client: client()}}
	if err := postOnce(ctx, targets[0].client, targets[0].url, header, body); err != nil {
		return h, fmt.Errorf("direct call: %w", err)
	}

	if t, err := startHAProxy(ctx, c, h, ps, msHTTP, fmt.Sprintf("127.0.0.1:%d", ports[3])); err != nil {
		say("HAProxy left out: %v", err)
		h.Left[targetHAProxy] = err.Error()
	} else {
		t.url += path
		t.client = client()
		if err := postOnce(ctx, t.client, t.url, header, body); err != nil {
			h.Left[targetHAProxy] = "a call through HAProxy failed: " + err.Error()
		} else {
			targets = append(targets, t)
		}
	}

	if t, err := startGateway(ctx, c, h, ps, dir, msHTTP, fmt.Sprintf("127.0.0.1:%d", ports[4]), fmt.Sprintf("127.0.0.1:%d", ports[5]), keySum); err != nil {
		say("Sluice gateway left out: %v", err)
		h.Left[targetGateway] = err.Error()
	} else {
		t.url += path
		t.client = client()
		if err := postOnce(ctx, t.client, t.url, header, body); err != nil {
			h.Left[targetGateway] = "a call through the gateway failed: " + err.Error()
		} else {
			targets = append(targets, t)
		}
	}

	for i := range targets {
		rc, err := newRawClient(targets[i].url, c.MaxInFlight, c.Timeout)
		if err != nil {
			return h, err
		}
		targets[i].load = rc
		defer rc.closeIdle()
	}
	per := c.Seconds / float64(c.Rounds)
	for _, rate := range rates {
		rows := map[string]*hopRow{}
		phases := map[string][]loadResult{}
		for r := range c.Rounds {
			for k := range targets {
				if ctx.Err() != nil {
					return h, ctx.Err()
				}
				t := targets[(k+r)%len(targets)]
				spec := loadSpec{URL: t.url, Header: header, Body: func(int) []byte { return body }, MaxInFlight: c.MaxInFlight}
				gate.wait(ctx)
				warm := spec
				warm.Rate, warm.Duration = c.WarmupRate, c.Warmup
				_ = runLoad(ctx, t.load, warm) // warms connections and caches; not reported
				pids := map[string]int{cpuModel: ms.pid(), cpuLoadgen: pidSelf, cpuMachine: pidMachine}
				if t.proxy != nil {
					pids[cpuProxy] = t.proxy.pid()
				}
				m := newCPUMeter(pids)
				spec.Rate, spec.Duration = rate, time.Duration(per*float64(time.Second))
				var prof func()
				if t.admin != "" && r == 0 {
					prof = captureProfile(ctx, c.ProfileDir, t.admin, fmt.Sprintf("hop-%.0f", rate), spec.Duration)
				}
				res := runLoad(ctx, t.load, spec)
				if prof != nil {
					prof()
				}
				used, wall := m.since()
				say("%-15s %5.0f/s round %d: sent %d ok %d late %d p50 %s p99 %s", t.name, rate, r+1, res.Sent, res.OK, res.Late, pct(res.Latency, 0.5), pct(res.Latency, 0.99))
				row := rows[t.name]
				if row == nil {
					row = &hopRow{Target: t.name, Rate: rate, CPU: map[string]time.Duration{}}
					rows[t.name] = row
				}
				row.Rounds = append(row.Rounds, roundStat{P50: pct(res.Latency, 0.5), P99: pct(res.Latency, 0.99)})
				for k, v := range used {
					row.CPU[k] += v
				}
				row.Wall += wall
				phases[t.name] = append(phases[t.name], res)
			}
		}
		for _, t := range targets {
			row := rows[t.name]
			row.Res = merge(phases[t.name])
			h.Rows = append(h.Rows, *row)
		}
	}
	return h, nil
}

// startHAProxy starts HAProxy with the peers' configuration in front of
// upstream.
func startHAProxy(ctx context.Context, c config, h *hopResult, ps *procs, upstream, listen string) (hopTarget, error) {
	if c.HAProxy == "" {
		return hopTarget{}, errors.New("left out with -haproxy ''")
	}
	bin, err := exec.LookPath(c.HAProxy)
	if err != nil {
		return hopTarget{}, fmt.Errorf("%s not found (bench/run.sh installs the Debian package haproxy when it runs as root): %w", c.HAProxy, err)
	}
	cfg := filepath.Join(c.PeersDir, "haproxy.cfg")
	if _, err := os.Stat(cfg); err != nil {
		return hopTarget{}, fmt.Errorf("no peer configuration: %w", err)
	}
	if out, err := exec.CommandContext(ctx, bin, "-v").Output(); err == nil {
		h.HAProxyVersion = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	h.HAProxyCmd = fmt.Sprintf("UPSTREAM=%s LISTEN=%s haproxy -db -f bench/peers/haproxy.cfg", upstream, listen)
	say("starting HAProxy on %s", listen)
	p, err := ps.start("haproxy", bin, []string{"-db", "-f", cfg}, []string{"UPSTREAM=" + upstream, "LISTEN=" + listen})
	if err != nil {
		return hopTarget{}, err
	}
	if err := waitReady(ctx, p, "http://"+listen+"/v2/health/ready", 20*time.Second); err != nil {
		return hopTarget{}, err
	}
	return hopTarget{name: targetHAProxy, url: "http://" + listen, proxy: p}, nil
}

// gatewayOnlyYAML is a sluice.yaml with only a gateway section: the KServe
// v2 passthrough to one kserve_http backend, one client with a rate limit
// far above the offered load.
func gatewayOnlyYAML(listen, admin, upstream, keySum string, timeout time.Duration) string {
	return fmt.Sprintf(`# gatewaybench: the gateway's KServe v2 passthrough (auth + rate limit + route), nothing else.
gateway:
  listen: "%s"
  admin: "%s"
  drain_period: 0s
  clients:
    - id: gatewaybench
      api_key_sha256: %s
      rate_limit: {requests_per_second: 1000000, burst: 1000000}
  proxy:
    backend: models-http
    timeout: %s
  backends:
    - name: models-http
      kind: kserve_http
      endpoints: ["%s"]
      health_check: {interval: 1s, timeout: 500ms}
`, listen, admin, keySum, timeout, upstream)
}

// startGateway starts `sluice serve -c` with a gateway-only file.
func startGateway(ctx context.Context, c config, h *hopResult, ps *procs, dir, upstream, listen, admin, keySum string) (hopTarget, error) {
	y := gatewayOnlyYAML(listen, admin, upstream, keySum, c.Timeout)
	h.GatewayYAML = y
	file := filepath.Join(dir, "gateway-hop.yaml")
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		return hopTarget{}, err
	}
	say("starting the Sluice gateway on %s", listen)
	p, err := ps.start("sluice gateway", c.SluiceBin, []string{"serve", "-c", file, "--log-format", "text"}, nil)
	if err != nil {
		return hopTarget{}, err
	}
	if err := waitReady(ctx, p, "http://"+listen+"/ready", 30*time.Second); err != nil {
		return hopTarget{}, err
	}
	return hopTarget{name: targetGateway, url: "http://" + listen, proxy: p, admin: admin}, nil
}
