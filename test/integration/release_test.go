package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/release/diff"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// The release-safety scenario (issue 6) runs `sluice serve -c` on the
// model repository test/integration/testdata/models, built by
// scripts/make_regional_model.py: parcel_eta_regional version 1 is the
// example's parcel_eta v1, and version 2 is the same graph made worse on
// long routes (distance_km above the threshold in its model_config.json:
// the ETA times 1.6, the confidence halved), identical elsewhere.
//
// The scenario makes one region's inputs differ: the test reads every
// route's distance_km from the chain's feature server and sends the long
// routes, and only those, with "x-region: sa"; the other routes go out as
// "eu" or "us". So version 2 is worse for region sa exactly, which is what
// a shadow diff sliced by x-region, and a rollout whose stage adds region
// sa, must catch.
//
// TestReleaseShadowDiff mirrors every request to version 2, records to
// JSONL, stops the process with SIGTERM under load, checks that no
// accepted record was lost, and runs `sluice shadow diff`.
// TestReleaseRollout rolls version 2 out by stages (premium users, region
// sa, everyone) and checks that it rolls back at the sa stage.
// TestReleaseShadowNATS records to NATS JetStream at 127.0.0.1:4222.

const (
	relModelRepo = "test/integration/testdata/models"
	relModel     = "parcel_eta_regional"
	relService   = "regional"
	relNATSURL   = "nats://127.0.0.1:4222"
	// relSubjects are the subjects of a stream the NATS sink creates: the
	// gateway's recording config has no subject prefix, so every stream
	// it creates takes these.
	relSubjects = "sluice.recordings.>"
)

// relLongRouteKM reads the threshold version 2 was built with.
func relLongRouteKM(t *testing.T) float64 {
	t.Helper()
	var p struct {
		LongRouteKM float64 `json:"long_route_km"`
	}
	if err := json.Unmarshal(readFile(t, filepath.Join(relModelRepo, relModel, "2", "model_config.json")), &p); err != nil {
		t.Fatal(err)
	}
	if p.LongRouteKM <= 0 {
		t.Fatalf("%s/%s/2/model_config.json has no long_route_km; rerun scripts/make_regional_model.py", relModelRepo, relModel)
	}
	return p.LongRouteKM
}

// relStart is gwStart on the scenario's model repository.
func relStart(t *testing.T, repo string, gateway map[string]any, env ...string) *gwChain {
	t.Helper()
	return gwStartModel(t, relModelRepo, relModel, repo, gateway, env...)
}

// relGateway is the gateway section every scenario run shares: one API
// client, no anonymous access, and the example's service on
// parcel_eta_regional version 1, to which extra (shadow or rollout) is
// added.
func relGateway(t *testing.T, extra map[string]any, recording map[string]any) map[string]any {
	t.Helper()
	svc := gwService(gwExample(t), relService, nil, gwRoute("default", nil, "", 100, 0))
	svc["model"] = map[string]any{"name": relModel, "version": "1"}
	maps.Copy(svc, extra)
	gw := map[string]any{
		"drain_period": "1s",
		"access_log":   "off",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     []any{svc},
	}
	if recording != nil {
		gw["recording"] = recording
	}
	return gw
}

// relTraffic is the scenario's request mix over entities whose features
// are present: routes split at the threshold into long and short.
type relTraffic struct {
	users, packages []int64
	long, short     []int64
}

