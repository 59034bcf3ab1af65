package integration_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The recording drills (issue 12) run `sluice serve -c` with the
// parcel-eta service mirroring every request (shadow 100 %, keyed by a
// unique order id) to version 2 and recording to a private nats-server
// (natstest) with a disk spool in the test's temporary directory, under
// steady open-loop load with unique request ids, and break the broker:
//
//   - TestRecordDrillBrokerKilled: SIGKILL for 15 s, then a restart on the
//     same port and store, while the load goes on;
//   - TestRecordDrillBrokerHungAcrossSIGTERM: SIGSTOP under load, SIGTERM
//     of the gateway while the broker hangs, SIGCONT, and the gateway
//     started again on the same configuration and spool;
//   - TestRecordDrillSpoolFull: the broker stopped and a 256 KiB spool, so
//     the drop_newest policy applies; the broker and the gateway started
//     again.
//
// Each reads the stream back and checks what users rely on: every request
// answered 200 is stored exactly once (by request id), and nothing else
// is; where the spool's bound discarded records, the counts say exactly
// how many.

const (
	drService = "parcel-eta"
	drStream  = "SLUICE_DRILL"
	// drQueue sizes the shadow and recorder queues above every drill's
	// request cap: nothing can be dropped in front of the recorder.
	drQueue = 20000
	// drCloseTimeout is recording.close_timeout and drDrain the gateway's
	// drain_period: together they bound the shutdown.
	drCloseTimeout = 3 * time.Second
	drDrain        = time.Second
)

// drGateway is the gateway section of every drill: one API client, the
// example's service with one route to version 1 and every request
// mirrored to version 2, recorded to natsURL with the spool in spoolDir.
// spool adds to (or overrides) recording.spool.
func drGateway(t *testing.T, natsURL, spoolDir string, spool map[string]any) map[string]any {
	t.Helper()
	svc := gwService(gwExample(t), drService, nil, gwRoute("default", nil, "", 100, 0))
	svc["shadow"] = map[string]any{"version": "2", "percent": 100, "key": "order_id", "timeout": "5s"}
	sp := map[string]any{"dir": spoolDir}
	maps.Copy(sp, spool)
	return map[string]any{
		"drain_period": drDrain.String(),
		"access_log":   "off",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     []any{svc},
		"recording": map[string]any{
			"sink": "nats", "nats": map[string]any{"url": natsURL, "stream": drStream},
			"queue_size": drQueue, "workers": 4, "spool": sp, "close_timeout": drCloseTimeout.String(),
		},
	}
}

// drStart starts the chain of a drill.
func drStart(t *testing.T, gateway map[string]any) *gwChain {
	t.Helper()
	return gwStartWith(t, "examples/models", "parcel_eta", gwFeatureRepo(t, ""), gateway, gwOptions{env: gwKeyEnv})
}

