package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config/duration"
	"github.com/sluice-ml/sluice/internal/match"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// fakeClock is the controller's injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = t
}

// testConfig is the example: stage 1 premium users, stage 2 the long
// tail (region sa), then everyone.
func testConfig(tb testing.TB) Config {
	tb.Helper()
	return Config{
		Stable:    Target{Version: "1"},
		Candidate: Target{Version: "2"},
		Stages: []Stage{
			{
				Name:        "premium",
				Groups:      []Group{{Name: "premium", Headers: []match.HeaderMatch{{Name: "x-user-type", Exact: new("premium")}}}},
				MinDuration: duration.Duration(time.Hour),
			},
			{
				Name:        "long-tail",
				Groups:      []Group{{Name: "region-sa", Headers: []match.HeaderMatch{{Name: "x-region", Exact: new("sa")}}}},
				MinDuration: duration.Duration(time.Hour),
			},
		},
		MinRequests: 100,
		StateFile:   filepath.Join(tb.TempDir(), "rollout", "parcel-eta.json"),
	}
}

// behaviour says how a version answers request i of group on arm.
type behaviour func(arm Arm, group string, i int) Outcome

// healthy answers in 10–16 ms with confidence 0.8–0.9, with a little noise
// below every threshold: 2 % low-confidence answers in every group, and
// 0.5 % errors among premium and region sa requests.
func healthy(_ Arm, _ string, i int) Outcome {
	o := clean(ArmStable, "", i)
	if (i/10)%50 == 7 {
		o.Confidence = 0.5
	}
	if i%1000 == 10 || i%1000 == 511 {
		o.Status = 503
	}
	return o
}

// clean answers in 10–16 ms with confidence 0.8–0.9 and no errors.
func clean(_ Arm, _ string, i int) Outcome {
	return Outcome{Status: 200, Latency: time.Duration(10+i%7) * time.Millisecond, Confidence: 0.8 + float64(i%3)*0.05, HasConfidence: true}
}

// worseIn makes the candidate answer with f in group only.
func worseIn(group string, f func(o Outcome, i int) Outcome) behaviour {
	return func(arm Arm, g string, i int) Outcome {
		o := healthy(arm, g, i)
		if arm == ArmCandidate && g == group {
			o = f(o, i)
		}
		return o
	}
}

// attrs is request i: every 10th is a premium user (in region eu); of the
// rest, regions sa, us and eu.
func attrs(i int) Attributes {
	region := "eu"
	switch i % 5 {
	case 1:
		region = "sa"
	case 2:
		region = "us"
	}
	userType := "standard"
	if i%10 == 0 {
		userType = "premium"
	}
	h := http.Header{}
	h.Set("X-User-Type", userType)
	h.Set("X-Region", region)
	return Attributes{
		Headers:   h,
		Values:    map[string]string{"region": region, "user_id": strconv.Itoa(i % 997)},
		RequestID: "req-" + strconv.Itoa(i),
	}
}

type harness struct {
	t     *testing.T
	cfg   Config
	c     *Controller
	clock *fakeClock
	reg   *prometheus.Registry
	i     int
}

func newHarness(t *testing.T, cfg Config, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, cfg: cfg, clock: &fakeClock{t: t0}, reg: prometheus.NewRegistry()}
	opts.Now = h.clock.Now
	c, err := New("parcel-eta", cfg, opts, nil, h.reg)
	require.NoError(t, err)
	h.c = c
	return h
}

// send routes one request and reports its outcome.
func (h *harness) send(a Attributes, b behaviour, i int) (string, Arm) {
	v, g, arm := h.c.Decide(a)
	require.Equal(h.t, h.c.Target(arm).Version, v)
	h.c.Observe(arm, g, b(arm, g, i))
	return g, arm
}

// drive sends n requests of the standard mix.
func (h *harness) drive(n int, b behaviour) {
	for range n {
		h.send(attrs(h.i), b, h.i)
		h.i++
	}
}

// arm returns the arm and group of a request with the given user type and region.
func (h *harness) arm(userType, region string) (Arm, string) {
	hd := http.Header{}
	hd.Set("X-User-Type", userType)
	hd.Set("X-Region", region)
	_, g, a := h.c.Decide(Attributes{Headers: hd, RequestID: "probe-" + userType + region})
	return a, g
}

func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	switch name {
	case "stage":
		return testutil.ToFloat64(h.c.m.stage.WithLabelValues(append([]string{"parcel-eta"}, labels...)...))
	case "state":
		return testutil.ToFloat64(h.c.m.state.WithLabelValues(append([]string{"parcel-eta"}, labels...)...))
	case "transitions":
		return testutil.ToFloat64(h.c.m.transitions.WithLabelValues(append([]string{"parcel-eta"}, labels...)...))
	case "requests":
		return testutil.ToFloat64(h.c.m.requests.WithLabelValues(append([]string{"parcel-eta"}, labels...)...))
	}
	h.t.Fatalf("unknown metric %s", name)
	return 0
}

