// Package driftwatch is the gateway's drift watch, a release hook
// (release.Hook): it feeds a service's answered calls (its scalar
// features and model outputs) to a drift monitor (internal/release/drift),
// checks the drift each interval against a reference (a file, the fleet's,
// or the first record_for of live traffic), and tells the fallback and the
// rollout's drift gates what moved.
package driftwatch

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// Kind is the drift watch's hook kind.
const Kind = "drift"

// References shares the drift reference recorded from live traffic with
// the other replicas of a fleet.
type References interface {
	// Load returns the fleet's reference of service, or nil.
	Load(service string) []*drift.Reference
	// Share stores refs as the fleet's reference of service unless
	// another replica stored one first, and returns the fleet's reference
	// (refs, or the other replica's).
	Share(service string, refs []*drift.Reference) []*drift.Reference
}

// Options are what the watches need of their owner.
type Options struct {
	// Logger logs the references loaded and recorded (the gateway's).
	Logger *slog.Logger
	// Base is the logger the monitors name their component on.
	Base *slog.Logger
	// Registerer gets the monitors' gauges; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Now is the clock.
	Now func() time.Time
	// Fleet shares the recorded references; nil keeps them here.
	Fleet References
}

// Watch is the release hook of a service with a drift block. It is
// carried over a reload that leaves the block unchanged.
type Watch struct {
	release.Base
	o       Options
	cfg     config.Drift
	service string
	mon     *drift.Monitor
	feats   []release.Feature // the watched features
	outputs []string          // the watched model outputs

	mu          sync.Mutex // protects the fields below
	recordUntil time.Time  // zero once a reference is installed
	drifting    map[string]bool
	lastCheck   time.Time // of the statistics (Tick)
}

// Factory makes the services' drift watches, reusing prev when the drift
// block did not change.
func Factory(o Options) release.Factory {
	return func(svc release.Service, prev release.Hook) (release.Hook, error) {
		sc := svc.Config()
		if sc.Drift == nil {
			return nil, nil
		}
		if w, ok := prev.(*Watch); ok && reflect.DeepEqual(w.cfg, *sc.Drift) {
			return w, nil
		}
		return newWatch(o, svc, *sc.Drift)
	}
}

func newWatch(o Options, svc release.Service, dc config.Drift) (*Watch, error) {
	name := svc.Name()
	w := &Watch{o: o, cfg: dc, service: name, drifting: map[string]bool{}}
	var vars []drift.Variable
	for _, f := range svc.Features() {
		if !f.Scalar() || len(dc.Features) > 0 && !slices.Contains(dc.Features, f.Ref) {
			continue
		}
		w.feats = append(w.feats, f)
		vars = append(vars, drift.Variable{Name: VarName(f.Ref)})
	}
	w.outputs = dc.Outputs
	if len(w.outputs) == 0 {
		w.outputs = svc.Outputs()
	}
	for _, out := range w.outputs {
		vars = append(vars, drift.Variable{Name: "output__" + out})
	}
	width := dc.Window.Std() / 6
	mon, err := drift.NewMonitor(name, vars, drift.Options{
		Window:       drift.WindowOptions{Buckets: 6, Width: width, Now: o.Now},
		PSIThreshold: dc.PSIThreshold, KSAlpha: dc.KSAlpha, Interval: dc.Interval.Std(),
	}, o.Base, o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("service %q drift: %w", name, err)
	}
	if dc.Reference != "" {
		refs, err := drift.LoadReferences(dc.Reference)
		if err != nil {
			mon.Close()
			return nil, fmt.Errorf("service %q drift.reference: %w", name, err)
		}
		for _, r := range refs {
			if err := mon.SetReference(r.Name, r); err != nil {
				mon.Close()
				return nil, fmt.Errorf("service %q drift.reference: %w", name, err)
			}
		}
	} else if refs := w.fleetReference(); refs != nil {
		// Another replica recorded the fleet's reference: use it.
		for _, r := range refs {
			_ = mon.SetReference(r.Name, r) // names this configuration does not watch are skipped
		}
		o.Logger.Info("drift reference loaded from the fleet", "service", name, "variables", len(refs))
	} else {
		w.recordUntil = o.Now().Add(dc.RecordFor.Std())
	}
	w.mon = mon
	return w, nil
}

// fleetReference is the fleet's reference of the service, or nil.
func (w *Watch) fleetReference() []*drift.Reference {
	if w.o.Fleet == nil {
		return nil
	}
	return w.o.Fleet.Load(w.service)
}

// Kind is "drift".
func (w *Watch) Kind() string { return Kind }

// ModelDone feeds every answered call to the watch.
func (w *Watch) ModelDone(c release.Call, err error) {
	if err != nil {
		return
	}
	now := c.Start()
	Observe(w.mon, w.feats, c, now)
	for _, o := range w.outputs {
		if x, ok := c.Output(o); ok {
			w.mon.ObserveAt("output__"+o, x, now)
		}
	}
}