func newRelTraffic(t *testing.T, c *gwChain) relTraffic {
	t.Helper()
	threshold := relLongRouteKM(t)
	ids := c.presentIDs(t)
	routes := make([]int64, relRoutes)
	for i := range routes {
		routes[i] = int64(i + 1)
	}
	rows := c.onlineFeatures(t, map[string]any{
		"features": []string{"route_features:distance_km"}, "entities": map[string]any{"route_id": routes},
	})
	tr := relTraffic{users: ids.users, packages: ids.packages}
	for j, id := range routes {
		if rows.Results[1].Statuses[j] != "PRESENT" {
			continue
		}
		d, ok := rows.Results[1].Values[j].(float64)
		if !ok {
			t.Fatalf("route %d: distance_km %v is not a number", id, rows.Results[1].Values[j])
		}
		if d > threshold {
			tr.long = append(tr.long, id)
		} else {
			tr.short = append(tr.short, id)
		}
	}
	t.Logf("%d long routes (distance_km > %g) and %d short ones", len(tr.long), threshold, len(tr.short))
	if len(tr.long) < 20 || len(tr.short) < 20 {
		t.Fatalf("%d long and %d short routes: the generated data does not fit the scenario's threshold %g km", len(tr.long), len(tr.short), threshold)
	}
	return tr
}

// relRoutes is the number of routes gwFeatureData generates.
const relRoutes = 500

// relFeatureRepo is gwFeatureRepo with route_features kept fresh for 30
// days (the example's 6h, and 1h for its hot routes, leave only a handful
// of the generated routes, which update about weekly, present): the
// scenario needs many routes on both sides of the threshold.
func relFeatureRepo(t *testing.T) string {
	t.Helper()
	dir := gwFeatureRepo(t, "")
	path := filepath.Join(dir, "feature_views.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	views, _ := doc["feature_views"].([]any)
	found := false
	for _, v := range views {
		if m, ok := v.(map[string]any); ok && m["name"] == "route_features" {
			m["ttl"] = "30d"
			delete(m, "hot")
			found = true
		}
	}
	if !found {
		t.Fatalf("%s has no route_features view", path)
	}
	if b, err = yaml.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, path, b)
	return dir
}

// relRequest is one request of the mix and what it was sent as.
type relRequest struct {
	body    map[string]any
	hdr     map[string]string
	region  string
	premium bool
}

// request i: three in ten go to long routes as region sa; the rest to
// short routes as eu or us. With premium, three in ten (short routes only,
// so that the premium stage sees no long route) carry x-user-type premium.
func (tr relTraffic) request(i int, premium bool) relRequest {
	pick := func(ids []int64, salt int) int64 { return ids[(i*7919+salt)%len(ids)] }
	r := relRequest{hdr: map[string]string{"Authorization": gwAuth["Authorization"]}}
	rt := pick(tr.short, 17)
	switch {
	case i%10 < 3:
		r.region, rt = "sa", pick(tr.long, 31)
	case i%2 == 0:
		r.region = "eu"
	default:
		r.region = "us"
	}
	r.hdr["x-region"] = r.region
	if premium && i%10 >= 3 && i%10 < 6 {
		r.premium = true
		r.hdr["x-user-type"] = "premium"
	}
	r.body = gwBody(pick(tr.users, 3), pick(tr.packages, 11), rt, float64(20+i%40), 0.4)
	r.body["order_id"] = fmt.Sprintf("order-%06d", i)
	return r
}

// relAnswer is one 200 answer of the load.
type relAnswer struct {
	req     relRequest
	version string
	eta     float64
	conf    float64
	// afterSignal: the request was sent after SIGTERM, during the drain.
	afterSignal bool
}

// relLoad drives the mix at the chain from workers goroutines, at most max
// requests. Before stopping, every answer must be a 200; once stopping is
// set (SIGTERM was sent), a transport error ends a worker quietly: the
// gateway closed its listener.
type relLoad struct {
	c        *gwChain
	tr       relTraffic
	premium  bool
	max      int
	next     atomic.Int64
	answered atomic.Int64
	stopping atomic.Bool

	mu  sync.Mutex // protects ok and err
	ok  map[string]relAnswer
	err error
}

func newRelLoad(c *gwChain, tr relTraffic, premium bool, maxRequests int) *relLoad {
	return &relLoad{c: c, tr: tr, premium: premium, max: maxRequests, ok: map[string]relAnswer{}}
}

