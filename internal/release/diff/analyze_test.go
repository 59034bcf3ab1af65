package diff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/record"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// rec builds a record whose primary and shadow arms answer eta_prediction
// a and b with latencies latA and latB.
func rec(i int, region string, a, b, latA, latB float64) *record.Record {
	r := &record.Record{
		Schema:    record.SchemaVersion,
		RequestID: fmt.Sprintf("req-%05d", i),
		Time:      t0.Add(time.Duration(i) * time.Second),
		Service:   "parcel-eta",
		Headers:   map[string]string{"x-request-id": fmt.Sprintf("req-%05d", i)},
		Request:   map[string]any{"user_id": json.Number(fmt.Sprint(i)), "base_eta": json.Number("35")},
		Features:  map[string]any{"route_features__distance_km": float64(i%10) + 0.5},
		Arms: map[string]record.Arm{
			record.ArmPrimary: {Model: "parcel_eta", Version: "1", Status: 200, LatencyMS: latA, Outputs: map[string][]float64{"eta_prediction": {a}}},
			record.ArmShadow:  {Model: "parcel_eta", Version: "2", Status: 200, LatencyMS: latB, Outputs: map[string][]float64{"eta_prediction": {b}}},
		},
	}
	if region != "" {
		r.Headers["x-region"] = region
	}
	return r
}

func analyze(t *testing.T, in Input, opts Options) *Result {
	t.Helper()
	res, err := Analyze(t.Context(), in, opts)
	if err != nil {
		t.Fatalf("Analyze: %v", err)
	}
	// Whatever the data, the result must encode as JSON (no NaN/Inf).
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("result does not encode: %v", err)
	}
	return res
}

func gateByID(res *Result, id string) *Gate {
	for i := range res.Gates {
		if res.Gates[i].ID == id {
			return &res.Gates[i]
		}
	}
	return nil
}

func output(t *testing.T, res *Result, name string) OutputStats {
	t.Helper()
	for _, o := range res.Outputs {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("no output %s in %+v", name, res.Outputs)
	return OutputStats{}
}

func TestDeltaAndSignificance(t *testing.T) {
	var recs []*record.Record
	// 100 requests: Δ = +0.01 for 95, exactly 0.15 (not significant: the
	// rule is |Δ| > threshold) for 2, and −0.2, +0.3, +0.16 for 3.
	deltas := make([]float64, 100)
	for i := range deltas {
		deltas[i] = 0.01
	}
	deltas[10], deltas[11] = 0.15, -0.15
	deltas[20], deltas[30], deltas[40] = -0.2, 0.3, 0.16
	var sum float64
	for i, d := range deltas {
		a := 40 + float64(i%7)
		recs = append(recs, rec(i, "eu", a, a+d, 2, 2))
		sum += (a + d) - a // the Δ as float arithmetic computes it
	}
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{})
	st := output(t, res, "eta_prediction")
	if st.Compared != 100 || st.Significant != 3 || st.SignificantShare != 0.03 {
		t.Fatalf("compared %d, significant %d (%g), want 100, 3 (0.03)", st.Compared, st.Significant, st.SignificantShare)
	}
	if math.Abs(st.MeanDelta-sum/100) > 1e-12 {
		t.Errorf("mean Δ = %g, want %g", st.MeanDelta, sum/100)
	}
	if math.Abs(st.MaxAbsDelta-0.3) > 1e-9 {
		t.Errorf("max |Δ| = %g, want 0.3", st.MaxAbsDelta)
	}
	g := gateByID(res, "significant_share[eta_prediction]")
	if g == nil || g.Passed || g.Value != 0.03 || g.Limit != DefaultMaxSignificantShare {
		t.Fatalf("significant_share gate = %+v, want failed at 0.03 > 0.01", g)
	}
	if res.Passed || !slices.Contains(res.Failed, "significant_share[eta_prediction]") {
		t.Fatalf("Passed = %v, Failed = %v", res.Passed, res.Failed)
	}
	// Worst examples: largest |Δ| first, with their context.
	w := res.Worst[0]
	if w.Output != "eta_prediction" || len(w.Examples) != DefaultWorstN {
		t.Fatalf("worst = %s with %d examples", w.Output, len(w.Examples))
	}
	if got := []string{w.Examples[0].RequestID, w.Examples[1].RequestID, w.Examples[2].RequestID}; !slices.Equal(got, []string{"req-00030", "req-00020", "req-00040"}) {
		t.Fatalf("worst three = %v", got)
	}
	e := w.Examples[0]
	if !e.Significant || e.Headers["x-region"] != "eu" || e.Features["route_features__distance_km"] != 0.5 || e.Request["user_id"] != json.Number("30") {
		t.Fatalf("worst example context = %+v", e)
	}
	if e.B-e.A != e.Delta {
		t.Fatalf("example Δ %g ≠ B − A = %g", e.Delta, e.B-e.A)
	}
	// A higher share limit passes the same data; a threshold of 0.1
	// counts the ±0.15s too.
	if res := analyze(t, Input{A: FromRecords(recs...)}, Options{MaxSignificantShare: 0.05}); !res.Passed {
		t.Fatalf("with max share 5%%: failed %v", res.Failed)
	}
	if st := output(t, analyze(t, Input{A: FromRecords(recs...)}, Options{Threshold: 0.1}), "eta_prediction"); st.Significant != 5 {
		t.Fatalf("threshold 0.1: %d significant, want 5", st.Significant)
	}
}

