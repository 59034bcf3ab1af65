package gateway

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/driftwatch"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// serviceRollout is the release hook of a service in a staged rollout:
// the controller that decides which version (and, per arm, which backend)
// serves each request, and per traffic group a drift monitor of the
// service's scalar features, which the controller's diagnosis ranks when a
// group fails. It is carried over a reload that leaves the rollout's
// settings unchanged (its state is also on disk, or in the fleet).
type serviceRollout struct {
	release.Base
	cfg        rollout.Config
	ctrl       *rollout.Controller
	groups     map[string]*drift.Monitor
	vars       []release.Feature // the scalar features the groups watch
	confidence string            // the model output the confidence gate reads
}

// rolloutFactory makes the service's rollout, reusing prev when its
// configuration did not change.
func (g *Gateway) rolloutFactory(svc release.Service, prev release.Hook) (release.Hook, error) {
	sc := svc.Config()
	if sc.Rollout == nil {
		return nil, nil
	}
	old, _ := prev.(*serviceRollout)
	if old != nil && reflect.DeepEqual(old.cfg, *sc.Rollout) {
		return old, nil
	}
	r := &serviceRollout{cfg: *sc.Rollout, groups: map[string]*drift.Monitor{}, confidence: "confidence_score"}
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
		m, err := drift.NewMonitor("rollout/"+sc.Name+"/"+name, vars, drift.Options{}, g.base, nil)
		if err != nil {
			return nil, fmt.Errorf("rollout of %s: %w", sc.Name, err)
		}
		r.groups[name] = m
	}
	opts := rollout.Options{Now: g.opts.Now, Diagnose: r.diagnose, Fleet: g.rolloutFleetFor(sc.Name)}
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
	if sc.Rollout.Gates.Accuracy != nil && sc.Accuracy != nil && g.opts.Accuracy != nil {
		opts.Accuracy = accuracyGateSource(g.opts.Accuracy, sc)
	}
	ctrl, err := rollout.New(sc.Name, *sc.Rollout, opts, g.base, g.reg)
	if err != nil {
		return nil, err
	}
	g.attachRollout(sc.Name, ctrl)
	r.ctrl = ctrl
	return r, nil
}

// kindRollout is the rollout hook's kind.
const kindRollout = "rollout"

// Kind is "rollout".
func (r *serviceRollout) Kind() string { return kindRollout }

// diagnose ranks the features whose live distribution in group differs
// most from the other groups'.
func (r *serviceRollout) diagnose(group string) []rollout.Suspect {
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
func (r *serviceRollout) Steer(c release.Call) {
	version, group, arm := r.ctrl.Decide(rollout.Attributes{Headers: c.Header(), Values: c.Values(), RequestID: c.RequestID()})
	c.SetVersion(version)
	c.SetGroup(group, string(arm))
	if t := r.ctrl.Target(arm); t.Backend != "" {
		c.SetBackend(t.Backend)
	}
}

// FeaturesRead feeds the call's group's drift windows.
func (r *serviceRollout) FeaturesRead(c release.Call) {
	group, _ := c.Group()
	if m, ok := r.groups[group]; ok {
		driftwatch.Observe(m, r.vars, c, c.Start())
	}
}

// ModelDone tells the controller how the model call went.
func (r *serviceRollout) ModelDone(c release.Call, err error) {
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
func (r *serviceRollout) Tick(ctx context.Context, now time.Time) { r.ctrl.Tick(ctx, now) }

// Status is the rollout's admin view (rollout.Status).
func (r *serviceRollout) Status() any { return r.ctrl.Status() }

// Close forgets the replaced controller's metric series.
func (r *serviceRollout) Close() { r.ctrl.Forget() }