func (l *relLoad) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// run sends requests until n more were sent, max is reached, or a worker
// stops; ctx bounds it in time.
func (l *relLoad) run(ctx context.Context, workers, n int) {
	end := min(int(l.next.Load())+n, l.max)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(l.next.Add(1) - 1)
				if i >= end {
					return
				}
				if !l.one(ctx, i) {
					return
				}
			}
		})
	}
	wg.Wait()
	if int(l.next.Load()) > end {
		l.next.Store(int64(end))
	}
}

// one sends request i and reports whether the worker should go on.
func (l *relLoad) one(ctx context.Context, i int) bool {
	req := l.tr.request(i, l.premium)
	stopping := l.stopping.Load()
	res, err := l.c.predict(ctx, relService, req.body, req.hdr)
	if err != nil {
		if stopping || l.stopping.Load() {
			return false // the listener is closed: the end of the load
		}
		l.fail(fmt.Errorf("request %d: %w", i, err))
		return false
	}
	if res.code != http.StatusOK {
		l.fail(fmt.Errorf("request %d (%s): %d %s", i, req.region, res.code, res.body))
		return false
	}
	a, eta, conf, err := res.answer()
	if err != nil {
		l.fail(fmt.Errorf("request %d: %w", i, err))
		return false
	}
	l.mu.Lock()
	l.ok[a.RequestID] = relAnswer{req: req, version: a.Version, eta: eta, conf: conf, afterSignal: stopping}
	l.mu.Unlock()
	l.answered.Add(1)
	return true
}

func (l *relLoad) answers() map[string]relAnswer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.ok)
}

func (l *relLoad) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatalf("load: %v; logs:\n%s", l.err, l.c.tail())
	}
}

// relShadowStats is GET admin /shadow.
type relShadowStats struct {
	Recording string              `json:"recording"`
	Recorder  *record.WriterStats `json:"recorder"`
	Queued    int                 `json:"queued"`
}

// relSIGTERMUnderLoad drives the mix with shadow recording on, sends
// SIGTERM once warm requests were answered while the load goes on, and
// waits for the process to exit. It returns the 200 answers by request id
// and the recorder's stats fetched just before the signal.
//
// Why "no accepted record was lost" is checked exactly: with percent 100
// every answered request offered its shadow job before the gateway wrote
// the answer, and Close (after the listener's graceful shutdown, so after
// the last answer) drains the shadow queue and flushes the recorder. The
// queues are sized above the load's request cap, so nothing can be
// dropped, and the set of recorded request ids must equal the set of
// answered ones: a lost, duplicated or invented record breaks the
// equality. The recorder's accepted count fetched just before SIGTERM is
// a lower bound (requests answered during the drain add to it), and its
// dropped count must be 0.
func relSIGTERMUnderLoad(t *testing.T, c *gwChain, tr relTraffic, warm, maxRequests int) (map[string]relAnswer, relShadowStats) {
	t.Helper()
	load := newRelLoad(c, tr, false, maxRequests)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	load.run(ctx, 8, warm)
	load.check(t)
	if got := load.answered.Load(); got != int64(warm) {
		t.Fatalf("warm-up: %d of %d answered", got, warm)
	}

	var wg sync.WaitGroup
	wg.Go(func() { load.run(ctx, 8, maxRequests) })
	// Let the load run at full speed, then read the recorder and signal.
	time.Sleep(300 * time.Millisecond)
	var before relShadowStats
	c.adminJSON(t, "/shadow", &before)
	load.stopping.Store(true)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	load.check(t)
	select {
	case <-c.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("sluice did not exit within 45s of SIGTERM; logs:\n%s", c.tail())
	}
	if c.waitErr != nil {
		t.Fatalf("sluice exited with %v after SIGTERM; logs:\n%s", c.waitErr, c.tail())
	}
	answers := load.answers()
	after := 0
	for _, a := range answers {
		if a.afterSignal {
			after++
		}
	}
	t.Logf("%d requests answered, %d of them after SIGTERM; recorder before SIGTERM: %+v", len(answers), after, before.Recorder)
	if after == 0 {
		t.Fatalf("no request was answered after SIGTERM: the shutdown did not happen under load")
	}
	if int(load.next.Load()) >= maxRequests {
		t.Fatalf("the load reached its cap of %d requests before the gateway stopped; raise the cap", maxRequests)
	}
	if before.Recorder == nil {
		t.Fatalf("GET /shadow has no recorder stats: %+v", before)
	}
	if before.Recorder.Dropped != 0 || before.Recorder.Failed != 0 {
		t.Errorf("recorder before SIGTERM: %+v, want nothing dropped or failed", before.Recorder)
	}
	if strings.Contains(c.logs.String(), "not written") {
		t.Errorf("the recorder reports unwritten records; logs:\n%s", c.tail())
	}
	return answers, before
}