func TestStageProgression(t *testing.T) {
	h := newHarness(t, testConfig(t), Options{})
	c := h.c

	arm, group := h.arm("premium", "eu")
	require.Equal(t, ArmCandidate, arm, "stage 1 sends premium users to the candidate")
	require.Equal(t, "premium", group)
	arm, group = h.arm("standard", "sa")
	require.Equal(t, ArmStable, arm, "the long tail waits for stage 2")
	require.Equal(t, "region-sa", group)
	arm, group = h.arm("standard", "eu")
	require.Equal(t, ArmStable, arm)
	require.Equal(t, AllGroup, group)

	h.drive(2000, healthy)
	require.Nil(t, c.Tick(t.Context(), t0.Add(59*time.Minute)), "no promotion before min_duration")
	tr := c.Tick(t.Context(), t0.Add(time.Hour))
	require.NotNil(t, tr)
	require.Equal(t, KindPromote, tr.Kind)
	require.Equal(t, "premium", tr.From)
	require.Equal(t, "long-tail", tr.To)
	require.False(t, tr.Manual)

	st := c.Status()
	require.Equal(t, StateProgressing, st.State)
	require.Equal(t, 1, st.Stage)
	require.Equal(t, "long-tail", st.StageName)
	require.Equal(t, t0.Add(time.Hour), st.StageSince)
	require.InDelta(t, 1, h.metric("stage"), 0)
	for _, g := range st.Groups {
		require.Zero(t, g.Candidate.Requests, "windows restart with the stage (group %s)", g.Name)
	}

	arm, _ = h.arm("premium", "eu")
	require.Equal(t, ArmCandidate, arm, "earlier stages' groups stay on the candidate")
	arm, _ = h.arm("standard", "sa")
	require.Equal(t, ArmCandidate, arm)
	arm, _ = h.arm("standard", "us")
	require.Equal(t, ArmStable, arm)

	h.drive(2000, healthy)
	require.Nil(t, c.Tick(t.Context(), t0.Add(119*time.Minute)))
	tr = c.Tick(t.Context(), t0.Add(2*time.Hour))
	require.NotNil(t, tr)
	require.Equal(t, AllGroup, tr.To, "the implicit final stage")

	arm, _ = h.arm("standard", "us")
	require.Equal(t, ArmCandidate, arm)

	// The final stage sends everyone to the candidate: the latency gate
	// compares against the stable outcomes seen since the rollout started.
	h.drive(2000, healthy)
	st = c.Status()
	require.GreaterOrEqual(t, st.Baseline.Requests, uint64(100))
	tr = c.Tick(t.Context(), t0.Add(3*time.Hour))
	require.NotNil(t, tr)
	require.Equal(t, StateComplete, tr.State)
	require.Equal(t, StateComplete, c.Status().State)
	require.Nil(t, c.Tick(t.Context(), t0.Add(10*time.Hour)), "nothing happens after completion")

	require.InDelta(t, 2, h.metric("stage"), 0)
	require.InDelta(t, 1, h.metric("state", "complete"), 0)
	require.InDelta(t, 0, h.metric("state", "progressing"), 0)
	require.InDelta(t, 3, h.metric("transitions", "promote"), 0)
	require.InDelta(t, 0, h.metric("transitions", "rollback"), 0)
	require.Positive(t, h.metric("requests", "candidate", "premium"))
	require.Positive(t, h.metric("requests", "stable", "region-sa"))

	hist := c.Status().History
	kinds := make([]TransitionKind, 0, len(hist))
	for _, tr := range hist {
		kinds = append(kinds, tr.Kind)
	}
	require.Equal(t, []TransitionKind{KindStart, KindPromote, KindPromote, KindPromote}, kinds)
}

func TestRollbackWhenOneRegionFails(t *testing.T) {
	tests := []struct {
		name      string
		bad       func(o Outcome, i int) Outcome
		gate      string
		value     float64
		threshold float64
		detail    string
	}{
		{
			name:      "low confidence",
			bad:       func(o Outcome, _ int) Outcome { o.Confidence = 0.3; return o },
			gate:      GateLowConfidenceShare,
			value:     1,
			threshold: DefaultMaxLowConfidenceShare,
			detail:    "1 > 0.15 (share of confidence < 0.6",
		},
		{
			name: "errors",
			bad: func(o Outcome, i int) Outcome {
				if i%10 == 1 { // every other sa request (i%5 == 1)
					o.Status = 500
				}
				return o
			},
			gate:      GateErrorRate,
			value:     0.5,
			threshold: DefaultMaxErrorRate,
			detail:    "0.5 > 0.01",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var diagnosed []string
			opts := Options{Diagnose: func(group string) []Suspect {
				diagnosed = append(diagnosed, group)
				out := []Suspect{{Feature: "route_features__distance_km", PSI: 0.91, KS: 0.6, PValue: 3e-12}}
				for i := range 10 {
					out = append(out, Suspect{Feature: fmt.Sprintf("f%d", i), PSI: 0.1})
				}
				return out
			}}
			h := newHarness(t, testConfig(t), opts)
			c := h.c
			b := worseIn("region-sa", tt.bad)

			h.drive(2000, b)
			require.Equal(t, KindPromote, c.Tick(t.Context(), t0.Add(time.Hour)).Kind, "stage 1 does not serve the region: healthy")

			h.drive(2000, b)
			tr := c.Tick(t.Context(), t0.Add(time.Hour+time.Minute))
			require.NotNil(t, tr, "the region's failure rolls back at once, before min_duration")
			require.Equal(t, KindRollback, tr.Kind)
			require.Equal(t, StateRolledBack, tr.State)

			st := c.Status()
			require.Equal(t, StateRolledBack, st.State)
			r := st.Reason
			require.NotNil(t, r)
			require.Equal(t, tt.gate, r.Gate)
			require.InDelta(t, tt.value, r.Value, 1e-9)
			require.InDelta(t, tt.threshold, r.Threshold, 1e-12)
			require.Equal(t, "long-tail", r.Stage)
			require.Equal(t, 1, r.StageIndex)
			require.Equal(t, "region-sa", r.Group)
			require.GreaterOrEqual(t, r.Requests, uint64(100))
			require.Equal(t, []string{"region-sa"}, diagnosed, "Diagnose is asked about the failing group once")
			require.Len(t, r.Suspects, MaxSuspects)
			require.Equal(t, "route_features__distance_km", r.Suspects[0].Feature)
			require.Len(t, r.Failed, 1, "premium stays healthy")
			for _, want := range []string{"gate " + tt.gate, `stage "long-tail"`, `group "region-sa"`, tt.detail, "route_features__distance_km (PSI 0.91"} {
				require.Contains(t, r.Message, want)
			}
			require.Equal(t, r.Message, tr.Reason)

			for _, p := range [][2]string{{"premium", "eu"}, {"standard", "sa"}, {"standard", "us"}} {
				arm, _ := h.arm(p[0], p[1])
				require.Equal(t, ArmStable, arm, "after a rollback every request goes to stable (%v)", p)
			}
			require.Nil(t, c.Tick(t.Context(), t0.Add(5*time.Hour)), "a rolled-back rollout stays rolled back")
			require.InDelta(t, 1, h.metric("transitions", "rollback"), 0)
			require.InDelta(t, 1, h.metric("state", "rolled_back"), 0)
		})
	}
}

