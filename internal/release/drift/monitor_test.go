package drift

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// normalQuantiles returns 101 quantiles of N(mu, 1), the extremes at
// probabilities 0.0005 and 0.9995 (a training file cannot list ±∞).
func normalQuantiles(mu float64) []float64 {
	q := make([]float64, 101)
	for j := range q {
		p := min(max(float64(j)/100, 0.0005), 0.9995)
		q[j] = mu + math.Sqrt2*math.Erfinv(2*p-1)
	}
	return q
}

// normalBins returns decile edges of N(0, 1) and their proportions.
func normalBins() (edges, props []float64) {
	for i := 1; i < 10; i++ {
		edges = append(edges, math.Sqrt2*math.Erfinv(2*float64(i)/10-1))
	}
	for range 10 {
		props = append(props, 0.1)
	}
	return edges, props
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestShiftIsDetectedAndNoShiftIsNot(t *testing.T) {
	edges, props := normalBins()
	rng := rand.New(rand.NewPCG(42, 43))
	sample := make([]float64, 20_000)
	for i := range sample {
		sample[i] = rng.NormFloat64()
	}
	recorded, err := NewReference("x", sample, 10)
	if err != nil {
		t.Fatal(err)
	}
	refs := []struct {
		name string
		ref  *Reference
	}{
		// Training-data statistics: bins and quantiles of N(0, 1).
		{"training file", &Reference{Name: "x", Kind: Numeric, Count: 1_000_000, Edges: edges, Proportions: props, Quantiles: normalQuantiles(0)}},
		{"recorded period", recorded},
	}
	for i, ref := range refs {
		for j, tc := range []struct {
			name  string
			shift float64
		}{{"unshifted", 0}, {"shifted", 0.5}} {
			t.Run(ref.name+"/"+tc.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(j)))
				ref := ref.ref
				m, err := NewMonitor("svc", []Variable{{Name: "x", Reference: ref}}, Options{Window: WindowOptions{Buckets: 1, Size: 8192, Seed: 3}}, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				for range 5000 {
					m.Observe("x", rng.NormFloat64()+tc.shift)
				}
				rs := m.Check()
				if len(rs) != 1 || rs[0].Skip != "" || rs[0].Samples != 5000 {
					t.Fatalf("results = %+v", rs)
				}
				r := rs[0]
				if tc.shift == 0 {
					// Under the null hypothesis, with 5000 values, p is
					// uniform (these seeds give 0.64 and 0.75) and PSI about
					// (bins−1)/n ≈ 0.002.
					if r.PValue < 0.1 || r.PSI > 0.02 || r.Drifting {
						t.Fatalf("unshifted sample flagged: %+v", r)
					}
					return
				}
				// A shift of σ/2: D ≈ 0.2, PSI ≈ 0.25.
				if r.PValue > 1e-9 || r.PSI < PSIModerate || r.KS < 0.15 || !r.Drifting {
					t.Fatalf("shifted sample not flagged: %+v", r)
				}
			})
		}
	}
}

