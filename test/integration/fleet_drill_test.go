package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/release/rollout"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestFleetDrill is issue 15's multi-replica drill with real processes:
// three `sluice serve -c` replicas (each a gateway, a model server and a
// feature server; the features in the shared Redis at 127.0.0.1:6379)
// share their rollout and fallback baselines through a private
// nats-server (natstest). The load is spread over the three gateways by
// the test's own round-robin client (no HAProxy: a request refused at
// connect, which never reached a process, goes to the next gateway, as a
// load balancer's retry would); every request is counted.
//
//  1. A regressed candidate (version 2, whose confidence is below the
//     gate's threshold on every answer) is rolled back fleet-wide: one
//     decision in every replica's history, and no answer of version 2
//     to a request sent more than a second after it.
//  2. The gate trips on fleet-wide counts: the reason counts at least
//     min_requests candidate requests while no replica routed that many.
//  3. A replica killed with SIGKILL under load costs only the requests it
//     had in flight.
//  4. The killed replica, started again, has the fleet's fallback baseline
//     before its first request and triggers the fallback within seconds
//     of drifted traffic (buckets of 4s stand for the hours).
//  5. NATS killed for 15 s: the replicas keep serving with their last
//     state and say so on GET /cluster; once it is back they converge (a
//     reset on one replica reaches the others within a second).
//  6. NATS hung (SIGSTOP) for 10 s: its connections stay open and nothing
//     answers, the failure a dead broker's timeouts never see. No request
//     waits on it (every answer 200, none as slow as a shared-state
//     timeout), the replicas notice by their pings and say so, and once it
//     runs again they converge.
func TestFleetDrill(t *testing.T) {
	// Not parallel: it bounds request latency and how fast replicas converge.
	nats, repo := flSharedState(t, "fleetit")

	const minRequests = 150
	base := gwExample(t)
	ro := gwService(base, flRollout, nil, gwRoute("default", nil, "", 100, 0))
	ro["rollout"] = map[string]any{
		"stable":    map[string]any{"version": "1"},
		"candidate": map[string]any{"version": "2"},
		"stages":    []any{map[string]any{"name": "all", "traffic_percent": 50, "min_duration": "1h"}},
		"gates": map[string]any{
			"max_error_rate": 0.5, "max_p95_latency_ratio": 100, "max_low_confidence_share": 0.15, "confidence_below": 1,
		},
		"min_requests": minRequests,
	}
	steady := gwService(base, flSteady, map[string]any{
		"output": "eta_prediction", "baseline_window": "4s", "history": 30, "window": "1s",
		"trigger":    map[string]any{"band": 15, "duration": "1s", "clear_duration": "1s"},
		"confidence": map[string]any{"output": "confidence_score", "below": 0.7},
		"rule":       "base_eta + route_delay_factor * distance_km",
	}, gwRoute("default", nil, "", 100, 0))
	// The drift reference is recorded from the first 5 s of live traffic,
	// by the first replica to finish, for the whole fleet.
	steady["drift"] = map[string]any{"record_for": "5s", "interval": "1s"}
	probe := gwService(base, "probe", nil, gwRoute("default", nil, "", 100, 0))
	gateway := map[string]any{
		"drain_period": "200ms",
		"access_log":   "off",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     []any{ro, steady, probe},
	}
	chains := flReplicas(t, 3, "drill", nats, repo, gateway)
	var cs flCluster
	chains[0].adminJSON(t, "/cluster", &cs)
	if cs.Mode != "fleet" || !cs.Connected || cs.Replica != "gw-0" {
		t.Fatalf("GET /cluster: %+v, want a connected fleet replica gw-0", cs)
	}

	low, high := flDriftSets(t, chains[0])
	l := newFlLoad(t, chains, low)

	// 1 and 2: the regressed candidate.
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second) // bounds every load of the drill
	defer cancel()
	l.start(ctx, 90, 4000)
	var decided time.Time
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "a rollback", func() (bool, string) {
		for _, c := range chains {
			if st := flStatus(t, c); st.State == rollout.StateRolledBack {
				decided = flRollbackTime(t, st)
				return true, ""
			}
		}
		return false, fmt.Sprintf("statuses %+v", flStatuses(t, chains))
	})
	// Every replica follows within a second of the decision.
	flWaitState(t, chains, decided, "the rollback", func(st flRolloutStatus) bool { return st.State == rollout.StateRolledBack })
	time.Sleep(2 * time.Second) // load goes on under the rolled-back state
	l.halt()
	l.mustAllOK(t)

	var reason *rollout.Reason
	for i, c := range chains {
		st := flStatus(t, c)
		if got := flRollbackTime(t, st); !got.Equal(decided) {
			t.Errorf("replica %d: rollback at %v, replica 0's at %v: not one decision", i, got, decided)
		}
		n := 0
		for _, h := range st.History {
			if h.Kind == rollout.KindRollback {
				n++
			}
		}
		if n != 1 {
			t.Errorf("replica %d: %d rollbacks in its history, want 1", i, n)
		}
		reason = st.Reason
	}
	rollbacks, own := 0.0, []float64{}
	for _, c := range chains {
		m := c.metricsText(t)
		v, _ := gwMetric(m, `sluice_rollout_transitions_total{kind="rollback",service="`+flRollout+`"}`)
		rollbacks += v
		cand, _ := gwMetric(m, `sluice_rollout_requests_total{arm="candidate",group="all",service="`+flRollout+`"}`)
		own = append(own, cand)
	}
	if rollbacks != 1 {
		t.Errorf("%v rollback transitions across the fleet, want exactly 1", rollbacks)
	}
	if reason == nil || reason.Gate != rollout.GateLowConfidenceShare || reason.Requests < minRequests {
		t.Fatalf("rollback reason %+v: want low_confidence_share over at least %d candidate requests", reason, minRequests)
	}
	for i, n := range own {
		if n >= minRequests {
			t.Errorf("replica %d routed %v candidate requests: the drill needs every replica below min_requests %d", i, n, minRequests)
		}
	}
	t.Logf("rollback at %v on %d fleet-wide candidate requests; per replica routed %v (each < %d)",
		decided.Format(time.RFC3339Nano), reason.Requests, own, minRequests)
	lastV2, v2 := l.lastVersion2(decided)
	t.Logf("%d answers of version 2; the last to a request sent %v after the decision", v2, lastV2)
	if lastV2 > time.Second {
		t.Errorf("version 2 answered a request sent %v after the rollback decision, want at most 1s", lastV2)
	}

	// 3: SIGKILL of replica 2 under load.
	if n := flBaselineBuckets(t, chains[2]); n == 0 {
		t.Fatalf("replica 2 has no completed baseline bucket after the first phase")
	}
	l.reset()
	l.start(ctx, 90, 2000)
	time.Sleep(1500 * time.Millisecond)
	if err := chains[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-chains[2].done
	// The process is gone: a request sent before this may have been
	// accepted by it (in flight), none sent after can be.
	killed := time.Now()
	time.Sleep(1500 * time.Millisecond)
	l.halt()
	lost := l.checkKill(t, 2, killed)
	t.Logf("SIGKILL of replica 2: %d requests, %d lost (all in flight on it at the kill), %d refused at connect and sent on",
		len(l.reqs), lost, l.moved.Load())

	// 4: replica 2 again: the fleet's baseline before its first request.
	chains[2] = drRestart(t, chains[2])
	l.chains[2] = chains[2]
	if n := flBaselineBuckets(t, chains[2]); n == 0 {
		t.Fatal("the restarted replica has no baseline before its first request: not loaded from the fleet")
	} else {
		t.Logf("restarted replica 2 starts with %d baseline buckets from the fleet", n)
	}
	var dv []struct {
		Service        string    `json:"service"`
		ReferenceFrom  string    `json:"reference_from"`
		RecordingUntil time.Time `json:"recording_until"`
	}
	chains[2].adminJSON(t, "/drift", &dv)
	if len(dv) != 1 || dv[0].ReferenceFrom != "recorded" {
		t.Fatalf("GET /drift on the restarted replica: %+v; want the reference the fleet recorded, not a new recording", dv)
	}
	drift := newFlLoad(t, chains[2:], high)
	drifted := time.Now()
	drift.start(ctx, 40, 400)
	harness.WaitFor(t, time.Until(drifted.Add(10*time.Second)), 50*time.Millisecond, "the restarted replica triggering the fallback on drifted traffic", func() (bool, string) {
		return flTriggered(t, chains[2]), flFallbackJSON(t, chains[2])
	})
	triggered := time.Since(drifted)
	drift.halt()
	drift.mustAllOK(t)
	t.Logf("restarted replica triggered the fallback %v after drifted traffic began (its first own bucket could complete only after 4s)", triggered.Round(time.Millisecond))
	if triggered > 4*time.Second {
		t.Errorf("triggered after %v: no faster than a replica building its baseline from scratch", triggered)
	}

	// 5: NATS down for 15 s, under load.
	l.reset()
	l.start(ctx, 40, 2000)
	nats.Kill()
	if stale := flWatchStale(t, chains, 15*time.Second); len(stale) != 3 {
		t.Errorf("replicas that said the shared state was unreachable: %v, want all three", stale)
	}
	nats.Restart()
	flWaitInSync(t, chains, "NATS came back")
	l.halt()
	l.mustAllOK(t)
	for _, r := range l.reqs {
		if r.svc == flRollout && r.version != "1" {
			t.Fatalf("request %s got version %s while the rolled-back state should hold", r.id, r.version)
		}
	}
	t.Logf("NATS down 15s: %d requests, all answered 200 by version 1 (the last state)", len(l.reqs))
	// Converged: a reset on replica 0 reaches the others within a second.
	res, err := chains[0].send(t.Context(), http.MethodPost, chains[0].url(chains[0].admin, "/rollout/"+flRollout+"/reset?reason=drill"), nil, nil)
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("POST reset: %v %d %s", err, res.code, res.body)
	}
	flWaitState(t, chains, time.Now(), "the reset after the outage", func(st flRolloutStatus) bool { return st.State == rollout.StateProgressing })

	// 6: NATS hung (SIGSTOP) for 10 s, under load.
	l.reset()
	l.start(ctx, 40, 2000)
	nats.Pause()
	stale := flWatchStale(t, chains, 10*time.Second)
	nats.Resume()
	if len(stale) != 3 {
		t.Errorf("replicas that said the shared state was unreachable while NATS hung: %v, want all three", stale)
	}
	flWaitInSync(t, chains, "NATS ran again")
	l.halt()
	l.mustAllOK(t)
	var slowest time.Duration
	for _, r := range l.reqs {
		slowest = max(slowest, r.end.Sub(r.start))
	}
	// A request that waited on the hung broker would wait out one of the
	// shared state's bounds, the shortest of which is rollout.FleetTimeout;
	// a loaded machine (the race detector, a build on both cores) can
	// stretch an ordinary answer past a second, but not to that bound.
	if slowest >= rollout.FleetTimeout {
		t.Errorf("a request took %v while NATS hung (the shared state's timeout is %v): something on the request path waits on it", slowest, rollout.FleetTimeout)
	}
	t.Logf("NATS hung 10s: %d requests, all answered 200, slowest %v", len(l.reqs), slowest.Round(time.Millisecond))
	// Converged again: a reset on replica 1 reaches the others (whatever
	// the gate decided meanwhile, the reset is the last transition).
	res, err = chains[1].send(t.Context(), http.MethodPost, chains[1].url(chains[1].admin, "/rollout/"+flRollout+"/reset?reason=after-hang"), nil, nil)
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("POST reset: %v %d %s", err, res.code, res.body)
	}
	flWaitState(t, chains, time.Now(), "the reset after NATS hung", func(st flRolloutStatus) bool {
		h := st.History
		return len(h) > 0 && h[len(h)-1].Reason == "after-hang"
	})
}

