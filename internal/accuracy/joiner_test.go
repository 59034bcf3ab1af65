package accuracy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The GCS emulator (objstoretest) starts a pubsub worker at init.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func etaSpec() accuracyspec.Service {
	s := accuracyspec.Service{
		Key: "order_id", Slices: []string{"X-Region"},
		Outputs: []accuracyspec.Output{{Name: "eta_minutes", Observed: "actual_minutes"}},
		Offline: []accuracyspec.Offline{{Version: "1", Metrics: map[string]float64{"mae": 4}}},
	}
	s.ApplyDefaults()
	return s
}

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestJoiner(t *testing.T, path string, c *clock, reg prometheus.Registerer) (*Joiner, func()) {
	t.Helper()
	var j *Joiner
	st, err := OpenBolt(path, 1000, func(e *Entry) { j.Evicted(e) })
	if err != nil {
		t.Fatal(err)
	}
	j = New(st, Options{Lookback: 24 * time.Hour, Now: c.now}, nil, reg)
	j.SetServices([]Service{{Name: "eta", Spec: etaSpec()}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = j.Run(ctx); close(done) }()
	return j, func() {
		cancel()
		if err := j.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		<-done
	}
}

func pred(key, version, region string, eta float64, at time.Time) *Prediction {
	return &Prediction{
		Service: "eta", Key: key, RequestID: "req-" + key, Model: "parcel_eta", Version: version, Route: "default",
		Slices: map[string]string{"x-region": region}, Outputs: map[string]float64{"eta_minutes": eta}, Time: at,
	}
}

func outcome(key string, actual float64, at time.Time) Outcome {
	return Outcome{Service: "eta", Key: key, Values: map[string]float64{"actual_minutes": actual}, Time: at}
}

func TestJoinOutOfOrderAndDuplicates(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	j, stop := newTestJoiner(t, filepath.Join(t.TempDir(), "p.db"), c, reg)
	defer stop()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	type pairT struct{ pred, obs float64 }
	want := map[string][]pairT{} // version/slice → pairs
	var ps []*Prediction
	for i := range 200 {
		v := []string{"1", "2"}[i%2]
		region := []string{"eu", "us", "apac"}[i%3]
		p := pred(fmt.Sprintf("o-%d", i), v, region, 20+rng.Float64()*40, c.t)
		ps = append(ps, p)
	}
	// Outcomes of the first 50 arrive before their predictions.
	var early []Outcome
	actual := map[string]float64{}
	for i, p := range ps {
		actual[p.Key] = p.Outputs["eta_minutes"] + rng.NormFloat64()*5
		if i < 50 {
			early = append(early, outcome(p.Key, actual[p.Key], c.t))
		}
	}
	res, err := j.Ingest(ctx, early)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != ResultHeld {
			t.Fatalf("early outcome %d: %s, want held", i, r)
		}
	}
	for _, p := range ps {
		if !j.Offer(p, nil) {
			t.Fatal("Offer refused")
		}
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The rest, in reverse order, each twice, plus the early ones again,
	// within the rolling window.
	c.t = c.t.Add(10 * time.Minute)
	var late []Outcome
	for i := len(ps) - 1; i >= 50; i-- {
		late = append(late, outcome(ps[i].Key, actual[ps[i].Key], c.t), outcome(ps[i].Key, actual[ps[i].Key]+1, c.t))
	}
	late = append(late, early...)
	res, err = j.Ingest(ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, r := range res {
		counts[r]++
	}
	if counts[ResultJoined] != 150 || counts[ResultDuplicate] != 200 || len(counts) != 2 {
		t.Fatalf("results %v, want 150 joined and 200 duplicates", counts)
	}
	for _, p := range ps {
		pr := pairT{p.Outputs["eta_minutes"], actual[p.Key]}
		for _, sl := range []string{"all", "route=default", "x-region=" + p.Slices["x-region"]} {
			want[p.Version+"/"+sl] = append(want[p.Version+"/"+sl], pr)
		}
	}
	for k, pairs := range want {
		var v, sl string
		fmt.Sscanf(k[:1], "%s", &v)
		sl = k[2:]
		var sumAbs, sumErr float64
		for _, p := range pairs {
			sumAbs += math.Abs(p.pred - p.obs)
			sumErr += p.pred - p.obs
		}
		n := float64(len(pairs))
		got := testutil.ToFloat64(j.m.joined.WithLabelValues("eta", v, "eta_minutes", sl))
		if got != n {
			t.Errorf("%s: joined %v, want %v", k, got, n)
		}
		if got := testutil.ToFloat64(j.m.online.WithLabelValues("eta", v, "eta_minutes", sl, "mae")); math.Abs(got-sumAbs/n) > 1e-9 {
			t.Errorf("%s: mae %v, want %v", k, got, sumAbs/n)
		}
		if got := testutil.ToFloat64(j.m.online.WithLabelValues("eta", v, "eta_minutes", sl, "bias")); math.Abs(got-sumErr/n) > 1e-9 {
			t.Errorf("%s: bias %v, want %v", k, got, sumErr/n)
		}
	}
	mae1 := testutil.ToFloat64(j.m.online.WithLabelValues("eta", "1", "eta_minutes", "all", "mae"))
	if got := testutil.ToFloat64(j.m.ratio.WithLabelValues("eta", "1", "eta_minutes", "mae")); math.Abs(got-mae1/4) > 1e-9 {
		t.Errorf("online/offline ratio %v, want %v", got, mae1/4)
	}
	if got := testutil.ToFloat64(j.m.coverage.WithLabelValues("eta", "1")); got != 1 {
		t.Errorf("label coverage %v, want 1", got)
	}
}

func TestTooLateAndInvalid(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	j, stop := newTestJoiner(t, filepath.Join(t.TempDir(), "p.db"), c, nil)
	defer stop()
	ctx := context.Background()
	j.Offer(pred("a", "1", "eu", 30, c.t), nil)
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(25 * time.Hour)
	res, err := j.Ingest(ctx, []Outcome{
		outcome("a", 31, c.t),                    // observed 25h after the prediction
		outcome("b", 31, c.t.Add(-25*time.Hour)), // observed before the lookback
		outcome("c", 31, c.t.Add(time.Hour)),     // in the future
		{Service: "eta", Key: "d", Values: map[string]float64{"other": 1}, Time: c.t},
		{Service: "nope", Key: "e", Values: map[string]float64{"actual_minutes": 1}, Time: c.t},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ResultTooLate, ResultTooLate, ResultInvalid, ResultInvalid, ResultInvalid}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("outcome %d: %s, want %s", i, res[i], want[i])
		}
	}
}

func TestPendingSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	j, stop := newTestJoiner(t, path, c, nil)
	for i := range 10 {
		j.Offer(pred(fmt.Sprintf("k%d", i), "1", "eu", 30, c.t), nil)
	}
	stop() // Close stores what is queued
	j2, stop2 := newTestJoiner(t, path, c, nil)
	defer stop2()
	var outs []Outcome
	for i := range 10 {
		outs = append(outs, outcome(fmt.Sprintf("k%d", i), 32, c.t))
	}
	res, err := j2.Ingest(context.Background(), outs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != ResultJoined {
			t.Fatalf("outcome %d after restart: %s, want joined", i, r)
		}
	}
	if got := testutil.ToFloat64(j2.m.online.WithLabelValues("eta", "1", "eta_minutes", "all", "mae")); got != 2 {
		t.Errorf("mae %v, want 2", got)
	}
}