// drRestart starts the configuration c ran (the same ports, stream and
// spool directory) again, once c has exited: the gateway's next start.
func drRestart(t *testing.T, c *gwChain) *gwChain {
	t.Helper()
	select {
	case <-c.done:
	default:
		t.Fatal("drRestart: the previous process is still running")
	}
	n := &gwChain{
		listen: c.listen, admin: c.admin, features: c.features, models: c.models,
		modelsGRPC: c.modelsGRPC, modelsMetrics: c.modelsMetrics, config: c.config,
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mustWrite(t, path, c.config)
	n.launch(t, path, gwOptions{env: gwKeyEnv}, 60*time.Second)
	return n
}

// drLoad is open-loop load on the service: request i is sent at its time
// (start + i/rate) whether or not earlier ones were answered, with
// x-request-id <prefix>-<i> and order_id <prefix>-order-<i>, at most
// drInFlight at a time (a tick that finds them all busy is skipped and
// counted). Every answer before stopping must be a 200; once stopping is
// set (SIGTERM was sent), a transport error is the closed listener.
type drLoad struct {
	c        *gwChain
	ids      gwIDs
	prefix   string
	stopping atomic.Bool
	sent     atomic.Int64
	skipped  atomic.Int64
	wg       sync.WaitGroup
	stop     chan struct{}
	ticking  chan struct{} // closed when the ticker goroutine returns

	mu      sync.Mutex // protects ok, refused, errs
	ok      map[string]bool
	refused int // transport errors after stopping
	errs    []string
}

const drInFlight = 64

func newDrLoad(c *gwChain, ids gwIDs, prefix string) *drLoad {
	return &drLoad{c: c, ids: ids, prefix: prefix, ok: map[string]bool{}}
}

// start sends at rate per second, in the background, until halt is
// called, maxRequests were sent or ctx ends.
func (l *drLoad) start(ctx context.Context, rate, maxRequests int) {
	l.stop, l.ticking = make(chan struct{}), make(chan struct{})
	sem := make(chan struct{}, drInFlight)
	go func() {
		defer close(l.ticking)
		begin := time.Now()
		for i := range maxRequests {
			at := begin.Add(time.Duration(i) * time.Second / time.Duration(rate))
			t := time.NewTimer(time.Until(at))
			select {
			case <-t.C:
			case <-l.stop:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
			select {
			case sem <- struct{}{}:
			default:
				l.skipped.Add(1)
				continue
			}
			l.sent.Add(1)
			l.wg.Go(func() {
				defer func() { <-sem }()
				l.one(ctx, i)
			})
		}
	}()
}

// halt stops sending and waits for the requests in flight.
func (l *drLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.ticking
	l.wg.Wait()
}

// one sends request i.
func (l *drLoad) one(ctx context.Context, i int) {
	pick := func(ids []int64, salt int) int64 { return ids[(i*7919+salt)%len(ids)] }
	id := fmt.Sprintf("%s-%06d", l.prefix, i)
	body := gwBody(pick(l.ids.users, 3), pick(l.ids.packages, 11), pick(l.ids.routes, 17), float64(20+i%40), 0.4)
	body["order_id"] = drOrderID(id)
	hdr := map[string]string{"Authorization": gwAuth["Authorization"], "x-request-id": id}
	stopping := l.stopping.Load()
	res, err := l.c.predict(ctx, drService, body, hdr)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && (stopping || l.stopping.Load()):
		l.refused++
	case err != nil:
		l.errs = append(l.errs, fmt.Sprintf("request %s: %v", id, err))
	case res.code != http.StatusOK:
		l.errs = append(l.errs, fmt.Sprintf("request %s: %d %s", id, res.code, res.body))
	default:
		a, _, _, err := res.answer()
		if err != nil || a.RequestID != id {
			l.errs = append(l.errs, fmt.Sprintf("request %s: answer %s (%v), want request_id %s", id, res.body, err, id))
			return
		}
		l.ok[id] = true
	}
}

// drOrderID is the order id sent with request id <prefix>-<i>:
// <prefix>-order-<i>, the shadow key of its record.
func drOrderID(id string) string {
	prefix, i, _ := strings.Cut(id, "-")
	return prefix + "-order-" + i
}

// answered returns the ids answered 200, failing the test on any other
// answer (or a transport error before stopping).
func (l *drLoad) answered(t *testing.T) map[string]bool {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		t.Fatalf("%d requests not answered 200 while the gateway was up, e.g. %v; logs:\n%s", len(l.errs), relFirst(l.errs, 3), l.c.tail())
	}
	return maps.Clone(l.ok)
}

// drShadow reads the recorder's counts from GET admin /shadow.
func drShadow(t *testing.T, c *gwChain) relShadowStats {
	t.Helper()
	var st relShadowStats
	c.adminJSON(t, "/shadow", &st)
	if st.Recording != "nats" || st.Recorder == nil {
		t.Fatalf("GET /shadow: recording %q, recorder %+v; want nats with stats", st.Recording, st.Recorder)
	}
	return st
}