// relCheckRecords checks that the records are exactly the answered
// requests, each with both arms as the scenario predicts.
func relCheckRecords(t *testing.T, recs []*record.Record, answers map[string]relAnswer, before relShadowStats) {
	t.Helper()
	threshold := relLongRouteKM(t)
	if uint64(len(recs)) < before.Recorder.Accepted {
		t.Errorf("%d records stored, but the recorder had accepted %d before SIGTERM: accepted records were lost", len(recs), before.Recorder.Accepted)
	}
	seen := map[string]bool{}
	var missing, extra []string
	for _, r := range recs {
		if seen[r.RequestID] {
			t.Errorf("request %s recorded twice", r.RequestID)
		}
		seen[r.RequestID] = true
		a, ok := answers[r.RequestID]
		if !ok {
			extra = append(extra, r.RequestID)
			continue
		}
		relCheckRecord(t, r, a)
		// The region the test assigned agrees with the distance the
		// gateway read: the recorded features explain the slice.
		d, ok := r.Features["route_features__distance_km"].(float64)
		if !ok || (d > threshold) != (a.req.region == "sa") {
			t.Errorf("record %s: region %s with recorded distance_km %v (threshold %g)", r.RequestID, a.req.region, r.Features["route_features__distance_km"], threshold)
		}
	}
	for id := range answers {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("%d records for %d answered requests: %d answered requests not recorded (e.g. %v), %d records of no answered request (e.g. %v)",
			len(recs), len(answers), len(missing), relFirst(missing, 3), len(extra), relFirst(extra, 3))
	}
}

func relFirst(s []string, n int) []string { return s[:min(n, len(s))] }

// relCheckRecord checks one record against the answer the client got.
func relCheckRecord(t *testing.T, r *record.Record, a relAnswer) {
	t.Helper()
	if r.Service != relService || r.ShadowKey != a.req.body["order_id"] {
		t.Errorf("record %s: service %q, shadow key %q; want %s, %v", r.RequestID, r.Service, r.ShadowKey, relService, a.req.body["order_id"])
	}
	if r.Headers["x-region"] != a.req.region || r.Headers["x-request-id"] != "" && r.Headers["x-request-id"] != r.RequestID {
		t.Errorf("record %s: headers %v, want x-region %s", r.RequestID, r.Headers, a.req.region)
	}
	for k := range r.Headers {
		if k == "authorization" {
			t.Errorf("record %s: the Authorization header was recorded", r.RequestID)
		}
	}
	p, s := r.Arms[record.ArmPrimary], r.Arms[record.ArmShadow]
	if p.Model != relModel || p.Version != "1" || p.Status != http.StatusOK || s.Version != "2" || s.Status != http.StatusOK {
		t.Fatalf("record %s: primary %+v, shadow %+v; want %s versions 1 and 2, both 200", r.RequestID, p, s, relModel)
	}
	if len(r.Inputs) != 3 || len(r.Features) == 0 {
		t.Errorf("record %s: %d inputs, %d features; want 3 inputs and the features", r.RequestID, len(r.Inputs), len(r.Features))
	}
	pe, se := p.Outputs["eta_prediction"], s.Outputs["eta_prediction"]
	pc, sc := p.Outputs["confidence_score"], s.Outputs["confidence_score"]
	if len(pe) != 1 || len(se) != 1 || len(pc) != 1 || len(sc) != 1 {
		t.Fatalf("record %s: outputs %v / %v, want one eta_prediction and one confidence_score per arm", r.RequestID, p.Outputs, s.Outputs)
	}
	if math.Abs(pe[0]-a.eta) > 1e-4*math.Max(1, a.eta) {
		t.Errorf("record %s: primary eta %v, but the client got %v", r.RequestID, pe[0], a.eta)
	}
	if a.req.region == "sa" {
		if math.Abs(se[0]-1.6*pe[0]) > 1e-4*math.Max(1, se[0]) || math.Abs(sc[0]-0.5*pc[0]) > 1e-6 {
			t.Errorf("record %s (sa): shadow eta %v conf %v, want 1.6 × %v and 0.5 × %v", r.RequestID, se[0], sc[0], pe[0], pc[0])
		}
	} else if se[0] != pe[0] || sc[0] != pc[0] {
		t.Errorf("record %s (%s): shadow %v/%v differs from primary %v/%v on a short route", r.RequestID, a.req.region, se[0], sc[0], pe[0], pc[0])
	}
}

