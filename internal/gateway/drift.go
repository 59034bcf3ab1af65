package gateway

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// serviceDrift is the release hook of a service with a drift watch: it
// watches the service's live features and outputs against a reference (a
// file, or the first RecordFor of live traffic). It is carried over a
// reload that leaves the drift settings unchanged.
type serviceDrift struct {
	release.Base
	g       *Gateway
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

// kindDrift is the drift watch's kind.
const kindDrift = "drift"

// driftFactory makes the service's drift watch, reusing prev when its
// configuration did not change.
func (g *Gateway) driftFactory(svc release.Service, prev release.Hook) (release.Hook, error) {
	sc := svc.Config()
	if sc.Drift == nil {
		return nil, nil
	}
	if d, ok := prev.(*serviceDrift); ok && reflect.DeepEqual(d.cfg, *sc.Drift) {
		return d, nil
	}
	dc := *sc.Drift
	d := &serviceDrift{g: g, cfg: dc, service: sc.Name, drifting: map[string]bool{}}
	var vars []drift.Variable
	for _, f := range svc.Features() {
		if !f.Scalar() || len(dc.Features) > 0 && !slices.Contains(dc.Features, f.Ref) {
			continue
		}
		d.feats = append(d.feats, f)
		vars = append(vars, drift.Variable{Name: driftName(f.Ref)})
	}
	d.outputs = dc.Outputs
	if len(d.outputs) == 0 {
		d.outputs = svc.Outputs()
	}
	for _, o := range d.outputs {
		vars = append(vars, drift.Variable{Name: "output__" + o})
	}
	width := dc.Window.Std() / 6
	mon, err := drift.NewMonitor(sc.Name, vars, drift.Options{
		Window:       drift.WindowOptions{Buckets: 6, Width: width, Now: g.opts.Now},
		PSIThreshold: dc.PSIThreshold, KSAlpha: dc.KSAlpha, Interval: dc.Interval.Std(),
	}, g.base, g.reg)
	if err != nil {
		return nil, fmt.Errorf("service %q drift: %w", sc.Name, err)
	}
	if dc.Reference != "" {
		refs, err := drift.LoadReferences(dc.Reference)
		if err != nil {
			mon.Close()
			return nil, fmt.Errorf("service %q drift.reference: %w", sc.Name, err)
		}
		for _, r := range refs {
			if err := mon.SetReference(r.Name, r); err != nil {
				mon.Close()
				return nil, fmt.Errorf("service %q drift.reference: %w", sc.Name, err)
			}
		}
	} else if refs := g.fleetDriftReference(sc.Name); refs != nil {
		// Another replica recorded the fleet's reference: use it.
		for _, r := range refs {
			_ = mon.SetReference(r.Name, r) // names this configuration does not watch are skipped
		}
		g.logger.Info("drift reference loaded from the fleet", "service", sc.Name, "variables", len(refs))
	} else {
		d.recordUntil = g.opts.Now().Add(dc.RecordFor.Std())
	}
	d.mon = mon
	return d, nil
}

// Kind is "drift".
func (d *serviceDrift) Kind() string { return kindDrift }

// ModelDone feeds every answered call to the watch.
func (d *serviceDrift) ModelDone(c release.Call, err error) {
	if err != nil {
		return
	}
	now := c.Start()
	observeScalars(d.mon, d.feats, c, now)
	for _, o := range d.outputs {
		if x, ok := c.Output(o); ok {
			d.mon.ObserveAt("output__"+o, x, now)
		}
	}
}

// Tick checks the drift once each of the watch's intervals.
func (d *serviceDrift) Tick(_ context.Context, now time.Time) {
	d.mu.Lock()
	due := now.Sub(d.lastCheck) >= d.cfg.Interval.Std()
	if due {
		d.lastCheck = now
	}
	d.mu.Unlock()
	if due {
		d.check(now, d.g)
	}
}

// Close removes the replaced watch's metric series.
func (d *serviceDrift) Close() { d.mon.Close() }

// check records the reference when its recording period is over, then
// computes the statistics (gauges and events).
func (d *serviceDrift) check(now time.Time, g *Gateway) {
	d.mu.Lock()
	record := !d.recordUntil.IsZero() && !now.Before(d.recordUntil)
	d.mu.Unlock()
	if record {
		n := 0
		for _, name := range d.mon.Names() {
			ref, err := d.mon.Record(name)
			if err != nil {
				continue // too few samples: its window keeps filling
			}
			if d.mon.SetReference(name, ref) == nil {
				n++
			}
		}
		if n > 0 {
			d.mu.Lock()
			d.recordUntil = time.Time{}
			d.mu.Unlock()
			g.logger.Info("drift reference recorded from live traffic", "service", d.service, "variables", n)
			if g.opts.Fleet != nil {
				// One reference per fleet: the first replica's.
				for _, r := range g.shareDriftReference(d.service, d.mon.References()) {
					_ = d.mon.SetReference(r.Name, r)
				}
			}
		}
	}
	res := d.mon.Check()
	d.mu.Lock()
	for _, r := range res {
		d.drifting[r.Name] = r.Drifting
	}
	d.mu.Unlock()
}

// outputDrifting reports whether the watched output drifts now.
func (d *serviceDrift) outputDrifting(output string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drifting["output__"+output]
}

// groupDrift compares a rollout group's live features with the service's
// reference, for the rollout's drift gates.
func (d *serviceDrift) groupDrift(group *drift.Monitor) []rollout.Suspect {
	for _, ref := range d.mon.References() {
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