// drWait polls GET /shadow until cond holds, for at most timeout.
func drWait(t *testing.T, c *gwChain, what string, timeout time.Duration, cond func(record.WriterStats) bool) record.WriterStats {
	t.Helper()
	var got record.WriterStats
	harness.WaitFor(t, timeout, 100*time.Millisecond, what, func() (bool, string) {
		st := drShadow(t, c)
		got = *st.Recorder
		return st.Queued == 0 && cond(got), fmt.Sprintf("recorder %+v, %d shadow calls queued; logs:\n%s", got, st.Queued, c.tail())
	})
	return got
}

// drDrained: nothing spooled, everything accepted (or recovered) written.
func drDrained(st record.WriterStats) bool {
	return st.Spooled == 0 && st.Written == st.Accepted+st.Recovered
}

// drReadStream reads every record of the drill's stream on url and checks
// that the stream holds as many messages as were read.
func drReadStream(t *testing.T, url string) []*record.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nopts := record.NATSOptions{URL: url, Stream: drStream}
	src, err := record.OpenStream(ctx, nopts, record.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := record.ReadAll(ctx, src)
	_ = src.Close()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, drStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != uint64(len(recs)) {
		t.Fatalf("stream %s holds %d messages, the reader read %d records", drStream, n, len(recs))
	}
	return recs
}

// drCheckStream checks that recs hold each id of want exactly once and
// nothing else, and that each is a record of the service with both arms.
func drCheckStream(t *testing.T, recs []*record.Record, want map[string]bool) {
	t.Helper()
	count := make(map[string]int, len(recs))
	for _, r := range recs {
		count[r.RequestID]++
		if count[r.RequestID] > 1 {
			continue
		}
		p, s := r.Arms[record.ArmPrimary], r.Arms[record.ArmShadow]
		if r.Service != drService || r.ShadowKey != drOrderID(r.RequestID) ||
			p.Version != "1" || p.Status != http.StatusOK || s.Version != "2" || s.Status != http.StatusOK {
			t.Errorf("record %s: service %q, shadow key %q, primary %s/%d, shadow %s/%d; want %s, its order id, 1/200, 2/200",
				r.RequestID, r.Service, r.ShadowKey, p.Version, p.Status, s.Version, s.Status, drService)
		}
	}
	var dup, missing, extra []string
	for id, n := range count {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("%s×%d", id, n))
		}
		if !want[id] {
			extra = append(extra, id)
		}
	}
	for id := range want {
		if count[id] == 0 {
			missing = append(missing, id)
		}
	}
	slices.Sort(dup)
	slices.Sort(missing)
	slices.Sort(extra)
	if len(dup)+len(missing)+len(extra) > 0 {
		t.Fatalf("%d records (%d distinct) for %d requests answered 200: %d stored more than once (e.g. %v), %d answered but not stored (e.g. %v), %d stored but not answered (e.g. %v)",
			len(recs), len(count), len(want), len(dup), relFirst(dup, 3), len(missing), relFirst(missing, 3), len(extra), relFirst(extra, 3))
	}
}

// drMetrics reads the gateway's /metrics (admin port).
func drMetrics(t *testing.T, c *gwChain) string {
	t.Helper()
	res, err := c.get(t.Context(), c.url(c.admin, "/metrics"))
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("GET admin /metrics: %v %d", err, res.code)
	}
	return string(res.body)
}

// drMetric is a series' value in text, 0 when it is not exposed.
func drMetric(text, series string) float64 {
	v, _ := gwMetric(text, series)
	return v
}

// drCloseLine matches the gateway's final recording line.
var drCloseLine = regexp.MustCompile(`msg="recording closed"(.*)`)

// drClosed parses the counts of the "recording closed" line the gateway
// logs at shutdown.
func drClosed(t *testing.T, c *gwChain) map[string]uint64 {
	t.Helper()
	m := drCloseLine.FindStringSubmatch(c.logs.String())
	if m == nil {
		t.Fatalf("no \"recording closed\" line; logs:\n%s", c.tail())
	}
	out := map[string]uint64{}
	for f := range strings.FieldsSeq(m[1]) {
		k, v, ok := strings.Cut(f, "=")
		if n, err := strconv.ParseUint(v, 10, 64); ok && err == nil {
			out[k] = n
		}
	}
	return out
}