func TestRelativeDelta(t *testing.T) {
	recs := []*record.Record{
		rec(0, "", 10, 11, 1, 1),   // +10 %: not significant
		rec(1, "", 1, 1.2, 1, 1),   // +20 %
		rec(2, "", 100, 80, 1, 1),  // −20 %
		rec(3, "", 0, 0, 1, 1),     // 0/0: no change
		rec(4, "", -50, -55, 1, 1), // −10 % of |A|
	}
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{Relative: true})
	st := output(t, res, "eta_prediction")
	if st.Significant != 2 {
		t.Fatalf("relative: %d significant, want 2", st.Significant)
	}
	if math.Abs(st.MaxAbsDelta-0.2) > 1e-9 {
		t.Fatalf("relative max |Δ| = %g, want 0.2", st.MaxAbsDelta)
	}
	// Absolute Δ on the same data: 1, 0.2, 20, 0, 5 are all above 0.15.
	if st := output(t, analyze(t, Input{A: FromRecords(recs...)}, Options{}), "eta_prediction"); st.Significant != 4 {
		t.Fatalf("absolute: %d significant, want 4", st.Significant)
	}
}

// A replay of the same model reproduces its outputs: every gate passes.
func TestIdenticalArmsPass(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var recs []*record.Record
	for i := range 500 {
		v := 30 + 10*rng.NormFloat64()
		lat := 2 + rng.Float64()
		recs = append(recs, rec(i, []string{"eu", "us"}[i%2], v, v, lat, lat))
	}
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{Slices: []SliceKey{{Name: "x-region"}}})
	if !res.Passed || len(res.Failed) != 0 {
		t.Fatalf("identical arms failed: %v", res.Failed)
	}
	st := output(t, res, "eta_prediction")
	if st.Significant != 0 || st.MaxAbsDelta != 0 || st.KS.Statistic != 0 || st.KS.PValue != 1 {
		t.Fatalf("identical arms: %+v", st)
	}
	if len(res.Warnings) != 0 {
		t.Fatalf("unexpected warnings %v", res.Warnings)
	}
	if res.Counts.Pairs != 500 || res.Counts.BothOK != 500 || res.Mode != ModeArms {
		t.Fatalf("counts %+v mode %s", res.Counts, res.Mode)
	}
	if res.A.Models["parcel_eta:1"] != 500 || res.B.Models["parcel_eta:2"] != 500 {
		t.Fatalf("models A %v B %v", res.A.Models, res.B.Models)
	}
	if !res.From.Equal(t0) || !res.To.Equal(t0.Add(499*time.Second)) {
		t.Fatalf("time range %v – %v", res.From, res.To)
	}
}

// regionScenario: v2 is worse by +5 minutes for region eu only.
func regionScenario(n int) []*record.Record {
	rng := rand.New(rand.NewPCG(9, 10))
	regions := []string{"eu", "us", "ap"}
	var recs []*record.Record
	for i := range n {
		region := regions[i%3]
		a := 35 + 8*rng.NormFloat64()
		b := a + 0.02*rng.NormFloat64()
		if region == "eu" {
			b += 5
		}
		lat := 1.5 + rng.Float64()
		recs = append(recs, rec(i, region, a, b, lat, lat*1.01))
	}
	return recs
}