// flWaitState waits until every replica's rollout status satisfies ok,
// all within a second of since, when what happened.
func flWaitState(t *testing.T, chains []*gwChain, since time.Time, what string, ok func(flRolloutStatus) bool) {
	t.Helper()
	for i, c := range chains {
		harness.WaitFor(t, time.Until(since.Add(time.Second)), 10*time.Millisecond, fmt.Sprintf("replica %d following %s within a second", i, what), func() (bool, string) {
			st := flStatus(t, c)
			return ok(st), string(st.State)
		})
	}
}

// flSharedState starts a private nats-server and copies the example
// feature repository with its online store in the shared Redis, under a
// project named after prefix whose keys are deleted when the test ends.
func flSharedState(t *testing.T, prefix string) (*natstest.Server, string) {
	t.Helper()
	gwNeedRedis(t, gwSharedRedis)
	project := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := gwScan(ctx, gwSharedRedis, "sluice:"+project+":*", true); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	return natstest.Start(t), gwFeatureRepo(t, gwRedisStore(project, gwSharedRedis))
}

// flReplicas starts n `sluice serve -c` replicas gw-0, gw-1, … of one
// fleet (named after prefix) on nats, each with gateway and the feature
// repository repo.
func flReplicas(t *testing.T, n int, prefix string, nats *natstest.Server, repo string, gateway map[string]any) []*gwChain {
	t.Helper()
	fleet := fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1e9)
	var chains []*gwChain
	for i := range n {
		cluster := map[string]any{
			"name": fleet, "replica": fmt.Sprintf("gw-%d", i), "nats": map[string]any{"url": nats.URL()},
			"publish_interval": "250ms", "replica_ttl": "2s",
		}
		chains = append(chains, gwStartWith(t, "examples/models", "parcel_eta", repo, gateway, gwOptions{
			env: gwKeyEnv, mutate: func(cfg map[string]any) { cfg["cluster"] = cluster },
		}))
	}
	return chains
}