// drSIGTERM signals c and waits for it to exit within limit.
func drSIGTERM(t *testing.T, c *gwChain, limit time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(limit + 30*time.Second):
		t.Fatalf("sluice did not exit within %s of SIGTERM; logs:\n%s", limit+30*time.Second, c.tail())
	}
	took := time.Since(begin)
	if took > limit {
		t.Errorf("sluice exited %s after SIGTERM, want within %s; logs:\n%s", took.Round(time.Millisecond), limit, c.tail())
	}
	return took
}

// drNoDrops checks that nothing was dropped in front of the recorder: the
// shadow queue and the recorder's queue took every mirrored request.
func drNoDrops(t *testing.T, metrics string, st record.WriterStats) {
	t.Helper()
	if n := drMetric(metrics, `sluice_gateway_shadow_requests_total{result="dropped",service="`+drService+`"}`); n != 0 {
		t.Errorf("%v shadow calls dropped at the shadow queue", n)
	}
	if st.Dropped != 0 || st.Failed != 0 {
		t.Errorf("recorder %+v: want nothing dropped at its queue or failed", st)
	}
}

// TestRecordDrillBrokerKilled: under 100 requests/s for 30 s, the broker
// is killed (SIGKILL) for 15 s and restarted on the same port and store.
// The gateway answers 200 throughout; the outage's records go to the
// spool and are drained once the broker is back; the stream then holds
// every answered request exactly once.
func TestRecordDrillBrokerKilled(t *testing.T) {
	// Not parallel: 100 requests/s for 30 s, every answer counted.
	srv := natstest.Start(t)
	c := drStart(t, drGateway(t, srv.URL(), t.TempDir(), nil))
	ids := c.presentIDs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	const rate, seconds = 100, 30
	load := newDrLoad(c, ids, "kill")
	load.start(ctx, rate, rate*seconds)
	begin := time.Now()
	time.Sleep(5 * time.Second)
	before := drShadow(t, c).Recorder
	srv.Kill()
	killed := time.Now()
	var maxSpooled uint64
	for time.Since(killed) < 15*time.Second {
		maxSpooled = max(maxSpooled, drShadow(t, c).Recorder.Spooled)
		time.Sleep(250 * time.Millisecond)
	}
	srv.Restart()
	t.Logf("broker down for %s", time.Since(killed).Round(time.Millisecond))
	time.Sleep(time.Until(begin.Add(seconds * time.Second)))
	load.halt()
	answered := load.answered(t)

	st := drWait(t, c, "the spool drained", 60*time.Second, drDrained)
	metrics := drMetrics(t, c)
	dups := drMetric(metrics, `sluice_release_nats_publishes_total{result="duplicate",stream="`+drStream+`"}`)
	t.Logf("%d requests sent (%d ticks skipped), %d answered 200; recorder before the kill %+v, most spooled during the outage %d, after the drain %+v; %v publishes deduplicated by the stream",
		load.sent.Load(), load.skipped.Load(), len(answered), *before, maxSpooled, st, dups)
	if before.Written == 0 {
		t.Errorf("nothing was published before the kill")
	}
	if maxSpooled == 0 {
		t.Errorf("nothing was spooled while the broker was down")
	}
	drNoDrops(t, metrics, st)
	if st.Accepted != uint64(len(answered)) {
		t.Errorf("recorder accepted %d records for %d requests answered 200", st.Accepted, len(answered))
	}
	recs := drReadStream(t, srv.URL())
	t.Logf("%d records read back from the stream", len(recs))
	drCheckStream(t, recs, answered)
}