func TestNoRollbackOnHealthyNoise(t *testing.T) {
	cfg := testConfig(t)
	cfg.Stages[0].MinDuration = duration.Duration(24 * time.Hour) // stay in stage 1 and keep judging
	h := newHarness(t, cfg, Options{})
	for k := range 20 {
		h.drive(1000, healthy)
		require.Nil(t, h.c.Tick(t.Context(), t0.Add(time.Duration(k)*time.Minute)), "tick %d", k)
	}
	st := h.c.Status()
	require.Equal(t, StateProgressing, st.State)
	prem := st.Groups[0]
	require.Equal(t, "premium", prem.Name)
	require.True(t, prem.Serving)
	require.Len(t, prem.Gates, 3)
	for _, g := range prem.Gates {
		require.Equal(t, GateOK, g.Status, "%s = %v", g.Gate, g.Value)
	}
	require.Positive(t, prem.Candidate.ErrorRate, "the noise is there")
	require.Positive(t, prem.Candidate.LowConfidenceShare)
}

func TestMinRequests(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, Options{})
	c := h.c
	premium := func(i int) Attributes {
		a := attrs(0)
		a.RequestID = "p-" + strconv.Itoa(i)
		return a
	}
	t.Run("promotion waits for min_requests", func(t *testing.T) {
		for i := range 200 {
			a := attrs(3) // standard, eu: stable, the latency baseline
			a.RequestID = "s-" + strconv.Itoa(i)
			h.send(a, clean, i)
		}
		for i := range 99 {
			h.send(premium(i), clean, i)
		}
		require.Nil(t, c.Tick(t.Context(), t0.Add(2*time.Hour)))
		st := c.Status()
		require.Equal(t, GatePending, st.Groups[0].Gates[0].Status)
		require.Equal(t, uint64(99), st.Groups[0].Gates[0].Requests)
		h.send(premium(99), clean, 99)
		tr := c.Tick(t.Context(), t0.Add(2*time.Hour))
		require.NotNil(t, tr)
		require.Equal(t, "long-tail", tr.To)
	})
	t.Run("gates wait for min_requests", func(t *testing.T) {
		sa := func(i int) Attributes {
			a := attrs(1)
			a.RequestID = "sa-" + strconv.Itoa(i)
			return a
		}
		bad := worseIn("region-sa", func(o Outcome, _ int) Outcome { o.Status = 503; return o })
		for i := range 99 {
			h.send(sa(i), bad, i)
		}
		require.Nil(t, c.Tick(t.Context(), t0.Add(2*time.Hour+time.Minute)), "99 failures are not judged")
		h.send(sa(99), bad, 99)
		tr := c.Tick(t.Context(), t0.Add(2*time.Hour+2*time.Minute))
		require.NotNil(t, tr)
		require.Equal(t, KindRollback, tr.Kind)
		require.Equal(t, uint64(100), c.Status().Reason.Requests)
	})
}

func TestLatencyGate(t *testing.T) {
	h := newHarness(t, testConfig(t), Options{})
	slow := worseIn("premium", func(o Outcome, _ int) Outcome { o.Latency *= 2; return o })
	h.drive(2000, slow)
	tr := h.c.Tick(t.Context(), t0.Add(time.Minute))
	require.NotNil(t, tr)
	r := h.c.Status().Reason
	require.Equal(t, GateP95LatencyRatio, r.Gate)
	require.Equal(t, "premium", r.Group)
	require.Equal(t, "premium", r.Stage)
	require.InDelta(t, 2, r.Value, 0.05)
	require.InDelta(t, 1.1, r.Threshold, 1e-12)
}

func TestDriftGates(t *testing.T) {
	drift := func(group string) []Suspect {
		if group == "region-sa" {
			return []Suspect{{Feature: "a", PSI: 0.05, PValue: 0.3}, {Feature: "b", PSI: 0.6, PValue: 1e-6}}
		}
		return []Suspect{{Feature: "a", PSI: 0.02, PValue: 0.5}}
	}
	tests := []struct {
		name  string
		gates Gates
		gate  string
		value float64
	}{
		{name: "psi", gates: Gates{MaxDriftPSI: new(0.2)}, gate: GateDriftPSI, value: 0.6},
		{name: "p-value", gates: Gates{MinDriftPValue: new(0.01)}, gate: GateDriftPValue, value: 1e-6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Gates = tt.gates
			h := newHarness(t, cfg, Options{Drift: drift})
			h.drive(2000, healthy)
			require.Equal(t, KindPromote, h.c.Tick(t.Context(), t0.Add(time.Hour)).Kind)
			h.drive(2000, healthy)
			tr := h.c.Tick(t.Context(), t0.Add(time.Hour+time.Minute))
			require.NotNil(t, tr)
			r := h.c.Status().Reason
			require.Equal(t, tt.gate, r.Gate)
			require.Equal(t, "region-sa", r.Group)
			require.InDelta(t, tt.value, r.Value, 1e-12)
		})
	}
	t.Run("no drift report holds promotion", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Gates.MaxDriftPSI = new(0.2)
		h := newHarness(t, cfg, Options{Drift: func(string) []Suspect { return nil }})
		h.drive(2000, healthy)
		require.Nil(t, h.c.Tick(t.Context(), t0.Add(2*time.Hour)))
		gates := h.c.Status().Groups[0].Gates
		require.Equal(t, GateDriftPSI, gates[len(gates)-1].Gate)
		require.Equal(t, GatePending, gates[len(gates)-1].Status)
	})
}