// flWatchStale polls every replica's GET /cluster for d and returns the
// replicas that said, at least once, that the shared state was out of
// reach.
func flWatchStale(t *testing.T, chains []*gwChain, d time.Duration) map[int]bool {
	t.Helper()
	stale := map[int]bool{}
	for start := time.Now(); time.Since(start) < d; time.Sleep(500 * time.Millisecond) {
		for i, c := range chains {
			var s flCluster
			c.adminJSON(t, "/cluster", &s)
			if s.Stale || !s.Connected {
				stale[i] = true
			}
		}
	}
	return stale
}

// flWaitInSync waits up to 15 s for every replica to say it is connected
// and in sync again after what happened.
func flWaitInSync(t *testing.T, chains []*gwChain, after string) {
	t.Helper()
	for i, c := range chains {
		harness.WaitFor(t, 15*time.Second, 100*time.Millisecond, fmt.Sprintf("replica %d in sync after %s", i, after), func() (bool, string) {
			var s flCluster
			c.adminJSON(t, "/cluster", &s)
			return s.Connected && !s.Stale, fmt.Sprintf("%+v", s)
		})
	}
}

const (
	flRollout = "parcel-eta"
	flSteady  = "steady"
)

// flCluster is what GET /cluster answers.
type flCluster struct {
	Mode      string `json:"mode"`
	Replica   string `json:"replica"`
	Connected bool   `json:"connected"`
	Stale     bool   `json:"stale"`
}