func TestEvictionAndExpiry(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	var j *Joiner
	st, err := OpenBolt(filepath.Join(t.TempDir(), "p.db"), 5, func(e *Entry) { j.Evicted(e) })
	if err != nil {
		t.Fatal(err)
	}
	j = New(st, Options{Lookback: time.Hour, Now: c.now}, nil, reg)
	j.SetServices([]Service{{Name: "eta", Spec: etaSpec()}})
	defer func() { _ = j.Close(context.Background()) }()
	ctx := context.Background()
	for i := range 8 {
		j.storePredictions(ctx, []*Prediction{pred(fmt.Sprintf("k%d", i), "1", "eu", 30, c.t.Add(time.Duration(i)*time.Second))})
	}
	if st.Len() != 5 {
		t.Fatalf("store holds %d, want 5", st.Len())
	}
	if got := testutil.ToFloat64(j.m.evicted.WithLabelValues("eta", "prediction")); got != 3 {
		t.Errorf("evicted %v, want 3", got)
	}
	// The evicted ones expired soonest: k0..k2 are unknown now (held),
	// and holding k0's outcome evicts k3.
	res, _ := j.Ingest(ctx, []Outcome{outcome("k0", 1, c.t.Add(10*time.Second)), outcome("k7", 1, c.t)})
	if res[0] != ResultHeld || res[1] != ResultJoined {
		t.Fatalf("results %v, want held, joined", res)
	}
	if got := testutil.ToFloat64(j.m.evicted.WithLabelValues("eta", "prediction")); got != 4 {
		t.Errorf("evicted %v, want 4", got)
	}
	c.t = c.t.Add(2 * time.Hour)
	j.Sweep(ctx)
	if st.Len() != 0 {
		t.Fatalf("store holds %d after the lookback, want 0", st.Len())
	}
	if got := testutil.ToFloat64(j.m.expired.WithLabelValues("eta", "prediction")); got != 3 {
		t.Errorf("expired predictions %v, want 3", got)
	}
	if got := testutil.ToFloat64(j.m.expired.WithLabelValues("eta", "outcome")); got != 1 {
		t.Errorf("expired outcomes %v, want 1", got)
	}
}

func TestAUCMatchesPairCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s Stats
	var ps, ys []float64
	for range 2000 {
		y := float64(rng.IntN(2))
		// Probabilities on the bin grid, so the binned AUC is exact.
		k := rng.IntN(100)
		if y == 1 {
			k = min(k+20, 99)
		}
		p := (float64(k) + 0.5) / 100
		s.addBinary(p, y, 0.5)
		ps, ys = append(ps, p), append(ys, y)
	}
	var num, den float64
	for i := range ps {
		if ys[i] != 1 {
			continue
		}
		for k := range ps {
			if ys[k] != 0 {
				continue
			}
			den++
			switch {
			case ps[i] > ps[k]:
				num++
			case ps[i] == ps[k]:
				num += 0.5
			}
		}
	}
	got, ok := s.Metric("auc")
	if !ok || math.Abs(got-num/den) > 1e-9 {
		t.Fatalf("auc %v (%v), want %v", got, ok, num/den)
	}
}

// failingStore fails its first fails updates (a broker that is down or
// hung), or every update while down is set, then writes through to the
// bolt store underneath.
type failingStore struct {
	Store
	fails atomic.Int32
	down  atomic.Bool
}

func (s *failingStore) Update(ctx context.Context, keys []string, fn func(int, *Entry) *Entry) error {
	if s.down.Load() || s.fails.Add(-1) >= 0 {
		return errors.New("nats: timeout")
	}
	return s.Store.Update(ctx, keys, fn)
}

