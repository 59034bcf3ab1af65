package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sluice-ml/sluice/internal/testutil/faultkserve"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The gateway fault tests run `sluice serve -c` with a gateway-only file in
// front of three real model servers (the `simple` model), each behind a
// faultkserve proxy, and break one proxy while a bounded load runs.

const (
	faultService = "fault"
	faultBackend = "pool"
	faultWidth   = 16 // elements of simple's INPUT0 and INPUT1
	faultRate    = 40 // requests per second of the load
)

// faultGatewayOptions are the knobs a fault test turns in the generated
// gateway file.
type faultGatewayOptions struct {
	endpoints        []string
	perTryTimeout    time.Duration
	errorInterval    time.Duration // outlier_detection.interval: the error-rate window
	baseEjectionTime time.Duration
}

// faultGatewayYAML returns a gateway-only sluice.yaml: one service whose two
// inputs (simple's INPUT0 and INPUT1) both come from the request fields
// v0..v15, so the model's OUTPUT0 is twice the request and OUTPUT1 zero,
// routed to one kserve_grpc backend.
func faultGatewayYAML(listen, admin string, o faultGatewayOptions) string {
	var fields, refs []string
	for i := range faultWidth {
		fields = append(fields, fmt.Sprintf("        - {name: v%d, type: int64, required: true}", i))
		refs = append(refs, fmt.Sprintf("field:v%d", i))
	}
	eps := make([]string, len(o.endpoints))
	for i, e := range o.endpoints {
		eps[i] = strconv.Quote(e)
	}
	return fmt.Sprintf(`gateway:
  listen: %q
  admin: %q
  drain_period: 100ms
  anonymous:
    allowed: true
  log_sampling: {success_percent: 0, errors_percent: 100}
  services:
    - name: %s
      path: POST /v1/services/%s:predict
      request_fields:
%s
      inputs:
        - {tensor: INPUT0, datatype: INT32, features: [%s]}
        - {tensor: INPUT1, datatype: INT32, features: [%s]}
      model: {name: simple, version: "1"}
      outputs:
        - {name: sum, from: OUTPUT0}
        - {name: diff, from: OUTPUT1}
      routes:
        - name: default
          route:
            weighted:
              - {backend: %s, weight: 100}
          timeout: 1s
          retries:
            retry_on: [5xx, gateway-error, reset, connect-failure, unavailable]
            num_retries: 2
            per_try_timeout: %s
            budget: {percent: 20, min_concurrency: 10}
  backends:
    - name: %s
      kind: kserve_grpc
      endpoints: [%s]
      load_balancing: least_request
      health_check: {interval: 500ms, timeout: 250ms}
      outlier_detection:
        error_rate_percent: 5
        interval: %s
        min_request_volume: 20
        consecutive_503: 3
        window: 1m
        base_ejection_time: %s
        max_ejection_percent: 50
`, listen, admin, faultService, faultService, strings.Join(fields, "\n"),
		strings.Join(refs, ", "), strings.Join(refs, ", "), faultBackend, o.perTryTimeout,
		faultBackend, strings.Join(eps, ", "), o.errorInterval, o.baseEjectionTime)
}

// faultGateway is a running `sluice serve -c` with only a gateway section.
type faultGateway struct {
	*server
	listen, admin string
	client        *http.Client
}