type flRolloutStatus struct {
	Service string               `json:"service"`
	State   rollout.State        `json:"state"`
	Reason  *rollout.Reason      `json:"reason"`
	History []rollout.Transition `json:"history"`
	Fleet   *rollout.FleetStatus `json:"fleet"`
}

func flStatus(t *testing.T, c *gwChain) flRolloutStatus {
	t.Helper()
	var all []flRolloutStatus
	c.adminJSON(t, "/rollout", &all)
	for _, s := range all {
		if s.Service == flRollout {
			return s
		}
	}
	t.Fatalf("GET /rollout: no rollout of %s in %+v", flRollout, all)
	return flRolloutStatus{}
}

func flStatuses(t *testing.T, cs []*gwChain) []flRolloutStatus {
	t.Helper()
	var out []flRolloutStatus
	for _, c := range cs {
		out = append(out, flStatus(t, c))
	}
	return out
}

func flRollbackTime(t *testing.T, st flRolloutStatus) time.Time {
	t.Helper()
	for _, h := range slices.Backward(st.History) {
		if h.Kind == rollout.KindRollback {
			return h.Time
		}
	}
	t.Fatalf("rolled back without a rollback in the history: %+v", st.History)
	return time.Time{}
}

func flFallbackJSON(t *testing.T, c *gwChain) string {
	t.Helper()
	res, err := c.get(t.Context(), c.url(c.admin, "/fallback"))
	if err != nil {
		t.Fatal(err)
	}
	return string(res.body)
}

