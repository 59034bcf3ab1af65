package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-ml/sluice/internal/cluster"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/fallback"
	"github.com/sluice-ml/sluice/internal/gateway/release/driftwatch"
	"github.com/sluice-ml/sluice/internal/gateway/release/rollouthook"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// Fleet is the gateway's share of a fleet's state (the cluster section):
// three JetStream KV buckets.
//
//   - rollout: one key per service, the rollout's saved state, written
//     by compare-and-set and watched by every replica;
//   - windows: one key per service and replica, the replica's gate
//     windows, published every publish interval and counted by the
//     others while fresh (the bucket's TTL is the replica TTL, so a dead
//     replica's entries also leave the server);
//   - baselines: one key per service, the fleet's completed fallback
//     baseline buckets, merged by compare-and-set as each replica
//     completes one and read by a replica at start;
//   - drift: one key per service, the drift reference recorded from live
//     traffic (drift.record_for) by the first replica to finish
//     recording; the others, and replicas started later, use it.
type Fleet struct {
	c                                  *cluster.Cluster
	rollouts, windows, baseline, drift *cluster.Bucket
}

// OpenFleet creates or opens the gateway's buckets on a connected
// cluster and reads them.
func OpenFleet(ctx context.Context, c *cluster.Cluster) (*Fleet, error) {
	f := &Fleet{c: c}
	var err error
	if f.rollouts, err = c.Bucket(ctx, "rollout", cluster.BucketOptions{Description: "Sluice rollout state, one key per service"}); err != nil {
		return nil, err
	}
	if f.windows, err = c.Bucket(ctx, "windows", cluster.BucketOptions{
		Description: "Sluice rollout gate windows, one key per service and replica", TTL: c.ReplicaTTL(),
	}); err != nil {
		return nil, err
	}
	if f.baseline, err = c.Bucket(ctx, "baselines", cluster.BucketOptions{
		Description: "Sluice fallback baselines (completed buckets), one key per service",
	}); err != nil {
		return nil, err
	}
	if f.drift, err = c.Bucket(ctx, "drift", cluster.BucketOptions{
		Description: "Sluice drift references recorded from live traffic, one key per service",
	}); err != nil {
		return nil, err
	}
	return f, nil
}

// Status is the cluster connection's state, for the admin API.
func (f *Fleet) Status() cluster.Status { return f.c.Status() }

// rolloutFleet is a service's rollout.Fleet on the fleet's buckets.
type rolloutFleet struct {
	f   *Fleet
	key string // the service's key
}

func (f *Fleet) forRollout(service string) *rolloutFleet {
	return &rolloutFleet{f: f, key: cluster.Key(service)}
}

