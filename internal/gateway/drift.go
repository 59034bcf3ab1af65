package gateway

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// serviceDrift watches a service's live features and outputs against a
// reference: a file, or the first RecordFor of live traffic.
type serviceDrift struct {
	cfg     config.Drift
	service string
	mon     *drift.Monitor
	feats   []rolloutVar // the watched features
	outputs []string     // the watched model outputs

	mu          sync.Mutex // protects the fields below
	recordUntil time.Time  // zero once a reference is installed
	drifting    map[string]bool
}

// driftFor returns the service's drift watch, reusing the running one when
// its configuration did not change.
func (g *Gateway) driftFor(sc config.Service, s *service) (*serviceDrift, error) {
	g.mapsMu.Lock()
	defer g.mapsMu.Unlock()
	if d, ok := g.drifts[sc.Name]; ok && reflect.DeepEqual(d.cfg, *sc.Drift) {
		return d, nil
	}
	dc := *sc.Drift
	d := &serviceDrift{cfg: dc, service: sc.Name, drifting: map[string]bool{}}
	var vars []drift.Variable
	for col, ref := range s.features {
		t := s.featureTypes[col]
		if t.List || t.Kind == feature.KindString || t.Kind == feature.KindBytes {
			continue
		}
		if len(dc.Features) > 0 && !slices.Contains(dc.Features, ref) {
			continue
		}
		name := strings.Replace(ref, ":", "__", 1)
		isInt := t.Kind == feature.KindInt32 || t.Kind == feature.KindInt64 || t.Kind == feature.KindUnixTimestamp
		d.feats = append(d.feats, rolloutVar{name: name, col: col, isInt: isInt})
		vars = append(vars, drift.Variable{Name: name})
	}
	d.outputs = dc.Outputs
	if len(d.outputs) == 0 {
		for _, o := range s.outputs {
			d.outputs = append(d.outputs, o.from)
		}
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
	if old, ok := g.drifts[sc.Name]; ok {
		old.mon.Close()
	}
	d.mon = mon
	g.drifts[sc.Name] = d
	return d, nil
}

// driftHook is the release hook of a service with a drift watch: every
// answered call feeds it.
type driftHook struct {
	noHook
	d *serviceDrift
}

func (h driftHook) modelDone(x *exchange, err error) {
	if err == nil {
		h.d.observe(x.feats, x.resp, x.start)
	}
}

// observe feeds one answered request.
func (d *serviceDrift) observe(feats *serving.Response, resp *infer.Response, now time.Time) {
	observeScalars(d.mon, d.feats, feats, now)
	for _, o := range d.outputs {
		if x, ok := outputScalar(resp, o); ok {
			d.mon.ObserveAt("output__"+o, x, now)
		}
	}
}

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

// runDrift checks every service's drift each of its intervals until ctx
// ends.
func (g *Gateway) runDrift(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := map[*serviceDrift]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := g.opts.Now()
		for _, s := range g.state.Load().byName {
			d := s.drift
			if d == nil || now.Sub(last[d]) < d.cfg.Interval.Std() {
				continue
			}
			last[d] = now
			d.check(now, g)
		}
	}
}