func TestTrafficPercent(t *testing.T) {
	cfg := testConfig(t)
	cfg.Stages[0] = Stage{
		Name:           "eu-canary",
		Groups:         []Group{{Name: "eu", Fields: map[string][]string{"region": {"eu"}}}},
		TrafficPercent: 30,
	}
	h := newHarness(t, cfg, Options{})
	var n, cand int
	for i := range 20000 {
		a := attrs(i)
		if a.Values["region"] != "eu" {
			continue
		}
		n++
		_, g, arm := h.c.Decide(a)
		require.Equal(t, "eu", g)
		if arm == ArmCandidate {
			cand++
		}
		_, _, again := h.c.Decide(a)
		require.Equal(t, arm, again, "the same request id gets the same arm")
	}
	require.InDelta(t, 0.30, float64(cand)/float64(n), 0.02)
	require.InDelta(t, 30, h.c.Status().Groups[0].TrafficPercent, 0)

	require.NoError(t, h.c.Promote(t.Context(), ""))
	for i := range 100 {
		a := attrs(i * 5) // region eu
		_, _, arm := h.c.Decide(a)
		require.Equal(t, ArmCandidate, arm, "a passed stage's groups are all on the candidate")
	}
}

func TestControlShareAfterCompletion(t *testing.T) {
	complete := func(t *testing.T, hashKey string) *Controller {
		t.Helper()
		cfg := Config{Stable: Target{Version: "1"}, Candidate: Target{Version: "2"}, HashKey: hashKey}
		c, err := New("parcel-eta", cfg, Options{}, nil, nil)
		require.NoError(t, err)
		require.NoError(t, c.Promote(t.Context(), "ship it"))
		require.Equal(t, StateComplete, c.Status().State)
		return c
	}
	a, b := complete(t, ""), complete(t, "")
	const n = 20000
	control := 0
	for i := range n {
		req := Attributes{RequestID: fmt.Sprintf("order-%d", i)}
		v, g, arm := a.Decide(req)
		require.Equal(t, AllGroup, g)
		if arm == ArmControl {
			control++
			require.Equal(t, "1", v, "the control share goes to the previous version")
		} else {
			require.Equal(t, ArmCandidate, arm)
			require.Equal(t, "2", v)
		}
		_, _, again := b.Decide(req)
		require.Equal(t, arm, again, "another replica picks the same arm for %s", req.RequestID)
	}
	require.InDelta(t, 0.05, float64(control)/n, 0.005)

	t.Run("by hash key", func(t *testing.T) {
		c := complete(t, "user_id")
		arms := map[string]Arm{}
		for i := range 5000 {
			user := strconv.Itoa(i % 500)
			_, _, arm := c.Decide(Attributes{Values: map[string]string{"user_id": user}, RequestID: fmt.Sprintf("r%d", i)})
			if prev, ok := arms[user]; ok {
				require.Equal(t, prev, arm, "user %s always gets the same version", user)
			}
			arms[user] = arm
		}
	})
	t.Run("zero control", func(t *testing.T) {
		cfg := Config{Stable: Target{Version: "1"}, Candidate: Target{Version: "2"}, ControlPercent: new(0.0)}
		c, err := New("parcel-eta", cfg, Options{}, nil, nil)
		require.NoError(t, err)
		require.NoError(t, c.Promote(t.Context(), ""))
		for i := range 2000 {
			_, _, arm := c.Decide(Attributes{RequestID: strconv.Itoa(i)})
			require.Equal(t, ArmCandidate, arm)
		}
	})
}