type flFallback struct {
	Service   string         `json:"service"`
	Triggered bool           `json:"triggered"`
	Baseline  map[string]any `json:"baseline"`
}

func flFallbackOf(t *testing.T, c *gwChain) flFallback {
	t.Helper()
	var all []flFallback
	c.adminJSON(t, "/fallback", &all)
	for _, f := range all {
		if f.Service == flSteady {
			return f
		}
	}
	t.Fatalf("GET /fallback: no %s in %+v", flSteady, all)
	return flFallback{}
}

func flBaselineBuckets(t *testing.T, c *gwChain) int {
	t.Helper()
	n, _ := flFallbackOf(t, c).Baseline["buckets"].(float64)
	return int(n)
}

func flTriggered(t *testing.T, c *gwChain) bool {
	t.Helper()
	return flFallbackOf(t, c).Triggered
}

func (c *gwChain) metricsText(t *testing.T) string {
	t.Helper()
	res, err := c.get(t.Context(), c.url(c.admin, "/metrics"))
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("GET /metrics: %v %d", err, res.code)
	}
	return string(res.body)
}

// flDriftSets probes entity combinations on the probe service (no rollout,
// no fallback) and returns a low set (the lowest third of ETAs) and a high
// set whose ETAs are at least 1.4× the low set's largest.
func flDriftSets(t *testing.T, c *gwChain) (low, high []map[string]any) {
	t.Helper()
	ids := c.presentIDs(t)
	rng := rand.New(rand.NewPCG(15, 1))
	type combo struct {
		body map[string]any
		eta  float64
	}
	var cs []combo
	for range 90 {
		b := gwBody(ids.users[rng.IntN(len(ids.users))], ids.packages[rng.IntN(len(ids.packages))], ids.routes[rng.IntN(len(ids.routes))], 30, 0.5)
		res := c.mustPredict(t, "probe", b, gwAuth)
		_, eta, _ := res.mustAnswer(t)
		cs = append(cs, combo{b, eta})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].eta < cs[j].eta })
	lows := cs[:30]
	top := lows[len(lows)-1].eta
	for _, x := range lows {
		low = append(low, x.body)
	}
	for _, x := range cs[30:] {
		if x.eta >= 1.4*top {
			high = append(high, x.body)
		}
	}
	if len(high) < 3 {
		t.Fatalf("no ETAs 1.4× above the low set's %.1f among the probes: %v", top, cs)
	}
	t.Logf("drift sets: low ETAs %.1f-%.1f, %d high ones from %.1f", lows[0].eta, top, len(high), 1.4*top)
	return low, high
}

// flLoad is open-loop load over the chains, round-robin, alternating the
// rollout service and the steady one, at most 64 requests in flight. A
// request refused at connect goes to the next chain (it never reached the
// refusing one); no connection is reused, so a killed process shows as
// refused connects, and the requests it had in flight as transport errors.
type flLoad struct {
	t      *testing.T
	chains []*gwChain
	bodies []map[string]any
	client *http.Client
	prefix string
	runs   int
	moved  atomic.Int64
	stop   chan struct{}
	ticks  chan struct{}
	wg     sync.WaitGroup

	mu   sync.Mutex
	reqs []flReq
}

type flReq struct {
	id         string
	svc        string
	gw         int
	start, end time.Time
	code       int
	version    string
	err        error
}

func newFlLoad(t *testing.T, chains []*gwChain, bodies []map[string]any) *flLoad {
	t.Helper()
	return &flLoad{
		t: t, chains: chains, bodies: bodies, prefix: fmt.Sprintf("fl%d", time.Now().UnixNano()%1e6),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second},
	}
}

func (l *flLoad) reset() {
	l.mu.Lock()
	l.reqs = nil
	l.mu.Unlock()
	l.moved.Store(0)
}