func TestSliceCatchesOneRegion(t *testing.T) {
	res := analyze(t, Input{A: FromRecords(regionScenario(900)...)}, Options{
		Slices: []SliceKey{{Source: SourceHeader, Name: "x-region"}},
	})
	if res.Passed {
		t.Fatal("a regression in one region passed")
	}
	for _, id := range []string{"significant_share[eta_prediction]@x-region=eu", "ks[eta_prediction]@x-region=eu"} {
		if !slices.Contains(res.Failed, id) {
			t.Errorf("failed gates %v lack %s", res.Failed, id)
		}
	}
	for _, id := range res.Failed {
		if strings.Contains(id, "x-region=us") || strings.Contains(id, "x-region=ap") {
			t.Errorf("gate %s failed although the region is unchanged", id)
		}
	}
	if len(res.Slices) != 1 {
		t.Fatalf("%d slice reports", len(res.Slices))
	}
	groups := map[string]SliceGroup{}
	var order []string
	for _, g := range res.Slices[0].Groups {
		groups[g.Value] = g
		order = append(order, g.Value)
	}
	if !slices.Equal(order, []string{"ap", "eu", "us"}) {
		t.Fatalf("groups %v, want ap, eu, us", order)
	}
	eu, us := groups["eu"], groups["us"]
	if eu.Passed || !eu.Gated || eu.Pairs != 300 {
		t.Fatalf("eu slice: %+v", eu)
	}
	if eu.Outputs[0].SignificantShare != 1 || eu.Outputs[0].KS.PValue >= 0.01 {
		t.Fatalf("eu output: %+v", eu.Outputs[0])
	}
	if !us.Passed || !groups["ap"].Passed {
		t.Fatalf("us/ap slices failed: %+v / %+v", us, groups["ap"])
	}
	if us.Outputs[0].Significant != 0 || us.Outputs[0].KS.PValue < 0.5 {
		t.Fatalf("us output: %+v", us.Outputs[0])
	}
	if us.Latency.A.N != 300 || us.Latency.B.P95 <= us.Latency.A.P95 {
		t.Fatalf("us latency: %+v", us.Latency)
	}
}

func TestMissingSliceKeyWarning(t *testing.T) {
	build := func(missing int) []*record.Record {
		var recs []*record.Record
		for i := range 100 {
			region := "eu"
			if i < missing {
				region = ""
			}
			recs = append(recs, rec(i, region, 1, 1, 1, 1))
		}
		return recs
	}
	key := SliceKey{Name: "x-region"}
	res := analyze(t, Input{A: FromRecords(build(70)...)}, Options{Slices: []SliceKey{key}})
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "x-region is missing from 70 of 100 records") {
		t.Fatalf("warnings = %q", res.Warnings)
	}
	rep := res.Slices[0]
	if rep.Missing != 70 || rep.MissingShare != 0.7 {
		t.Fatalf("missing %d (%g)", rep.Missing, rep.MissingShare)
	}
	if last := rep.Groups[len(rep.Groups)-1]; last.Value != "(missing)" || last.Pairs != 70 {
		t.Fatalf("last group %+v, want (missing) with 70", last)
	}
	if res := analyze(t, Input{A: FromRecords(build(30)...)}, Options{Slices: []SliceKey{key}}); len(res.Warnings) != 0 {
		t.Fatalf("30%% missing warned: %q", res.Warnings)
	}
	// A key found nowhere (a typo) is missing from every record.
	res = analyze(t, Input{A: FromRecords(build(0)...)}, Options{Slices: []SliceKey{{Name: "x-regoin"}}})
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "missing from 100 of 100") {
		t.Fatalf("typo key warnings = %q", res.Warnings)
	}
}

func TestLatencyRegressionGate(t *testing.T) {
	build := func(factor float64) []*record.Record {
		var recs []*record.Record
		for i := range 200 {
			lat := 10 + float64(i%100)/10 // 10.0 … 19.9 ms
			recs = append(recs, rec(i, "", 1, 1, lat, lat*factor))
		}
		return recs
	}
	res := analyze(t, Input{A: FromRecords(build(1.2)...)}, Options{})
	g := gateByID(res, "latency_p95")
	if g == nil || g.Passed || math.Abs(g.Value-0.2) > 1e-9 {
		t.Fatalf("+20%%: gate %+v", g)
	}
	if !slices.Equal(res.Failed, []string{"latency_p95"}) {
		t.Fatalf("failed %v, want only latency_p95", res.Failed)
	}
	// p95 of 10.0…19.9 (each twice) by linear interpolation.
	want := quantile(slices.Sorted(func(yield func(float64) bool) {
		for i := range 200 {
			if !yield(10 + float64(i%100)/10) {
				return
			}
		}
	}), 0.95)
	if math.Abs(res.Latency.A.P95-want) > 1e-9 || math.Abs(res.Latency.A.P95-19.405) > 1e-9 {
		t.Fatalf("p95 A = %g, want %g", res.Latency.A.P95, want)
	}
	if res := analyze(t, Input{A: FromRecords(build(1.05)...)}, Options{}); !res.Passed {
		t.Fatalf("+5%%: failed %v", res.Failed)
	}
	if res := analyze(t, Input{A: FromRecords(build(1.2)...)}, Options{MinP95IncreaseMS: 5}); !res.Passed {
		t.Fatalf("+20%% under a 5 ms floor: failed %v", res.Failed)
	}
	if res := analyze(t, Input{A: FromRecords(build(1.2)...)}, Options{MaxP95Regression: -1}); gateByID(res, "latency_p95") != nil {
		t.Fatal("disabled latency gate was evaluated")
	}
}