// A store that fails for a while loses no prediction: the batch in hand
// is retried until it is stored. One that still fails at Close drops what
// it holds and counts it.
func TestStoreFailuresRetried(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	bolt, err := OpenBolt(filepath.Join(t.TempDir(), "p.db"), 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := &failingStore{Store: bolt}
	st.fails.Store(3)
	reg := prometheus.NewRegistry()
	j := New(st, Options{Lookback: 24 * time.Hour, Now: c.now}, nil, reg)
	j.SetServices([]Service{{Name: "eta", Spec: etaSpec()}})
	done := make(chan struct{})
	go func() { _ = j.Run(context.Background()); close(done) }()
	for i := range 10 {
		if !j.Offer(pred(fmt.Sprintf("k%d", i), "1", "eu", 30, c.t), nil) {
			t.Fatalf("offer %d refused", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := bolt.Len(); n != 10 {
		t.Fatalf("%d predictions stored after the store came back, want all 10", n)
	}
	if f, d := testutil.ToFloat64(j.m.storeFails), testutil.ToFloat64(j.m.dropped.WithLabelValues("eta")); f != 3 || d != 0 {
		t.Fatalf("store errors %v, dropped %v; want 3 and 0", f, d)
	}

	st.down.Store(true)
	if !j.Offer(pred("late", "1", "eu", 30, c.t), nil) {
		t.Fatal("offer refused")
	}
	harness.WaitFor(t, 10*time.Second, 5*time.Millisecond, "4 failed store calls", func() (bool, string) {
		n := testutil.ToFloat64(j.m.storeFails)
		return n >= 4, fmt.Sprintf("%v failed", n)
	})
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if d := testutil.ToFloat64(j.m.dropped.WithLabelValues("eta")); d != 1 {
		t.Fatalf("dropped %v, want the 1 prediction the dead store held at Close", d)
	}
}

// TestOutcomeOwnership: an outcome joins only a prediction served to the
// client that posts it, unless its source may judge any (issue 22 item
// 5). Another client's outcome is not stored, so the owner's still joins,
// whether it came after the prediction was stored or was held before.
func TestOutcomeOwnership(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	j, stop := newTestJoiner(t, filepath.Join(t.TempDir(), "p.db"), c, reg)
	defer stop()
	ctx := context.Background()
	from := func(o Outcome, client string, anyPred bool) Outcome {
		o.Client, o.Any = client, anyPred
		return o
	}
	ingest := func(outs ...Outcome) []string {
		t.Helper()
		res, err := j.Ingest(ctx, outs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// held-a: demo's outcome arrives before dispatch's prediction.
	if got := ingest(from(outcome("held-a", 1e5, c.t), "demo", false)); got[0] != ResultHeld {
		t.Fatalf("early foreign outcome: %v, want held", got)
	}
	for _, key := range []string{"a", "b", "held-a"} {
		p := pred(key, "1", "eu", 40, c.t)
		p.Client = "dispatch"
		if !j.Offer(p, nil) {
			t.Fatal("Offer refused")
		}
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(time.Minute)
	got := ingest(
		from(outcome("a", 1e5, c.t), "demo", false),         // another client's: refused
		from(outcome("a", 42, c.t), "dispatch", false),      // the owner's: joins
		from(outcome("b", 44, c.t), "labeler", true),        // outcome_clients: joins
		from(outcome("held-a", 41, c.t), "dispatch", false), // the held foreign one was dropped
	)
	if want := []string{ResultNotPermitted, ResultJoined, ResultJoined, ResultJoined}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(j.m.outcomes.WithLabelValues("eta", ResultNotPermitted)); n != 2 {
		t.Fatalf("not_permitted outcomes counted %v, want 2 (one posted, one held and dropped)", n)
	}
	// MAE over the three joined pairs: |40-42|, |40-44|, |40-41|; the
	// refused 100,000 never entered.
	for _, se := range j.Status()[0].Series {
		if se.Slice == "all" && se.Output == "eta_minutes" {
			if se.Pairs != 3 || math.Abs(se.Metrics["mae"]-7.0/3) > 1e-9 {
				t.Fatalf("series %+v, want 3 pairs with MAE 7/3", se)
			}
			return
		}
	}
	t.Fatalf("no series for slice all: %+v", j.Status())
}