func (l *flLoad) start(ctx context.Context, rate, maxRequests int) {
	l.runs++
	l.stop, l.ticks = make(chan struct{}), make(chan struct{})
	sem := make(chan struct{}, 64)
	run := l.runs
	go func() {
		defer close(l.ticks)
		begin := time.Now()
		for i := range maxRequests {
			tm := time.NewTimer(time.Until(begin.Add(time.Duration(i) * time.Second / time.Duration(rate))))
			select {
			case <-tm.C:
			case <-l.stop:
				tm.Stop()
				return
			case <-ctx.Done():
				tm.Stop()
				return
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // all busy: skipped, not sent
			}
			l.wg.Go(func() {
				defer func() { <-sem }()
				l.one(ctx, run, i)
			})
		}
	}()
}

func (l *flLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.ticks
	l.wg.Wait()
}

func (l *flLoad) one(ctx context.Context, run, i int) {
	svc := flRollout
	if i%2 == 1 {
		svc = flSteady
	}
	id := fmt.Sprintf("%s-%d-%06d", l.prefix, run, i)
	body, _ := json.Marshal(l.bodies[i%len(l.bodies)])
	for k := range len(l.chains) {
		gw := (i + k) % len(l.chains)
		c := l.chains[gw]
		r := flReq{id: id, svc: svc, gw: gw, start: time.Now()}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url(c.listen, "/v1/services/"+svc+":predict"), bytes.NewReader(body))
		req.Header.Set("Authorization", gwAuth["Authorization"])
		req.Header.Set("x-request-id", id)
		resp, err := l.client.Do(req)
		r.end = time.Now()
		if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
			l.moved.Add(1)
			continue
		}
		if err == nil {
			var b bytes.Buffer
			_, err = b.ReadFrom(resp.Body)
			_ = resp.Body.Close()
			r.code = resp.StatusCode
			if err == nil && r.code == http.StatusOK {
				res := gwResult{code: r.code, body: b.Bytes()}
				var a gwAnswer
				a, _, _, err = res.answer()
				r.version = a.Version
			} else if err == nil {
				err = fmt.Errorf("%d %s", r.code, strings.TrimSpace(b.String()))
			}
		}
		r.err = err
		l.mu.Lock()
		l.reqs = append(l.reqs, r)
		l.mu.Unlock()
		return
	}
	l.mu.Lock()
	l.reqs = append(l.reqs, flReq{id: id, svc: svc, gw: -1, err: errors.New("every gateway refused the connection")})
	l.mu.Unlock()
}

// mustAllOK fails the test unless every request sent was answered 200.
func (l *flLoad) mustAllOK(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reqs) == 0 {
		t.Fatal("the load sent nothing")
	}
	var bad []string
	for _, r := range l.reqs {
		if r.err != nil {
			bad = append(bad, fmt.Sprintf("%s on gw-%d: %v", r.id, r.gw, r.err))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d requests failed, first: %v", len(bad), len(l.reqs), bad[:min(5, len(bad))])
	}
}

// lastVersion2 returns how long after decided the last request answered
// by version 2 was sent (negative when all were sent before), and how many
// such answers there were.
func (l *flLoad) lastVersion2(decided time.Time) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, n := time.Duration(-1<<62), 0
	for _, r := range l.reqs {
		if r.version == "2" {
			n++
			last = max(last, r.start.Sub(decided))
		}
	}
	return last, n
}

// checkKill checks that the only failed requests were on chain gw and
// started before killed, when its process had exited (in flight at the
// kill), and returns how many.
func (l *flLoad) checkKill(t *testing.T, gw int, killed time.Time) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	lost := 0
	after := 0
	for _, r := range l.reqs {
		if r.start.After(killed) {
			after++
		}
		if r.err == nil {
			continue
		}
		if r.gw != gw || r.start.After(killed) {
			t.Errorf("request %s on gw-%d sent %v after the kill failed: %v", r.id, r.gw, r.start.Sub(killed), r.err)
			continue
		}
		lost++
	}
	if after == 0 {
		t.Error("no request was sent after the kill")
	}
	if lost > 64 {
		t.Errorf("%d requests lost, more than could be in flight", lost)
	}
	return lost
}