func TestManualCommands(t *testing.T) {
	h := newHarness(t, testConfig(t), Options{})
	c := h.c
	conflict := func(t *testing.T, err error, reason string) {
		t.Helper()
		var ie *apierr.Error
		require.ErrorAs(t, err, &ie)
		require.Equal(t, apierr.KindConflict, ie.Kind)
		require.Equal(t, reason, ie.Reason)
	}

	require.NoError(t, c.Pause(t.Context(), "investigating"))
	require.NoError(t, c.Pause(t.Context(), ""), "pausing twice is harmless")
	require.Equal(t, StatePaused, c.Status().State)
	h.drive(2000, healthy)
	require.Nil(t, c.Tick(t.Context(), t0.Add(2*time.Hour)), "a paused rollout is not promoted")
	arm, _ := h.arm("premium", "eu")
	require.Equal(t, ArmCandidate, arm, "a paused rollout keeps its routing")

	require.NoError(t, c.Resume(t.Context(), ""))
	require.NoError(t, c.Resume(t.Context(), ""), "resuming twice is harmless")
	tr := c.Tick(t.Context(), t0.Add(2*time.Hour))
	require.NotNil(t, tr)
	require.Equal(t, KindPromote, tr.Kind)

	h.clock.Set(t0.Add(3 * time.Hour))
	require.NoError(t, c.Promote(t.Context(), "trust me"), "manual promotion ignores the gates")
	st := c.Status()
	require.Equal(t, AllGroup, st.StageName)
	require.Equal(t, t0.Add(3*time.Hour), st.StageSince)
	last := st.History[len(st.History)-1]
	require.True(t, last.Manual)
	require.Equal(t, "trust me", last.Reason)

	t.Run("gates roll back a paused rollout", func(t *testing.T) {
		require.NoError(t, c.Pause(t.Context(), ""))
		h.drive(1000, worseIn(AllGroup, func(o Outcome, _ int) Outcome { o.Status = 502; return o }))
		tr := c.Tick(t.Context(), t0.Add(3*time.Hour+time.Minute))
		require.NotNil(t, tr)
		require.Equal(t, KindRollback, tr.Kind)
		require.Equal(t, GateErrorRate, c.Status().Reason.Gate)
	})

	conflict(t, c.Promote(t.Context(), ""), "rollout_rolled_back")
	conflict(t, c.Pause(t.Context(), ""), "rollout_rolled_back")
	conflict(t, c.Resume(t.Context(), ""), "rollout_rolled_back")
	conflict(t, c.Rollback(t.Context(), "again"), "rollout_rolled_back")

	h.clock.Set(t0.Add(4 * time.Hour))
	require.NoError(t, c.Reset(t.Context(), "fixed v2"))
	st = c.Status()
	require.Equal(t, StateProgressing, st.State)
	require.Equal(t, 0, st.Stage)
	require.Nil(t, st.Reason)
	require.Equal(t, t0.Add(4*time.Hour), st.StageSince)
	require.Zero(t, st.Baseline.Requests, "reset clears every window")

	require.NoError(t, c.Rollback(t.Context(), "customer complaints"))
	r := c.Status().Reason
	require.Equal(t, GateManual, r.Gate)
	require.Equal(t, "manual rollback: customer complaints", r.Message)
	require.Equal(t, "premium", r.Stage)

	for _, kind := range []string{"pause", "resume", "promote", "rollback", "reset"} {
		require.Positive(t, h.metric("transitions", kind), kind)
	}

	t.Run("complete", func(t *testing.T) {
		c, err := New("x", Config{Candidate: Target{Version: "2"}}, Options{}, nil, nil)
		require.NoError(t, err)
		require.NoError(t, c.Promote(t.Context(), ""))
		conflict(t, c.Promote(t.Context(), ""), "rollout_complete")
		conflict(t, c.Pause(t.Context(), ""), "rollout_complete")
		require.NoError(t, c.Rollback(t.Context(), "regression found after the rollout"), "a complete rollout can still be rolled back")
		_, _, arm := c.Decide(Attributes{RequestID: "a"})
		require.Equal(t, ArmStable, arm)
	})
}

func TestStateSurvivesRestart(t *testing.T) {
	cfg := testConfig(t)
	restart := func(t *testing.T, cfg Config, now time.Time) *harness {
		t.Helper()
		h := &harness{t: t, cfg: cfg, clock: &fakeClock{t: now}, reg: prometheus.NewRegistry()}
		c, err := New("parcel-eta", cfg, Options{Now: h.clock.Now}, nil, h.reg)
		require.NoError(t, err)
		h.c = c
		return h
	}

	h := newHarness(t, cfg, Options{})
	h.drive(2000, healthy)
	require.NotNil(t, h.c.Tick(t.Context(), t0.Add(time.Hour)))

	t.Run("mid-stage", func(t *testing.T) {
		h2 := restart(t, cfg, t0.Add(time.Hour+50*time.Minute))
		st := h2.c.Status()
		require.Equal(t, StateProgressing, st.State)
		require.Equal(t, "long-tail", st.StageName)
		require.Equal(t, t0.Add(time.Hour), st.StageSince, "min_duration counts from the stage's start")
		require.InDelta(t, 1, h2.metric("stage"), 0)
		require.Nil(t, h2.c.Tick(t.Context(), t0.Add(2*time.Hour)), "windows start empty after a restart")
		h2.drive(2000, healthy)
		require.NotNil(t, h2.c.Tick(t.Context(), t0.Add(2*time.Hour)))
	})

	// The first controller is stale now; start again from the file.
	h = restart(t, cfg, t0.Add(3*time.Hour))
	h.drive(2000, worseIn(AllGroup, func(o Outcome, _ int) Outcome { o.Confidence = 0.1; return o }))
	require.NotNil(t, h.c.Tick(t.Context(), t0.Add(3*time.Hour+time.Minute)))
	want := h.c.Status().Reason
	require.Equal(t, GateLowConfidenceShare, want.Gate)

	t.Run("rolled back stays rolled back", func(t *testing.T) {
		h2 := restart(t, cfg, t0.Add(10*time.Hour))
		st := h2.c.Status()
		require.Equal(t, StateRolledBack, st.State)
		require.Equal(t, want, st.Reason)
		require.InDelta(t, 1, h2.metric("state", "rolled_back"), 0)
		for i := range 200 {
			_, _, arm := h2.c.Decide(attrs(i))
			require.Equal(t, ArmStable, arm)
		}
	})

	t.Run("a new candidate starts a new rollout", func(t *testing.T) {
		cfg := cfg
		cfg.Candidate.Version = "3"
		h2 := restart(t, cfg, t0.Add(11*time.Hour))
		st := h2.c.Status()
		require.Equal(t, StateProgressing, st.State)
		require.Equal(t, 0, st.Stage)
		require.Len(t, st.History, 1)
		require.Contains(t, st.History[0].Reason, "new rollout of 3 over 1 replaces the saved one of 2 over 1")
		saved, err := loadState(cfg.StateFile)
		require.NoError(t, err)
		require.Equal(t, "3", saved.Candidate.Version)
	})

	t.Run("no temporary files are left", func(t *testing.T) {
		entries, err := os.ReadDir(filepath.Dir(cfg.StateFile))
		require.NoError(t, err)
		require.Len(t, entries, 1)
		require.Equal(t, filepath.Base(cfg.StateFile), entries[0].Name())
	})

	t.Run("a damaged file stops New", func(t *testing.T) {
		bad := cfg
		bad.StateFile = filepath.Join(t.TempDir(), "state.json")
		require.NoError(t, os.WriteFile(bad.StateFile, []byte(`{"schema":1,"state":"rolled_`), 0o600))
		_, err := New("parcel-eta", bad, Options{}, nil, nil)
		require.ErrorContains(t, err, bad.StateFile)
	})

	t.Run("another service's file stops New", func(t *testing.T) {
		_, err := New("other-service", cfg, Options{}, nil, nil)
		require.ErrorContains(t, err, `belongs to service "parcel-eta"`)
	})

	t.Run("unwritable state file", func(t *testing.T) {
		bad := cfg
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o600))
		bad.StateFile = filepath.Join(dir, "file", "state.json")
		_, err := New("parcel-eta", bad, Options{}, nil, nil)
		require.Error(t, err)
	})
}

