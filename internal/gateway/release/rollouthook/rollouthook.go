// Package rollouthook is the gateway's staged rollout, a release hook
// (release.Hook) around the rollout controller (internal/release/rollout):
// the controller decides which version (and, per arm, which backend)
// serves each call, and learns how each call went; per traffic group a
// drift monitor of the service's scalar features feeds the controller's
// diagnosis of a failing group and, with a drift watch, its drift gates.
package rollouthook

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/driftwatch"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/rollout"
	"github.com/sluice-ml/sluice/internal/release/rollout/rolloutspec"
)

// Kind is the rollout hook's kind.
const Kind = "rollout"

// Fleet shares the rollouts' state and gate windows with the other
// replicas of a fleet.
type Fleet interface {
	// For is the rollout.Fleet of service.
	For(service string) rollout.Fleet
	// Publish publishes the service's gate windows, read from windows,
	// for the other replicas.
	Publish(service string, windows func() []byte)
}

// Comparer sums up the joined predictions and outcomes of a rollout group
// per slice (accuracy.Joiner), for the accuracy gate.
type Comparer interface {
	Compare(service, group, output, candidate string) []accuracy.SliceComparison
}

// Options are what the rollouts need of their owner.
type Options struct {
	// Base is the logger the controllers name their component on.
	Base *slog.Logger
	// Registerer gets the controllers' metrics; nil leaves them
	// unregistered.
	Registerer prometheus.Registerer
	// Now is the clock.
	Now func() time.Time
	// Fleet shares the state and windows; nil keeps them here (and on
	// the rollout's state file).
	Fleet Fleet
	// Accuracy feeds the accuracy gates of services with an accuracy
	// block; nil leaves those gates without data.
	Accuracy Comparer
}

// Rollout is the release hook of a service in a staged rollout. It is
// carried over a reload that leaves the rollout's settings unchanged (its
// state is also on disk, or in the fleet).
type Rollout struct {
	release.Base
	cfg        rollout.Config
	ctrl       *rollout.Controller
	groups     map[string]*drift.Monitor
	vars       []release.Feature // the scalar features the groups watch
	confidence string            // the model output the confidence gate reads
}

// Factory makes the services' rollouts, reusing prev when the rollout's
// settings did not change. The drift watch's factory must run before it
// for the drift gates to see the service's watch.
func Factory(o Options) release.Factory {
	return func(svc release.Service, prev release.Hook) (release.Hook, error) {
		sc := svc.Config()
		if sc.Rollout == nil {
			return nil, nil
		}
		if old, ok := prev.(*Rollout); ok && reflect.DeepEqual(old.cfg, *sc.Rollout) {
			return old, nil
		}
		return newRollout(o, svc)
	}
}

func newRollout(o Options, svc release.Service) (*Rollout, error) {
	sc := svc.Config()
	r := &Rollout{cfg: *sc.Rollout, groups: map[string]*drift.Monitor{}, confidence: "confidence_score"}
	if sc.Fallback != nil {
		r.confidence = sc.Fallback.Confidence.Output
	}
	var vars []drift.Variable
	for _, f := range svc.Features() {
		if !f.Scalar() {
			continue
		}
		r.vars = append(r.vars, f)
		vars = append(vars, drift.Variable{Name: driftwatch.VarName(f.Ref)})
	}
	groups := []string{rollout.AllGroup}
	for _, st := range sc.Rollout.Stages {
		for _, gr := range st.Groups {
			groups = append(groups, gr.Name)
		}
	}
	for _, name := range groups {
		if _, ok := r.groups[name]; ok || len(vars) == 0 {
			continue
		}
		// Unregistered: per-group windows feed the diagnosis, not gauges.
		m, err := drift.NewMonitor("rollout/"+sc.Name+"/"+name, vars, drift.Options{}, o.Base, nil)
		if err != nil {
			return nil, fmt.Errorf("rollout of %s: %w", sc.Name, err)
		}
		r.groups[name] = m
	}
	opts := rollout.Options{Now: o.Now, Diagnose: r.diagnose}
	if o.Fleet != nil {
		opts.Fleet = o.Fleet.For(sc.Name)
	}
	if d, ok := svc.Hook(driftwatch.Kind).(*driftwatch.Watch); ok {
		// The drift gates compare each group's live features with the
		// service's drift reference.
		opts.Drift = func(group string) []rollout.Suspect {
			m, ok := r.groups[group]
			if !ok {
				return nil
			}
			return d.GroupDrift(m)
		}
	}
	if sc.Rollout.Gates.Accuracy != nil && sc.Accuracy != nil && o.Accuracy != nil {
		opts.Accuracy = accuracyGateSource(o.Accuracy, sc)
	}
	ctrl, err := rollout.New(sc.Name, *sc.Rollout, opts, o.Base, o.Registerer)
	if err != nil {
		return nil, err
	}
	if o.Fleet != nil {
		o.Fleet.Publish(sc.Name, ctrl.WindowsSnapshot)
	}
	r.ctrl = ctrl
	return r, nil
}

