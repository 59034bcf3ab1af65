package integration_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The hostile-load tests attack a real `sluice serve -c` process and check
// what docs/security.md promises: a feature request with 1.5 M entity ids
// gets a clear 4xx, chunked bodies far over every limit on every HTTP port
// are refused, the process's resident memory stays under the documented
// bound throughout, and legitimate requests on the same ports keep
// succeeding meanwhile. TestSIGHUPDropsNothing reloads the configuration
// under load; TestFuturePush pushes a row dated an hour ahead.
//
// The memory tests run a plain (non-race) build of the binary: the bound
// is documented for the binary operators run, and the race detector's
// shadow memory multiplies every figure (here 1.8× at rest and 3.5× at
// the attack's peak), which would measure the detector rather than
// Sluice. The other tests use the suite's -race binary.

const (
	// hostileBudget is security.memory_budget_bytes at its default.
	hostileBudget = 256 << 20
	// hostileAllowance is what the process may hold beyond its resting
	// RSS and the budget, as docs/security.md ("Bounded memory") states
	// it: 3 × the budget. The budget counts wire bytes; a body buffer
	// grown as chunks arrive holds up to 1.25× its bytes, and Go's
	// collector (GOGC=100) lets the heap reach twice what was live at its
	// last cycle, so refused buffers awaiting collection can add as much
	// again (2.5× the budget); the rest covers connection buffers and
	// stacks of the ~100 attacking connections, decoded copies and pages
	// not yet returned to the OS. Measured here: 2.6 to 3.2× the budget
	// above rest with the plain binary; the -race binary took 2.5 GiB
	// above rest for the same attack (its shadow memory grows with the
	// heap), which is why these tests run the plain one.
	hostileAllowance = 3 * hostileBudget
	// hostileAttackBytes is one attacking body: 64 MiB and a little more,
	// so that it is over every listener's body limit (KServe's is
	// exactly 64 MiB) and no port may ever take one whole.
	hostileAttackBytes = 64<<20 + 64<<10
	// An attacker writes hostileChunk bytes every hostileTick: 8 MiB/s
	// per connection, 16 connections per port. The budget fills within a
	// second or two and stays under pressure for the whole window.
	hostileChunk = 128 << 10
	hostileTick  = 16 * time.Millisecond
	// hostileWindow is how long the attack runs; hostileMaxBodies bounds
	// the bodies one attacking connection sends in it.
	hostileWindow    = 6 * time.Second
	hostileMaxBodies = 100
	// hostileIDs is the entity count of the oversized feature request.
	hostileIDs = 1_500_000
)

// plainBuild is the non-race binary, built once per run next to binPath
// (TestMain removes that folder).
var plainBuild onceGo

func plainBinary(t *testing.T) string {
	t.Helper()
	return plainBuild.run(t, "build the plain sluice binary", filepath.Join(filepath.Dir(binPath), "sluice-plain"),
		"build", "-o", "{out}", "./cmd/sluice")
}

// hostileStart is gwStart on the plain binary. Its callers do not call
// t.Parallel, and no parallel test runs while a test that does not is
// running, so pointing binPath at the plain binary for the length of one
// start is safe; the chain starter itself stays the one every test shares.
func hostileStart(t *testing.T, repo string, gateway map[string]any) *gwChain {
	t.Helper()
	plain := plainBinary(t)
	race := binPath
	binPath = plain
	defer func() { binPath = race }()
	return gwStart(t, repo, gateway, gwKeyEnv...)
}

// hostileGateway is a gateway section with the main client (no rate
// limit), no anonymous access and service parcel-eta on version 1.
func hostileGateway(t *testing.T) map[string]any {
	t.Helper()
	return map[string]any{
		"drain_period": "100ms",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     []any{gwService(gwExample(t), "parcel-eta", nil, gwRoute("default", nil, "", 100, 0))},
	}
}

// procMem is a process's resident memory from /proc/<pid>/status.
type procMem struct {
	rss, hwm int64 // VmRSS and VmHWM (the peak), bytes
}