func (r *rolloutFleet) Load(ctx context.Context) ([]byte, uint64, error) {
	e, err := r.f.rollouts.Get(ctx, r.key)
	if errors.Is(err, cluster.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value, e.Revision, nil
}

func (r *rolloutFleet) Save(ctx context.Context, data []byte, rev uint64) (uint64, error) {
	n, err := r.f.rollouts.Update(ctx, r.key, data, rev)
	if errors.Is(err, cluster.ErrConflict) {
		return 0, fmt.Errorf("%w: %w", rollout.ErrConflict, err)
	}
	return n, err
}

func (r *rolloutFleet) Windows() [][]byte {
	es := r.f.windows.Fresh(r.key+".", r.windowKey(), r.f.c.ReplicaTTL())
	out := make([][]byte, 0, len(es))
	for _, e := range es {
		out = append(out, e.Value)
	}
	return out
}

func (r *rolloutFleet) windowKey() string { return r.key + "." + cluster.Key(r.f.c.Replica()) }

// rolloutFleet is the fleet's share of the rollouts, or nil without a
// fleet.
func (g *Gateway) rolloutFleet() rollouthook.Fleet {
	if g.opts.Fleet == nil {
		return nil
	}
	return fleetRollouts{g.opts.Fleet}
}

// fleetRollouts is rollouthook.Fleet on the fleet's rollout and windows
// buckets.
type fleetRollouts struct{ f *Fleet }

func (r fleetRollouts) For(service string) rollout.Fleet { return r.f.forRollout(service) }

func (r fleetRollouts) Publish(service string, windows func() []byte) {
	r.f.c.Publish(r.f.windows, r.f.forRollout(service).windowKey(), windows)
}

// watchFleet routes the rollout changes other replicas make to the
// controllers of this gateway.
func (g *Gateway) watchFleet() {
	f := g.opts.Fleet
	if f == nil {
		return
	}
	f.rollouts.OnChange(func(e cluster.Entry, deleted bool) {
		if deleted {
			return
		}
		var ctrl *rollout.Controller
		for name, s := range g.state.Load().byName {
			if s.rollout != nil && cluster.Key(name) == e.Key {
				ctrl = s.rollout.Controller()
				break
			}
		}
		if ctrl != nil {
			ctrl.ApplyFleet(e.Value, e.Revision)
		}
	})
}

// baselineSync persists one service's fallback baseline: to the fleet's
// bucket (merged with the other replicas') or to a local file.
type baselineSync struct {
	m      *fallback.Monitor
	file   string // single-process mode
	keep   int    // buckets kept: fallback.history
	gen    uint64 // the monitor's completions already persisted
	pushed int64  // fleet mode: the last bucket index merged into the fleet's
	failed bool   // the last save failed (said once in the log)
}

// seedBaseline loads the persisted baseline of sc into m (the fleet's, or
// the local file's) and returns what persists it later. Failing to read
// is logged, not fatal: the baseline then builds up again.
func (g *Gateway) seedBaseline(sc config.Service, m *fallback.Monitor) *baselineSync {
	fb := sc.Fallback
	bs := &baselineSync{m: m, file: fb.BaselineFile, keep: min(fb.History, fallback.MaxSnapshotBuckets), pushed: -1}
	var data []byte
	var err error
	switch {
	case g.opts.Fleet != nil:
		var e cluster.Entry
		e, err = g.opts.Fleet.baseline.Get(context.Background(), cluster.Key(sc.Name))
		if errors.Is(err, cluster.ErrNotFound) {
			err = nil
		}
		data = e.Value
	case bs.file != "":
		data, err = readBounded(bs.file)
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	default:
		return nil
	}
	if err == nil && data != nil {
		var s *fallback.Snapshot
		if s, err = fallback.ParseSnapshot(data); err == nil {
			if m.Seed(s) {
				g.logger.Info("fallback baseline loaded", "service", sc.Name, "buckets", len(s.Buckets), "fleet", g.opts.Fleet != nil)
			}
		}
	}
	if err != nil {
		g.logger.Warn("fallback baseline not loaded; it builds up again", "service", sc.Name, "err", err)
	}
	_, bs.gen = m.Completed(true)
	return bs
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 2<<20))
}

// persistBaselines writes the baselines whose monitors completed a bucket
// since the last call. It runs on RunBackground's tick.
func (g *Gateway) persistBaselines(ctx context.Context) {
	st := g.state.Load()
	for _, sc := range st.cfg.Services {
		s := st.byName[sc.Name]
		if s.fallback == nil || s.fallback.baseline == nil {
			continue
		}
		name, bs := sc.Name, s.fallback.baseline
		err := g.persistBaseline(ctx, name, bs)
		switch {
		case err != nil && !bs.failed:
			g.logger.Warn("fallback baseline not saved; retried every tick", "service", name, "err", err)
		case err == nil && bs.failed:
			g.logger.Info("fallback baseline saved again", "service", name)
		}
		bs.failed = err != nil
	}
}

