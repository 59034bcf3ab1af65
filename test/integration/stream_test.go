package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parquet-go/parquet-go"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// streamDefs is the stream feature repository of the stream tests: 1 s
// tiles and 10 s / 30 s windows, so the windows slide while the test runs.
const streamDefs = `
entities:
  - {name: route, join_keys: [route_id], value_type: String}
sources:
  - name: delivery_log
    path: data/deliveries.parquet
    timestamp_field: event_ts
    created_timestamp_column: arrived_ts
  - name: deliveries
    type: stream
    url: %s
    stream: DELIVERIES
    subject: deliveries.events
    timestamp_field: event_ts
    batch_source: delivery_log
    sequence_field: seq
    consumer: %s
stream_feature_views:
  - name: route_live
    entities: [route]
    source: deliveries
    tile: 1s
    allowed_lateness: 3s
    aggregations:
      - {name: n_10s, function: count, time_window: 10s}
      - {name: delay_sum_10s, column: delay_min, function: sum, time_window: 10s}
      - {name: delay_mean_30s, column: delay_min, function: mean, time_window: 30s}
      - {name: delay_min_30s, column: delay_min, function: min, time_window: 30s}
      - {name: delay_max_30s, column: delay_min, function: max, time_window: 30s}
      - {name: delay_last_30s, column: delay_min, function: last, time_window: 30s}
      - {name: delay_sd_30s, column: delay_min, function: stddev, time_window: 30s}
`

var streamFeatures = []string{"n_10s", "delay_sum_10s", "delay_mean_30s", "delay_min_30s", "delay_max_30s", "delay_last_30s", "delay_sd_30s"}

const streamRoutes = 6

func streamRepo(t *testing.T, natsURL string, redisPort int, project, consumer string) string {
	t.Helper()
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "feature_store.yaml"), fmt.Appendf(nil, "project: %s\nonline_store:\n  type: redis\n  redis_type: standalone\n  addrs: [\"127.0.0.1:%d\"]\n", project, redisPort))
	mustWrite(t, filepath.Join(dir, "defs.yaml"), fmt.Appendf(nil, streamDefs, natsURL, consumer))
	return dir
}

// aggregator is one `sluice features aggregate` process.
type aggregator struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

func startAggregator(t *testing.T, repo string) *aggregator {
	t.Helper()
	a := &aggregator{logs: &syncBuffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(binPath, "features", "aggregate", "--repo", repo, "--ack-wait", "2s", "--batch", "50", "--log-level", "warn")
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(20 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		if strings.Contains(a.logs.String(), "DATA RACE") {
			t.Errorf("race detected in the aggregator:\n%s", a.logs)
		}
	})
	harness.WaitFor(t, 30*time.Second, 20*time.Millisecond, "aggregator ready", func() (bool, string) {
		select {
		case <-a.done:
			t.Fatalf("aggregator exited during start-up:\n%s", a.logs)
		default:
		}
		return strings.Contains(a.logs.String(), "aggregating"), "logs:\n" + a.logs.String()
	})
	return a
}

func (a *aggregator) kill(t *testing.T) {
	t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
}

// publisher publishes generated delivery events: event times up to 2.5 s
// before the publish (out of order), one in nine 6 s old (late under the
// 3 s allowed lateness), one in seven without a delay.
type publisher struct {
	js  jetstream.JetStream
	rnd *rand.Rand
}