// relDiffGatesFailed is the exit status of `sluice shadow diff` when a
// gate fails (1 is an error, 2 a usage error).
const relDiffGatesFailed = 3

// relDiff runs `sluice shadow diff --recording rec --slice header:x-region
// --out out` and returns its exit status and report.
func relDiff(t *testing.T, rec string) (int, *diff.Result) {
	t.Helper()
	out := t.TempDir()
	// No latency gate: the shadow calls run after the answers, on the
	// shadow workers of a -race binary on shared cores, so their p95 is
	// not the model's; the test is about what the arms answer.
	cmd := exec.Command(binPath, "shadow", "diff", "--recording", rec, "--slice", "header:x-region", "--max-p95-regression", "-1", "--out", out)
	b, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sluice shadow diff: %v\n%s", err, b)
	}
	t.Logf("sluice shadow diff exited %d:\n%s", code, b)
	if code != 0 && code != relDiffGatesFailed {
		t.Fatalf("sluice shadow diff exited %d, an error rather than a verdict:\n%s", code, b)
	}
	if code == relDiffGatesFailed && !strings.Contains(string(b), "x-region=sa") {
		t.Errorf("sluice shadow diff does not name the failing slice x-region=sa in its output:\n%s", b)
	}
	return code, relReadReport(t, out)
}

func relReadReport(t *testing.T, dir string) *diff.Result {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, diff.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := diff.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, diff.HTMLFile)); err != nil {
		t.Errorf("no %s next to %s: %v", diff.HTMLFile, diff.JSONFile, err)
	}
	return res
}