func (g *Gateway) persistBaseline(ctx context.Context, service string, bs *baselineSync) error {
	snap, gen := bs.m.Completed(g.opts.Fleet != nil)
	if gen == bs.gen {
		return nil
	}
	if g.opts.Fleet == nil {
		all, _ := bs.m.Completed(false)
		if len(all.Buckets) > bs.keep {
			all.Buckets = all.Buckets[len(all.Buckets)-bs.keep:]
		}
		data, err := all.Marshal()
		if err == nil {
			err = writeFileAtomic(bs.file, data)
		}
		if err == nil {
			bs.gen = gen
		}
		return err
	}
	fresh := snap
	fresh.Buckets = nil
	for _, b := range snap.Buckets {
		if b.Index > bs.pushed {
			fresh.Buckets = append(fresh.Buckets, b)
		}
	}
	if len(fresh.Buckets) == 0 {
		bs.gen = gen
		return nil
	}
	key := cluster.Key(service)
	bucket := g.opts.Fleet.baseline
	for range 5 {
		var shared fallback.Snapshot
		e, err := bucket.Get(ctx, key)
		switch {
		case errors.Is(err, cluster.ErrNotFound):
		case err != nil:
			return err
		default:
			if s, perr := fallback.ParseSnapshot(e.Value); perr == nil {
				shared = *s
			}
		}
		if !shared.Merge(&fresh, bs.keep) {
			// Another bucket width: this configuration's baseline replaces it.
			shared = fallback.Snapshot{}
			shared.Merge(&fresh, bs.keep)
		}
		data, err := shared.Marshal()
		if err != nil {
			return err
		}
		_, err = bucket.Update(ctx, key, data, e.Revision)
		if errors.Is(err, cluster.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		bs.pushed, bs.gen = fresh.Buckets[len(fresh.Buckets)-1].Index, gen
		return nil
	}
	return errors.New("the fleet's baseline kept changing")
}

// writeFileAtomic replaces path with data through a temporary file in the
// same folder, so a crash leaves the old or the new file.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// fleetTick is the fleet's share of RunBackground's one-second tick.
func (g *Gateway) fleetTick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g.persistBaselines(ctx)
}

// ClusterStatus is what GET /cluster answers: the mode, and in fleet mode
// the connection's state (a replica cut off from NATS says so here while
// it serves with the last state it saw).
type ClusterStatus struct {
	// Mode is "fleet" or "single_process".
	Mode string `json:"mode"`
	*cluster.Status
}

// ClusterStatus returns the gateway's place in its fleet.
func (g *Gateway) ClusterStatus() ClusterStatus {
	if g.opts.Fleet == nil {
		return ClusterStatus{Mode: "single_process"}
	}
	st := g.opts.Fleet.Status()
	return ClusterStatus{Mode: "fleet", Status: &st}
}

// driftReferences are the fleet's drift references for the drift
// watches, or nil without a fleet.
func (g *Gateway) driftReferences() driftwatch.References {
	if g.opts.Fleet == nil {
		return nil
	}
	return fleetDrift{g}
}

// fleetDrift is driftwatch.References on the fleet's drift bucket.
type fleetDrift struct{ g *Gateway }

func (f fleetDrift) Load(service string) []*drift.Reference { return f.g.fleetDriftReference(service) }

func (f fleetDrift) Share(service string, refs []*drift.Reference) []*drift.Reference {
	return f.g.shareDriftReference(service, refs)
}

// fleetDriftReference returns the fleet's recorded drift reference of
// service, or nil when there is none (or no fleet).
func (g *Gateway) fleetDriftReference(service string) []*drift.Reference {
	if g.opts.Fleet == nil {
		return nil
	}
	e, err := g.opts.Fleet.drift.Get(context.Background(), cluster.Key(service))
	if err != nil {
		if !errors.Is(err, cluster.ErrNotFound) {
			g.logger.Warn("fleet drift reference not read", "service", service, "err", err)
		}
		return nil
	}
	refs, err := drift.ParseReferences(e.Value)
	if err != nil {
		g.logger.Warn("fleet drift reference ignored", "service", service, "err", err)
		return nil
	}
	return refs
}

// shareDriftReference stores refs, recorded here, as the fleet's drift
// reference of service unless another replica stored one first; it
// returns the fleet's reference (refs, or the other replica's).
func (g *Gateway) shareDriftReference(service string, refs []*drift.Reference) []*drift.Reference {
	if g.opts.Fleet == nil {
		return refs
	}
	data, err := drift.MarshalReferences(refs)
	if err == nil {
		_, err = g.opts.Fleet.drift.Update(context.Background(), cluster.Key(service), data, 0)
	}
	switch {
	case err == nil:
		return refs
	case errors.Is(err, cluster.ErrConflict):
		if theirs := g.fleetDriftReference(service); theirs != nil {
			return theirs
		}
		return refs
	default:
		g.logger.Warn("drift reference not shared with the fleet; this replica uses its own", "service", service, "err", err)
		return refs
	}
}