func (p *publisher) publish(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range n {
		now := time.Now()
		et := now.Add(-time.Duration(p.rnd.Int64N(int64(2500 * time.Millisecond))))
		if p.rnd.IntN(9) == 0 {
			et = now.Add(-6 * time.Second)
		}
		ev := map[string]any{"event_ts": et.UTC().Format(time.RFC3339Nano), "route_id": fmt.Sprintf("r%d", p.rnd.IntN(streamRoutes))}
		if p.rnd.IntN(7) != 0 {
			ev["delay_min"] = math.Round(p.rnd.NormFloat64()*1e4) / 64
		}
		b, _ := json.Marshal(ev)
		if _, err := p.js.Publish(ctx, "deliveries.events", b); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

// caughtUp waits until the consumer has delivered every event and every
// delivered event is acknowledged (so its tiles are written).
func caughtUp(t *testing.T, js jetstream.JetStream, consumer string) {
	t.Helper()
	caughtUpStream(t, js, "DELIVERIES", consumer)
}

// servedRow is one route's served values (nil for null).
type servedRow [7]*float64

// readServed reads every route's stream features and returns them with a
// time in the same tile as the server's read; it reads again when the
// read straddles a tile boundary.
func readServed(t *testing.T, base string) (time.Time, []servedRow) {
	t.Helper()
	var feats []string
	for _, f := range streamFeatures {
		feats = append(feats, "route_live:"+f)
	}
	var ids []string
	for i := range streamRoutes {
		ids = append(ids, fmt.Sprintf("r%d", i))
	}
	body, _ := json.Marshal(map[string]any{"features": feats, "entities": map[string]any{"route_id": ids}})
	for {
		t0 := time.Now()
		code, _, resp := do(t, http.MethodPost, base+"/get-online-features", body, map[string]string{"Content-Type": "application/json"})
		t1 := time.Now()
		if code != http.StatusOK {
			t.Fatalf("get-online-features = %d %s", code, resp)
		}
		if t0.Truncate(time.Second) != t1.Truncate(time.Second) {
			continue
		}
		var got struct {
			Results []struct {
				Values []*float64 `json:"values"`
			} `json:"results"`
		}
		// Route ids are strings: decode them apart.
		var raw struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(resp, &raw); err != nil {
			t.Fatal(err)
		}
		if len(raw.Results) != 1+len(streamFeatures) {
			t.Fatalf("response shape: %s", resp)
		}
		got.Results = make([]struct {
			Values []*float64 `json:"values"`
		}, len(streamFeatures))
		for i := range streamFeatures {
			if err := json.Unmarshal(raw.Results[i+1], &got.Results[i]); err != nil {
				t.Fatal(err)
			}
		}
		rows := make([]servedRow, streamRoutes)
		for f := range streamFeatures {
			for r := range streamRoutes {
				rows[r][f] = got.Results[f].Values[r]
			}
		}
		return t0, rows
	}
}

// logEvent is one event read back from the stream.
type logEvent struct {
	seq     uint64
	arrived time.Time
	et      time.Time
	route   string
	delay   *float64
}

// readLog reads every event back from the stream with its sequence and
// arrival time, and writes the event log (the stream source's batch
// source) into repo.
func readLog(t *testing.T, js jetstream.JetStream, repo string) []logEvent {
	t.Helper()
	s, err := js.Stream(t.Context(), "DELIVERIES")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var evs []logEvent
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("get event %d: %v", seq, err)
		}
		var ev struct {
			ET    string   `json:"event_ts"`
			Route string   `json:"route_id"`
			Delay *float64 `json:"delay_min"`
		}
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		et, err := time.Parse(time.RFC3339Nano, ev.ET)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, logEvent{seq: m.Sequence, arrived: m.Time, et: et, route: ev.Route, delay: ev.Delay})
	}
	ts := feature.Type{Kind: feature.KindUnixTimestamp}
	cols := []offline.Column{
		{Name: "route_id", Type: feature.Type{Kind: feature.KindString}},
		{Name: "event_ts", Type: ts},
		{Name: "arrived_ts", Type: ts},
		{Name: "seq", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "delay_min", Type: feature.Type{Kind: feature.KindFloat64}},
	}
	if err := os.MkdirAll(filepath.Join(repo, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(repo, "data/deliveries.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	pw, err := offline.NewWriter(w, cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		d := feature.Value{Null: true}
		if e.delay != nil {
			d = feature.Value{F64: *e.delay}
		}
		if err := pw.Write([]feature.Value{{S: e.route}, {I64: e.et.UnixNano()}, {I64: e.arrived.UnixNano()}, {I64: int64(e.seq)}, d}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// moment is one captured read.
type moment struct {
	at   time.Time
	rows []servedRow
}

// historicalRows runs `sluice features historical` for every route at
// every moment and returns the rows in moment, route order.
func historicalRows(t *testing.T, repo string, moments []moment) [][7]*float64 {
	t.Helper()
	ts := feature.Type{Kind: feature.KindUnixTimestamp}
	ent := filepath.Join(repo, "entities.parquet")
	f, err := os.Create(ent)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := offline.NewWriter(f, []offline.Column{{Name: "route_id", Type: feature.Type{Kind: feature.KindString}}, {Name: offline.EntityTimestampColumn, Type: ts}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range moments {
		for r := range streamRoutes {
			if err := pw.Write([]feature.Value{{S: fmt.Sprintf("r%d", r)}, {I64: m.at.UnixNano()}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(repo, "training.parquet")
	var feats []string
	for _, n := range streamFeatures {
		feats = append(feats, "route_live:"+n)
	}
	cmd := exec.Command(binPath, "features", "historical", "--repo", repo, "--entities", ent, "--features", strings.Join(feats, ","), "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("features historical: %v\n%s", err, b)
	}
	type row struct {
		N    *int64   `parquet:"n_10s,optional"`
		Sum  *float64 `parquet:"delay_sum_10s,optional"`
		Mean *float64 `parquet:"delay_mean_30s,optional"`
		Min  *float64 `parquet:"delay_min_30s,optional"`
		Max  *float64 `parquet:"delay_max_30s,optional"`
		Last *float64 `parquet:"delay_last_30s,optional"`
		SD   *float64 `parquet:"delay_sd_30s,optional"`
	}
	rows, err := parquet.ReadFile[row](out)
	if err != nil {
		t.Fatal(err)
	}
	outRows := make([][7]*float64, len(rows))
	for i, r := range rows {
		if r.N != nil {
			n := float64(*r.N)
			outRows[i][0] = &n
		}
		outRows[i][1], outRows[i][2], outRows[i][3], outRows[i][4], outRows[i][5], outRows[i][6] = r.Sum, r.Mean, r.Min, r.Max, r.Last, r.SD
	}
	return outRows
}

func fmtVal(v *float64) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(*v)
}

// directCount counts route's events in the 10 s window at at, from the
// log: arrived by at, not late, each sequence once. It does not use the
// tile code.
func directCount(evs []logEvent, route string, at time.Time) (int64, float64) {
	end := at.Truncate(time.Second).Add(time.Second)
	var n int64
	var sum float64
	seen := map[uint64]bool{}
	for _, e := range evs {
		if e.route != route || seen[e.seq] || e.arrived.After(at) || e.et.Before(e.arrived.Add(-3*time.Second)) {
			continue
		}
		seen[e.seq] = true
		if !e.et.Before(end.Add(-10*time.Second)) && e.et.Before(end) {
			n++
			if e.delay != nil {
				sum += *e.delay
			}
		}
	}
	return n, sum
}

// TestStreamAggregationsOnlineEqualOffline is the consistency test of
// stream feature views, with the crash drill and two replicas: generated
// delivery events (out of order, some late) are published to a real
// JetStream and aggregated live by two `sluice features aggregate`
// processes sharing the durable consumer, one of them SIGKILLed
// mid-stream and restarted (its unacknowledged events are delivered
// again). At 20 moments the feature server's values are captured; then
// historical retrieval over the stream's event log, for the same routes
// and times, must return the same values (exact for count, sum, min, max
// and last; 1e-9 relative for mean and stddev), and the counts must equal
// a direct count from the log. One more aggregator, alone on its own
// consumer and project, aggregates the same stream, and its feature
// server must answer the same values as the two replicas' at every
// moment.
func TestStreamAggregationsOnlineEqualOffline(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	rd := startRedis(t, freePort(t))
	repo := streamRepo(t, ns.URL(), rd.port, fmt.Sprintf("stream_%d", time.Now().UnixNano()), "replicas")

	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "DELIVERIES", Subjects: []string{"deliveries.events"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	a := startAggregator(t, repo)
	startAggregator(t, repo)
	base := startFeatureServer(t, repo)
	// One aggregator alone, on its own consumer and project.
	single := streamRepo(t, ns.URL(), rd.port, fmt.Sprintf("single_%d", time.Now().UnixNano()), "single")
	startAggregator(t, single)
	singleBase := startFeatureServer(t, single)
	pub := &publisher{js: js, rnd: rand.New(rand.NewPCG(29, 2))}

	var moments []moment
	for i := range 20 {
		n := 40 + pub.rnd.IntN(40)
		if i == 8 {
			n = 1500 // the crash drill: kill a while it has events in hand
		}
		pub.publish(t, n)
		if i == 8 {
			time.Sleep(50 * time.Millisecond)
			a.kill(t)
			pub.publish(t, 200)
			a = startAggregator(t, repo)
		}
		caughtUp(t, js, "replicas")
		caughtUp(t, js, "single")
		var at time.Time
		var rows []servedRow
		for {
			var one []servedRow
			var at1 time.Time
			at, rows = readServed(t, base)
			at1, one = readServed(t, singleBase)
			if at.Truncate(time.Second) != at1.Truncate(time.Second) {
				continue
			}
			for r := range streamRoutes {
				for f, name := range streamFeatures {
					if fmtVal(rows[r][f]) != fmtVal(one[r][f]) {
						t.Fatalf("moment %d route r%d %s: two replicas (one killed and restarted) %s, one aggregator %s", i, r, name, fmtVal(rows[r][f]), fmtVal(one[r][f]))
					}
				}
			}
			break
		}
		moments = append(moments, moment{at: at, rows: rows})
		if i%4 == 3 {
			time.Sleep(time.Duration(700+pub.rnd.IntN(1500)) * time.Millisecond) // let windows slide
		}
	}
	evs := readLog(t, js, repo)
	hist := historicalRows(t, repo, moments)
	if len(hist) != len(moments)*streamRoutes {
		t.Fatalf("historical rows = %d, want %d", len(hist), len(moments)*streamRoutes)
	}
	var counted int64
	for mi, m := range moments {
		for r := range streamRoutes {
			served, trained := m.rows[r], hist[mi*streamRoutes+r]
			for f, name := range streamFeatures {
				s, h := served[f], trained[f]
				if (s == nil) != (h == nil) {
					t.Fatalf("moment %d route r%d %s: served %s, historical %s", mi, r, name, fmtVal(s), fmtVal(h))
				}
				if s == nil {
					continue
				}
				exact := name != "delay_mean_30s" && name != "delay_sd_30s"
				if exact && *s != *h || !exact && math.Abs(*s-*h) > 1e-9*math.Abs(*h) {
					t.Fatalf("moment %d route r%d %s: served %v, historical %v", mi, r, name, *s, *h)
				}
			}
			n, sum := directCount(evs, fmt.Sprintf("r%d", r), m.at)
			var got float64
			if served[0] != nil {
				got = *served[0]
			}
			if int64(got) != n {
				t.Fatalf("moment %d route r%d: served count %v, direct count from the log %d (an event lost or counted twice)", mi, r, got, n)
			}
			if served[1] != nil && math.Abs(*served[1]-sum) > 1e-6*math.Max(1, math.Abs(sum)) {
				t.Fatalf("moment %d route r%d: served sum %v, direct sum %v", mi, r, *served[1], sum)
			}
			counted += n
		}
	}
	t.Logf("%d events in the log, %d counted in the 10 s windows over %d moments", len(evs), counted, len(moments))
	if counted < 200 {
		t.Fatalf("only %d events counted over the moments: the test exercised too little", counted)
	}
}

// TestStreamExampleInFeatureServer runs the example repository's stream
// feature view (route_live) with the embedded store, aggregated inside
// the feature server (feature-server --aggregate): deliveries published on
// parcel.deliveries, two of them late, are served as the route's count,
// mean and max.
func TestStreamExampleInFeatureServer(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	dir := t.TempDir()
	src := filepath.Join(repoDir, "examples/parcel-eta/features")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		b := readFile(t, filepath.Join("examples/parcel-eta/features", e.Name()))
		if e.Name() == "stream_feature_views.yaml" {
			b = []byte(strings.Replace(string(b), "    stream: PARCEL_DELIVERIES\n", "    stream: PARCEL_DELIVERIES\n    url: "+ns.URL()+"\n", 1))
		}
		mustWrite(t, filepath.Join(dir, e.Name()), b)
	}
	// Without --aggregate nothing keeps the view: it serves NOT_FOUND.
	base := startFeatureServer(t, dir)
	code, _, resp := do(t, http.MethodPost, base+"/get-online-features",
		[]byte(`{"features":["route_live:deliveries_10m"],"entities":{"route_id":[29]}}`), map[string]string{"Content-Type": "application/json"})
	if code != http.StatusOK || !strings.Contains(string(resp), `"NOT_FOUND"`) {
		t.Fatalf("before any event: %d %s, want NOT_FOUND", code, resp)
	}

	agg := t.TempDir()
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(agg, e.Name()), b)
	}
	aggBase, _ := startFeatureServerArgs(t, agg, "--aggregate")
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	delays := []float64{3, 5, 10, 2}
	for _, d := range delays {
		b, _ := json.Marshal(map[string]any{"event_ts": now.Add(-30 * time.Second).Format(time.RFC3339Nano), "route_id": 29, "delay_min": d})
		if _, err := js.Publish(t.Context(), "parcel.deliveries", b); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // late: older than the 2 minutes allowed
		b, _ := json.Marshal(map[string]any{"event_ts": now.Add(-5 * time.Minute).Format(time.RFC3339Nano), "route_id": 29, "delay_min": 99})
		if _, err := js.Publish(t.Context(), "parcel.deliveries", b); err != nil {
			t.Fatal(err)
		}
	}
	caughtUpStream(t, js, "PARCEL_DELIVERIES", "sluice-route_deliveries")
	code, _, resp = do(t, http.MethodPost, aggBase+"/get-online-features",
		[]byte(`{"features":["route_live:deliveries_10m","route_live:delay_mean_10m","route_live:delay_max_1h"],"entities":{"route_id":[29, 30]}}`),
		map[string]string{"Content-Type": "application/json"})
	if code != http.StatusOK {
		t.Fatalf("get-online-features = %d %s", code, resp)
	}
	var got struct {
		Results []struct {
			Values   []any    `json:"values"`
			Statuses []string `json:"statuses"`
		} `json:"results"`
	}
	if err := json.Unmarshal(resp, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 4 || got.Results[1].Values[0] != float64(4) || got.Results[2].Values[0] != float64(5) || got.Results[3].Values[0] != float64(10) {
		t.Fatalf("route 29: want 4 deliveries (two late ones dropped), mean delay 5, max 10; got %s", resp)
	}
	if got.Results[1].Statuses[1] != "NOT_FOUND" {
		t.Fatalf("route 30 has no events: want NOT_FOUND, got %s", resp)
	}
}

// caughtUpStream is caughtUp for any stream and consumer.
func caughtUpStream(t *testing.T, js jetstream.JetStream, stream, consumer string) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("consumer %s of %s caught up", consumer, stream), func() (bool, string) {
		c, err := js.Consumer(t.Context(), stream, consumer)
		if err != nil {
			return false, err.Error()
		}
		info, err := c.Info(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > 0,
			fmt.Sprintf("pending %d, ack pending %d, delivered %d", info.NumPending, info.NumAckPending, info.Delivered.Stream)
	})
}