// startGatewayForFaults writes the config made by yaml (given the listen
// and admin addresses), starts `sluice serve -c` on it and waits until
// GET /ready answers 200. The process gets SIGTERM when the test ends.
func startGatewayForFaults(t *testing.T, yaml func(listen, admin string) string) *faultGateway {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml(listen, admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &server{http: listen, logs: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(binPath, "serve", "-c", path, "--log-format", "text")
	s.cmd.Dir = repoDir
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	begin := time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
	g := &faultGateway{
		server: s, listen: listen, admin: admin,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second},
	}
	t.Cleanup(func() {
		s.stop(t)
		g.client.CloseIdleConnections()
		if t.Failed() {
			logs := s.logs.String()
			t.Logf("gateway logs (last 8 KiB):\n%s", logs[max(0, len(logs)-8<<10):])
		}
	})
	harness.WaitFor(t, 30*time.Second, 20*time.Millisecond, "gateway ready", func() (bool, string) {
		select {
		case <-s.done:
			t.Fatalf("sluice serve -c exited during start-up (%v); config:\n%s\nlogs:\n%s", s.waitErr, yaml(listen, admin), s.logs)
		default:
		}
		code, _, err := g.get(t.Context(), "http://"+listen+"/ready")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %v; logs:\n%s", code, err, s.logs)
	})
	s.startup = time.Since(begin)
	return g
}

func (g *faultGateway) get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// faultResult is one request of a load.
type faultResult struct {
	n       int
	code    int
	body    []byte
	err     error // transport error or a wrong answer
	latency time.Duration
}

func (r faultResult) failed() bool { return r.err != nil || r.code != http.StatusOK }

func (r faultResult) String() string {
	if r.err != nil {
		return fmt.Sprintf("request %d after %v: %v (status %d, body %s)", r.n, r.latency.Round(time.Millisecond), r.err, r.code, r.body)
	}
	return fmt.Sprintf("request %d after %v: status %d, body %s", r.n, r.latency.Round(time.Millisecond), r.code, r.body)
}

// predict sends request n (fields v_i = n+i) and checks the answer: sum is
// twice the fields, diff zero, source model.
func (g *faultGateway) predict(ctx context.Context, n int) faultResult {
	fields := make(map[string]int, faultWidth)
	for i := range faultWidth {
		fields[fmt.Sprintf("v%d", i)] = n + i
	}
	body, _ := json.Marshal(fields)
	res := faultResult{n: n}
	start := time.Now()
	defer func() { res.latency = time.Since(start) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"http://"+g.listen+"/v1/services/"+faultService+":predict", bytes.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-request-id", fmt.Sprintf("fault-%d", n))
	resp, err := g.client.Do(req)
	if err != nil {
		res.err = err
		res.latency = time.Since(start)
		return res
	}
	res.body, res.err = io.ReadAll(resp.Body)
	resp.Body.Close()
	res.code = resp.StatusCode
	res.latency = time.Since(start)
	if res.err != nil || res.code != http.StatusOK {
		return res
	}
	var answer struct {
		Source  string         `json:"source"`
		Outputs map[string]any `json:"outputs"`
	}
	if err := json.Unmarshal(res.body, &answer); err != nil {
		res.err = fmt.Errorf("decode answer: %w", err)
		return res
	}
	sum, diff := faultNumbers(answer.Outputs["sum"]), faultNumbers(answer.Outputs["diff"])
	switch {
	case answer.Source != "model":
		res.err = fmt.Errorf("source %q, want model", answer.Source)
	case len(sum) != faultWidth || len(diff) != faultWidth:
		res.err = fmt.Errorf("got %d sums and %d diffs, want %d of each", len(sum), len(diff), faultWidth)
	default:
		for i := range faultWidth {
			if sum[i] != float64(2*(n+i)) || diff[i] != 0 {
				res.err = fmt.Errorf("element %d: sum %v diff %v, want %d and 0", i, sum[i], diff[i], 2*(n+i))
				break
			}
		}
	}
	return res
}

// faultNumbers flattens a JSON value (a number or nested arrays of numbers).
func faultNumbers(v any) []float64 {
	switch x := v.(type) {
	case float64:
		return []float64{x}
	case []any:
		var out []float64
		for _, e := range x {
			out = append(out, faultNumbers(e)...)
		}
		return out
	}
	return nil
}

// runLoad sends faultRate requests per second, each in its own goroutine,
// until it has sent count or stop is closed, and returns every result once
// all have answered.
func (g *faultGateway) runLoad(ctx context.Context, first, count int, stop <-chan struct{}) []faultResult {
	results := make([]faultResult, 0, count)
	var mu sync.Mutex // protects results
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / faultRate)
	defer tick.Stop()
send:
	for n := first; n < first+count; n++ {
		wg.Go(func() {
			r := g.predict(ctx, n)
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		})
		select {
		case <-tick.C:
		case <-stop:
			break send
		case <-ctx.Done():
			break send
		}
	}
	wg.Wait()
	return results
}

// startLoad runs runLoad in the background; wait returns its results.
func (g *faultGateway) startLoad(ctx context.Context, first, count int) (stop func(), wait func() []faultResult) {
	stopc := make(chan struct{})
	done := make(chan []faultResult, 1)
	go func() { done <- g.runLoad(ctx, first, count, stopc) }()
	var once sync.Once
	stop = func() { once.Do(func() { close(stopc) }) }
	var res []faultResult
	var waitOnce sync.Once
	wait = func() []faultResult {
		waitOnce.Do(func() { res = <-done })
		return res
	}
	return stop, wait
}

// faultEndpoint is one row of the admin /endpoints answer.
type faultEndpoint struct {
	Addr         string    `json:"addr"`
	Healthy      bool      `json:"healthy"`
	Ejected      bool      `json:"ejected"`
	EjectedUntil time.Time `json:"ejected_until"`
	InFlight     int       `json:"in_flight"`
	ErrorRate    float64   `json:"error_rate"`
	Recent503    int       `json:"recent_503"`
}

// endpoints reads GET admin /endpoints and returns every endpoint object in
// it (any object with an "addr"), keyed by address, and the raw answer.
func (g *faultGateway) endpoints(t *testing.T) (map[string]faultEndpoint, []byte) {
	t.Helper()
	code, body, err := g.get(t.Context(), "http://"+g.admin+"/endpoints")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET admin /endpoints: %d %s %v", code, body, err)
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("GET admin /endpoints: %v in %s", err, body)
	}
	out := map[string]faultEndpoint{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if _, ok := x["addr"].(string); ok {
				b, _ := json.Marshal(x)
				var e faultEndpoint
				if err := json.Unmarshal(b, &e); err != nil {
					t.Fatalf("admin /endpoints row %s: %v", b, err)
				}
				out[e.Addr] = e
				return
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	return out, body
}

// waitEndpoint polls admin /endpoints every 50ms until ok holds for addr
// and returns that row, failing the test after timeout.
func (g *faultGateway) waitEndpoint(t *testing.T, addr, what string, timeout time.Duration, ok func(faultEndpoint) bool) faultEndpoint {
	t.Helper()
	var e faultEndpoint
	harness.WaitFor(t, timeout, 50*time.Millisecond, "endpoint "+addr+" "+what, func() (bool, string) {
		eps, raw := g.endpoints(t)
		var found bool
		e, found = eps[addr]
		return found && ok(e), "admin /endpoints: " + string(raw)
	})
	return e
}

// faultRoutable reports whether the gateway may pick e: healthy, not ejected.
func faultRoutable(e faultEndpoint) bool { return e.Healthy && !e.Ejected }

// waitAllRoutable waits until every proxy is healthy and not ejected.
func (g *faultGateway) waitAllRoutable(t *testing.T, proxies []*faultkserve.Proxy) {
	t.Helper()
	for _, p := range proxies {
		g.waitEndpoint(t, p.Addr(), "healthy and admitted", 10*time.Second, faultRoutable)
	}
}

// metric sums the samples of the named metric in admin /metrics whose
// labels contain every one of match (e.g. `service="fault"`).
func (g *faultGateway) metric(t *testing.T, name string, match ...string) float64 {
	t.Helper()
	code, body, err := g.get(t.Context(), "http://"+g.admin+"/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET admin /metrics: %d %v", code, err)
	}
	var sum float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		labels := line[len(name):sp]
		all := true
		for _, m := range match {
			all = all && strings.Contains(labels, m)
		}
		if !all {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("admin /metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// budgetExhausted reads sluice_gateway_retry_budget_exhausted_total for
// the fault service.
func (g *faultGateway) budgetExhausted(t *testing.T) float64 {
	t.Helper()
	return g.metric(t, "sluice_gateway_retry_budget_exhausted_total", `service="`+faultService+`"`)
}

// checkNoFailures fails the test when more requests failed than the retry
// budget refused retries since it read exhaustedBefore: with idempotent
// inference and num_retries 2, every other failure must be retried away.
// It lists at most 10 failures.
func (g *faultGateway) checkNoFailures(t *testing.T, what string, results []faultResult, exhaustedBefore float64) {
	t.Helper()
	allowed := int(g.budgetExhausted(t) - exhaustedBefore)
	var failed []faultResult
	for _, r := range results {
		if r.failed() {
			failed = append(failed, r)
		}
	}
	t.Logf("%s: %d requests, %d failed, retry budget refused %d retries", what, len(results), len(failed), allowed)
	if len(failed) > allowed {
		t.Errorf("%s: %d of %d requests failed, want at most %d (the retries the budget refused)",
			what, len(failed), len(results), allowed)
		for _, r := range failed[:min(len(failed), 10)] {
			t.Errorf("  %v", r)
		}
	}
}

// startFaultProxies puts a faultkserve proxy in front of each model server.
func startFaultProxies(t *testing.T, models []*server) []*faultkserve.Proxy {
	t.Helper()
	proxies := make([]*faultkserve.Proxy, len(models))
	for i, m := range models {
		p, err := faultkserve.New(m.grpc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies[i] = p
	}
	return proxies
}

// faultProxyAddrs returns the proxies' addresses, the gateway's endpoints.
func faultProxyAddrs(proxies []*faultkserve.Proxy) []string {
	addrs := make([]string, len(proxies))
	for i, p := range proxies {
		addrs[i] = p.Addr()
	}
	return addrs
}

// faultForwarded returns how many calls each proxy forwarded, for messages.
func faultForwarded(proxies []*faultkserve.Proxy) []int64 {
	out := make([]int64, len(proxies))
	for i, p := range proxies {
		out[i] = p.Forwarded()
	}
	return out
}

func TestGatewayFault(t *testing.T) {
	// Not parallel: its per-try timeouts (200 ms) must not fire on an
	// endpoint slowed down by other tests.
	// Three real model servers serving only `simple`, shared by the
	// subtests; each subtest puts its own proxies and gateway in front. The
	// subtests run one after the other: the hang test's 200ms per-try
	// timeout must not fire on a healthy endpoint slowed down by another
	// subtest's load on a small machine.
	models := make([]*server, 3)
	for i := range models {
		models[i] = startServer(t, "--model-repository", filepath.Join(repoDir, "examples", "models"),
			"--model-control-mode", "explicit", "--load-model", "simple")
	}

	t.Run("EndpointDownAndBack", func(t *testing.T) {
		proxies := startFaultProxies(t, models)
		g := startGatewayForFaults(t, func(listen, admin string) string {
			return faultGatewayYAML(listen, admin, faultGatewayOptions{
				endpoints: faultProxyAddrs(proxies), perTryTimeout: 500 * time.Millisecond,
				errorInterval: 10 * time.Second,
				// Short, so the restarted endpoint is re-admitted within the test.
				baseEjectionTime: 2 * time.Second,
			})
		})
		g.waitAllRoutable(t, proxies)
		dead := proxies[0]
		ctx := t.Context()
		exhaustedBefore := g.budgetExhausted(t)

		// 40 req/s for 6 s; the endpoint dies at 1.5 s and comes back at 4 s.
		_, wait := g.startLoad(ctx, 0, 6*faultRate)
		time.Sleep(1500 * time.Millisecond)
		before := dead.Forwarded()
		if before == 0 {
			t.Errorf("endpoint %s got no traffic before it died; forwarded per proxy: %v", dead.Addr(), faultForwarded(proxies))
		}
		if err := dead.SetDown(true); err != nil {
			t.Fatal(err)
		}
		downAt := time.Now()
		e := g.waitEndpoint(t, dead.Addr(), "unhealthy or ejected", 3*time.Second,
			func(e faultEndpoint) bool { return !e.Healthy || e.Ejected })
		t.Logf("dead endpoint after %v: %+v", time.Since(downAt).Round(time.Millisecond), e)
		time.Sleep(time.Until(downAt.Add(2500 * time.Millisecond)))
		atRestart := dead.Forwarded()
		if err := dead.Restart(); err != nil {
			t.Fatal(err)
		}
		g.checkNoFailures(t, "load with an endpoint down", wait(), exhaustedBefore)

		e = g.waitEndpoint(t, dead.Addr(), "healthy and admitted again", 15*time.Second, faultRoutable)
		t.Logf("restarted endpoint: %+v; forwarded per proxy: %v", e, faultForwarded(proxies))
		// It takes traffic again: at most 60 sequential requests until one
		// reaches it (P2C picks it with probability 2/3 each time).
		exhaustedBefore = g.budgetExhausted(t)
		var after []faultResult
		for n := 10000; n < 10060 && dead.Forwarded() == atRestart; n++ {
			after = append(after, g.predict(ctx, n))
		}
		g.checkNoFailures(t, "requests after the restart", after, exhaustedBefore)
		if dead.Forwarded() == atRestart {
			t.Errorf("restarted endpoint %s got no traffic in %d requests; forwarded per proxy: %v",
				dead.Addr(), len(after), faultForwarded(proxies))
		}
	})

	t.Run("ErrorRateEjection", func(t *testing.T) {
		proxies := startFaultProxies(t, models)
		g := startGatewayForFaults(t, func(listen, admin string) string {
			return faultGatewayYAML(listen, admin, faultGatewayOptions{
				endpoints: faultProxyAddrs(proxies), perTryTimeout: 500 * time.Millisecond,
				// A 2 s error-rate window slides within the test; the
				// ejection keeps its default 30 s.
				errorInterval:    2 * time.Second,
				baseEjectionTime: 30 * time.Second,
			})
		})
		g.waitAllRoutable(t, proxies)
		bad := proxies[0]
		bad.SetErrorEvery(20, codes.Internal)
		exhaustedBefore := g.budgetExhausted(t)
		ctx := t.Context()

		// At most 15 s of 40 req/s; stopped once isolation is checked.
		stop, wait := g.startLoad(ctx, 0, 15*faultRate)
		defer stop()
		e := g.waitEndpoint(t, bad.Addr(), "ejected", 10*time.Second, func(e faultEndpoint) bool { return e.Ejected })
		left := time.Until(e.EjectedUntil)
		t.Logf("ejected: %+v, %v left; proxy calls %d failed %d", e, left.Round(time.Millisecond), bad.Calls(), bad.Failed())
		if left <= 25*time.Second || left > 30*time.Second {
			t.Errorf("ejected_until is %v from now, want in (25s, 30s] (base_ejection_time 30s)", left)
		}
		if bad.Failed() == 0 {
			t.Errorf("endpoint ejected before any injected failure (calls %d)", bad.Calls())
		}
		// Calls already sent when the ejection happened may still land; then
		// nothing more while it is isolated.
		time.Sleep(300 * time.Millisecond)
		isolated := bad.Calls()
		others := proxies[1].Calls() + proxies[2].Calls()
		time.Sleep(3 * time.Second)
		if got := bad.Calls(); got != isolated {
			t.Errorf("ejected endpoint got %d calls while isolated", got-isolated)
		}
		if got := proxies[1].Calls() + proxies[2].Calls(); got <= others {
			t.Errorf("the other endpoints got no traffic while one was isolated")
		}
		if e, _ := g.endpoints(t); !e[bad.Addr()].Ejected {
			t.Errorf("endpoint re-admitted after ~3s, want 30s isolation: %+v", e[bad.Addr()])
		}
		stop()
		results := wait()

		ejections := g.metric(t, "sluice_gateway_upstream_ejections_total",
			`endpoint="`+bad.Addr()+`"`, `reason="error_rate"`)
		if ejections != 1 {
			t.Errorf("sluice_gateway_upstream_ejections_total{endpoint=%q,reason=\"error_rate\"} = %v, want 1", bad.Addr(), ejections)
		}
		// Every injected failure is retried elsewhere; a request may fail
		// only when the retry budget refused its retry.
		g.checkNoFailures(t, "load with a 5% failing endpoint", results, exhaustedBefore)
		t.Logf("calls to the bad endpoint %d (failed %d); forwarded per proxy %v",
			bad.Calls(), bad.Failed(), faultForwarded(proxies))
	})

	t.Run("HangingEndpoint", func(t *testing.T) {
		proxies := startFaultProxies(t, models)
		g := startGatewayForFaults(t, func(listen, admin string) string {
			return faultGatewayYAML(listen, admin, faultGatewayOptions{
				endpoints: faultProxyAddrs(proxies), perTryTimeout: 200 * time.Millisecond,
				errorInterval: 10 * time.Second, baseEjectionTime: 30 * time.Second,
			})
		})
		g.waitAllRoutable(t, proxies)
		hung := proxies[0]
		hung.SetHang(true)
		retriesBefore := g.metric(t, "sluice_gateway_retries_total", `service="`+faultService+`"`)
		exhaustedBefore := g.budgetExhausted(t)

		// 40 req/s for 4 s.
		_, wait := g.startLoad(t.Context(), 0, 4*faultRate)
		results := wait()
		g.checkNoFailures(t, "load with a hanging endpoint", results, exhaustedBefore)
		var slowest time.Duration
		for _, r := range results {
			slowest = max(slowest, r.latency)
			if r.latency >= time.Second {
				t.Errorf("request %d took %v, want under the 1s route timeout", r.n, r.latency)
			}
		}
		retries := g.metric(t, "sluice_gateway_retries_total", `service="`+faultService+`"`) - retriesBefore
		t.Logf("slowest request %v; retries %v; hung endpoint calls %d, forwarded per proxy %v",
			slowest, retries, hung.Calls(), faultForwarded(proxies))
		if hung.Calls() == 0 {
			t.Fatalf("the hanging endpoint got no calls; forwarded per proxy %v", faultForwarded(proxies))
		}
		if hung.Forwarded() != 0 {
			t.Errorf("hanging endpoint forwarded %d calls", hung.Forwarded())
		}
		if retries <= 0 {
			t.Errorf("sluice_gateway_retries_total{service=%q} grew by %v, want > 0", faultService, retries)
		}
		// Readiness still answers, so active health checks keep it healthy:
		// only outlier detection can take it out.
		eps, raw := g.endpoints(t)
		if e, ok := eps[hung.Addr()]; !ok || !e.Healthy {
			t.Errorf("hanging endpoint should still pass health checks; admin /endpoints: %s", raw)
		} else {
			t.Logf("hanging endpoint at the end: %+v", e)
		}
	})
}