// relCheckDiff checks the report: region sa fails the KS and
// significant-share gates on both outputs, eu and us pass every gate.
func relCheckDiff(t *testing.T, code int, res *diff.Result) {
	t.Helper()
	if code != relDiffGatesFailed || res.Passed {
		t.Errorf("shadow diff exit status %d, passed %v: want %d (gates failed) and a failed report (failed gates %v)", code, res.Passed, relDiffGatesFailed, res.Failed)
	}
	gates := map[string]diff.Gate{}
	for _, g := range res.Gates {
		gates[g.ID] = g
	}
	for _, out := range []string{"eta_prediction", "confidence_score"} {
		for _, name := range []string{diff.GateKS, diff.GateSignificantShare} {
			id := name + "[" + out + "]@x-region=sa"
			g, ok := gates[id]
			switch {
			case !ok:
				t.Errorf("no gate %s in the report; gates: %v", id, slices.Sorted(maps.Keys(gates)))
			case g.Passed:
				t.Errorf("gate %s passed (%s), want it to fail", id, g.Message)
			case name == diff.GateKS && !(g.Value < 0.01):
				t.Errorf("gate %s: p-value %g, want < 0.01", id, g.Value)
			case name == diff.GateSignificantShare && !(g.Value > g.Limit):
				t.Errorf("gate %s: share %g, want above the limit %g", id, g.Value, g.Limit)
			}
		}
	}
	var slice *diff.SliceReport
	for i := range res.Slices {
		if res.Slices[i].Key.Name == "x-region" {
			slice = &res.Slices[i]
		}
	}
	if slice == nil {
		t.Fatalf("no x-region slice in the report: %+v", res.Slices)
	}
	if slice.Missing != 0 {
		t.Errorf("%d records without x-region, want 0", slice.Missing)
	}
	groups := map[string]diff.SliceGroup{}
	for _, g := range slice.Groups {
		groups[g.Value] = g
	}
	if got := slices.Sorted(maps.Keys(groups)); !slices.Equal(got, []string{"eu", "sa", "us"}) {
		t.Fatalf("x-region slices %v, want eu, sa, us", got)
	}
	for _, region := range []string{"eu", "us"} {
		g := groups[region]
		if !g.Gated || !g.Passed {
			t.Errorf("slice x-region=%s: gated %v, passed %v; want a gated slice that passes", region, g.Gated, g.Passed)
		}
		for _, o := range g.Outputs {
			if o.Significant != 0 || o.MaxAbsDelta != 0 {
				t.Errorf("slice x-region=%s output %s: %d significant, max |Δ| %g; want identical arms", region, o.Name, o.Significant, o.MaxAbsDelta)
			}
		}
	}
	if g := groups["sa"]; !g.Gated || g.Passed {
		t.Errorf("slice x-region=sa: gated %v, passed %v; want a gated slice that fails", g.Gated, g.Passed)
	}
	for id, g := range gates {
		if g.Slice != "" && !strings.HasSuffix(id, "@x-region=sa") && !g.Passed {
			t.Errorf("gate %s failed (%s): only region sa should", id, g.Message)
		}
	}
}

