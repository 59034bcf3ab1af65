package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/release/rollout"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The accuracy tests run `sluice serve -c` on the release scenario's model
// (parcel_eta_regional: version 2 answers like version 1 except on long
// routes, sent as region sa, where its ETA is 60 % higher), log every
// prediction of the service for online accuracy, post outcomes later
// (out of order, duplicated, some before their prediction) and read the
// gateway's /metrics.

// accService is the accuracy block the tests give the service.
func accService(extra map[string]any) map[string]any {
	a := map[string]any{
		"key":     "order_id",
		"slices":  []string{"x-region"},
		"outputs": []any{map[string]any{"name": "eta_minutes", "observed": "actual_minutes"}},
		"offline": []any{map[string]any{"version": "1", "metrics": map[string]any{"mae": 1.5}, "dataset": "test holdout"}},
	}
	maps.Copy(a, extra)
	return a
}

// accStart starts the chain with the service's extra blocks and the
// gateway's accuracy section writing under dir.
func accStart(t *testing.T, dir string, extra map[string]any) (*gwChain, relTraffic) {
	t.Helper()
	gw := relGateway(t, extra, nil)
	gw["accuracy"] = map[string]any{
		"path": filepath.Join(dir, "pending.db"), "lookback": "24h", "log": map[string]any{"dir": filepath.Join(dir, "log")},
	}
	c := relStart(t, relFeatureRepo(t), gw, gwKeyEnv...)
	return c, newRelTraffic(t, c)
}

// accAnswer is one logged prediction as the client saw it.
type accAnswer struct {
	order, version, region string
	eta                    float64
}

// accPredict sends requests first..last-1 of the mix from 8 workers and
// returns the answers by order id.
func accPredict(t *testing.T, c *gwChain, tr relTraffic, first, last int) map[string]accAnswer {
	t.Helper()
	var mu sync.Mutex
	out := map[string]accAnswer{}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				req := tr.request(i, false)
				res, err := c.predict(t.Context(), relService, req.body, req.hdr)
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					continue
				}
				a, eta, _, err := res.answer()
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					continue
				}
				// The model answers FP32: the gateway judges the float32
				// value, which the answer writes as its shortest decimal.
				eta = float64(float32(eta))
				mu.Lock()
				out[req.body["order_id"].(string)] = accAnswer{order: req.body["order_id"].(string), version: a.Version, region: req.region, eta: eta}
				mu.Unlock()
			}
		})
	}
	for i := first; i < last; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// accOutcome is one outcome as POST takes it.
type accOutcome struct {
	Key    string             `json:"key"`
	Values map[string]float64 `json:"values"`
	Time   string             `json:"time,omitempty"`
}

// accPost posts outcomes to the gateway's listener and returns the
// per-outcome results.
func accPost(t *testing.T, c *gwChain, outs []accOutcome, hdr map[string]string) []string {
	t.Helper()
	b, _ := json.Marshal(outs)
	res, err := c.send(t.Context(), http.MethodPost, c.url(c.listen, "/v1/services/"+relService+"/outcomes"), b, hdr)
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("POST outcomes: %v %d %s", err, res.code, res.body)
	}
	var a struct {
		Results []string `json:"results"`
	}
	if err := json.Unmarshal(res.body, &a); err != nil || len(a.Results) != len(outs) {
		t.Fatalf("POST outcomes answered %s (%v); want %d results", res.body, err, len(outs))
	}
	return a.Results
}