// TestRecordDrillBrokerHungAcrossSIGTERM: under 100 requests/s the broker
// hangs (SIGSTOP); the load goes on for 7 s, then the gateway gets SIGTERM and
// exits within drain + close_timeout (+ a margin), leaving what it could
// not publish in the spool and saying so. After SIGCONT the gateway starts
// again on the same configuration and spool and publishes it: the stream
// holds every answered request exactly once (what the hung broker took
// before the gateway gave up is deduplicated).
func TestRecordDrillBrokerHungAcrossSIGTERM(t *testing.T) {
	// Not parallel: it bounds the exit time after SIGTERM.
	srv := natstest.Start(t)
	c := drStart(t, drGateway(t, srv.URL(), t.TempDir(), nil))
	ids := c.presentIDs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	const rate = 100
	load := newDrLoad(c, ids, "hung")
	load.start(ctx, rate, 60*rate)
	time.Sleep(3 * time.Second)
	srv.Pause()
	// Longer than the 5 s ack timeout: the first batch's acks time out
	// and the drainer tries the hung broker too, so more records are in
	// doubt when the gateway gives up.
	time.Sleep(7 * time.Second)
	hung := drShadow(t, c).Recorder
	load.stopping.Store(true)
	// Margin: the listener's drain of requests in flight, the shadow calls
	// still queued, the model and feature servers' shutdown, all under the
	// race detector on a shared machine.
	limit := drDrain + drCloseTimeout + 10*time.Second
	took := drSIGTERM(t, c, limit)
	load.halt()
	answered := load.answered(t)
	if c.waitErr != nil {
		t.Errorf("sluice exited with %v: nothing was lost, the rest is spooled; logs:\n%s", c.waitErr, c.tail())
	}
	closed := drClosed(t, c)
	t.Logf("%d requests sent (%d ticks skipped, %d refused after SIGTERM), %d answered 200; recorder while hung %+v; exited %s after SIGTERM (limit %s); recording closed %v",
		load.sent.Load(), load.skipped.Load(), load.refused, len(answered), *hung, took.Round(time.Millisecond), limit, closed)
	if closed["accepted"] != uint64(len(answered)) {
		t.Errorf("recorder accepted %d records for %d requests answered 200", closed["accepted"], len(answered))
	}
	if closed["spooled"] == 0 {
		t.Errorf("nothing spooled at shutdown with the broker hung")
	}
	if closed["lost"] != 0 || closed["dropped"] != 0 || closed["accepted"] != closed["written"]+closed["spooled"] {
		t.Errorf("recording closed %v: want accepted = written + spooled, nothing lost or dropped", closed)
	}

	srv.Resume()
	next := drRestart(t, c)
	st := drWait(t, next, "the next start drained the spool", 60*time.Second, drDrained)
	metrics := drMetrics(t, next)
	dups := drMetric(metrics, `sluice_release_nats_publishes_total{result="duplicate",stream="`+drStream+`"}`)
	t.Logf("next start: %+v; %v publishes deduplicated by the stream", st, dups)
	if st.Recovered != closed["spooled"] || st.Accepted != 0 {
		t.Errorf("next start recovered %d records (accepted %d), want the %d spooled at shutdown (and no traffic)", st.Recovered, st.Accepted, closed["spooled"])
	}
	drNoDrops(t, metrics, st)
	recs := drReadStream(t, srv.URL())
	t.Logf("%d records read back from the stream", len(recs))
	drCheckStream(t, recs, answered)
}