func TestCheckExportsAndCountsEdges(t *testing.T) {
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	edges, props := normalBins()
	vars := []Variable{
		{Name: "x", Reference: &Reference{Name: "x", Edges: edges, Proportions: props, Quantiles: normalQuantiles(0)}},
		{Name: "region", Reference: &Reference{Name: "region", Kind: Categorical, Categories: []string{"north", "south"}, Proportions: []float64{0.5, 0.5}}},
		{Name: "no_ref"},
	}
	opts := Options{Window: WindowOptions{Buckets: 2, Width: time.Minute, Size: 2048, Seed: 5, Now: clock.Now}}
	m, err := NewMonitor("parcel_eta/features", vars, opts, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	events := func(name, kind string) float64 {
		return testutil.ToFloat64(m.m.events.WithLabelValues("parcel_eta/features", name, kind))
	}
	rng := rand.New(rand.NewPCG(9, 9))
	feed := func(shift float64, north float64) {
		for range 2000 {
			m.Observe("x", rng.NormFloat64()+shift)
			if rng.Float64() < north {
				m.ObserveCategory("region", "north")
			} else {
				m.ObserveCategory("region", "south")
			}
			m.Observe("no_ref", 1)
		}
	}
	// Too few samples: nothing judged, nothing exported.
	m.Observe("x", 0)
	if rs := m.Check(); rs[0].Skip == "" && rs[1].Skip == "" {
		t.Fatalf("judged one observation: %+v", rs)
	}
	if n := testutil.CollectAndCount(reg, "sluice_drift_psi"); n != 0 {
		t.Fatalf("%d psi series before any judgement, want 0", n)
	}
	if got := events("x", "psi") + events("x", "ks") + events("region", "psi"); got != 0 {
		t.Fatalf("events before any judgement = %v", got)
	}

	feed(0, 0.5)
	rs := m.Check()
	if rs[len(rs)-1].Name != "no_ref" || rs[len(rs)-1].Skip != SkipNoReference {
		t.Fatalf("variable without a reference: %+v", rs[len(rs)-1])
	}
	if got := testutil.ToFloat64(m.m.pvalue.WithLabelValues("parcel_eta/features", "x")); got < 0.01 {
		t.Fatalf("ks p-value gauge = %v on unshifted data", got)
	}
	if n := testutil.CollectAndCount(reg, "sluice_drift_ks_pvalue"); n != 1 {
		t.Fatalf("%d ks series, want 1 (categorical variables have none)", n)
	}

	// Drift starts: one event per kind, however many checks see it.
	clock.Advance(2 * time.Minute) // the unshifted data leaves the window
	feed(1, 0.9)
	for range 3 {
		m.Check()
	}
	if events("x", "psi") != 1 || events("x", "ks") != 1 || events("region", "psi") != 1 {
		t.Fatalf("events after persisting drift: x psi %v, x ks %v, region psi %v; want 1 each",
			events("x", "psi"), events("x", "ks"), events("region", "psi"))
	}
	if got := testutil.ToFloat64(m.m.psi.WithLabelValues("parcel_eta/features", "x")); got < PSISignificant {
		t.Fatalf("psi gauge = %v, want ≥ %v", got, PSISignificant)
	}
	if got := strings.Count(logs.String(), `"msg":"drift detected"`); got != 3 {
		t.Fatalf("%d drift events logged, want 3:\n%s", got, logs)
	}
	if !strings.Contains(logs.String(), `"scope":"parcel_eta/features","name":"x","kind":"ks"`) {
		t.Fatalf("event log lacks scope, name and kind:\n%s", logs)
	}
	last := m.Last()
	if len(last) != 3 || !last[0].Drifting || !last[1].Drifting {
		t.Fatalf("Last = %+v", last)
	}

	// Drift clears, then returns: a second rising edge.
	clock.Advance(2 * time.Minute)
	feed(0, 0.5)
	m.Check()
	if !strings.Contains(logs.String(), `"msg":"drift cleared"`) {
		t.Fatalf("no drift cleared log:\n%s", logs)
	}
	clock.Advance(2 * time.Minute)
	feed(1, 0.9)
	m.Check()
	if events("x", "psi") != 2 || events("region", "psi") != 2 {
		t.Fatalf("events after drift returned: x psi %v, region psi %v; want 2", events("x", "psi"), events("region", "psi"))
	}

	// Undeclared names and wrong kinds are not observed.
	if m.Observe("undeclared", 1) || m.ObserveCategory("x", "north") || m.Observe("region", 1) {
		t.Fatal("observed an undeclared name or the wrong kind")
	}
	if m.Window("x") == nil || m.Window("region") != nil || m.Window("undeclared") != nil {
		t.Fatal("Window returned the wrong windows")
	}

	m.Close()
	for _, name := range []string{"sluice_drift_psi", "sluice_drift_ks_pvalue", "sluice_drift_events_total"} {
		if n := testutil.CollectAndCount(reg, name); n != 0 {
			t.Fatalf("%d %s series after Close, want 0", n, name)
		}
	}
}

func TestMonitorsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, scope := range []string{"a", "b"} {
		if _, err := NewMonitor(scope, []Variable{{Name: "x"}}, Options{}, nil, reg); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.CollectAndCount(reg, "sluice_drift_events_total"); n != 4 {
		t.Fatalf("%d event series, want 4 (2 scopes × psi, ks)", n)
	}
}

func TestNewMonitorRejectsBadConfig(t *testing.T) {
	q := []float64{0, 1}
	tests := []struct {
		name    string
		scope   string
		vars    []Variable
		wantErr string
	}{
		{"empty scope", "", nil, "drift scope: empty"},
		{"duplicate", "s", []Variable{{Name: "x"}, {Name: "x"}}, `variables[1]: duplicate name "x"`},
		{"empty name", "s", []Variable{{}}, "variables[0]: name: empty"},
		{"unknown kind", "s", []Variable{{Name: "x", Kind: "ordinal"}}, `kind "ordinal"`},
		{"categorical without categories", "s", []Variable{{Name: "r", Kind: Categorical}}, "0 categories"},
		{"duplicate category", "s", []Variable{{Name: "r", Kind: Categorical, Categories: []string{"a", "a"}}}, `duplicate category "a"`},
		{"numeric with categories", "s", []Variable{{Name: "x", Categories: []string{"a"}}}, "categories for a numeric variable"},
		{"reference for another name", "s", []Variable{{Name: "x", Reference: &Reference{Name: "y", Quantiles: q}}}, `reference is for "y"`},
		{"kind mismatch", "s", []Variable{{Name: "x", Kind: Categorical, Categories: []string{"a"}, Reference: &Reference{Name: "x", Quantiles: q}}}, "categorical variable with a numeric reference"},
		{"invalid reference", "s", []Variable{{Name: "x", Reference: &Reference{Name: "x"}}}, "want edges and proportions, or quantiles"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewMonitor(tt.scope, tt.vars, Options{}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// group builds a monitor for one traffic group fed n observations of
// three numeric features (b shifted by shiftB, c by shiftC) and a region.
func group(t *testing.T, scope string, seed uint64, n int, shiftB, shiftC, north float64) *Monitor {
	t.Helper()
	vars := []Variable{
		{Name: "a"},
		{Name: "b"},
		{Name: "c"},
		{Name: "region", Kind: Categorical, Categories: []string{"north", "south"}},
	}
	m, err := NewMonitor(scope, vars, Options{Window: WindowOptions{Seed: seed}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for range n {
		m.Observe("a", rng.NormFloat64())
		m.Observe("b", rng.NormFloat64()+shiftB)
		m.Observe("c", rng.NormFloat64()*1.1+shiftC)
		if rng.Float64() < north {
			m.ObserveCategory("region", "north")
		} else {
			m.ObserveCategory("region", "south")
		}
	}
	return m
}

func TestRankPutsTheShiftedFeatureFirst(t *testing.T) {
	stable1 := group(t, "premium", 1, 3000, 0, 0, 0.5)
	stable2 := group(t, "standard", 2, 6000, 0, 0, 0.5)
	failing := group(t, "long_tail", 3, 3000, 1, 0.2, 0.6)

	rs := Rank(failing, stable1, stable2)
	if len(rs) != 4 {
		t.Fatalf("Rank returned %d results, want 4: %+v", len(rs), rs)
	}
	var order []string
	for _, r := range rs {
		order = append(order, r.Name)
	}
	if order[0] != "b" || order[3] != "a" {
		t.Fatalf("rank order %v, want b first and a last:\n%+v", order, rs)
	}
	byName := map[string]Result{}
	for _, r := range rs {
		byName[r.Name] = r
	}
	if b := byName["b"]; b.PValue > 1e-12 || b.PSI < PSISignificant || !b.Drifting || b.Samples != 3000 || b.BaseSamples != 9000 {
		t.Fatalf("shifted feature b: %+v", b)
	}
	if a := byName["a"]; a.PValue < 0.01 || a.PSI > PSIModerate || a.Drifting {
		t.Fatalf("unshifted feature a flagged: %+v", a)
	}
	if r := byName["region"]; !(r.PSI > 0.01) || !math.IsNaN(r.KS) {
		t.Fatalf("region (50 %% → 60 %% north): %+v", r)
	}

	// The stable groups compared with each other show nothing.
	for _, r := range Rank(stable1, stable2) {
		if r.Drifting {
			t.Fatalf("stable groups differ: %+v", r)
		}
	}
	// Too few observations on one side: ranked last, without statistics.
	sparse := group(t, "sparse", 4, 50, 3, 3, 0.5)
	rs = Rank(sparse, stable1)
	if len(rs) != 4 || rs[0].Skip != SkipFewSamples || !math.IsNaN(rs[0].PSI) {
		t.Fatalf("sparse group: %+v", rs)
	}
	if rs := Rank(failing); len(rs) != 0 {
		t.Fatalf("Rank with no stable group = %+v", rs)
	}
}

func TestRankMapsCategoriesByName(t *testing.T) {
	a, err := NewMonitor("a", []Variable{{Name: "r", Kind: Categorical, Categories: []string{"x", "y"}}}, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMonitor("b", []Variable{{Name: "r", Kind: Categorical, Categories: []string{"z", "y", "x"}}}, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 300 {
		a.ObserveCategory("r", "x")
		a.ObserveCategory("r", "y")
		b.ObserveCategory("r", "y")
		b.ObserveCategory("r", "x")
	}
	if rs := Rank(a, b); len(rs) != 1 || !near(rs[0].PSI, 0, 1e-12) {
		t.Fatalf("same mix under other category orders: %+v", rs)
	}
}

func TestRecordSaveReload(t *testing.T) {
	m := group(t, "svc", 11, 4000, 0, 0, 0.3)
	var refs []*Reference
	for _, name := range m.Names() {
		r, err := m.Record(name)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	if r := refs[3]; r.Kind != Categorical || !near(r.Proportions[0], 0.3, 0.03) || r.Count != 4000 {
		t.Fatalf("recorded region: %+v", r)
	}
	data, err := MarshalReferences(refs)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := ParseReferences(data)
	if err != nil {
		t.Fatalf("reload recorded references: %v\n%s", err, data)
	}
	// The same distribution, fresh traffic, compared with the reloaded
	// references (quantiles instead of the sample): no drift.
	live := group(t, "svc", 12, 4000, 0, 0, 0.3)
	for _, r := range loaded {
		if err := live.SetReference(r.Name, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(live.References()); got != 4 {
		t.Fatalf("References() has %d, want 4", got)
	}
	for _, r := range live.Check() {
		if r.Skip != "" || r.Drifting {
			t.Fatalf("same distribution flagged against its recorded reference: %+v", r)
		}
	}
	// Errors: unknown name, wrong kind, too few samples, wrong name.
	if err := live.SetReference("nope", refs[0]); err == nil {
		t.Fatal("SetReference accepted an unknown variable")
	}
	if err := live.SetReference("region", &Reference{Name: "region", Quantiles: []float64{0, 1}}); err == nil {
		t.Fatal("SetReference accepted a numeric reference for a categorical variable")
	}
	if err := live.SetReference("a", refs[1]); err == nil {
		t.Fatal("SetReference accepted a reference for another name")
	}
	if err := live.SetReference("a", nil); err != nil || len(live.References()) != 3 {
		t.Fatalf("SetReference(nil): %v, %d references", err, len(live.References()))
	}
	empty := group(t, "empty", 13, 10, 0, 0, 0.5)
	if _, err := empty.Record("a"); err == nil || !strings.Contains(err.Error(), "want at least 100") {
		t.Fatalf("Record with 10 observations: %v", err)
	}
}

func TestMonitorConcurrentUse(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := newFakeClock()
	opts := Options{MinSamples: 10, Window: WindowOptions{Buckets: 3, Width: time.Second, Size: 256, Now: clock.Now}}
	vars := []Variable{{Name: "x"}, {Name: "r", Kind: Categorical, Categories: []string{"a", "b"}}}
	m, err := NewMonitor("svc", vars, opts, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewMonitor("other", vars, opts, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 10_000 {
				if ctx.Err() != nil {
					return
				}
				m.Observe("x", rng.NormFloat64())
				other.Observe("x", rng.NormFloat64()+float64(g))
				m.ObserveCategory("r", [...]string{"a", "b", "c"}[i%3])
				if i%1000 == 0 {
					clock.Advance(100 * time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil && i < 50; i++ {
			m.Check()
			_ = Rank(m, other)
			_ = m.Last()
			if r, err := m.Record("x"); err == nil {
				if err := m.SetReference("x", r); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("concurrent use did not finish in time")
	}
	if rs := m.Check(); len(rs) != 2 {
		t.Fatalf("Check = %+v", rs)
	}
}

func TestRunChecksPeriodically(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vars := []Variable{{Name: "x", Reference: &Reference{Name: "x", Quantiles: normalQuantiles(0)}}}
		m, err := NewMonitor("svc", vars, Options{Interval: time.Second}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 500 {
			m.Observe("x", float64(i%7)+3) // far from N(0,1)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait()
		if m.Last() != nil {
			t.Fatal("checked before the first interval")
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if last := m.Last(); len(last) != 1 || !last[0].Drifting {
			t.Fatalf("Last after one interval = %+v", last)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
	})
}

func TestSortResults(t *testing.T) {
	nan := math.NaN()
	rs := []Result{
		{Name: "skipped", PSI: nan, KS: nan},
		{Name: "low", PSI: 0.01, KS: 0.5},
		{Name: "tie_small_ks", PSI: 0.3, KS: 0.1},
		{Name: "tie_big_ks", PSI: 0.3, KS: 0.2},
		{Name: "cat", PSI: 0.3, KS: nan},
		{Name: "high", PSI: 2, KS: 0.01},
	}
	sortResults(rs)
	var got []string
	for _, r := range rs {
		got = append(got, r.Name)
	}
	if want := "high tie_big_ks tie_small_ks cat low skipped"; strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}

func ExampleRank() {
	stable, _ := NewMonitor("stable", []Variable{{Name: "distance_km"}}, Options{}, nil, nil)
	canary, _ := NewMonitor("canary", []Variable{{Name: "distance_km"}}, Options{}, nil, nil)
	for i := range 1000 {
		stable.Observe("distance_km", float64(i%100))
		canary.Observe("distance_km", float64(i%100)+30)
	}
	for _, r := range Rank(canary, stable) {
		fmt.Printf("%s psi=%.2f ks=%.2f drifting=%v\n", r.Name, r.PSI, r.KS, r.Drifting)
	}
	// Output: distance_km psi=2.39 ks=0.30 drifting=true
}