// accMetrics scrapes the admin port's /metrics and returns the accuracy
// samples: name{labels sorted} → value.
func accMetrics(t *testing.T, c *gwChain) map[string]float64 {
	t.Helper()
	res, err := c.get(t.Context(), c.url(c.admin, "/metrics"))
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("GET /metrics: %v %d", err, res.code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(res.body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "sluice_accuracy_") {
			continue
		}
		for _, m := range f.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(ls)
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out[name+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

func accKey(name, version, slice, metric string) string {
	ls := []string{"output=eta_minutes", "service=" + relService, "slice=" + slice, "version=" + version}
	if metric != "" {
		ls = append(ls, "metric="+metric)
		slices.Sort(ls)
	}
	return name + "{" + strings.Join(ls, ",") + "}"
}

// accNoise is a deterministic error for order i, in minutes: symmetric
// around 0.
func accNoise(i int) float64 { return float64((i*37)%13-6) / 2 }

func TestAccuracyEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Versions 1 and 2 share the traffic, sticky by order id.
	c, tr := accStart(t, dir, map[string]any{
		"routes":   []any{gwRoute("default", nil, "order_id", 50, 50)},
		"accuracy": accService(nil),
	})
	const n = 240
	order := func(i int) string { return fmt.Sprintf("order-%06d", i) }

	// Outcomes of every eighth order arrive before its prediction.
	actual := map[string]float64{}
	var early []accOutcome
	for i := 0; i < n; i += 8 {
		actual[order(i)] = 25 + float64(i%17)
		early = append(early, accOutcome{Key: order(i), Values: map[string]float64{"actual_minutes": actual[order(i)]}})
	}
	for i, r := range accPost(t, c, early, gwAuth) {
		if r != "held" {
			t.Fatalf("early outcome %d: %s, want held", i, r)
		}
	}
	answers := accPredict(t, c, tr, 0, n)

	// The rest, newest first, in batches of 40; every fifth twice (the
	// second with another value, which must not count); then the early
	// ones again.
	var late []accOutcome
	for i := n - 1; i >= 0; i-- {
		if i%8 == 0 {
			continue
		}
		a := answers[order(i)]
		actual[a.order] = a.eta + accNoise(i)
		o := accOutcome{Key: a.order, Values: map[string]float64{"actual_minutes": actual[a.order]}, Time: time.Now().UTC().Format(time.RFC3339Nano)}
		late = append(late, o)
		if i%5 == 0 {
			late = append(late, accOutcome{Key: a.order, Values: map[string]float64{"actual_minutes": actual[a.order] + 100}})
		}
	}
	late = append(late, early...)
	counts := map[string]int{}
	for start := 0; start < len(late); start += 40 {
		for _, r := range accPost(t, c, late[start:min(start+40, len(late))], gwAuth) {
			counts[r]++
		}
	}
	// An outcome whose prediction is still on its way to the store (the
	// log is written off the request path) is held and joins when the
	// prediction lands: joined and held together are the first outcomes.
	wantJoined := n - len(early)
	wantDup := len(late) - wantJoined
	if counts["joined"]+counts["held"] != wantJoined || counts["duplicate"] != wantDup || counts["joined"] < wantJoined/2 {
		t.Fatalf("late outcomes: %v; want %d joined (or held) and %d duplicates", counts, wantJoined, wantDup)
	}

	// The independent computation over the same pairs, per version and
	// slice.
	type sums struct{ n, abs, err float64 }
	want := map[string]*sums{}
	for _, a := range answers {
		e := a.eta - actual[a.order]
		for _, sl := range []string{"all", "route=default", "x-region=" + a.region} {
			k := a.version + "|" + sl
			if want[k] == nil {
				want[k] = &sums{}
			}
			want[k].n++
			want[k].abs += math.Abs(e)
			want[k].err += e
		}
	}
	// The early outcomes join when their predictions reach the store
	// (asynchronously): wait until every pair is counted.
	var got map[string]float64
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, fmt.Sprintf("%d pairs joined", n), func() (bool, string) {
		got = accMetrics(t, c)
		total := got[accKey("sluice_accuracy_joined_total", "1", "all", "")] + got[accKey("sluice_accuracy_joined_total", "2", "all", "")]
		return total == n, fmt.Sprintf("%v pairs joined; logs:\n%s", total, c.tail())
	})
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }
	for k, w := range want {
		v, sl, _ := strings.Cut(k, "|")
		if g := got[accKey("sluice_accuracy_joined_total", v, sl, "")]; g != w.n {
			t.Errorf("version %s slice %s: joined %v, want %v", v, sl, g, w.n)
		}
		if g := got[accKey("sluice_accuracy_online", v, sl, "mae")]; !near(g, w.abs/w.n) {
			t.Errorf("version %s slice %s: mae %v, want %v", v, sl, g, w.abs/w.n)
		}
		if g := got[accKey("sluice_accuracy_online", v, sl, "bias")]; !near(g, w.err/w.n) {
			t.Errorf("version %s slice %s: bias %v, want %v", v, sl, g, w.err/w.n)
		}
	}
	if len(want) < 8 {
		t.Fatalf("only %d version×slice series: the mix did not reach both versions in every region", len(want))
	}
	t.Logf("%d version×slice series match; version 1 mae %.3f, version 2 mae %.3f", len(want),
		got[accKey("sluice_accuracy_online", "1", "all", "mae")], got[accKey("sluice_accuracy_online", "2", "all", "mae")])
	ratio := got[`sluice_accuracy_online_offline_ratio{metric=mae,output=eta_minutes,service=`+relService+`,version=1}`]
	if w := want["1|all"]; !near(ratio, w.abs/w.n/1.5) {
		t.Errorf("online/offline ratio %v, want %v", ratio, w.abs/w.n/1.5)
	}

	// Refusals: too late, bad bodies, no credential.
	old := accOutcome{Key: "order-x", Values: map[string]float64{"actual_minutes": 1}, Time: time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)}
	if r := accPost(t, c, []accOutcome{old}, gwAuth); r[0] != "too_late" {
		t.Errorf("an outcome observed 48h ago: %s, want too_late", r[0])
	}
	url := c.url(c.listen, "/v1/services/"+relService+"/outcomes")
	for _, tc := range []struct {
		body, reason, field string
		hdr                 map[string]string
		code                int
	}{
		{`[{"key":"k","values":{"actual_minutes":"soon"}}]`, "invalid_outcome", "outcomes[0].values.actual_minutes", gwAuth, 400},
		{`{"values":{"actual_minutes":3}}`, "invalid_outcome", "outcome.key", gwAuth, 400},
		{`{"key":"k","values":{"actual_minutes":3}}`, "missing_api_key", "", nil, 401},
	} {
		res, err := c.send(t.Context(), http.MethodPost, url, []byte(tc.body), tc.hdr)
		if err != nil || res.code != tc.code || !strings.Contains(string(res.body), tc.reason) || !strings.Contains(string(res.body), tc.field) {
			t.Errorf("POST %s: %v %d %s; want %d %s naming %q", tc.body, err, res.code, res.body, tc.code, tc.reason, tc.field)
		}
	}

	// The prediction log holds every prediction and every joined pair.
	c.stop(t)
	recs := accReadLog(t, filepath.Join(dir, "log"))
	var preds, pairs int
	for _, r := range recs {
		if r.Outcome != nil {
			pairs++
		} else {
			preds++
		}
		if r.JoinKey == "" || r.Route != "default" || r.Headers["x-region"] == "" {
			t.Fatalf("log record %+v lacks the join key, route or slice header", r)
		}
	}
	if preds != n || pairs != n {
		t.Errorf("prediction log: %d predictions and %d joined pairs, want %d each", preds, pairs, n)
	}
}