func readProcMem(pid int) (procMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	var m procMem
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return procMem{}, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, name, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return procMem{}, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			m.rss = kb << 10
		} else {
			m.hwm = kb << 10
		}
	}
	if m.rss == 0 || m.hwm == 0 {
		return procMem{}, fmt.Errorf("/proc/%d/status has no VmRSS or VmHWM", pid)
	}
	return m, nil
}

// memWatch tracks a process's peak RSS over a stretch of time: it resets
// the kernel's peak (VmHWM, by writing 5 to /proc/<pid>/clear_refs) and
// samples VmRSS every 5ms as well, in case the reset is not allowed.
type memWatch struct {
	pid     int
	resetOK bool
	max     atomic.Int64
	stop    chan struct{}
	done    chan struct{}
}

func watchMem(t *testing.T, pid int) *memWatch {
	t.Helper()
	w := &memWatch{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v): the peak is sampled every 5ms", err)
	} else {
		w.resetOK = true
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, err := readProcMem(pid); err == nil && m.rss > w.max.Load() {
				w.max.Store(m.rss)
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// peak stops the watch and returns the peak RSS since it started.
func (w *memWatch) peak(t *testing.T) int64 {
	t.Helper()
	close(w.stop)
	<-w.done
	p := w.max.Load()
	if w.resetOK {
		m, err := readProcMem(w.pid)
		if err != nil {
			t.Fatal(err)
		}
		p = max(p, m.hwm)
	}
	return p
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// legit sends one kind of small, legitimate request in a loop until stop
// is closed (at most 2000 times) and counts the answers: every one must be
// a 200.
type legit struct {
	name      string
	send      func(ctx context.Context) (gwResult, error)
	sent, ok  atomic.Int64
	mu        sync.Mutex // protects failures and latencies
	failures  []string
	latencies []time.Duration
}

func (l *legit) run(ctx context.Context, stop <-chan struct{}) {
	for range 2000 {
		select {
		case <-stop:
			return
		default:
		}
		begin := time.Now()
		res, err := l.send(ctx)
		took := time.Since(begin)
		l.sent.Add(1)
		l.mu.Lock()
		l.latencies = append(l.latencies, took)
		switch {
		case err != nil:
			l.failures = append(l.failures, err.Error())
		case res.code != http.StatusOK:
			l.failures = append(l.failures, fmt.Sprintf("%d %s", res.code, bytes.TrimSpace(res.body)))
		default:
			l.ok.Add(1)
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// check fails the test unless every request succeeded, and at least min
// were sent.
func (l *legit) check(t *testing.T, minSent int64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var worst time.Duration
	for _, d := range l.latencies {
		worst = max(worst, d)
	}
	t.Logf("legitimate %s: %d sent, %d answered 200 (slowest %v)", l.name, l.sent.Load(), l.ok.Load(), worst.Round(time.Millisecond))
	if l.sent.Load() < minSent {
		t.Errorf("legitimate %s: only %d requests sent during the attack, want at least %d", l.name, l.sent.Load(), minSent)
	}
	if n := len(l.failures); n > 0 {
		t.Errorf("legitimate %s: %d of %d requests failed during the attack, want none; first: %s", l.name, n, l.sent.Load(), l.failures[0])
	}
}

// legitTraffic starts the three kinds of legitimate request: a prediction
// through the gateway, a KServe infer on the model server, a feature read
// on the feature server.
func legitTraffic(t *testing.T, c *gwChain, ids gwIDs) []*legit {
	t.Helper()
	predictBody := gwBody(ids.users[0], ids.packages[0], ids.routes[0], 30, 0.5)
	inferBody := readFile(t, "examples/requests/parcel_eta.json")
	featureBody, _ := json.Marshal(map[string]any{
		"features": []string{"route_features:distance_km"},
		"entities": map[string]any{"route_id": ids.routes[:min(3, len(ids.routes))]},
	})
	return []*legit{
		{name: "gateway predict", send: func(ctx context.Context) (gwResult, error) {
			return c.predict(ctx, "parcel-eta", predictBody, gwAuth)
		}},
		{name: "KServe infer", send: func(ctx context.Context) (gwResult, error) {
			return c.send(ctx, http.MethodPost, "http://"+c.models+"/v2/models/parcel_eta/infer", inferBody, nil)
		}},
		{name: "get-online-features", send: func(ctx context.Context) (gwResult, error) {
			return c.send(ctx, http.MethodPost, "http://"+c.features+"/get-online-features", featureBody, nil)
		}},
	}
}

// startLegit runs ls until the returned stop function is called.
func startLegit(ctx context.Context, ls []*legit) (stop func()) {
	ch := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() { l.run(ctx, ch) })
	}
	return func() {
		close(ch)
		wg.Wait()
	}
}

// hostileIDsBody is a /get-online-features body asking for n route ids.
func hostileIDsBody(n int) []byte {
	b := make([]byte, 0, 8*n+128)
	b = append(b, `{"features":["route_features:distance_km"],"entities":{"route_id":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(i+1), 10)
	}
	return append(b, "]}}"...)
}

// metricsAddr is the model server's metrics listener in the chain's config.
func (c *gwChain) metricsAddr(t *testing.T) string {
	t.Helper()
	var cfg struct {
		ModelServer struct {
			MetricsPort int `yaml:"metrics_port"`
		} `yaml:"model_server"`
	}
	if err := yaml.Unmarshal(c.config, &cfg); err != nil || cfg.ModelServer.MetricsPort == 0 {
		t.Fatalf("model_server.metrics_port in the chain's config: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", cfg.ModelServer.MetricsPort)
}

// TestHostileLoad runs one chain (plain binary) and attacks it twice:
// oversized feature requests, then chunked bodies on every HTTP port. The
// process's RSS is measured at rest after a warm-up, and its peak during
// each attack must stay under rest + budget + allowance.
func TestHostileLoad(t *testing.T) {
	// Not parallel: it measures the server's memory, and points binPath at the plain binary for one start.
	c := hostileStart(t, gwFeatureRepo(t, ""), hostileGateway(t))
	pid := c.cmd.Process.Pid
	ids := c.presentIDs(t)

	// Warm-up: every code path the attacks and the legitimate traffic
	// use, so that the baseline holds their caches and pools.
	warm := legitTraffic(t, c, ids)
	for range 30 {
		for _, l := range warm {
			if res, err := l.send(t.Context()); err != nil || res.code != http.StatusOK {
				t.Fatalf("warm-up %s: %v %d %s", l.name, err, res.code, res.body)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	rest, err := readProcMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	bound := rest.rss + hostileBudget + hostileAllowance
	t.Logf("RSS at rest after warm-up: %s (start-up peak %s); bound for the attacks: rest + budget %s + allowance %s = %s",
		mib(rest.rss), mib(rest.hwm), mib(hostileBudget), mib(hostileAllowance), mib(bound))

	for _, a := range []struct {
		name   string
		attack func(t *testing.T)
	}{
		{"EntityIDs", func(t *testing.T) {
			t.Helper()
			c.checkEntityIDs(t, ids)
		}},
		{"ChunkedBodies", func(t *testing.T) {
			t.Helper()
			c.checkChunkedBodies(t, ids)
		}},
	} {
		t.Run(a.name, func(t *testing.T) {
			w := watchMem(t, pid)
			a.attack(t)
			peak := w.peak(t)
			t.Logf("RSS: at rest %s, peak during the attack %s (+%s, %.1f× the budget), bound %s",
				mib(rest.rss), mib(peak), mib(peak-rest.rss), float64(peak-rest.rss)/hostileBudget, mib(bound))
			if peak > bound {
				t.Errorf("peak RSS %s exceeds the documented bound %s (rest %s + budget %s + allowance %s)",
					mib(peak), mib(bound), mib(rest.rss), mib(hostileBudget), mib(hostileAllowance))
			}
		})
	}
	t.Run("HeaderLimits", func(t *testing.T) {
		c.checkHeaderLimits(t)
	})
	if strings.Contains(c.logs.String(), "panic") {
		t.Errorf("the process logged a panic; logs:\n%s", c.tail())
	}
}

// checkHeaderLimits sends every HTTP port 101 header fields, then one
// header of 80 KiB: both over the defaults (100 fields, 64 KiB, which Go's
// server enforces with 4 KiB of slack), both answered 431 before any
// handler runs.
func (c *gwChain) checkHeaderLimits(t *testing.T) {
	t.Helper()
	ports := []struct{ name, url string }{
		{"gateway", "http://" + c.listen + "/ready"},
		{"admin", "http://" + c.admin + "/config_dump"},
		{"models_http", "http://" + c.models + "/v2/health/live"},
		{"features", "http://" + c.features + "/health"},
		{"models_metrics", "http://" + c.metricsAddr(t) + "/metrics"},
	}
	many := map[string]string{}
	for i := range 101 {
		many[fmt.Sprintf("X-Hostile-%d", i)] = "v"
	}
	for _, p := range ports {
		t.Run(p.name, func(t *testing.T) {
			if res, err := c.send(t.Context(), http.MethodGet, p.url, nil, nil); err != nil || res.code != http.StatusOK {
				t.Fatalf("GET %s without extra headers: %v %d %s", p.url, err, res.code, res.body)
			}
			res, err := c.send(t.Context(), http.MethodGet, p.url, nil, many)
			var e errorBody
			if err != nil || res.code != http.StatusRequestHeaderFieldsTooLarge || json.Unmarshal(res.body, &e) != nil || e.Reason != "too_many_headers" {
				t.Errorf("101 header fields: %v %d %s, want 431 too_many_headers", err, res.code, res.body)
			}
			res, err = c.send(t.Context(), http.MethodGet, p.url, nil, map[string]string{"X-Hostile": strings.Repeat("h", 80<<10)})
			if err != nil || res.code != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("an 80 KiB header: %v %d %s, want 431", err, res.code, res.body)
			}
		})
	}
}

// checkEntityIDs sends /get-online-features with 1.5 M entity ids: once,
// then three at once while legitimate requests run. Each answers 413
// too_many_entity_rows naming the limit.
func (c *gwChain) checkEntityIDs(t *testing.T, ids gwIDs) {
	t.Helper()
	body := hostileIDsBody(hostileIDs)
	if len(body) >= 16<<20 {
		t.Fatalf("the 1.5 M id body is %d bytes: over the feature server's 16 MiB body limit, so the row cap would not be what answers", len(body))
	}
	t.Logf("1.5 M entity ids: a %s body", mib(int64(len(body))))
	url := "http://" + c.features + "/get-online-features"
	client := &http.Client{Timeout: 60 * time.Second}
	defer client.CloseIdleConnections()
	send := func() (gwResult, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return gwResult{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return gwResult{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return gwResult{code: resp.StatusCode, hdr: resp.Header, body: b}, err
	}
	check := func(res gwResult, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("1.5 M entity ids: %v", err)
			return
		}
		var e errorBody
		if jerr := json.Unmarshal(res.body, &e); jerr != nil || res.code != http.StatusRequestEntityTooLarge ||
			e.Reason != "too_many_entity_rows" || !strings.Contains(e.Error, "10000") {
			t.Errorf("1.5 M entity ids: %d %s, want 413 too_many_entity_rows naming the limit of 10000 rows", res.code, res.body)
		}
	}

	check(send())

	legits := legitTraffic(t, c, ids)
	stopLegit := startLegit(t.Context(), legits)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { check(send()) })
	}
	wg.Wait()
	stopLegit()
	for _, l := range legits {
		l.check(t, 1)
	}
}

// attackTarget is one HTTP port under attack.
type attackTarget struct {
	name string
	url  string
	hdr  map[string]string
	// reads is set where the endpoint reads the body: it must answer
	// tooLarge (413 where it is 0) body_too_large or 503 overloaded.
	// Elsewhere (no endpoint on the port takes a body) it must answer an
	// error without reading the body.
	reads bool
	// tooLarge is the port's status for a body over its limit: 0 is 413;
	// the KServe HTTP port answers 400, as Triton.
	tooLarge int
}

// attackTally counts one port's attacking bodies by outcome.
type attackTally struct {
	mu       sync.Mutex // protects the fields below
	bodies   int
	byStatus map[int]int
	byReason map[string]int
	closed   int      // the connection closed before the whole body was sent
	bad      []string // outcomes that are not a refusal
	maxSent  int64    // the most bytes of one body the client wrote before the outcome
}

func (a *attackTally) add(code int, reason string, sent int64, bad string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bodies++
	a.maxSent = max(a.maxSent, sent)
	switch {
	case bad != "":
		a.bad = append(a.bad, bad)
	case code == 0:
		a.closed++
	default:
		a.byStatus[code]++
		if reason != "" {
			a.byReason[reason]++
		}
	}
}

// errAnswered ends an attacking body's writer once the server answered.
var errAnswered = errors.New("the server answered")

// attackOnce sends one chunked body of hostileAttackBytes '0' characters
// at a steady pace and classifies the outcome.
func attackOnce(ctx context.Context, client *http.Client, tgt attackTarget, chunk []byte, tally *attackTally) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	var written atomic.Int64
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		tick := time.NewTicker(hostileTick)
		defer tick.Stop()
		for written.Load() < hostileAttackBytes {
			select {
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			case <-tick.C:
			}
			n := min(int64(len(chunk)), hostileAttackBytes-written.Load())
			if _, err := pw.Write(chunk[:n]); err != nil {
				return // the transport closed the body: the server answered or hung up
			}
			written.Add(n)
		}
		_ = pw.Close()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tgt.url, pr)
	if err != nil {
		_ = pr.CloseWithError(err)
		<-fed
		tally.add(0, "", 0, err.Error())
		return
	}
	req.ContentLength = -1 // chunked: no length to check up front
	req.Header.Set("Content-Type", "application/json")
	for k, v := range tgt.hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	sent := written.Load()
	_ = pr.CloseWithError(errAnswered)
	<-fed
	whole := sent >= hostileAttackBytes
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		tally.add(0, "", sent, fmt.Sprintf("neither answered nor closed within 20s (%d bytes written): %v", sent, err))
		return
	case err != nil && whole:
		tally.add(0, "", sent, fmt.Sprintf("the whole %d-byte body was sent, then: %v", sent, err))
		return
	case err != nil:
		tally.add(0, "", sent, "") // closed before the body was read whole: refused
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e errorBody
	_ = json.Unmarshal(b, &e)
	switch {
	case resp.StatusCode < 400:
		tally.add(resp.StatusCode, e.Reason, sent, fmt.Sprintf("answered %d %s after %d bytes", resp.StatusCode, bytes.TrimSpace(b), sent))
	case tgt.reads && (resp.StatusCode != cmp.Or(tgt.tooLarge, http.StatusRequestEntityTooLarge) || e.Reason != "body_too_large") &&
		(resp.StatusCode != http.StatusServiceUnavailable || e.Reason != "overloaded"):
		tally.add(resp.StatusCode, e.Reason, sent, fmt.Sprintf("answered %d %s, want %d body_too_large or 503 overloaded",
			resp.StatusCode, bytes.TrimSpace(b), cmp.Or(tgt.tooLarge, http.StatusRequestEntityTooLarge)))
	default:
		tally.add(resp.StatusCode, e.Reason, sent, "")
	}
}

// checkChunkedBodies sends, on every HTTP port of the chain, 16 concurrent
// chunked bodies of 64 MiB (each connection sending body after body for
// hostileWindow) while legitimate requests run on the same ports.
func (c *gwChain) checkChunkedBodies(t *testing.T, ids gwIDs) {
	t.Helper()
	targets := []attackTarget{
		{name: "gateway", url: "http://" + c.listen + "/v1/services/parcel-eta:predict", hdr: gwAuth, reads: true},
		// The admin port has no endpoint that reads a body: the attack
		// goes to a write route, which answers without reading it.
		{name: "admin", url: "http://" + c.admin + "/rollout/parcel-eta/pause"},
		{name: "models_http", url: "http://" + c.models + "/v2/models/parcel_eta/infer", reads: true, tooLarge: http.StatusBadRequest},
		{name: "features", url: "http://" + c.features + "/get-online-features", reads: true},
		// The metrics port serves GET /metrics only: a POST is answered
		// 405 without reading the body.
		{name: "models_metrics", url: "http://" + c.metricsAddr(t) + "/metrics"},
	}
	chunk := make([]byte, hostileChunk)
	for i := range chunk {
		chunk[i] = '0'
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	legits := legitTraffic(t, c, ids)
	stopLegit := startLegit(t.Context(), legits)
	begin := time.Now()
	end := begin.Add(hostileWindow)
	tallies := make([]*attackTally, len(targets))
	var wg sync.WaitGroup
	for i, tgt := range targets {
		tallies[i] = &attackTally{byStatus: map[int]int{}, byReason: map[string]int{}}
		for range 16 {
			wg.Go(func() {
				for n := 0; n < hostileMaxBodies && time.Now().Before(end); n++ {
					attackOnce(t.Context(), client, tgt, chunk, tallies[i])
				}
			})
		}
	}
	wg.Wait()
	attack := time.Since(begin)
	stopLegit()

	for i, tgt := range targets {
		a := tallies[i]
		t.Logf("%-15s %4d bodies: statuses %v reasons %v, %d closed early; at most %s of one body written before the answer (socket buffers included)",
			tgt.name, a.bodies, a.byStatus, a.byReason, a.closed, mib(a.maxSent))
		if a.bodies < 16 {
			t.Errorf("%s: only %d attacking bodies sent, want at least 16", tgt.name, a.bodies)
		}
		if len(a.bad) > 0 {
			t.Errorf("%s: %d of %d attacking bodies were not refused; first: %s", tgt.name, len(a.bad), a.bodies, a.bad[0])
		}
	}
	for _, l := range legits {
		l.check(t, 10)
	}
	t.Logf("chunked bodies: %v from the first body to the last answer", attack.Round(time.Millisecond))

	// Every byte charged to the budget was released.
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "sluice_admission_inflight_bytes 0 after the attack (else the budget leaked)", func() (bool, string) {
		res, err := c.get(t.Context(), "http://"+c.admin+"/metrics")
		if err != nil || res.code != http.StatusOK {
			t.Fatalf("admin /metrics: %v %d", err, res.code)
		}
		v, ok := gwMetric(string(res.body), "sluice_admission_inflight_bytes")
		return ok && v == 0, fmt.Sprintf("%v (found %v)", v, ok)
	})
}

// configPath is the sluice.yaml the chain runs (the -c argument).
func (c *gwChain) configPath(t *testing.T) string {
	t.Helper()
	args := c.cmd.Args
	for i, a := range args[:len(args)-1] {
		if a == "-c" {
			return args[i+1]
		}
	}
	t.Fatalf("no -c argument in %v", args)
	return ""
}

// reloadedRe matches the log line of a reload that SIGHUP applied.
var reloadedRe = regexp.MustCompile(`msg=reloaded(\s|$)`)

// TestSIGHUPDropsNothing sends SIGHUP to a chain under prediction load:
// twice with a harmless change to the file, once with a broken file. The
// same process answers every request 200, the changes take effect, and
// the broken file is refused while the running configuration keeps
// serving.
func TestSIGHUPDropsNothing(t *testing.T) {
	// Not parallel: its rate limits are timed.
	base := gwExample(t)
	limited := func(rps int) map[string]any {
		return map[string]any{
			"id": "it-limited", "api_key": "${" + gwLimitedKeyEnv + "}",
			"rate_limit": map[string]any{"requests_per_second": rps, "burst": rps},
		}
	}
	gateway := func(rps, spareV2 int) map[string]any {
		return map[string]any{
			"drain_period": "100ms",
			"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}, limited(rps)},
			"anonymous":    map[string]any{"allowed": false},
			"services": []any{
				gwService(base, "parcel-eta", nil, gwRoute("default", nil, "", 100, 0)),
				gwService(base, "spare", nil, gwRoute("default", nil, "", 100-spareV2, spareV2)),
			},
		}
	}
	c := gwStart(t, gwFeatureRepo(t, ""), gateway(5, 0), gwKeyEnv...)
	ids := c.presentIDs(t)
	path := c.configPath(t)
	pid := c.cmd.Process.Pid

	// rewrite replaces the gateway section of the running file.
	rewrite := func(gw map[string]any) {
		t.Helper()
		var cfg map[string]any
		if err := yaml.Unmarshal(c.config, &cfg); err != nil {
			t.Fatal(err)
		}
		next := cfg["gateway"].(map[string]any)
		maps.Copy(next, gw)
		b, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, path, b)
	}
	// applied reads the it-limited rate and the spare service's version 2
	// weight from the admin config dump.
	applied := func() (rps, spareV2 float64) {
		t.Helper()
		var dump struct {
			Gateway struct {
				Clients []struct {
					ID        string `json:"id"`
					RateLimit struct {
						RPS float64 `json:"requests_per_second"`
					} `json:"rate_limit"`
				} `json:"clients"`
				Services []struct {
					Name   string `json:"name"`
					Routes []struct {
						Route struct {
							Weighted []struct {
								Version string  `json:"version"`
								Weight  float64 `json:"weight"`
							} `json:"weighted"`
						} `json:"route"`
					} `json:"routes"`
				} `json:"services"`
			} `json:"gateway"`
		}
		c.adminJSON(t, "/config_dump", &dump)
		for _, cl := range dump.Gateway.Clients {
			if cl.ID == "it-limited" {
				rps = cl.RateLimit.RPS
			}
		}
		for _, s := range dump.Gateway.Services {
			if s.Name != "spare" {
				continue
			}
			for _, r := range s.Routes {
				for _, w := range r.Route.Weighted {
					if w.Version == "2" {
						spareV2 = w.Weight
					}
				}
			}
		}
		return rps, spareV2
	}
	if rps, v2 := applied(); rps != 5 || v2 != 0 {
		t.Fatalf("config_dump at start: it-limited %v requests/s, spare version 2 weight %v; want 5 and 0", rps, v2)
	}
	// waitLog waits until re matches n times in the log.
	waitLog := func(re *regexp.Regexp, n int, what string) {
		t.Helper()
		harness.WaitFor(t, 15*time.Second, 20*time.Millisecond, what+" in the log after SIGHUP", func() (bool, string) {
			return len(re.FindAllStringIndex(c.logs.String(), -1)) >= n, "logs:\n" + c.tail()
		})
	}
	hup := func() {
		t.Helper()
		if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	// 8 workers send predictions with unique bodies for the whole test.
	type outcome struct {
		code int
		err  error
	}
	var (
		mu       sync.Mutex // protects outcomes
		outcomes []outcome
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	deadline := time.Now().Add(30 * time.Second)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				// base_eta w + i/1000 makes every body unique.
				body := gwBody(ids.users[(w*131+i)%len(ids.users)], ids.packages[i%len(ids.packages)], ids.routes[w%len(ids.routes)],
					20+float64(w)+float64(i)/1000, 0.5)
				res, err := c.predict(t.Context(), "parcel-eta", body, gwAuth)
				mu.Lock()
				outcomes = append(outcomes, outcome{code: res.code, err: err})
				mu.Unlock()
			}
		})
	}
	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-c.done:
			t.Fatalf("sluice exited (%v); logs:\n%s", c.waitErr, c.tail())
		}
	}

	sleep(1500 * time.Millisecond)
	rewrite(gateway(7, 0))
	hup()
	waitLog(reloadedRe, 1, `"reloaded" after the first SIGHUP`)
	if rps, _ := applied(); rps != 7 {
		t.Errorf("after the first SIGHUP config_dump shows it-limited at %v requests/s, want 7", rps)
	}

	sleep(1500 * time.Millisecond)
	rewrite(gateway(7, 40))
	hup()
	waitLog(reloadedRe, 2, `"reloaded" after the second SIGHUP`)
	if rps, v2 := applied(); rps != 7 || v2 != 40 {
		t.Errorf("after the second SIGHUP config_dump shows it-limited %v requests/s, spare version 2 weight %v; want 7 and 40", rps, v2)
	}

	sleep(1500 * time.Millisecond)
	mustWrite(t, path, []byte("gateway: [this is: not, valid\n"))
	hup()
	waitLog(regexp.MustCompile(`msg="reload refused; the running configuration keeps serving"`), 1, "reload refusal after the broken file")
	sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if rps, v2 := applied(); rps != 7 || v2 != 40 {
		t.Errorf("after the broken file config_dump shows it-limited %v requests/s, spare version 2 weight %v; want the running 7 and 40", rps, v2)
	}
	select {
	case <-c.done:
		t.Fatalf("sluice exited (%v); logs:\n%s", c.waitErr, c.tail())
	default:
	}
	if c.cmd.Process.Pid != pid {
		t.Errorf("pid %d, want the same process %d", c.cmd.Process.Pid, pid)
	}
	if err := c.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("process %d: %v", pid, err)
	}
	ok := 0
	var failed []string
	for _, o := range outcomes {
		switch {
		case o.err != nil:
			failed = append(failed, o.err.Error())
		case o.code != http.StatusOK:
			failed = append(failed, strconv.Itoa(o.code))
		default:
			ok++
		}
	}
	t.Logf("SIGHUP under load: %d requests sent, %d answered 200; 2 reloads, 1 refused", len(outcomes), ok)
	if len(outcomes) < 100 {
		t.Errorf("only %d requests sent under load, want at least 100", len(outcomes))
	}
	if ok != len(outcomes) {
		t.Errorf("%d of %d requests were not answered 200 across the SIGHUPs; first: %s", len(failed), len(outcomes), failed[0])
	}
	// The spare service now routes by the reloaded weights.
	seen := map[string]int{}
	for i := range 40 {
		res := c.mustPredict(t, "spare", gwBody(ids.users[i%len(ids.users)], ids.packages[0], ids.routes[0], 30, 0.5), gwAuth)
		a, _, _ := res.mustAnswer(t)
		seen[a.Version]++
	}
	if seen["2"] == 0 || seen["1"] == 0 {
		t.Errorf("service spare after the reload to 60/40: versions %v, want both", seen)
	}
}

// TestFuturePush pushes a route row dated an hour ahead through the chain's
// feature server: 400 timestamp_in_future, nothing stored; a push for the
// same route dated now is then accepted and read back.
func TestFuturePush(t *testing.T) {
	t.Parallel()
	c := gwStart(t, gwFeatureRepo(t, ""), hostileGateway(t), gwKeyEnv...)
	const route = 7
	push := func(ts time.Time, distance float64) gwResult {
		t.Helper()
		df := map[string][]any{"route_id": {route}, "event_timestamp": {ts.UTC().Format(time.RFC3339Nano)}}
		for _, s := range []string{"avg_speed_kmh", "traffic_index", "stops", "hour_sin", "hour_cos", "weekday_sin", "weekday_cos"} {
			df[s] = []any{1.0}
		}
		df["distance_km"] = []any{distance}
		df["embedding"] = []any{make([]float64, 24)}
		b, _ := json.Marshal(map[string]any{"push_source_name": "route_push", "df": df, "to": "online"})
		res, err := c.send(t.Context(), http.MethodPost, "http://"+c.features+"/push", b, nil)
		if err != nil {
			t.Fatalf("push: %v", err)
		}
		return res
	}
	read := func() (any, string) {
		t.Helper()
		rows := c.onlineFeatures(t, map[string]any{"features": []string{"route_features:distance_km"}, "entities": map[string]any{"route_id": []int{route}}})
		return rows.Results[1].Values[0], rows.Results[1].Statuses[0]
	}
	before, _ := read()

	res := push(time.Now().Add(time.Hour), 4321.5)
	var e errorBody
	if err := json.Unmarshal(res.body, &e); err != nil || res.code != http.StatusBadRequest || e.Reason != "timestamp_in_future" {
		t.Fatalf("push dated an hour ahead: %d %s, want 400 timestamp_in_future", res.code, res.body)
	}
	if !strings.Contains(e.Error, "event_timestamp") || !strings.Contains(e.Error, "tolerance") {
		t.Errorf("error %q: want it to name the column and the tolerance", e.Error)
	}
	if v, _ := read(); v == 4321.5 || fmt.Sprint(v) != fmt.Sprint(before) {
		t.Errorf("distance_km of route %d is %v after the refused push, want the stored %v", route, v, before)
	}

	res = push(time.Now(), 1234.5)
	if res.code != http.StatusOK {
		t.Fatalf("push dated now after the refused one: %d %s, want 200", res.code, res.body)
	}
	if v, status := read(); v != 1234.5 || status != "PRESENT" {
		t.Errorf("route %d after the push: distance_km %v %s, want 1234.5 PRESENT", route, v, status)
	}
}