// TestRecordDrillSpoolFull: the broker stops after the gateway started
// and the spool is bounded at 256 KiB (drop_newest). Load goes on until
// the bound is passed; GET /shadow, /metrics and the "recording closed"
// line say exactly how many records were accepted, spooled and dropped by
// the policy. With the broker back, the next start publishes exactly the
// spooled records: accepted = stored + dropped_by_policy.
func TestRecordDrillSpoolFull(t *testing.T) {
	// Not parallel: it bounds the exit time after SIGTERM.
	srv := natstest.Start(t)
	const maxBytes = 256 << 10
	c := drStart(t, drGateway(t, srv.URL(), t.TempDir(), map[string]any{"max_bytes": maxBytes, "full": "drop_newest"}))
	ids := c.presentIDs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv.Stop()

	const rate, maxRequests = 50, 3000
	load := newDrLoad(c, ids, "full")
	load.start(ctx, rate, maxRequests)
	// Past the bound: some records dropped by the policy, then a few more
	// seconds of load on a full spool.
	drWait(t, c, "the spool's bound passed", 60*time.Second, func(st record.WriterStats) bool { return st.DroppedByPolicy > 0 })
	time.Sleep(2 * time.Second)
	load.halt()
	answered := load.answered(t)
	if int(load.sent.Load()) >= maxRequests {
		t.Fatalf("the load reached its cap of %d requests", maxRequests)
	}

	st := drWait(t, c, "the recorder settled", 30*time.Second, func(st record.WriterStats) bool {
		return st.Accepted == st.Written+st.Spooled+st.DroppedByPolicy+st.Failed
	})
	metrics := drMetrics(t, c)
	t.Logf("%d requests sent (%d ticks skipped), %d answered 200; recorder %+v", load.sent.Load(), load.skipped.Load(), len(answered), st)
	drNoDrops(t, metrics, st)
	if st.Accepted != uint64(len(answered)) || st.Written != 0 || st.Spooled == 0 || st.DroppedByPolicy == 0 {
		t.Errorf("recorder %+v for %d requests answered 200: want all accepted, none written, some spooled and some dropped by policy", st, len(answered))
	}
	for series, want := range map[string]uint64{
		`sluice_release_records_total{result="dropped_by_policy",sink="nats"}`: st.DroppedByPolicy,
		`sluice_release_records_total{result="written",sink="nats"}`:           0,
		`sluice_release_record_spool_records{sink="nats"}`:                     st.Spooled,
	} {
		if got := drMetric(metrics, series); got != float64(want) {
			t.Errorf("%s = %v, want %d", series, got, want)
		}
	}
	if b := drMetric(metrics, `sluice_release_record_spool_bytes{sink="nats"}`); b <= 0 || b > maxBytes {
		t.Errorf("spool bytes %v, want in (0, %d]", b, maxBytes)
	} else {
		t.Logf("spool holds %v bytes of its %d", b, maxBytes)
	}

	drSIGTERM(t, c, drDrain+drCloseTimeout+10*time.Second)
	closed := drClosed(t, c)
	t.Logf("recording closed %v; exit %v", closed, c.waitErr)
	for k, want := range map[string]uint64{
		"accepted": st.Accepted, "written": 0, "spooled": st.Spooled,
		"dropped_by_policy": st.DroppedByPolicy, "lost": st.DroppedByPolicy, "failed": 0, "dropped": 0,
	} {
		if closed[k] != want {
			t.Errorf("recording closed %s=%d, want %d (GET /shadow said %+v)", k, closed[k], want, st)
		}
	}

	srv.Restart()
	next := drRestart(t, c)
	st2 := drWait(t, next, "the next start drained the spool", 60*time.Second, drDrained)
	t.Logf("next start: %+v", st2)
	if st2.Recovered != st.Spooled || st2.Accepted != 0 {
		t.Errorf("next start recovered %d records (accepted %d), want the %d spooled", st2.Recovered, st2.Accepted, st.Spooled)
	}
	recs := drReadStream(t, srv.URL())
	stored := map[string]bool{}
	for _, r := range recs {
		if stored[r.RequestID] {
			t.Errorf("request %s stored twice", r.RequestID)
		}
		stored[r.RequestID] = true
	}
	t.Logf("%d records read back from the stream; accepted %d = stored %d + dropped_by_policy %d", len(recs), st.Accepted, len(stored), st.DroppedByPolicy)
	if uint64(len(recs)) != st.Spooled {
		t.Errorf("%d records in the stream, want the %d spooled", len(recs), st.Spooled)
	}
	if st.Accepted != uint64(len(stored))+st.DroppedByPolicy {
		t.Errorf("accepted %d != stored %d + dropped_by_policy %d", st.Accepted, len(stored), st.DroppedByPolicy)
	}
	drCheckStream(t, recs, stored)
	for id := range stored {
		if !answered[id] {
			t.Errorf("record %s is of no request answered 200", id)
		}
	}
}