func TestSavedStateRoundTrip(t *testing.T) {
	s := &SavedState{
		Schema: StateSchema, Service: "parcel-eta", Stable: Target{Version: "1"}, Candidate: Target{Version: "2", Backend: "gpu"},
		State: StateRolledBack, Stage: 1, StageName: "long-tail",
		StageSince: t0, StateSince: t0.Add(time.Minute),
		Reason: &Reason{
			Gate: GateErrorRate, Value: 0.5, Threshold: 0.01, Stage: "long-tail", StageIndex: 1, Group: "region-sa", Requests: 812,
			Failed:   []GateFailure{{Group: "region-sa", Gate: GateErrorRate, Value: 0.5, Threshold: 0.01, Requests: 812}},
			Suspects: []Suspect{{Feature: "x", PSI: 0.4, KS: 0.3, PValue: 1e-9}},
			Message:  "gate error_rate failed",
		},
		History: []Transition{
			{Time: t0, Kind: KindStart, To: "premium", State: StateProgressing, Reason: "rollout started"},
			{Time: t0.Add(time.Minute), Kind: KindRollback, From: "long-tail", To: "long-tail", State: StateRolledBack, Reason: "gate error_rate failed"},
		},
	}
	data, err := s.Marshal()
	require.NoError(t, err)
	got, err := ParseSavedState(data)
	require.NoError(t, err)
	require.Equal(t, s, got)

	bad := []struct{ name, data, want string }{
		{"schema", `{"schema":2,"state":"progressing","stage_since":"2026-01-01T00:00:00Z"}`, "unsupported state schema 2"},
		{"state", `{"schema":1,"state":"exploded","stage_since":"2026-01-01T00:00:00Z"}`, `unknown state "exploded"`},
		{"stage", `{"schema":1,"state":"paused","stage":-1,"stage_since":"2026-01-01T00:00:00Z"}`, "stage -1 outside"},
		{"since", `{"schema":1,"state":"paused"}`, "stage_since is missing"},
		{"kind", `{"schema":1,"state":"paused","stage_since":"2026-01-01T00:00:00Z","history":[{"kind":"explode","state":"paused"}]}`, `history[0]: unknown kind "explode"`},
		{"trailing", `{"schema":1,"state":"paused","stage_since":"2026-01-01T00:00:00Z"} {}`, "trailing data"},
		{"not json", `schema: 1`, "decode state"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSavedState([]byte(tt.data))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestConcurrentObserveAndTick(t *testing.T) {
	cfg := testConfig(t)
	cfg.Stages[0].MinDuration = duration.Duration(time.Minute)
	cfg.Stages[1].MinDuration = duration.Duration(time.Minute)
	h := newHarness(t, cfg, Options{Diagnose: func(string) []Suspect { return nil }})
	c := h.c
	const workers, perWorker = 8, 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				n := w*perWorker + i
				_, g, arm := c.Decide(attrs(n))
				c.Observe(arm, g, clean(arm, g, n))
			}
		})
	}
	var ticker sync.WaitGroup
	ticker.Go(func() {
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			default:
			}
			c.Tick(t.Context(), t0.Add(time.Duration(k)*time.Minute)) // every tick passes min_duration
			_, err := json.Marshal(c.Status())
			if err != nil {
				t.Error(err)
				return
			}
			if k%50 == 0 {
				_ = c.Pause(t.Context(), "")
				_ = c.Resume(t.Context(), "")
			}
			if k > 100000 {
				t.Error("ticker ran too long")
				return
			}
		}
	})
	wg.Wait()
	close(done)
	ticker.Wait()
	var total float64
	for _, g := range []string{"premium", "region-sa", AllGroup} {
		for _, a := range arms {
			total += h.metric("requests", string(a), g)
		}
	}
	require.InDelta(t, workers*perWorker, total, 0)
	require.NotEqual(t, StateRolledBack, c.Status().State, "healthy traffic never rolls back")
}

func TestStatusJSON(t *testing.T) {
	cfg := testConfig(t)
	cfg.Gates.MaxDriftPSI = new(10.0)
	h := newHarness(t, cfg, Options{
		Diagnose: func(string) []Suspect { return []Suspect{{Feature: "inf", PSI: posInf(), PValue: nan()}} },
		Drift:    func(string) []Suspect { return []Suspect{{Feature: "nan", PSI: nan(), KS: posInf(), PValue: nan()}} },
	})
	h.drive(2000, healthy)
	require.Nil(t, h.c.Tick(t.Context(), t0))
	data, err := json.Marshal(h.c.Status())
	require.NoError(t, err, "non-finite drift values must not break the admin API")
	require.Contains(t, string(data), `"drift":[{"feature":"nan","psi":0,"ks":1.7976931348623157e+308,"p_value":0}]`)
	gates := h.c.Status().Groups[0].Gates
	require.Equal(t, GatePending, gates[len(gates)-1].Status, "non-finite drift values are not judged")

	h.drive(2000, worseIn("premium", func(o Outcome, _ int) Outcome { o.Status = 500; return o }))
	require.NotNil(t, h.c.Tick(t.Context(), t0.Add(time.Minute)))
	data, err = json.Marshal(h.c.Status())
	require.NoError(t, err, "non-finite suspect values must not break the admin API")
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	for _, k := range []string{"service", "state", "stage", "stage_name", "stage_since", "stages", "groups", "reason", "history", "baseline"} {
		require.Contains(t, m, k)
	}
	require.Equal(t, "rolled_back", m["state"])
	stages := m["stages"].([]any)
	require.Len(t, stages, 3)
	require.Equal(t, "1h0m0s", stages[2].(map[string]any)["min_duration"], "the implicit final stage takes the previous min_duration")
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := New("x", Config{}, Options{}, nil, nil)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	require.ErrorContains(t, err, "candidate.version: is required")
}