// accReadLog reads every record of the prediction log folder.
func accReadLog(t *testing.T, dir string) []*record.Record {
	t.Helper()
	src, err := record.OpenFiles(dir, record.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	recs, err := record.ReadAll(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestAccuracyPendingSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, tr := accStart(t, dir, map[string]any{"accuracy": accService(nil)})
	answers := accPredict(t, c, tr, 0, 30)
	c.stop(t) // SIGTERM: the queued predictions are stored before exit
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mustWrite(t, path, c.config)
	c.launch(t, path, gwOptions{env: gwKeyEnv}, 60*time.Second)
	var outs []accOutcome
	for _, a := range answers {
		outs = append(outs, accOutcome{Key: a.order, Values: map[string]float64{"actual_minutes": a.eta + 2}})
	}
	for i, r := range accPost(t, c, outs, gwAuth) {
		if r != "joined" {
			t.Fatalf("outcome %d after a restart: %s, want joined (the prediction was pending before it)", i, r)
		}
	}
	got := accMetrics(t, c)
	if g := got[accKey("sluice_accuracy_online", "1", "all", "mae")]; math.Abs(g-2) > 1e-9 {
		t.Errorf("mae after the restart %v, want 2", g)
	}
}

func TestAccuracyGateRollsBackRegion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Version 2 serves half of everyone; the other gates are loose (the
	// halved confidence on long routes would trip the confidence gate
	// first): this is the accuracy gate's scenario.
	margin := 0.5
	ro := map[string]any{
		"stable":    map[string]any{"version": "1"},
		"candidate": map[string]any{"version": "2"},
		"stages":    []any{map[string]any{"name": "half", "traffic_percent": 50, "min_duration": "1h"}},
		"gates": map[string]any{
			"max_error_rate": 0.5, "max_p95_latency_ratio": 100, "max_low_confidence_share": 1.0,
			"accuracy": map[string]any{"metric": "mae", "margin": margin, "min_outcomes": 25},
		},
		"min_requests": 10,
		"hash_key":     "order_id",
	}
	c, tr := accStart(t, dir, map[string]any{"rollout": ro, "accuracy": accService(nil)})
	// The truth is version 1's answer plus noise: version 1 is right,
	// version 2 is right where it answers like version 1 (everywhere but
	// on the long routes of region sa, where it multiplies version 1's
	// ETA by 1.6: scripts/make_regional_model.py).
	answers := accPredict(t, c, tr, 0, 400)
	var outs []accOutcome
	i := 0
	for _, a := range slices.Sorted(maps.Keys(answers)) {
		ans := answers[a]
		stableETA := ans.eta
		if ans.version == "2" && ans.region == "sa" {
			stableETA = ans.eta / 1.6 // version 2 multiplies version 1's ETA by 1.6 on long routes
		}
		outs = append(outs, accOutcome{Key: a, Values: map[string]float64{"actual_minutes": stableETA + accNoise(i)}})
		i++
	}
	// One batch, as a nightly feedback export would come: the gate is
	// judged when it joins, over every slice at once, and names the worst.
	// (Fed in small batches it fails as soon as the first slice with
	// min_outcomes per version is worse, often "all", before region sa has
	// enough outcomes of its own.)
	res := accPost(t, c, outs, gwAuth)
	if n := len(slices.DeleteFunc(slices.Clone(res), func(r string) bool { return r == "joined" || r == "held" })); n > 0 {
		t.Fatalf("%d outcomes neither joined nor held: %v", n, res)
	}
	var st struct {
		Service string          `json:"service"`
		State   rollout.State   `json:"state"`
		Reason  *rollout.Reason `json:"reason"`
	}
	harness.WaitFor(t, 10*time.Second, 100*time.Millisecond, "the rollout decided", func() (bool, string) {
		var all []json.RawMessage
		c.adminJSON(t, "/rollout", &all)
		if err := json.Unmarshal(all[0], &st); err != nil {
			t.Fatal(err)
		}
		return st.State != rollout.StateProgressing, fmt.Sprintf("%s; logs:\n%s", st.State, c.tail())
	})
	if st.State != rollout.StateRolledBack || st.Reason == nil {
		t.Fatalf("rollout %s (%+v), want rolled back by the accuracy gate; logs:\n%s", st.State, st.Reason, c.tail())
	}
	r := st.Reason
	if r.Gate != "accuracy" || r.Slice != "x-region=sa" || r.Group != "all" || !(r.Value > 1+margin) || r.Requests < 25 {
		t.Errorf("reason %+v: want gate accuracy in slice x-region=sa of group all, ratio above %g over at least 25 outcomes", r, 1+margin)
	}
	if !strings.Contains(r.Message, "accuracy") || !strings.Contains(r.Message, `"x-region=sa"`) {
		t.Errorf("reason message %q does not name the gate and the slice", r.Message)
	}
	// The other regions: version 2 answers like version 1 there, and the
	// metrics say so.
	got := accMetrics(t, c)
	for _, region := range []string{"eu", "us"} {
		v1, v2 := got[accKey("sluice_accuracy_online", "1", "x-region="+region, "mae")], got[accKey("sluice_accuracy_online", "2", "x-region="+region, "mae")]
		if v2 > v1*(1+margin) {
			t.Errorf("region %s: version 2 mae %v against version 1's %v; the regression is in sa only", region, v2, v1)
		}
	}
	sa1, sa2 := got[accKey("sluice_accuracy_online", "1", "x-region=sa", "mae")], got[accKey("sluice_accuracy_online", "2", "x-region=sa", "mae")]
	if !(sa2 > sa1*(1+margin)) {
		t.Errorf("region sa: version 2 mae %v, version 1 %v; want version 2 worse", sa2, sa1)
	}
	t.Logf("rolled back: %s", r.Message)
}

// TestAccuracyFleetJoin runs two gateways (two `sluice serve -c`
// processes) with one cluster section: the pending store is the fleet's
// NATS JetStream key-value bucket, so a prediction served by A joins the
// outcome posted to B, and the same outcome posted to A afterwards is a
// duplicate.
func TestAccuracyFleetJoin(t *testing.T) {
	// Not parallel: it needs the shared NATS server's recording subjects to itself (relNATS).
	relNATS(t)
	fleet := fmt.Sprintf("accit%d", time.Now().UnixNano()%1_000_000_000)
	start := func() *gwChain {
		dir := t.TempDir()
		gw := relGateway(t, map[string]any{"accuracy": accService(nil)}, nil)
		gw["accuracy"] = map[string]any{"lookback": "1h", "log": map[string]any{"dir": filepath.Join(dir, "log")}}
		return gwStartWith(t, relModelRepo, relModel, relFeatureRepo(t), gw, gwOptions{
			env: gwKeyEnv,
			mutate: func(cfg map[string]any) {
				cfg["cluster"] = map[string]any{"name": fleet, "nats": map[string]any{"url": relNATSURL}}
			},
		})
	}
	a, b := start(), start()
	js := relNATS(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteKeyValue(ctx, "SLUICE_"+fleet+"_accuracy")
	})
	tr := newRelTraffic(t, a)
	answers := accPredict(t, a, tr, 0, 40)
	// A's worker stores the predictions in the bucket off the request
	// path: wait until they are there.
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "40 entries in A's pending store", func() (bool, string) {
		n := accMetrics(t, a)["sluice_accuracy_pending_entries{}"]
		return n >= 40, fmt.Sprintf("%v entries; logs:\n%s", n, a.tail())
	})
	var outs []accOutcome
	var sumAbs float64
	for i, k := range slices.Sorted(maps.Keys(answers)) {
		e := accNoise(i)
		outs = append(outs, accOutcome{Key: k, Values: map[string]float64{"actual_minutes": answers[k].eta - e}})
		sumAbs += math.Abs(e)
	}
	for i, r := range accPost(t, b, outs, gwAuth) {
		if r != "joined" {
			t.Fatalf("outcome %d at B for a prediction served by A: %s, want joined", i, r)
		}
	}
	for i, r := range accPost(t, a, outs[:5], gwAuth) {
		if r != "duplicate" {
			t.Errorf("outcome %d posted again, at A: %s, want duplicate", i, r)
		}
	}
	got := accMetrics(t, b)
	var n, mae float64
	for _, v := range []string{"1", "2"} {
		k := accKey("sluice_accuracy_joined_total", v, "all", "")
		n += got[k]
		mae += got[accKey("sluice_accuracy_online", v, "all", "mae")] * got[k]
	}
	if n != 40 || math.Abs(mae/n-sumAbs/40) > 1e-9 {
		t.Errorf("B joined %v pairs with MAE %v; want 40 with MAE %v", n, mae/n, sumAbs/40)
	}
}