func TestErrorRateAndDataGates(t *testing.T) {
	var recs []*record.Record
	for i := range 50 {
		r := rec(i, "", 1, 1, 1, 1)
		sh := r.Arms[record.ArmShadow]
		sh.Status, sh.Reason, sh.Outputs = 503, "overloaded", nil
		r.Arms[record.ArmShadow] = sh
		recs = append(recs, r)
	}
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{})
	if res.Passed {
		t.Fatal("a shadow failing every request passed")
	}
	for _, id := range []string{"data", "error_rate"} {
		if !slices.Contains(res.Failed, id) {
			t.Errorf("failed %v lacks %s", res.Failed, id)
		}
	}
	if res.Errors.RateB != 1 || res.Errors.ReasonsB["status 503: overloaded"] != 50 {
		t.Fatalf("errors %+v", res.Errors)
	}
	// No records at all must not pass either.
	if res := analyze(t, Input{A: FromRecords()}, Options{}); res.Passed || !slices.Equal(res.Failed, []string{"data"}) {
		t.Fatalf("empty recording: passed %v failed %v", res.Passed, res.Failed)
	}
}

func TestJoinByRequestID(t *testing.T) {
	mk := func(ids []int, v float64) []*record.Record {
		var recs []*record.Record
		for _, i := range ids {
			r := rec(i, "eu", v+float64(i), 0, 3, 0)
			delete(r.Arms, record.ArmShadow) // a replay records one arm
			recs = append(recs, r)
		}
		return recs
	}
	a := mk([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10)
	b := mk([]int{9, 8, 7, 6, 5, 10, 11, 12, 5}, 10.5) // other order, 5 twice, 3 unknown ids
	res := analyze(t, Input{A: FromRecords(a...), B: FromRecords(b...)}, Options{})
	c := res.Counts
	want := Counts{RecordsA: 10, RecordsB: 9, Duplicates: 1, UnmatchedA: 5, UnmatchedB: 3, Pairs: 5, BothOK: 5}
	if c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	if res.Mode != ModeJoin || res.A.Label != "A" || res.B.Label != "B" || res.A.Arm != "primary" || res.B.Arm != "primary" {
		t.Fatalf("sides %+v / %+v mode %s", res.A, res.B, res.Mode)
	}
	st := output(t, res, "eta_prediction")
	if st.Compared != 5 || st.Significant != 5 || math.Abs(st.MeanDelta-0.5) > 1e-12 {
		t.Fatalf("joined output %+v", st)
	}
	var joined []string
	for _, e := range res.Worst[0].Examples {
		joined = append(joined, e.RequestID)
	}
	slices.Sort(joined)
	if !slices.Equal(joined, []string{"req-00005", "req-00006", "req-00007", "req-00008", "req-00009"}) {
		t.Fatalf("joined ids %v", joined)
	}
	warn := strings.Join(res.Warnings, "\n")
	for _, s := range []string{"5 of 10 records of A have no request_id match in B", "3 of 9 records of B have no request_id match in A", "1 records repeat a request_id"} {
		if !strings.Contains(warn, s) {
			t.Errorf("warnings %q lack %q", res.Warnings, s)
		}
	}
	// Latency of B is 0 ms in these records: compared, not a regression.
	if res.Latency.A.N != 5 || res.Latency.B.N != 5 {
		t.Fatalf("latency %+v", res.Latency)
	}
}

func TestArmsModeUnmatched(t *testing.T) {
	recs := regionScenario(10)
	delete(recs[0].Arms, record.ArmShadow)
	delete(recs[1].Arms, record.ArmShadow)
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{})
	if res.Counts.UnmatchedA != 2 || res.Counts.Pairs != 8 {
		t.Fatalf("counts %+v", res.Counts)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "2 records have no shadow arm") }) {
		t.Fatalf("warnings %q", res.Warnings)
	}
	if _, err := Analyze(t.Context(), Input{A: FromRecords(), ArmB: "primary"}, Options{}); err == nil {
		t.Fatal("comparing an arm with itself was accepted")
	}
}