func TestValidate(t *testing.T) {
	base := func() Config {
		return Config{
			Stable: Target{Version: "1"}, Candidate: Target{Version: "2"},
			Stages: []Stage{{Name: "s1", Groups: []Group{{Name: "g1", Fields: map[string][]string{"region": {"eu"}}}}}},
		}
	}
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"ok", func(*Config) {}, ""},
		{"ok final all", func(c *Config) { c.Stages = append(c.Stages, Stage{Name: "all"}) }, ""},
		{"same versions", func(c *Config) { c.Candidate = c.Stable }, "candidate: must differ from stable"},
		{"stage name", func(c *Config) { c.Stages[0].Name = "" }, "stages[0].name: is required"},
		{"duplicate stage", func(c *Config) {
			c.Stages = append(c.Stages, Stage{Name: "s1", Groups: []Group{{Name: "g2", Fields: map[string][]string{"a": {"b"}}}}})
		}, `stages[1].name: duplicate stage "s1"`},
		{"groupless not last", func(c *Config) { c.Stages = append([]Stage{{Name: "s0"}}, c.Stages...) }, "stages[0].groups: only the last stage may have no groups"},
		{"reserved stage", func(c *Config) { c.Stages[0].Name = "all" }, `stages[0].name: "all" is reserved`},
		{"reserved group", func(c *Config) { c.Stages[0].Groups[0].Name = "all" }, `stages[0].groups[0].name: "all" is reserved`},
		{"duplicate group", func(c *Config) {
			c.Stages = append(c.Stages, Stage{Name: "s2", Groups: []Group{{Name: "g1", Fields: map[string][]string{"a": {"b"}}}}})
		}, `stages[1].groups[0].name: duplicate group "g1"`},
		{"empty group", func(c *Config) { c.Stages[0].Groups[0].Fields = nil }, "stages[0].groups[0]: needs at least one header or field match"},
		{"field without values", func(c *Config) { c.Stages[0].Groups[0].Fields["region"] = nil }, "stages[0].groups[0].fields.region: needs at least one value"},
		{"two header matchers", func(c *Config) {
			c.Stages[0].Groups[0].Headers = []match.HeaderMatch{{Name: "x", Exact: new("a"), Prefix: new("b")}}
		}, "stages[0].groups[0].headers[0]: header \"x\": want exactly one of exact, prefix, regex, present; got 2"},
		{"bad regex", func(c *Config) {
			c.Stages[0].Groups[0].Headers = []match.HeaderMatch{{Name: "x", Regex: new("(")}}
		}, "compile regex"},
		{"regex unbalanced but balanced by the anchors", func(c *Config) {
			c.Stages[0].Groups[0].Headers = []match.HeaderMatch{{Name: "x", Regex: new("a)|(b")}}
		}, "stages[0].groups[0].headers[0]: header \"x\": compile regex"},
		{"percent", func(c *Config) { c.Stages[0].TrafficPercent = 101 }, "stages[0].traffic_percent: 101 outside [0,100]"},
		{"duration", func(c *Config) { c.Stages[0].MinDuration = -1 }, "stages[0].min_duration: must not be negative"},
		{"control", func(c *Config) { c.ControlPercent = new(-1.0) }, "control_percent: -1 outside [0,100]"},
		{"min requests", func(c *Config) { c.MinRequests = -1 }, "min_requests: must not be negative"},
		{"error rate", func(c *Config) { c.Gates.MaxErrorRate = new(2.0) }, "gates.max_error_rate: 2 outside [0,1]"},
		{"ratio", func(c *Config) { c.Gates.MaxP95LatencyRatio = new(0.0) }, "gates.max_p95_latency_ratio: must be a positive number"},
		{"psi", func(c *Config) { c.Gates.MaxDriftPSI = new(-0.1) }, "gates.max_drift_psi: must be a non-negative number"},
		{"p-value", func(c *Config) { c.Gates.MinDriftPValue = new(nan()) }, "gates.min_drift_p_value: NaN outside [0,1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
			var fe *FieldError
			require.True(t, errors.As(err, &fe))
		})
	}
}

func TestConfigYAML(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "rollout.good.yaml"))
	require.NoError(t, err)
	cfg, err := decodeStrict(data)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	require.Equal(t, "2", cfg.Candidate.Version)
	require.Len(t, cfg.Stages, 3)
	require.Equal(t, 30*time.Minute, cfg.Stages[0].MinDuration.Std())
	require.Equal(t, []string{"sa", "af"}, cfg.Stages[1].Groups[0].Fields["region"])
	require.InDelta(t, 0.6, *cfg.Gates.ConfidenceBelow, 0)
	require.InDelta(t, 5, *cfg.ControlPercent, 0)

	require.Equal(t, "rollout/parcel-eta.json", cfg.StateFile)
	cfg.StateFile = filepath.Join(t.TempDir(), cfg.StateFile) // the gateway resolves it against the config file's folder
	c, err := New("parcel-eta", cfg, Options{}, nil, nil)
	require.NoError(t, err)
	require.Len(t, c.Status().Stages, 3, "the file's last stage takes everyone: no implicit stage")

	_, err = decodeStrict([]byte("stages:\n  - name: a\n    min_duration: soon\n"))
	require.ErrorContains(t, err, `"soon" is not a duration`)
	_, err = decodeStrict([]byte("colour: red\n"))
	require.ErrorContains(t, err, "field colour not found")
}