// TestAccuracyHungNATS hangs the fleet's NATS server (SIGSTOP: its
// connections stay open and nothing answers) under prediction traffic.
// The pending store lives there, but it is written off the request path:
// every prediction is answered at once. Each prediction made meanwhile is
// stored once NATS runs again or counted as dropped, none silently lost,
// and outcomes then join every stored one.
func TestAccuracyHungNATS(t *testing.T) {
	// Not parallel: it bounds each prediction's latency while NATS hangs.
	nats := natstest.Start(t)
	dir := t.TempDir()
	gw := relGateway(t, map[string]any{"accuracy": accService(nil)}, nil)
	gw["accuracy"] = map[string]any{"lookback": "1h", "log": map[string]any{"dir": filepath.Join(dir, "log")}}
	c := gwStartWith(t, relModelRepo, relModel, relFeatureRepo(t), gw, gwOptions{
		env: gwKeyEnv,
		mutate: func(cfg map[string]any) {
			cfg["cluster"] = map[string]any{"name": "acchung", "nats": map[string]any{"url": nats.URL()}}
		},
	})
	tr := newRelTraffic(t, c)
	pending := func() float64 { return accMetrics(t, c)["sluice_accuracy_pending_entries{}"] }
	dropped := func() float64 {
		return accMetrics(t, c)["sluice_accuracy_predictions_dropped_total{service="+relService+"}"]
	}
	answers := accPredict(t, c, tr, 0, 20)
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "20 entries in the pending store", func() (bool, string) {
		n := pending()
		return n >= 20, fmt.Sprintf("%v entries", n)
	})

	nats.Pause()
	var slowest time.Duration
	for i := 20; i < 60; i++ {
		start := time.Now()
		maps.Copy(answers, accPredict(t, c, tr, i, i+1))
		slowest = max(slowest, time.Since(start))
	}
	if slowest > time.Second {
		t.Errorf("a prediction took %v while NATS hung: the request path waits on the pending store", slowest)
	}
	time.Sleep(8 * time.Second) // past the store's 5 s request timeout
	nats.Resume()

	// Every prediction is in the store or counted as dropped.
	var p, d float64
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, "60 predictions pending or dropped after NATS ran again", func() (bool, string) {
		p, d = pending(), dropped()
		return p+d >= 60, fmt.Sprintf("%v pending + %v dropped", p, d)
	})
	if p+d != 60 {
		t.Fatalf("after NATS ran again: %v pending + %v dropped, want 60 predictions accounted for", p, d)
	}
	var outs []accOutcome
	for _, k := range slices.Sorted(maps.Keys(answers)) {
		outs = append(outs, accOutcome{Key: k, Values: map[string]float64{"actual_minutes": answers[k].eta}})
	}
	joined := 0
	for _, r := range accPost(t, c, outs, gwAuth) {
		if r == "joined" {
			joined++
		}
	}
	if float64(joined) != p {
		t.Errorf("%d outcomes joined, want one per stored prediction (%v)", joined, p)
	}
	t.Logf("NATS hung 8s+: 40 predictions answered, slowest %v; afterwards %v stored, %v dropped; %d outcomes joined",
		slowest.Round(time.Millisecond), p, d, joined)
}