// Tick checks the drift once each of the watch's intervals.
func (w *Watch) Tick(_ context.Context, now time.Time) {
	w.mu.Lock()
	due := now.Sub(w.lastCheck) >= w.cfg.Interval.Std()
	if due {
		w.lastCheck = now
	}
	w.mu.Unlock()
	if due {
		w.check(now)
	}
}

// Close removes the replaced watch's metric series.
func (w *Watch) Close() { w.mon.Close() }

// check records the reference when its recording period is over, then
// computes the statistics (gauges and events).
func (w *Watch) check(now time.Time) {
	w.mu.Lock()
	record := !w.recordUntil.IsZero() && !now.Before(w.recordUntil)
	w.mu.Unlock()
	if record {
		n := 0
		for _, name := range w.mon.Names() {
			ref, err := w.mon.Record(name)
			if err != nil {
				continue // too few samples: its window keeps filling
			}
			if w.mon.SetReference(name, ref) == nil {
				n++
			}
		}
		if n > 0 {
			w.mu.Lock()
			w.recordUntil = time.Time{}
			w.mu.Unlock()
			w.o.Logger.Info("drift reference recorded from live traffic", "service", w.service, "variables", n)
			if w.o.Fleet != nil {
				// One reference per fleet: the first replica's.
				for _, r := range w.o.Fleet.Share(w.service, w.mon.References()) {
					_ = w.mon.SetReference(r.Name, r)
				}
			}
		}
	}
	res := w.mon.Check()
	w.mu.Lock()
	for _, r := range res {
		w.drifting[r.Name] = r.Drifting
	}
	w.mu.Unlock()
}

// FeedsFallback reports whether the watch has the fallback treat
// low-confidence answers as drifting (feed_fallback) while output
// drifts now.
func (w *Watch) FeedsFallback(output string) bool {
	if !w.cfg.FeedFallback {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.drifting["output__"+output]
}

// GroupDrift compares a rollout group's live features with the service's
// reference, for the rollout's drift gates.
func (w *Watch) GroupDrift(group *drift.Monitor) []rollout.Suspect {
	for _, ref := range w.mon.References() {
		_ = group.SetReference(ref.Name, ref) // names the group does not watch are skipped
	}
	var out []rollout.Suspect
	for _, r := range group.Check() {
		if math.IsNaN(r.PSI) && math.IsNaN(r.PValue) {
			continue
		}
		out = append(out, rollout.Suspect{Feature: r.Name, PSI: r.PSI, KS: r.KS, PValue: r.PValue})
	}
	return out
}

// View is the admin view of one service's drift watch.
type View struct {
	Service        string     `json:"service"`
	ReferenceFrom  string     `json:"reference_from"` // "file", "recording" or "recorded"
	RecordingUntil time.Time  `json:"recording_until,omitzero"`
	Variables      []Variable `json:"variables"`
}

// Variable is one watched variable's last statistics.
type Variable struct {
	Name     string   `json:"name"`
	Samples  int64    `json:"samples"`
	PSI      *float64 `json:"psi"`
	KS       *float64 `json:"ks"`
	PValue   *float64 `json:"p_value"`
	Drifting bool     `json:"drifting"`
	Skip     string   `json:"skip,omitempty"`
}

// Status is the watch's admin view (a View).
func (w *Watch) Status() any {
	v := View{Service: w.service, ReferenceFrom: "file"}
	w.mu.Lock()
	if w.cfg.Reference == "" {
		v.ReferenceFrom = "recorded"
		if !w.recordUntil.IsZero() {
			v.ReferenceFrom, v.RecordingUntil = "recording", w.recordUntil
		}
	}
	w.mu.Unlock()
	for _, r := range w.mon.Last() {
		v.Variables = append(v.Variables, Variable{
			Name: r.Name, Samples: r.Samples, PSI: finite(r.PSI), KS: finite(r.KS), PValue: finite(r.PValue),
			Drifting: r.Drifting, Skip: r.Skip,
		})
	}
	return v
}

// finite returns a pointer to x, or nil for NaN and ±Inf (JSON has neither).
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// Observe feeds a drift monitor the scalar feature values of one call
// (vars: scalar features, by VarName).
func Observe(m *drift.Monitor, vars []release.Feature, c release.Call, now time.Time) {
	if c.Features() == nil {
		return
	}
	for _, f := range vars {
		if v := c.Feature(f.Column); v != nil {
			m.ObserveAt(VarName(f.Ref), f.Value(v), now)
		}
	}
}

// VarName is a feature's variable name in drift windows: view__feature.
func VarName(ref string) string { return strings.Replace(ref, ":", "__", 1) }