func TestReleaseShadowDiff(t *testing.T) {
	t.Parallel()
	recDir := t.TempDir()
	gateway := relGateway(t,
		map[string]any{"shadow": map[string]any{"version": "2", "percent": 100, "key": "order_id", "timeout": "5s"}},
		// Small files, so the recording spans several rotated ones; queues
		// above the load's cap, so nothing is dropped.
		map[string]any{"sink": "jsonl", "dir": recDir, "max_bytes": 512 << 10, "queue_size": 20000, "workers": 4},
	)
	c := relStart(t, relFeatureRepo(t), gateway, gwKeyEnv...)
	tr := newRelTraffic(t, c)
	answers, before := relSIGTERMUnderLoad(t, c, tr, 400, 15000)

	src, err := record.OpenFiles(recDir, record.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := record.ReadAll(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	files := src.Files()
	_ = src.Close()
	t.Logf("%d records in %d files", len(recs), len(files))
	if len(files) < 2 {
		t.Errorf("the recording is %d file(s); with max_bytes 512 KiB it should have rotated", len(files))
	}
	relCheckRecords(t, recs, answers, before)

	code, res := relDiff(t, recDir)
	relCheckDiff(t, code, res)
}

// relRolloutStatus is the part of GET admin /rollout the test reads.
type relRolloutStatus struct {
	Service   string                `json:"service"`
	State     rollout.State         `json:"state"`
	StageName string                `json:"stage_name"`
	Reason    *rollout.Reason       `json:"reason"`
	History   []rollout.Transition  `json:"history"`
	Groups    []rollout.GroupStatus `json:"groups"`
}

func TestReleaseRollout(t *testing.T) {
	t.Parallel()
	groups := func(name, header, value string) []any {
		return []any{map[string]any{"name": name, "headers": []any{map[string]any{"name": header, "exact": value}}}}
	}
	// min_requests 100 keeps the test short and still gives the diagnosis
	// its 100 samples per group. The latency gate is loose: under -race,
	// with both versions on one CPU instance each, p95 noise is not what
	// this scenario is about; the confidence gate is.
	ro := map[string]any{
		"stable":    map[string]any{"version": "1"},
		"candidate": map[string]any{"version": "2"},
		"stages": []any{
			map[string]any{"name": "premium", "groups": groups("premium", "x-user-type", "premium"), "min_duration": "1s"},
			map[string]any{"name": "long-tail", "groups": groups("long-tail", "x-region", "sa"), "min_duration": "1s"},
			map[string]any{"name": "all", "min_duration": "1s"},
		},
		"gates": map[string]any{
			"max_error_rate": 0.01, "max_p95_latency_ratio": 10, "max_low_confidence_share": 0.15, "confidence_below": 0.6,
		},
		"min_requests": 100,
		"hash_key":     "order_id",
	}
	c := relStart(t, relFeatureRepo(t), relGateway(t, map[string]any{"rollout": ro}, nil), gwKeyEnv...)
	tr := newRelTraffic(t, c)
	load := newRelLoad(c, tr, true, 20000)
	status := func() relRolloutStatus {
		var all []relRolloutStatus
		c.adminJSON(t, "/rollout", &all)
		if len(all) != 1 || all[0].Service != relService {
			t.Fatalf("GET /rollout: %+v, want the rollout of %s", all, relService)
		}
		return all[0]
	}
	if st := status(); st.State != rollout.StateProgressing || st.StageName != "premium" {
		t.Fatalf("at start: state %s, stage %s; want progressing at premium", st.State, st.StageName)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var st relRolloutStatus
	for {
		load.run(ctx, 8, 150)
		load.check(t)
		if st = status(); st.State != rollout.StateProgressing {
			break
		}
		if ctx.Err() != nil || int(load.next.Load()) >= load.max {
			t.Fatalf("after %d requests the rollout is still progressing at stage %s: %+v; logs:\n%s", load.answered.Load(), st.StageName, st.Groups, c.tail())
		}
	}
	t.Logf("rollout %s after %d requests: %+v", st.State, load.answered.Load(), st.Reason)

	if st.State != rollout.StateRolledBack {
		t.Fatalf("state %s, want rolled_back; history %+v", st.State, st.History)
	}
	r := st.Reason
	if r == nil {
		t.Fatal("rolled back without a reason")
	}
	if r.Gate != "low_confidence_share" || r.Group != "long-tail" || r.Stage != "long-tail" || r.StageIndex != 1 {
		t.Errorf("reason: gate %q, group %q, stage %q (%d); want low_confidence_share in group long-tail at stage long-tail (1)", r.Gate, r.Group, r.Stage, r.StageIndex)
	}
	if !strings.Contains(r.Message, "low_confidence_share") || !strings.Contains(r.Message, "long-tail") {
		t.Errorf("reason message %q does not name the gate and the group", r.Message)
	}
	if !(r.Value > r.Threshold) || r.Threshold != 0.15 || r.Requests < 100 {
		t.Errorf("reason: value %g, threshold %g, requests %d; want a share above 0.15 over at least 100 requests", r.Value, r.Threshold, r.Requests)
	}
	if len(r.Suspects) == 0 || r.Suspects[0].Feature != "route_features__distance_km" {
		t.Errorf("diagnosis %+v: want route_features__distance_km, the feature that defines the long tail, first", r.Suspects)
	}
	var kinds []string
	for _, h := range st.History {
		kinds = append(kinds, string(h.Kind)+":"+h.To)
	}
	if want := []string{"start:premium", "promote:long-tail", "rollback:long-tail"}; !slices.Equal(kinds, want) {
		t.Errorf("history %v, want %v", kinds, want)
	}

	// What the clients got: version 2 served premium users, then region
	// sa; never the other groups; and always a low confidence in sa.
	served := map[string]int{}
	for id, a := range load.answers() {
		group := "other"
		switch {
		case a.req.premium:
			group = "premium"
		case a.req.region == "sa":
			group = "sa"
		}
		if a.version == "2" {
			served[group]++
		}
		if a.version == "2" && group == "sa" && a.conf >= 0.6 {
			t.Errorf("request %s: version 2 answered region sa with confidence %g, want < 0.6", id, a.conf)
		}
	}
	if served["premium"] == 0 || served["sa"] == 0 || served["other"] != 0 {
		t.Errorf("version 2 answered %v; want premium and sa requests, and no other", served)
	}

	// After the rollback version 1 serves everyone, region sa included.
	for i := range 10 {
		req := tr.request(i, true)
		res := c.mustPredict(t, relService, req.body, req.hdr)
		if a, _, _ := res.mustAnswer(t); a.Version != "1" {
			t.Errorf("after the rollback, a %s request got version %s, want 1", req.region, a.Version)
		}
	}
}

// relNATS checks that the shared NATS server with JetStream answers (a
// failure under CI=true, a skip otherwise) and that no stream already
// takes the subjects a new recording stream needs, and returns a
// connection.
func relNATS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(relNATSURL, nats.Timeout(2*time.Second))
	if err == nil {
		t.Cleanup(nc.Close)
	}
	var js jetstream.JetStream
	if err == nil {
		js, err = jetstream.New(nc)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = js.AccountInfo(ctx)
		cancel()
	}
	if err != nil {
		t.Fatalf("nats with jetstream at %s not available: %v", relNATSURL, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	relSweepLeftovers(t, js)
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(relSubjects))
	var taken []string
	for n := range names.Name() {
		taken = append(taken, n)
	}
	if err := names.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	if len(taken) > 0 {
		t.Fatalf("stream(s) %v on %s already take %s: the gateway's recording stream would overlap them (its config has no subject prefix)", taken, relNATSURL, relSubjects)
	}
	return js
}

// relLeftoverAge is how old a stream or bucket of this suite's own naming
// must be before relSweepLeftovers takes it for the leftover of a run
// that was killed before its cleanup ran: a live test's lasts seconds.
const relLeftoverAge = 15 * time.Minute

// relSweepLeftovers deletes the recording streams (SLUICE_IT_*) and the
// accuracy buckets (SLUICE_accit*) that tests of this package made on the
// shared NATS server and that outlived their run, so that one killed run
// does not fail the next on "stream already takes the subjects". Only
// names this package makes are touched, and only old ones.
func relSweepLeftovers(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	infos := js.ListStreams(ctx)
	var old []string
	for info := range infos.Info() {
		name := info.Config.Name
		ours := strings.HasPrefix(name, "SLUICE_IT_") || strings.HasPrefix(name, "KV_SLUICE_accit")
		if ours && time.Since(info.Created) > relLeftoverAge {
			old = append(old, name)
		}
	}
	if err := infos.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	for _, name := range old {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("delete leftover stream %s: %v", name, err)
		}
		t.Logf("deleted %s, left on %s by an earlier run that did not clean up", name, relNATSURL)
	}
}

func TestReleaseShadowNATS(t *testing.T) {
	// Not parallel: it needs the shared NATS server's recording subjects to itself (relNATS).
	js := relNATS(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	stream := "SLUICE_IT_" + strings.ToUpper(hex.EncodeToString(b[:]))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", stream, err)
		}
	})
	gateway := relGateway(t,
		map[string]any{"shadow": map[string]any{"version": "2", "percent": 100, "key": "order_id", "timeout": "5s"}},
		map[string]any{"sink": "nats", "nats": map[string]any{"url": relNATSURL, "stream": stream}, "queue_size": 20000, "workers": 4},
	)
	c := relStart(t, relFeatureRepo(t), gateway, gwKeyEnv...)
	tr := newRelTraffic(t, c)
	answers, before := relSIGTERMUnderLoad(t, c, tr, 150, 15000)
	if before.Recording != "nats" {
		t.Errorf("GET /shadow recording %q, want nats", before.Recording)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	src, err := record.OpenStream(ctx, record.NATSOptions{URL: relNATSURL, Stream: stream}, record.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := record.ReadAll(ctx, src)
	_ = src.Close()
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != uint64(len(recs)) {
		t.Errorf("stream %s holds %d messages, the reader read %d records", stream, n, len(recs))
	}
	t.Logf("%d records read back from stream %s", len(recs), stream)
	relCheckRecords(t, recs, answers, before)
}