func TestHeaderAndFieldMatching(t *testing.T) {
	cfg := Config{
		Stable: Target{Version: "1"}, Candidate: Target{Version: "2"},
		Stages: []Stage{
			{Name: "s1", Groups: []Group{
				{Name: "exact", Headers: []match.HeaderMatch{{Name: "x-user-type", Exact: new("premium")}}},
				{Name: "prefix", Headers: []match.HeaderMatch{{Name: "X-Tenant", Prefix: new("acme-")}}},
			}},
			{Name: "s2", Groups: []Group{
				{Name: "regex", Headers: []match.HeaderMatch{{Name: "x-region", Regex: new("sa|af")}}},
				{Name: "present", Headers: []match.HeaderMatch{{Name: "x-beta", Present: new(true)}}},
				{Name: "fields", Fields: map[string][]string{"region": {"eu", "uk"}, "tier": {"gold"}}},
				{Name: "both", Headers: []match.HeaderMatch{{Name: "x-debug", Present: new(false)}}, Fields: map[string][]string{"tier": {"silver"}}},
			}},
		},
	}
	c, err := New("x", cfg, Options{}, nil, nil)
	require.NoError(t, err)
	tests := []struct {
		headers map[string]string
		values  map[string]string
		want    string
	}{
		{map[string]string{"X-User-Type": "premium"}, nil, "exact"},
		{map[string]string{"X-User-Type": "premium-plus"}, nil, AllGroup},
		{map[string]string{"X-Tenant": "acme-eu"}, nil, "prefix"},
		{map[string]string{"X-Region": "af"}, nil, "regex"},
		{map[string]string{"X-Region": "saf"}, nil, AllGroup}, // the regex matches the whole value
		{map[string]string{"X-Beta": ""}, nil, "present"},
		{nil, map[string]string{"region": "uk", "tier": "gold"}, "fields"},
		{nil, map[string]string{"region": "uk"}, AllGroup}, // every field must match
		{nil, map[string]string{"tier": "silver"}, "both"},
		{map[string]string{"X-Debug": "1"}, map[string]string{"tier": "silver"}, AllGroup},
		{map[string]string{"X-User-Type": "premium", "X-Region": "sa"}, nil, "exact"}, // the first group wins
	}
	for _, tt := range tests {
		t.Run(tt.want+fmt.Sprint(tt.headers, tt.values), func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			_, g, _ := c.Decide(Attributes{Headers: h, Values: tt.values, RequestID: "r"})
			require.Equal(t, tt.want, g)
		})
	}
}

func TestLatencyHistogram(t *testing.T) {
	var w window
	require.Zero(t, w.p95())
	for i := 1; i <= 1000; i++ {
		w.add(&Outcome{Status: 200, Latency: time.Duration(i) * time.Millisecond}, 0.6)
	}
	require.InDelta(t, 950, float64(w.p95())/float64(time.Millisecond), 950*0.011)
	var m window
	m.merge(&w)
	m.merge(&w)
	require.Equal(t, uint64(2000), m.n)
	require.Equal(t, w.p95(), m.p95())
	w.add(&Outcome{Latency: -time.Second}, 0.6)
	w.add(&Outcome{Latency: 1000 * time.Hour}, 0.6)
	require.Equal(t, latBuckets-1, latBucket(1000*time.Hour))
	require.Equal(t, 0, latBucket(0))
}

func TestOutcomeCounting(t *testing.T) {
	var w window
	w.add(&Outcome{Status: 200, Confidence: 0.59, HasConfidence: true}, 0.6)
	w.add(&Outcome{Status: 200, Confidence: 0.6, HasConfidence: true}, 0.6)
	w.add(&Outcome{Status: 404}, 0.6)
	w.add(&Outcome{Status: 503, Confidence: nan(), HasConfidence: true}, 0.6)
	require.Equal(t, uint64(4), w.n)
	require.Equal(t, uint64(1), w.errors, "4xx are the client's")
	require.Equal(t, uint64(3), w.confN)
	require.Equal(t, uint64(2), w.lowConf, "0.59 and NaN are low; 0.6 is not")
}

func TestUnknownGroupIgnored(t *testing.T) {
	h := newHarness(t, testConfig(t), Options{})
	h.c.Observe(ArmCandidate, "nope", Outcome{Status: 500})
	for _, g := range h.c.Status().Groups {
		require.Zero(t, g.Candidate.Requests)
	}
}

func TestForgetDeletesSeries(t *testing.T) {
	h := newHarness(t, testConfig(t), Options{})
	n, err := testutil.GatherAndCount(h.reg)
	require.NoError(t, err)
	require.Positive(t, n)
	h.c.Forget()
	n, err = testutil.GatherAndCount(h.reg)
	require.NoError(t, err)
	require.Zero(t, n)
}

func nan() float64    { return math.NaN() }
func posInf() float64 { return math.Inf(1) }

// decodeStrict decodes a rollout block the way config.Load does.
func decodeStrict(data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	return cfg, err
}

func TestMessageNamesStageOfTotal(t *testing.T) {
	h := newHarness(t, testConfig(t), Options{})
	h.drive(2000, worseIn("premium", func(o Outcome, _ int) Outcome { o.Status = 500; return o }))
	require.NotNil(t, h.c.Tick(t.Context(), t0.Add(time.Minute)))
	msg := h.c.Status().Reason.Message
	require.True(t, strings.HasPrefix(msg, `gate error_rate failed in stage "premium" (1 of 3), group "premium": 1 > 0.01`), msg)
}