func TestOutputMismatches(t *testing.T) {
	var recs []*record.Record
	for i := range 100 {
		recs = append(recs, rec(i, "", 5, 5, 1, 1))
	}
	sh := recs[0].Arms[record.ArmShadow]
	sh.Outputs = map[string][]float64{"eta_prediction": {5, 6}} // shape changed
	recs[0].Arms[record.ArmShadow] = sh
	sh = recs[1].Arms[record.ArmShadow]
	sh.Outputs = map[string][]float64{"eta_prediction": {math.NaN()}} // NaN only in B
	recs[1].Arms[record.ArmShadow] = sh
	pr := recs[2].Arms[record.ArmPrimary]
	pr.Outputs = map[string][]float64{"eta_prediction": {5}, "confidence_score": {0.9}} // only in A
	recs[2].Arms[record.ArmPrimary] = pr
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{})
	st := output(t, res, "eta_prediction")
	if st.Compared != 98 || st.Mismatched != 2 || st.Significant != 0 {
		t.Fatalf("eta %+v", st)
	}
	g := gateByID(res, "significant_share[eta_prediction]")
	if g == nil || g.Passed || g.Value != 0.02 {
		t.Fatalf("mismatches must count against the share gate: %+v", g)
	}
	if len(res.Outputs) != 1 || !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, "output confidence_score was returned only by primary")
	}) {
		t.Fatalf("outputs %d, warnings %q", len(res.Outputs), res.Warnings)
	}
	// Asking for it explicitly compares it (one side only: 1 mismatch).
	res = analyze(t, Input{A: FromRecords(recs...)}, Options{Outputs: []string{"confidence_score"}})
	if st := output(t, res, "confidence_score"); st.Compared != 0 || st.Mismatched != 1 {
		t.Fatalf("confidence_score %+v", st)
	}
}

func TestNumericSliceBuckets(t *testing.T) {
	var recs []*record.Record
	for i := range 100 {
		recs = append(recs, rec(i, "", 1, 1, 1, 1)) // distance = i%10 + 0.5
	}
	groupsOf := func(res *Result, i int) map[string]int {
		m := map[string]int{}
		for _, g := range res.Slices[i].Groups {
			m[g.Value] = g.Pairs
		}
		return m
	}
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{Slices: []SliceKey{
		{Source: SourceFeature, Name: "route_features__distance_km", Edges: []float64{2, 5}},
		{Source: SourceRequest, Name: "user_id"}, // 100 distinct: quartiles
	}})
	if got, want := groupsOf(res, 0), map[string]int{"(-inf,2)": 20, "[2,5)": 30, "[5,+inf)": 50}; !mapsEqual(got, want) {
		t.Errorf("edges: %v, want %v", got, want)
	}
	// 10 distinct values without edges: one slice each.
	perValue := analyze(t, Input{A: FromRecords(recs...)}, Options{Slices: []SliceKey{{Name: "route_features__distance_km"}}})
	if got := groupsOf(perValue, 0); len(got) != 10 || got["0.5"] != 10 || got["9.5"] != 10 {
		t.Errorf("per value: %v", got)
	}
	if got, want := groupsOf(res, 1), map[string]int{"(-inf,24.75)": 25, "[24.75,49.5)": 25, "[49.5,74.25)": 25, "[74.25,+inf)": 25}; !mapsEqual(got, want) {
		t.Errorf("quartiles: %v, want %v", got, want)
	}
	var order []string
	for _, g := range res.Slices[0].Groups {
		order = append(order, g.Value)
	}
	if !slices.Equal(order, []string{"(-inf,2)", "[2,5)", "[5,+inf)"}) {
		t.Errorf("bucket order %v", order)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestMinSliceCount(t *testing.T) {
	recs := regionScenario(30) // 10 per region: below the default 20
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{Slices: []SliceKey{{Name: "x-region"}}})
	for _, g := range res.Slices[0].Groups {
		if g.Gated || !g.Passed {
			t.Errorf("slice %s of %d pairs gated %v passed %v", g.Value, g.Pairs, g.Gated, g.Passed)
		}
	}
	for _, id := range res.Failed {
		if strings.Contains(id, "@") {
			t.Errorf("small slice gate %s counted", id)
		}
	}
	res = analyze(t, Input{A: FromRecords(recs...)}, Options{Slices: []SliceKey{{Name: "x-region"}}, MinSliceCount: 5})
	if !slices.Contains(res.Failed, "significant_share[eta_prediction]@x-region=eu") {
		t.Errorf("with min 5 the eu slice must be gated: failed %v", res.Failed)
	}
}

