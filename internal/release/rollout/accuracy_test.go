package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/rollout/rolloutspec"
)

func TestAccuracyGateRollsBackNamingTheSlice(t *testing.T) {
	margin := 0.2
	cfg := Config{
		Stable: Target{Version: "1"}, Candidate: Target{Version: "2"},
		Stages:      []Stage{{Name: "all", TrafficPercent: 50}},
		MinRequests: 1,
		Gates:       Gates{Accuracy: &rolloutspec.AccuracyGate{Margin: &margin, MinOutcomes: 50}},
	}
	var slices []AccuracySlice
	var asked string
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	c, err := New("eta", cfg, Options{Now: func() time.Time { return now }, Accuracy: func(group, metric string) []AccuracySlice {
		asked = metric
		return slices
	}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Too few outcomes: pending, no transition.
	slices = []AccuracySlice{{Slice: "all", Candidate: 9, Stable: 3, CandidateN: 49, StableN: 500}}
	if tr := c.Tick(t.Context(), now); tr != nil {
		t.Fatalf("transition %+v with 49 candidate outcomes", tr)
	}
	if asked != "mae" {
		t.Errorf("asked for %q, want the default metric mae", asked)
	}
	// Within the margin everywhere: holds.
	slices = []AccuracySlice{
		{Slice: "all", Candidate: 3.5, Stable: 3, CandidateN: 200, StableN: 200},
		{Slice: "x-region=eu", Candidate: 3.3, Stable: 3, CandidateN: 100, StableN: 100},
	}
	if tr := c.Tick(t.Context(), now); tr != nil {
		t.Fatalf("transition %+v within the margin", tr)
	}
	st := c.Status()
	if g := st.Groups[0].Gates[len(st.Groups[0].Gates)-1]; g.Gate != GateAccuracy || g.Status != GateOK {
		t.Fatalf("gate %+v, want accuracy ok", g)
	}
	// One region worse beyond the margin (and "all" too, by less): the
	// reason names the worst slice.
	slices = []AccuracySlice{
		{Slice: "all", Candidate: 4, Stable: 3, CandidateN: 300, StableN: 300},
		{Slice: "x-region=eu", Candidate: 3, Stable: 3, CandidateN: 100, StableN: 100},
		{Slice: "x-region=sa", Candidate: 12, Stable: 3, CandidateN: 60, StableN: 60},
		{Slice: "x-region=us", Candidate: 30, Stable: 3, CandidateN: 10, StableN: 100}, // too few
	}
	tr := c.Tick(t.Context(), now)
	if tr == nil || tr.Kind != KindRollback {
		t.Fatalf("transition %+v, want a rollback", tr)
	}
	r := c.Status().Reason
	if r.Gate != GateAccuracy || r.Slice != "x-region=sa" || r.Value != 4 || r.Threshold != 1.2 || r.Requests != 60 {
		t.Fatalf("reason %+v, want accuracy in slice x-region=sa, 4 > 1.2 over 60 outcomes", r)
	}
	if want := `slice "x-region=sa"`; !strings.Contains(r.Message, want) {
		t.Errorf("message %q does not name %s", r.Message, want)
	}
}