// Kind is "rollout".
func (r *Rollout) Kind() string { return Kind }

// Controller is the rollout's controller, for the operator's commands,
// the fleet's changes and the accuracy gate's outcomes.
func (r *Rollout) Controller() *rollout.Controller { return r.ctrl }

// diagnose ranks the features whose live distribution in group differs
// most from the other groups'.
func (r *Rollout) diagnose(group string) []rollout.Suspect {
	failing, ok := r.groups[group]
	if !ok {
		return nil
	}
	var others []*drift.Monitor
	for name, m := range r.groups {
		if name != group {
			others = append(others, m)
		}
	}
	var out []rollout.Suspect
	for _, res := range drift.Rank(failing, others...) {
		out = append(out, rollout.Suspect{Feature: res.Name, PSI: res.PSI, KS: res.KS, PValue: res.PValue})
	}
	return out
}

// Steer lets the controller pick the call's version and, per arm, its
// backend.
func (r *Rollout) Steer(c release.Call) {
	version, group, arm := r.ctrl.Decide(rollout.Attributes{Headers: c.Header(), Values: c.Values(), RequestID: c.RequestID()})
	c.SetVersion(version)
	c.SetGroup(group, string(arm))
	if t := r.ctrl.Target(arm); t.Backend != "" {
		c.SetBackend(t.Backend)
	}
}

// FeaturesRead feeds the call's group's drift windows.
func (r *Rollout) FeaturesRead(c release.Call) {
	group, _ := c.Group()
	if m, ok := r.groups[group]; ok {
		driftwatch.Observe(m, r.vars, c, c.Start())
	}
}

// ModelDone tells the controller how the model call went.
func (r *Rollout) ModelDone(c release.Call, err error) {
	o := rollout.Outcome{Status: http.StatusOK, Latency: c.Latency()}
	if err != nil {
		o.Status, _ = apierr.HTTPStatus(err)
	} else if v, ok := c.Output(r.confidence); ok {
		o.Confidence, o.HasConfidence = v, true
	}
	group, arm := c.Group()
	r.ctrl.Observe(rollout.Arm(arm), group, o)
}

// Tick is the controller's clock.
func (r *Rollout) Tick(ctx context.Context, now time.Time) { r.ctrl.Tick(ctx, now) }

// Status is the rollout's admin view (rollout.Status).
func (r *Rollout) Status() any { return r.ctrl.Status() }

// Close forgets the replaced controller's metric series.
func (r *Rollout) Close() { r.ctrl.Forget() }

// accuracyGateSource feeds a rollout's accuracy gate from the joiner: per
// slice of a group, the candidate version's error and the stable
// version's in the same group, or across all groups when the group has
// too few stable outcomes (a stage that sends the whole group to the
// candidate).
func accuracyGateSource(j Comparer, sc config.Service) rollout.AccuracyFunc {
	gate := sc.Rollout.Gates.Accuracy
	output := gate.Output
	if output == "" && len(sc.Accuracy.Outputs) > 0 {
		output = sc.Accuracy.Outputs[0].Name
	}
	minN := uint64(gate.MinOutcomes)
	if minN == 0 {
		minN = rolloutspec.DefaultAccuracyMinOutcomes
	}
	candidate, service := sc.Rollout.Candidate.Version, sc.Name
	return func(group, metric string) []rollout.AccuracySlice {
		var out []rollout.AccuracySlice
		for _, c := range j.Compare(service, group, output, candidate) {
			stable := c.Stable
			if stable.N < minN {
				stable = c.StableAll
			}
			cv, ok1 := c.Candidate.Metric(metric)
			sv, ok2 := stable.Metric(metric)
			if !ok1 || !ok2 {
				continue
			}
			out = append(out, rollout.AccuracySlice{Slice: c.Slice, Candidate: cv, Stable: sv, CandidateN: c.Candidate.N, StableN: stable.N})
		}
		return out
	}
}