func TestParseSliceKey(t *testing.T) {
	tests := []struct {
		in      string
		want    SliceKey
		wantErr string
	}{
		{in: "x-region", want: SliceKey{Name: "x-region"}},
		{in: "header:X-User-Type", want: SliceKey{Source: SourceHeader, Name: "x-user-type"}},
		{in: "feature:route_features__distance_km@2,5,10", want: SliceKey{Source: SourceFeature, Name: "route_features__distance_km", Edges: []float64{2, 5, 10}}},
		{in: "request:base_eta@ 30 , 40", want: SliceKey{Source: SourceRequest, Name: "base_eta", Edges: []float64{30, 40}}},
		{in: "cookie:x", wantErr: "unknown slice source"},
		{in: "feature:", wantErr: "empty slice key name"},
		{in: "d@5,2", wantErr: "strictly ascending"},
		{in: "d@a", wantErr: "not a number"},
		{in: "d@1,NaN", wantErr: "not finite"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSliceKey(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSliceKey: %v", err)
			}
			if got.Source != tt.want.Source || got.Name != tt.want.Name || !slices.Equal(got.Edges, tt.want.Edges) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			again, err := ParseSliceKey(got.String())
			if err != nil || again.String() != got.String() {
				t.Fatalf("round trip of %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	err := Options{Threshold: -1, KSAlpha: 2, Bins: 5000, Slices: []SliceKey{{Name: "a"}, {Name: "a"}}, Outputs: []string{""}}.Validate()
	for _, s := range []string{"threshold must not be negative", "ks alpha", "bins 5000", "duplicate key a", "outputs[0]: empty name"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Validate() = %v, want it to contain %q", err, s)
		}
	}
	if _, err := Analyze(t.Context(), Input{A: FromRecords()}, Options{Threshold: math.NaN()}); err == nil {
		t.Error("Analyze accepted a NaN threshold")
	}
	if _, err := Analyze(t.Context(), Input{}, Options{}); err == nil {
		t.Error("Analyze accepted no recording")
	}
}

func TestAnalyzeStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Analyze(ctx, Input{A: FromRecords(regionScenario(10)...)}, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Analyze with a cancelled context: %v", err)
	}
}

// End to end with the record package: JSONL recordings written by
// record.Encode, read back by record.OpenFiles and joined by request_id.
// Decoded request fields are json.Number and features float64.
func TestAnalyzeJSONLRecordings(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, recs []*record.Record) string {
		t.Helper()
		var b strings.Builder
		for _, r := range recs {
			line, err := record.Encode(r)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			b.Write(line)
			b.WriteByte('\n')
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	recs := regionScenario(300)
	// B is a replay of the shadow version: its primary arm is the shadow.
	var replay []*record.Record
	for _, r := range recs {
		c := *r
		c.Arms = map[string]record.Arm{record.ArmPrimary: r.Arms[record.ArmShadow]}
		replay = append(replay, &c)
	}
	open := func(path string) record.Source {
		t.Helper()
		src, err := record.OpenFiles(path, record.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}
	res := analyze(t, Input{A: open(write("a.jsonl", recs)), B: open(write("b.jsonl", replay[50:]))}, Options{
		Slices: []SliceKey{{Name: "x-region"}, {Source: SourceRequest, Name: "base_eta"}},
	})
	if res.Counts.Pairs != 250 || res.Counts.UnmatchedA != 50 {
		t.Fatalf("counts %+v", res.Counts)
	}
	if !slices.Contains(res.Failed, "significant_share[eta_prediction]@x-region=eu") || slices.Contains(res.Failed, "ks[eta_prediction]@x-region=us") {
		t.Fatalf("failed %v", res.Failed)
	}
	if g := res.Slices[1].Groups; len(g) != 1 || g[0].Value != "35" || g[0].Pairs != 250 {
		t.Fatalf("base_eta slice %+v", g)
	}
	if res.B.Models["parcel_eta:2"] != 250 {
		t.Fatalf("B models %v", res.B.Models)
	}
}

// TestKSMinimumEffect: the ks gate's minimum effect. On a large-valued
// output (an ETA of 20–40 minutes) a 0.001 shift passes the default gate
// and a 5-minute one fails it. On a near-constant output KS calls a 0.001
// shift significant: with an absolute minimum of 0.01 the gate passes it
// and says so ("significant but below the minimum effect"), and fails it
// without a minimum, or with a smaller one for that output.
func TestKSMinimumEffect(t *testing.T) {
	build := func(base, step, shift float64) []*record.Record {
		var recs []*record.Record
		for i := range 3000 {
			a := base + float64(i%1000)*step
			recs = append(recs, rec(i, "", a, a+shift, 5, 5))
		}
		return recs
	}
	eta := func(shift float64) []*record.Record { return build(20, 0.02, shift) } // 20 … 40, σ ≈ 5.8
	res := analyze(t, Input{A: FromRecords(eta(0.001)...)}, Options{})
	if g := gateByID(res, "ks[eta_prediction]"); g == nil || !g.Passed {
		t.Fatalf("0.001 shift of an ETA: gate %+v, want passed", g)
	}
	st := output(t, res, "eta_prediction")
	if want := 0.1 * st.A.Std; math.Abs(st.KSMinEffect-want) > 1e-9 || want < 0.5 {
		t.Fatalf("min effect %g, want 0.1 σ = %g", st.KSMinEffect, want)
	}
	if g := gateByID(analyze(t, Input{A: FromRecords(eta(5)...)}, Options{}), "ks[eta_prediction]"); g == nil || g.Passed {
		t.Fatalf("5 minute shift: gate %+v, want failed", g)
	}

	flat := func(shift float64) []*record.Record { return build(30, 1e-6, shift) } // 30.000000 … 30.000999
	res = analyze(t, Input{A: FromRecords(flat(0.001)...)}, Options{KSMinEffect: 0.01})
	g := gateByID(res, "ks[eta_prediction]")
	if g == nil || !g.Passed || g.Value >= DefaultKSAlpha {
		t.Fatalf("0.001 shift under an absolute minimum of 0.01: gate %+v, want passed with p < %g", g, DefaultKSAlpha)
	}
	st = output(t, res, "eta_prediction")
	if math.Abs(st.KSEffect-0.001) > 1e-6 || st.KSMinEffect != 0.01 || st.KSVerdict != KSBelowMinEffect {
		t.Fatalf("effect %g, min %g, verdict %q", st.KSEffect, st.KSMinEffect, st.KSVerdict)
	}
	if !strings.HasPrefix(g.Message, "significant but below the minimum effect") {
		t.Fatalf("message %q does not say it", g.Message)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.HasPrefix(w, "eta_prediction: significant but below the minimum effect")
	}) {
		t.Fatalf("no warning: %q", res.Warnings)
	}
	for _, o := range []Options{
		{KSMinEffect: -1},
		{KSMinEffect: 0.01, MinEffects: map[string]MinEffect{"eta_prediction": {Absolute: 0.0005}}},
		{}, // 0.1 σ of a near-constant output is tiny: 0.001 is 3.5 σ
	} {
		if g := gateByID(analyze(t, Input{A: FromRecords(flat(0.001)...)}, o), "ks[eta_prediction]"); g == nil || g.Passed {
			t.Fatalf("0.001 shift of a near-constant output with %+v: gate %+v, want failed", o, g)
		}
	}
}

// TestKSGateOnBoundedOutput is the shift the seeds' gate passed in
// silence: a 0–1 score moved by 0.1 (KS D = 0.5), every request's |Δ|
// under the 0.15 threshold, the percentiles 0.1 apart, under the old
// minimum effect (the threshold) yet far above 0.1 σ of the score. The
// default gate fails, names the output in Failed and in the HTML report,
// and per slice; report-only passes but still warns.
func TestKSGateOnBoundedOutput(t *testing.T) {
	var recs []*record.Record
	for i := range 2000 {
		a := 0.7 + 0.2*float64(i%1000)/1000 // confidence 0.7 … 0.9, σ ≈ 0.058
		r := rec(i, []string{"eu", "us"}[i%2], 0, 0, 5, 5)
		r.Arms = map[string]record.Arm{
			record.ArmPrimary: {Model: "parcel_eta", Version: "1", Status: 200, LatencyMS: 5, Outputs: map[string][]float64{"confidence_score": {a}}},
			record.ArmShadow:  {Model: "parcel_eta", Version: "2", Status: 200, LatencyMS: 5, Outputs: map[string][]float64{"confidence_score": {a + 0.1}}},
		}
		recs = append(recs, r)
	}
	opts := Options{Slices: []SliceKey{{Name: "x-region"}}}
	res := analyze(t, Input{A: FromRecords(recs...)}, opts)
	st := output(t, res, "confidence_score")
	if math.Abs(st.KS.Statistic-0.5) > 0.01 || st.KSVerdict != KSSignificant {
		t.Fatalf("D = %g, verdict %q; want D ≈ 0.5, significant", st.KS.Statistic, st.KSVerdict)
	}
	if st.Significant != 0 {
		t.Fatalf("%d requests above the threshold; the scenario needs none", st.Significant)
	}
	if res.Passed || !slices.Contains(res.Failed, "ks[confidence_score]") || !slices.Contains(res.Failed, "ks[confidence_score]@x-region=eu") {
		t.Fatalf("passed %v, failed %v", res.Passed, res.Failed)
	}
	if slices.Contains(res.Failed, "significant_share[confidence_score]") {
		t.Fatalf("the significant_share gate failed too: %v", res.Failed)
	}
	dir := t.TempDir()
	if err := Write(dir, res); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ks[confidence_score]", "SIGNIFICANT SHIFT", "0.5000"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	// The old default (the minimum effect = the threshold, 0.15) passed it.
	old := analyze(t, Input{A: FromRecords(recs...)}, Options{KSMinEffect: DefaultThreshold})
	if g := gateByID(old, "ks[confidence_score]"); g == nil || !g.Passed || !strings.HasPrefix(g.Message, "significant but below the minimum effect") {
		t.Fatalf("with the old minimum: gate %+v", g)
	}
	ro := analyze(t, Input{A: FromRecords(recs...)}, Options{KSReportOnly: true})
	if !ro.Passed || !slices.ContainsFunc(ro.Warnings, func(w string) bool { return strings.Contains(w, "confidence_score: significant shift") }) {
		t.Fatalf("report-only: passed %v, warnings %q", ro.Passed, ro.Warnings)
	}
}

func TestParseMinEffect(t *testing.T) {
	for _, c := range []struct {
		in   string
		name string
		want MinEffect
		err  bool
	}{
		{"eta=0.5", "eta", MinEffect{Absolute: 0.5}, false},
		{"conf=0.2sigma", "conf", MinEffect{Sigma: 0.2}, false},
		{"conf = 0.3σ", "conf", MinEffect{Sigma: 0.3}, false},
		{"conf=1sd", "conf", MinEffect{Sigma: 1}, false},
		{"conf=0", "conf", MinEffect{Absolute: -1}, false},
		{"conf=-1sigma", "", MinEffect{}, true},
		{"conf=NaN", "", MinEffect{}, true},
		{"=1", "", MinEffect{}, true},
		{"conf", "", MinEffect{}, true},
	} {
		name, m, err := ParseMinEffect(c.in)
		if (err != nil) != c.err || name != c.name || m != c.want {
			t.Errorf("ParseMinEffect(%q) = %q %+v %v", c.in, name, m, err)
		}
	}
}

// TestSliceLatencyGate: a slice with enough requests on each side gates
// its p95 latency; a smaller one only reports it.
func TestSliceLatencyGate(t *testing.T) {
	var recs []*record.Record
	for i := range 600 {
		region := []string{"eu", "us"}[i%2]
		lat := 10 + float64(i%50)/10
		latB := lat
		if region == "eu" {
			latB = lat * 1.5 // only eu got slower
		}
		recs = append(recs, rec(i, region, 30, 30, lat, latB))
	}
	key := []SliceKey{{Source: SourceHeader, Name: "x-region"}}
	res := analyze(t, Input{A: FromRecords(recs...)}, Options{Slices: key})
	if !slices.Contains(res.Failed, "latency_p95@x-region=eu") || slices.Contains(res.Failed, "latency_p95@x-region=us") {
		t.Fatalf("failed %v, want latency_p95@x-region=eu and not us", res.Failed)
	}
	res = analyze(t, Input{A: FromRecords(recs...)}, Options{Slices: key, MinLatencySliceCount: 1000})
	if slices.Contains(res.Failed, "latency_p95@x-region=eu") {
		t.Fatalf("a slice under the latency count was gated: %v", res.Failed)
	}
}
