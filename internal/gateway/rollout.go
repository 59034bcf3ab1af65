package gateway

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// serviceRollout is a service's staged rollout: the controller that
// decides which version serves each request, and per traffic group a drift
// monitor of the service's scalar features, which the controller's
// diagnosis ranks when a group fails.
type serviceRollout struct {
	cfg        rollout.Config
	ctrl       *rollout.Controller
	groups     map[string]*drift.Monitor
	vars       []rolloutVar
	confidence string      // the model output the confidence gate reads
	ticking    atomic.Bool // a Tick of ctrl runs (on Run's tick)
}

type rolloutVar struct {
	name  string // view__feature
	col   int
	isInt bool
}

// rolloutFor returns the service's rollout, reusing the running one when
// its configuration did not change (its state is also on disk).
func (g *Gateway) rolloutFor(sc config.Service, s *service) (*serviceRollout, error) {
	g.mapsMu.Lock()
	defer g.mapsMu.Unlock()
	if r, ok := g.rollouts[sc.Name]; ok && reflect.DeepEqual(r.cfg, *sc.Rollout) {
		return r, nil
	}
	r := &serviceRollout{cfg: *sc.Rollout, groups: map[string]*drift.Monitor{}, confidence: "confidence_score"}
	if s.fallback != nil {
		r.confidence = s.fallback.confidence
	}
	var vars []drift.Variable
	for col, ref := range s.features {
		t := s.featureTypes[col]
		if t.List || t.Kind == feature.KindString || t.Kind == feature.KindBytes {
			continue
		}
		name := strings.Replace(ref, ":", "__", 1)
		isInt := t.Kind == feature.KindInt32 || t.Kind == feature.KindInt64 || t.Kind == feature.KindUnixTimestamp
		r.vars = append(r.vars, rolloutVar{name: name, col: col, isInt: isInt})
		vars = append(vars, drift.Variable{Name: name})
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
	if d := s.drift; d != nil {
		// The drift gates compare each group's live features with the
		// service's drift reference.
		opts.Drift = func(group string) []rollout.Suspect {
			m, ok := r.groups[group]
			if !ok {
				return nil
			}
			return d.groupDrift(m)
		}
	}
	if sc.Rollout.Gates.Accuracy != nil && sc.Accuracy != nil && g.opts.Accuracy != nil {
		opts.Accuracy = accuracyGateSource(g.opts.Accuracy, sc)
	}
	ctrl, err := rollout.New(sc.Name, *sc.Rollout, opts, g.base, g.reg)
	if err != nil {
		return nil, err
	}
	if old, ok := g.rollouts[sc.Name]; ok {
		old.ctrl.Forget()
	}
	g.attachRollout(sc.Name, ctrl)
	r.ctrl = ctrl
	g.rollouts[sc.Name] = r
	return r, nil
}

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

// observeFeatures feeds the group's drift windows.
func (r *serviceRollout) observeFeatures(group string, feats *serving.Response, now time.Time) {
	if m, ok := r.groups[group]; ok {
		observeScalars(m, r.vars, feats, now)
	}
}

// observeScalars feeds a drift monitor the scalar feature values of one
// request row.
func observeScalars(m *drift.Monitor, vars []rolloutVar, feats *serving.Response, now time.Time) {
	if feats == nil {
		return
	}
	for _, v := range vars {
		fv, _ := featureCell(feats, v.col)
		if fv == nil {
			continue
		}
		x := fv.F64
		if v.isInt {
			x = float64(fv.I64)
		} else if fv.Bool {
			x = 1
		}
		m.ObserveAt(v.name, x, now)
	}
}

// rolloutHook is the release hook of a service in a staged rollout: the
// controller picks each call's version (and, per arm, its backend), sees
// its features and learns how the model call went.
type rolloutHook struct {
	noHook
	r        *serviceRollout
	backends map[string]*backend // the configuration's, for the arms' backends
}

func (h *rolloutHook) steer(x *exchange) {
	x.version, x.roGroup, x.roArm = h.r.ctrl.Decide(rollout.Attributes{Headers: x.call.Header, Values: x.values, RequestID: x.reqID})
	if t := h.r.ctrl.Target(x.roArm); t.Backend != "" {
		x.b, x.log.Backend = h.backends[t.Backend], t.Backend
	}
}

func (h *rolloutHook) featuresRead(x *exchange) {
	h.r.observeFeatures(x.roGroup, x.feats, x.start)
}

func (h *rolloutHook) modelDone(x *exchange, err error) {
	o := rollout.Outcome{Status: http.StatusOK, Latency: x.callLatency}
	if err != nil {
		o.Status, _ = apierr.HTTPStatus(err)
	} else if c, ok := outputScalar(x.resp, h.r.confidence); ok {
		o.Confidence, o.HasConfidence = c, true
	}
	h.r.ctrl.Observe(x.roArm, x.roGroup, o)
}
