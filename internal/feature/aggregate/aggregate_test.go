package aggregate

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

func testSpec(t *testing.T) *Spec {
	t.Helper()
	s, err := NewSpec(&feature.StreamView{
		Tile: time.Minute, AllowedLateness: 2 * time.Minute,
		Aggregations: []feature.Aggregation{
			{Name: "n_10m", Function: "count", Window: 10 * time.Minute},
			{Name: "sum_10m", Column: "x", Function: "sum", Window: 10 * time.Minute},
			{Name: "mean_1h", Column: "x", Function: "mean", Window: time.Hour},
			{Name: "min_1h", Column: "x", Function: "min", Window: time.Hour},
			{Name: "max_1h", Column: "x", Function: "max", Window: time.Hour},
			{Name: "last_1h", Column: "x", Function: "last", Window: time.Hour},
			{Name: "sd_1h", Column: "x", Function: "stddev", Window: time.Hour},
			{Name: "ny_1h", Column: "y", Function: "count", Window: time.Hour},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// events generates n events over 90 minutes, some out of order, some late.
func events(n int, seed uint64) []Event {
	r := rand.New(rand.NewPCG(seed, 1))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	out := make([]Event, n)
	for i := range out {
		arrival := base + int64(i)*int64(90*time.Minute)/int64(n)
		et := arrival - r.Int64N(int64(90*time.Second)) // within lateness
		if r.IntN(10) == 0 {
			et = arrival - int64(5*time.Minute) // late
		}
		y := math.NaN()
		if r.IntN(2) == 0 {
			y = 1
		}
		out[i] = Event{Seq: uint64(i + 1), Arrival: arrival, Time: et, Values: []float64{r.NormFloat64()*1e3 + 0.1, y}}
	}
	return out
}

func valuesAt(s *Spec, evs []Event, t int64) []feature.Value {
	st := NewState()
	for i := range evs {
		st.Apply(s, &evs[i])
	}
	out := make([]feature.Value, s.Features())
	st.Values(s, t, out)
	return out
}

func TestOrderAndReplayDoNotChangeValues(t *testing.T) {
	s := testSpec(t)
	evs := events(3000, 7)
	at := evs[len(evs)-1].Arrival
	want := valuesAt(s, evs, at)
	if want[0].I64 == 0 || want[1].F64 == 0 {
		t.Fatalf("degenerate values %+v", want)
	}
	shuffled := append([]Event(nil), evs...)
	rand.New(rand.NewPCG(3, 3)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	replayed := slices.Concat(shuffled, evs[100:900]) // a redelivery
	got := valuesAt(s, replayed, at)
	for i := range want {
		if !same(got[i], want[i]) {
			t.Errorf("feature %d: shuffled+replayed %+v, in order %+v", i, got[i], want[i])
		}
	}
}

func TestValuesMatchDirectComputation(t *testing.T) {
	s := testSpec(t)
	evs := events(2000, 11)
	at := evs[1500].Arrival
	got := valuesAt(s, evs[:1501], at)
	// Direct: events not late, in [tileStart(at)+tile−w, tileStart(at)+tile).
	end := (s.tileOf(at) + 1) * s.tile
	var n10 int64
	sum10 := new(big.Float).SetPrec(4096)
	var xs []float64
	var lastTS int64 = math.MinInt64
	var lastSeq uint64
	var last float64
	for _, e := range evs[:1501] {
		if e.Time < e.Arrival-s.lateness {
			continue
		}
		if e.Time >= end-int64(10*time.Minute) && e.Time < end {
			n10++
			sum10.Add(sum10, big.NewFloat(e.Values[0]))
		}
		if e.Time >= end-int64(time.Hour) && e.Time < end {
			xs = append(xs, e.Values[0])
			if e.Time > lastTS || (e.Time == lastTS && e.Seq > lastSeq) {
				lastTS, lastSeq, last = e.Time, e.Seq, e.Values[0]
			}
		}
	}
	s10, _ := sum10.Float64()
	if got[0].I64 != n10 || got[1].F64 != s10 {
		t.Errorf("10m count/sum = %d/%v, direct %d/%v", got[0].I64, got[1].F64, n10, s10)
	}
	mn, mx, mean := math.Inf(1), math.Inf(-1), 0.0
	for _, x := range xs {
		mn, mx, mean = min(mn, x), max(mx, x), mean+x
	}
	mean /= float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(len(xs)-1))
	if got[3].F64 != mn || got[4].F64 != mx || got[5].F64 != last {
		t.Errorf("min/max/last = %v/%v/%v, direct %v/%v/%v", got[3].F64, got[4].F64, got[5].F64, mn, mx, last)
	}
	if rel(got[2].F64, mean) > 1e-9 || rel(got[6].F64, sd) > 1e-9 {
		t.Errorf("mean/stddev = %v/%v, direct %v/%v", got[2].F64, got[6].F64, mean, sd)
	}
}

func rel(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-300) }

func TestLateAndDuplicateOutcomes(t *testing.T) {
	s := testSpec(t)
	st := NewState()
	ev := Event{Seq: 5, Arrival: int64(time.Hour), Time: int64(time.Hour - 3*time.Minute), Values: []float64{1, 1}}
	if o := st.Apply(s, &ev); o != Late {
		t.Fatalf("3m old with 2m lateness: %v, want Late", o)
	}
	ev.Time = int64(time.Hour - time.Minute)
	if o := st.Apply(s, &ev); o != Applied {
		t.Fatalf("1m old: %v, want Applied", o)
	}
	if o := st.Apply(s, &ev); o != Duplicate {
		t.Fatalf("replayed: %v, want Duplicate", o)
	}
}

func TestEncodeRoundTripAndPrune(t *testing.T) {
	s := testSpec(t)
	evs := events(500, 5)
	st := NewState()
	for i := range evs {
		st.Apply(s, &evs[i])
	}
	st.Version = 42
	at := evs[len(evs)-1].Arrival
	st.Prune(s, at, 1)
	b := st.Append(nil, s)
	got, err := Decode(b, s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 42 || string(got.Append(nil, s)) != string(b) {
		t.Fatal("decode(encode(state)) differs")
	}
	ro, err := DecodeForRead(b, s)
	if err != nil {
		t.Fatal(err)
	}
	roVals := make([]feature.Value, s.Features())
	ro.Values(s, at, roVals)
	atVals := make([]feature.Value, s.Features())
	newest, found, err := ValuesAt(b, s, at, atVals)
	if err != nil || !found || newest != got.Newest {
		t.Fatalf("ValuesAt: newest %d found %v err %v", newest, found, err)
	}
	for i := range atVals {
		if !same(atVals[i], roVals[i]) {
			t.Errorf("feature %d: ValuesAt %+v, Values %+v", i, atVals[i], roVals[i])
		}
	}
	want := make([]feature.Value, s.Features())
	full := valuesAt(s, evs, at)
	got.Values(s, at, want)
	for i := range want {
		if !same(want[i], full[i]) || !same(roVals[i], full[i]) {
			t.Errorf("feature %d after prune: %+v (read-only decode %+v), unpruned %+v", i, want[i], roVals[i], full[i])
		}
	}
	// A replayed event whose tile was pruned is not counted again.
	if o := got.Apply(s, &evs[0]); o != Expired {
		t.Errorf("replay of a pruned tile's event: %v, want Expired", o)
	}
	for i := range b {
		if _, err := Decode(b[:i], s); err == nil {
			t.Fatalf("truncated to %d bytes: decoded", i)
		}
	}
}

func TestDecoder(t *testing.T) {
	s := testSpec(t)
	d := NewDecoder(s, "ts", []string{"route"}, []feature.Kind{feature.KindString}, map[string]string{"x": "delay"})
	var ev Event
	key, err := d.Decode([]byte(`{"ts":"2026-01-01T00:00:01.5Z","route":"r1","delay":2.5}`), &ev, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := feature.AppendEntityKey(nil, []feature.Kind{feature.KindString}, []feature.Value{{S: "r1"}})
	if string(key) != string(want) || ev.Values[0] != 2.5 || !math.IsNaN(ev.Values[1]) ||
		ev.Time != time.Date(2026, 1, 1, 0, 0, 1, 5e8, time.UTC).UnixNano() {
		t.Fatalf("decoded %+v key %x", ev, key)
	}
	for _, bad := range []string{`[]`, `{"route":"r1"}`, `{"ts":"x","route":"r1"}`, `{"ts":1,"delay":1}`, `{"ts":1,"route":"r","delay":"a"}`, `{"ts":1,"route":1}`} {
		if _, err := d.Decode([]byte(bad), &ev, nil); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}

func same(a, b feature.Value) bool {
	return a.Null == b.Null && a.I64 == b.I64 && math.Float64bits(a.F64) == math.Float64bits(b.F64)
}
