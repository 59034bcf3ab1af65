package fallback

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// feed is a test driver: one prediction per second, a deterministic spread of
// ±5 % around base×factor, advancing a shared clock.
type feed struct {
	m   *Monitor
	now time.Time
	i   int
}

func newFeed(t *testing.T, opts MonitorOptions, reg prometheus.Registerer) *feed {
	t.Helper()
	f := &feed{now: time.Date(2026, 11, 30, 8, 17, 0, 0, time.UTC)}
	opts.Now = func() time.Time { return f.now }
	f.m = NewMonitor("parcel-eta", opts, nil, reg)
	return f
}

func (f *feed) run(d time.Duration, factor float64) {
	for end := f.now.Add(d); f.now.Before(end); f.now = f.now.Add(time.Second) {
		f.i++
		f.m.Observe(f.now, factor*(100+float64(f.i%11-5)))
	}
}

func TestMonitorStableBaselineNeverTriggers(t *testing.T) {
	f := newFeed(t, MonitorOptions{}, nil)
	f.run(30*time.Minute, 1)
	st := f.m.State()
	require.Zero(t, st.Baseline.Hours, "no baseline before one full hour")
	f.run(2*time.Hour, 1)
	st = f.m.State()
	require.False(t, st.Triggered)
	require.Equal(t, 2, st.Baseline.Hours)
	require.InDelta(t, 100, st.Baseline.Mean, 0.1)
	require.InDelta(t, 3.16, st.Baseline.Std, 0.1) // uniform over -5..5: σ = √10
	require.InDelta(t, 104.5, st.Baseline.P90, 1)
	require.InDelta(t, 104.5, st.RecentP90, 1)
	require.Less(t, st.Baseline.Lower(), st.Baseline.Mean)
	require.Greater(t, st.Baseline.Upper(), st.Baseline.Mean)
}

func TestMonitorNoTriggerWithoutBaseline(t *testing.T) {
	f := newFeed(t, MonitorOptions{}, nil)
	f.run(10*time.Minute, 1)
	f.run(45*time.Minute, 2) // far off, but less than an hour of history
	require.False(t, f.m.State().Triggered)
}

// TestFallbackScenario is the package-level Done-when scenario: predictions
// driven away from the baseline make low-confidence requests go to the rule
// (source fallback_rule); after recovery every request gets the model again.
func TestFallbackScenario(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	f := newFeed(t, MonitorOptions{}, reg)
	rule, err := CompileRule("base_eta + route_delay_factor * distance", testVars)
	require.NoError(t, err)
	answer := func(conf, model float64) (float64, string) {
		if f.m.UseRule(conf, 0) {
			v, err := rule.Eval(testValues())
			require.NoError(t, err)
			return v, SourceRule
		}
		return model, SourceModel
	}

	f.run(2*time.Hour, 1)
	_, src := answer(0.3, 42)
	require.Equal(t, SourceModel, src, "not triggered: even low confidence gets the model")

	f.run(9*time.Minute, 1.3)
	require.False(t, f.m.State().Triggered, "9 minutes outside the band is not enough")

	f.run(90*time.Second, 1.3)
	st := f.m.State()
	require.True(t, st.Triggered, "10 minutes outside the band triggers")
	require.False(t, st.Since.IsZero())
	require.InDelta(t, 135, st.RecentP90, 1)
	require.InDelta(t, 1, testutil.ToFloat64(f.m.met.triggered.WithLabelValues("parcel-eta")), 0)

	v, src := answer(0.3, 42)
	require.Equal(t, SourceRule, src)
	require.InDelta(t, 16.5, v, 1e-9)
	v, src = answer(0.9, 42)
	require.Equal(t, SourceModel, src, "confident requests keep the model")
	require.InDelta(t, 42, v, 0)
	require.InDelta(t, 1, testutil.ToFloat64(f.m.met.answers.WithLabelValues("parcel-eta", CauseDrift)), 0)

	// Recovery: back inside the band for longer than the window plus
	// ClearDuration clears the trigger.
	f.run(30*time.Second, 1)
	require.True(t, f.m.State().Triggered, "clearing waits for ClearDuration")
	f.run(2*time.Minute, 1)
	st = f.m.State()
	require.False(t, st.Triggered)
	require.True(t, st.Since.IsZero())
	_, src = answer(0.3, 42)
	require.Equal(t, SourceModel, src)
	require.InDelta(t, 0, testutil.ToFloat64(f.m.met.triggered.WithLabelValues("parcel-eta")), 0)
	require.InDelta(t, 100, testutil.ToFloat64(f.m.met.baselineMean.WithLabelValues("parcel-eta")), 1)
	require.InDelta(t, 104.5, testutil.ToFloat64(f.m.met.p90.WithLabelValues("parcel-eta")), 1)
}

func TestMonitorDownwardShiftTriggers(t *testing.T) {
	f := newFeed(t, MonitorOptions{Duration: 5 * time.Minute}, nil)
	f.run(90*time.Minute, 1)
	f.run(6*time.Minute, 0.7)
	require.True(t, f.m.State().Triggered)
}

func TestMonitorBriefExcursionResets(t *testing.T) {
	f := newFeed(t, MonitorOptions{}, nil)
	f.run(90*time.Minute, 1)
	f.run(8*time.Minute, 1.3)
	f.run(2*time.Minute, 1) // back inside: the run outside restarts
	f.run(8*time.Minute, 1.3)
	require.False(t, f.m.State().Triggered)
}

func TestMonitorBoundedMemory(t *testing.T) {
	m := NewMonitor("s", MonitorOptions{RecentCap: 64}, nil, nil)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 72 * 60 { // 72 h, one observation a minute
		m.Observe(start.Add(time.Duration(i)*time.Minute), 10)
		require.LessOrEqual(t, len(m.buckets), 25)
	}
	require.Equal(t, 24, m.State().Baseline.Hours)
	require.Len(t, m.ring, 64)
	require.LessOrEqual(t, cap(m.scratch), 64)
}

func TestMonitorIgnoresNonFinite(t *testing.T) {
	m := NewMonitor("s", MonitorOptions{}, nil, nil)
	now := time.Now()
	m.Observe(now, math.NaN())
	m.Observe(now, math.Inf(1))
	require.True(t, m.start.IsZero())
}

func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := NewMonitor("a", MonitorOptions{}, nil, reg)
	b := NewMonitor("b", MonitorOptions{}, nil, reg)
	require.Same(t, a.met.triggered, b.met.triggered)
	n, err := testutil.GatherAndCount(reg, "sluice_gateway_fallback_triggered")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func TestWelfordMerge(t *testing.T) {
	xs := []float64{1, 4, 9, 16, 25, 36, 49}
	var all, a, b welford
	for i, x := range xs {
		all.add(x)
		if i < 3 {
			a.add(x)
		} else {
			b.add(x)
		}
	}
	a.merge(b)
	require.InDelta(t, all.mean, a.mean, 1e-9)
	require.InDelta(t, all.std(), a.std(), 1e-9)
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name      string
		conf      float64
		triggered bool
		want      bool
	}{
		{"triggered low confidence", 0.5, true, true},
		{"triggered at threshold", 0.7, true, false},
		{"triggered high confidence", 0.9, true, false},
		{"not triggered low confidence", 0.1, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Decide(tt.conf, tt.triggered, DefaultThreshold))
		})
	}
}
