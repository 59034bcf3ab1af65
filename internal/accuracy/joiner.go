package accuracy

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// The results of an outcome.
const (
	ResultJoined    = "joined"
	ResultHeld      = "held"
	ResultDuplicate = "duplicate"
	ResultTooLate   = "too_late"
	ResultInvalid   = "invalid"
	// ResultNotPermitted: the outcome's poster is not the client the
	// prediction was served to and may not judge others' predictions; it is
	// not stored, so the owner's outcome still joins.
	ResultNotPermitted = "not_permitted"
)

// windowSlots is the number of slots a rolling window is cut into.
const windowSlots = 12

// maxKeyLen bounds a business key.
const maxKeyLen = 256

// maxFuture is how far in the future an outcome's time may lie (clock
// skew between the sender and Sluice).
const maxFuture = 5 * time.Minute

// Log is where predictions and joined pairs are recorded durably
// (record.Writer). Offer never blocks.
type Log interface {
	Offer(rec *record.Record) bool
}

// Options configure a Joiner.
type Options struct {
	// Lookback is how long a prediction waits for its outcome and an
	// outcome for its prediction [14 days].
	Lookback time.Duration
	// QueueSize bounds the predictions offered and not yet stored [10000].
	QueueSize int
	// BatchSize bounds the predictions per store update [256].
	BatchSize int
	// Log, when set, receives every logged prediction and every joined
	// pair as records.
	Log Log
	// SweepInterval is how often expired entries are dropped [1m].
	SweepInterval time.Duration
	// RefreshInterval is how often the rolling gauges are recomputed when
	// no pair joins [10s].
	RefreshInterval time.Duration
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Service is one service's accuracy block, with the defaults applied.
type Service struct {
	Name string
	Spec accuracyspec.Service
}

// Joiner joins outcomes to logged predictions and keeps the metrics. It
// is safe for concurrent use. New starts nothing: Run runs the worker
// that stores offered predictions and the sweeper; Close stops taking
// predictions, stores the queued ones and closes the store.
type Joiner struct {
	store Store
	opts  Options
	log   *slog.Logger
	m     *metrics

	sendMu  sync.Mutex // orders offers against the close of queue; protects closed
	closed  bool
	closing chan struct{} // closed by Close: a failing store is retried no more
	queue   chan queued
	done    chan struct{} // closed when Run's worker returned
	runs    atomic.Bool

	services atomic.Pointer[map[string]*svc]

	offered atomic.Uint64 // predictions queued
	stored  atomic.Uint64 // predictions the worker finished with

	mu sync.Mutex // protects the svc states' mutable parts
}

type queued struct {
	p *Prediction
}

// svc is a service's compiled block and its metric state.
type svc struct {
	name   string
	spec   accuracyspec.Service
	window time.Duration
	dims   []string // slice headers, lower-case

	// guarded by Joiner.mu
	values map[string]map[string]bool // per dimension, the values with series
	series map[string]*series         // by version, output, slice
	gate   map[string]*Stats          // by group, slice, version, output
	logged map[string]float64         // per version, predictions logged
	joined map[string]float64         // per version, predictions joined
}

// series is one (version, output, slice) rolling window.
type series struct {
	version, output, slice string
	w                      *window
}

// New builds a joiner over store. A nil logger discards; a nil reg
// registers nothing.
func New(store Store, opts Options, logger *slog.Logger, reg prometheus.Registerer) *Joiner {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.Lookback <= 0 {
		opts.Lookback = accuracyspec.DefaultLookback
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = accuracyspec.DefaultQueueSize
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 256
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Minute
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	j := &Joiner{
		store: store, opts: opts, log: logger.With("component", "accuracy"), m: newMetrics(reg),
		queue: make(chan queued, opts.QueueSize), done: make(chan struct{}), closing: make(chan struct{}),
	}
	empty := map[string]*svc{}
	j.services.Store(&empty)
	return j
}

// Evicted counts an entry the store evicted to stay within its bound:
// pass it as the store's onEvict.
func (j *Joiner) Evicted(e *Entry) { j.m.evicted.WithLabelValues(e.Service, e.Kind()).Inc() }

// SetServices applies the services' accuracy blocks, keeping the metric
// state of services whose block did not change. The gauges of services
// no longer listed are deleted.
func (j *Joiner) SetServices(list []Service) {
	j.mu.Lock()
	defer j.mu.Unlock()
	old := *j.services.Load()
	next := make(map[string]*svc, len(list))
	for _, s := range list {
		if o, ok := old[s.Name]; ok && sameSpec(o.spec, s.Spec) {
			next[s.Name] = o
			continue
		}
		if o, ok := old[s.Name]; ok {
			j.forget(o)
		}
		sv := &svc{
			name: s.Name, spec: s.Spec, window: s.Spec.Window.Std(),
			values: map[string]map[string]bool{}, series: map[string]*series{}, gate: map[string]*Stats{},
			logged: map[string]float64{}, joined: map[string]float64{},
		}
		if sv.window <= 0 {
			sv.window = accuracyspec.DefaultWindow
		}
		for _, h := range s.Spec.Slices {
			sv.dims = append(sv.dims, strings.ToLower(h))
		}
		for _, off := range s.Spec.Offline {
			for name, v := range off.Metrics {
				j.m.offline.WithLabelValues(s.Name, off.Version, off.Output, name).Set(v)
			}
		}
		next[s.Name] = sv
	}
	for name, o := range old {
		if _, ok := next[name]; !ok {
			j.forget(o)
		}
	}
	j.services.Store(&next)
}

func sameSpec(a, b accuracyspec.Service) bool {
	// The spec holds slices and maps: compare the parts that shape state.
	if a.Percent != b.Percent || a.Key != b.Key || a.MaxSliceValues != b.MaxSliceValues || a.Window != b.Window ||
		len(a.Slices) != len(b.Slices) || len(a.Outputs) != len(b.Outputs) || len(a.Offline) != len(b.Offline) {
		return false
	}
	for i := range a.Slices {
		if a.Slices[i] != b.Slices[i] {
			return false
		}
	}
	for i := range a.Outputs {
		if a.Outputs[i] != b.Outputs[i] {
			return false
		}
	}
	for i := range a.Offline {
		x, y := a.Offline[i], b.Offline[i]
		if x.Version != y.Version || x.Output != y.Output || len(x.Metrics) != len(y.Metrics) {
			return false
		}
		for k, v := range x.Metrics {
			if y.Metrics[k] != v {
				return false
			}
		}
	}
	return true
}

// forget deletes a service's series. Callers hold mu.
func (j *Joiner) forget(s *svc) {
	labels := prometheus.Labels{"service": s.name}
	j.m.online.DeletePartialMatch(labels)
	j.m.pairs.DeletePartialMatch(labels)
	j.m.joined.DeletePartialMatch(labels)
	j.m.offline.DeletePartialMatch(labels)
	j.m.ratio.DeletePartialMatch(labels)
	j.m.coverage.DeletePartialMatch(labels)
}

func (j *Joiner) service(name string) (*svc, bool) {
	s, ok := (*j.services.Load())[name]
	return s, ok
}

// Spec returns the accuracy block of service name.
func (j *Joiner) Spec(name string) (accuracyspec.Service, bool) {
	s, ok := j.service(name)
	if !ok {
		return accuracyspec.Service{}, false
	}
	return s.spec, true
}

// Offer logs p (and its features, when the service logs them) and queues
// it for the store. It never blocks: a full or closed queue drops p and
// counts it.
func (j *Joiner) Offer(p *Prediction, features map[string]any) bool {
	j.sendMu.Lock()
	defer j.sendMu.Unlock()
	if j.closed {
		j.m.dropped.WithLabelValues(p.Service).Inc()
		return false
	}
	select {
	case j.queue <- queued{p: p}:
		j.offered.Add(1)
	default:
		j.m.dropped.WithLabelValues(p.Service).Inc()
		return false
	}
	j.m.logged.WithLabelValues(p.Service, p.Version).Inc()
	j.mu.Lock()
	if s, ok := j.service(p.Service); ok {
		s.logged[p.Version]++
	}
	j.mu.Unlock()
	if j.opts.Log != nil {
		j.opts.Log.Offer(predictionRecord(p, features, nil))
	}
	return true
}

// predictionRecord is the log's record of p, with the outcome once joined.
func predictionRecord(p *Prediction, features map[string]any, o *Outcome) *record.Record {
	rec := &record.Record{
		Schema: record.SchemaVersion, RequestID: p.RequestID, Time: p.Time, Service: p.Service,
		JoinKey: p.Key, Route: p.Route, Group: p.Group, Headers: p.Slices, Features: features,
		Arms: map[string]record.Arm{record.ArmPrimary: {Model: p.Model, Version: p.Version, Status: 200, Outputs: scalarOutputs(p.Outputs)}},
	}
	if o != nil {
		rec.Outcome = &record.Outcome{Time: o.Time, Received: o.Received, Values: o.Values}
	}
	return rec
}

func scalarOutputs(m map[string]float64) map[string][]float64 {
	out := make(map[string][]float64, len(m))
	for k, v := range m {
		out[k] = []float64{v}
	}
	return out
}

// Run stores offered predictions until Close, and sweeps expired entries
// and refreshes the rolling gauges until ctx ends or Close. It returns
// once the queue is drained after Close, or ctx ended.
func (j *Joiner) Run(ctx context.Context) error {
	if !j.runs.CompareAndSwap(false, true) {
		return errors.New("accuracy: Run called twice")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(j.done)
		j.work()
		close(stop)
	})
	sweep := time.NewTicker(j.opts.SweepInterval)
	refresh := time.NewTicker(j.opts.RefreshInterval)
	defer sweep.Stop()
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			// The worker keeps storing what requests offer until Close.
			return nil
		case <-stop:
			wg.Wait()
			return nil
		case <-sweep.C:
			j.Sweep(ctx)
		case <-refresh.C:
			j.refresh()
		}
	}
}

// work stores queued predictions in batches until the queue is closed
// and drained.
func (j *Joiner) work() {
	batch := make([]*Prediction, 0, j.opts.BatchSize)
	for q := range j.queue {
		batch = append(batch[:0], q.p)
	fill:
		for len(batch) < cap(batch) {
			select {
			case q, ok := <-j.queue:
				if !ok {
					break fill
				}
				batch = append(batch, q.p)
			default:
				break fill
			}
		}
		j.storeBatch(batch)
		j.stored.Add(uint64(len(batch)))
	}
}

// Backoff between retries of a batch the pending store refused.
const (
	minStoreRetry = 100 * time.Millisecond
	maxStoreRetry = 5 * time.Second
)

// storeBatch stores a batch, retrying while the store fails (a broker
// outage or hang): the batch waits in memory, the queue behind it fills,
// and what the queue cannot take is dropped and counted at Offer. A retry
// is safe: writing a prediction that is already stored changes nothing.
// Once Close was called a batch that fails again is dropped and counted,
// so Close does not wait on a dead store.
func (j *Joiner) storeBatch(batch []*Prediction) {
	backoff := minStoreRetry
	var failingSince time.Time
	for {
		err := j.storePredictions(context.Background(), batch)
		if err == nil {
			if !failingSince.IsZero() {
				j.log.Info("pending store writes again", "failing_for", time.Since(failingSince).Round(time.Millisecond).String())
			}
			return
		}
		j.m.storeFails.Inc()
		if failingSince.IsZero() {
			failingSince = time.Now()
			j.log.Warn("pending store update failed; retrying, new predictions are dropped once the queue is full", "predictions", len(batch), "err", err)
		}
		select {
		case <-j.closing:
			for _, p := range batch {
				j.m.dropped.WithLabelValues(p.Service).Inc()
			}
			j.log.Warn("pending store still failing at close; predictions dropped", "predictions", len(batch), "err", err)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxStoreRetry)
	}
}

// storePredictions writes a batch of predictions to the store, joining
// those whose outcome waits there.
func (j *Joiner) storePredictions(ctx context.Context, ps []*Prediction) error {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = storeKey(p.Service, p.Key)
	}
	look := j.opts.Lookback.Nanoseconds()
	joined := make([]*Outcome, len(ps))
	refused := make([]bool, len(ps))
	err := j.store.Update(ctx, keys, func(i int, old *Entry) *Entry {
		p := ps[i]
		joined[i], refused[i] = nil, false
		switch {
		case old == nil:
			return &Entry{Prediction: p, Service: p.Service, Expires: p.Time.UnixNano() + look}
		case old.Joined:
			return old // the key's outcome was counted with an earlier prediction
		case old.Outcome != nil && !old.Outcome.mayJudge(p):
			// Held before its prediction came, from a client that may not
			// judge it: dropped, so the owner's outcome can still join.
			refused[i] = true
			return &Entry{Prediction: p, Service: p.Service, Expires: p.Time.UnixNano() + look}
		case old.Outcome != nil:
			joined[i] = old.Outcome
			return &Entry{Joined: true, Service: p.Service, Expires: max(old.Expires, p.Time.UnixNano()+look)}
		default:
			// A newer prediction for the same key replaces the waiting one:
			// the outcome judges the last answer the caller got.
			if p.Time.Before(old.Prediction.Time) {
				return old
			}
			return &Entry{Prediction: p, Service: p.Service, Expires: p.Time.UnixNano() + look}
		}
	})
	if err != nil {
		return err
	}
	now := j.opts.Now()
	var pairs []joinedPair
	for i, o := range joined {
		if o != nil {
			pairs = append(pairs, joinedPair{ps[i], o})
		}
		if refused[i] {
			j.m.outcomes.WithLabelValues(ps[i].Service, ResultNotPermitted).Inc()
		}
	}
	j.count(pairs, now)
	j.m.pending.Set(float64(j.store.Len()))
	return nil
}

// joinedPair is a prediction and its outcome.
type joinedPair struct {
	p *Prediction
	o *Outcome
}

// Ingest joins outcomes to their predictions: one result per outcome, in
// order (ResultJoined, ResultHeld, ResultDuplicate, ResultTooLate,
// ResultInvalid, ResultNotPermitted). An outcome joins a prediction only
// when it may judge it (Outcome.Any, or posted by the prediction's
// Client); a held outcome that may not is dropped when its prediction
// arrives. The error is the store's; no result counts then.
func (j *Joiner) Ingest(ctx context.Context, outs []Outcome) ([]string, error) {
	now := j.opts.Now()
	results := make([]string, len(outs))
	var keys []string
	var idx []int
	for i := range outs {
		o := &outs[i]
		if o.Time.IsZero() {
			o.Time = now
		}
		o.Received = now
		if r := j.check(o, now); r != "" {
			results[i] = r
			continue
		}
		keys = append(keys, storeKey(o.Service, o.Key))
		idx = append(idx, i)
	}
	look := j.opts.Lookback.Nanoseconds()
	preds := make([]*Prediction, len(keys))
	err := j.store.Update(ctx, keys, func(k int, old *Entry) *Entry {
		i := idx[k]
		o := &outs[i]
		preds[k] = nil
		switch {
		case old == nil:
			results[i] = ResultHeld
			return &Entry{Outcome: o, Service: o.Service, Expires: o.Time.UnixNano() + look}
		case old.Joined || old.Outcome != nil:
			results[i] = ResultDuplicate
			return old
		case !o.mayJudge(old.Prediction):
			results[i] = ResultNotPermitted
			return old
		case o.Time.Sub(old.Prediction.Time) > j.opts.Lookback:
			results[i] = ResultTooLate
			return old
		default:
			results[i] = ResultJoined
			preds[k] = old.Prediction
			return &Entry{Joined: true, Service: o.Service, Expires: old.Expires}
		}
	})
	if err != nil {
		j.m.storeFails.Inc()
		return nil, err
	}
	var pairs []joinedPair
	for k, p := range preds {
		if p != nil {
			pairs = append(pairs, joinedPair{p, &outs[idx[k]]})
		}
	}
	j.count(pairs, now)
	for i := range outs {
		svc := outs[i].Service
		if _, ok := j.service(svc); !ok {
			svc = "_unknown"
		}
		j.m.outcomes.WithLabelValues(svc, results[i]).Inc()
	}
	j.m.pending.Set(float64(j.store.Len()))
	return results, nil
}

// check says why an outcome is refused before the store is asked, or "".
func (j *Joiner) check(o *Outcome, now time.Time) string {
	s, ok := j.service(o.Service)
	if !ok || o.Key == "" || len(o.Key) > maxKeyLen || o.Time.After(now.Add(maxFuture)) {
		return ResultInvalid
	}
	if now.Sub(o.Time) > j.opts.Lookback {
		return ResultTooLate
	}
	usable := false
	for _, out := range s.spec.Outputs {
		if v, ok := o.Values[out.Observed]; ok {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return ResultInvalid
			}
			usable = true
		}
	}
	if !usable {
		return ResultInvalid
	}
	return ""
}

// count counts joined pairs: the windows of every slice each falls in,
// the gate's sums, the label delay and the log's record; then it
// publishes the gauges of the series they touched, once each.
func (j *Joiner) count(pairs []joinedPair, now time.Time) {
	if len(pairs) == 0 {
		return
	}
	for _, jp := range pairs {
		if j.opts.Log != nil {
			j.opts.Log.Offer(predictionRecord(jp.p, nil, jp.o))
		}
		j.m.delay.WithLabelValues(jp.p.Service).Observe(max(jp.o.Received.Sub(jp.p.Time), 0).Seconds())
	}
	t := now.UnixNano()
	dirty := map[*series]*svc{}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, jp := range pairs {
		j.pair(jp.p, jp.o, t, dirty)
	}
	for se, s := range dirty {
		j.publish(s, se, t)
	}
}

// pair adds one joined pair to the windows and sums, and marks the
// series it touched. Callers hold mu.
func (j *Joiner) pair(p *Prediction, o *Outcome, t int64, dirty map[*series]*svc) {
	s, ok := j.service(p.Service)
	if !ok {
		return
	}
	s.joined[p.Version]++
	if n := s.logged[p.Version]; n > 0 {
		j.m.coverage.WithLabelValues(s.name, p.Version).Set(min(s.joined[p.Version]/n, 1))
	}
	slices := j.slicesOf(s, p)
	for oi := range s.spec.Outputs {
		out := &s.spec.Outputs[oi]
		pred, ok1 := p.Outputs[out.Name]
		obs, ok2 := o.Values[out.Observed]
		if !ok1 || !ok2 {
			continue
		}
		var add func(st *Stats)
		if out.Kind == accuracyspec.KindBinary {
			add = func(st *Stats) { st.addBinary(pred, obs, out.Threshold) }
		} else {
			lo, okl := p.Outputs[out.Lower]
			hi, okh := p.Outputs[out.Upper]
			has := out.Lower != "" && okl && okh
			add = func(st *Stats) { st.addRegression(pred, obs, lo, hi, has) }
		}
		for _, sl := range slices {
			se := s.seriesOf(p.Version, out.Name, sl)
			if se == nil {
				se = &series{version: p.Version, output: out.Name, slice: sl, w: newWindow(s.window.Nanoseconds(), windowSlots)}
				s.series[p.Version+"\x00"+out.Name+"\x00"+sl] = se
			}
			add(se.w.slot(t))
			j.m.joined.WithLabelValues(s.name, p.Version, out.Name, sl).Inc()
			dirty[se] = s
			if p.Group != "" {
				for _, g := range []string{p.Group, "*"} {
					k := gateKey(g, sl, p.Version, out.Name)
					st := s.gate[k]
					if st == nil {
						st = &Stats{}
						s.gate[k] = st
					}
					add(st)
				}
			}
		}
	}
}

func (s *svc) seriesOf(version, output, slice string) *series {
	return s.series[version+"\x00"+output+"\x00"+slice]
}

func gateKey(group, slice, version, output string) string {
	return group + "\x00" + slice + "\x00" + version + "\x00" + output
}

// otherValue is the slice value of a dimension's values past its cap.
const otherValue = "_other"

// slicesOf lists the slices p falls in: all, its route, its rollout
// group, and one per configured header. Callers hold mu.
func (j *Joiner) slicesOf(s *svc, p *Prediction) []string {
	out := make([]string, 0, 3+len(s.dims))
	out = append(out, "all")
	if p.Route != "" {
		out = append(out, "route="+j.capped(s, "route", p.Route))
	}
	if p.Group != "" {
		out = append(out, "group="+j.capped(s, "group", p.Group))
	}
	for _, d := range s.dims {
		v := p.Slices[d]
		if v == "" {
			v = "_none"
		}
		out = append(out, d+"="+j.capped(s, d, v))
	}
	return out
}

// capped returns v, or "_other" once dimension dim has MaxSliceValues
// values with series of their own. Callers hold mu.
func (j *Joiner) capped(s *svc, dim, v string) string {
	seen := s.values[dim]
	if seen == nil {
		seen = map[string]bool{}
		s.values[dim] = seen
	}
	if seen[v] {
		return v
	}
	if len(seen) >= s.spec.MaxSliceValues || len(v) > 64 {
		return otherValue
	}
	seen[v] = true
	return v
}

// publish sets a series' gauges from its window at t. Callers hold mu.
func (j *Joiner) publish(s *svc, se *series, t int64) {
	sum := se.w.sum(t)
	j.m.pairs.WithLabelValues(s.name, se.version, se.output, se.slice).Set(float64(sum.N))
	metricsOf := accuracyspec.RegressionMetrics
	if sum.binary {
		metricsOf = accuracyspec.BinaryMetrics
	}
	for _, name := range metricsOf {
		v, ok := sum.Metric(name)
		if !ok {
			j.m.online.DeleteLabelValues(s.name, se.version, se.output, se.slice, name)
			continue
		}
		j.m.online.WithLabelValues(s.name, se.version, se.output, se.slice, name).Set(v)
		if se.slice != "all" {
			continue
		}
		for _, off := range s.spec.Offline {
			if off.Version != se.version || off.Output != se.output {
				continue
			}
			if ov, ok := off.Metrics[name]; ok && ov != 0 {
				j.m.ratio.WithLabelValues(s.name, se.version, se.output, name).Set(v / ov)
			}
		}
	}
}

// refresh recomputes every rolling gauge at now, so that pairs leaving
// the window leave the gauges too.
func (j *Joiner) refresh() {
	t := j.opts.Now().UnixNano()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, s := range *j.services.Load() {
		for _, se := range s.series {
			j.publish(s, se, t)
		}
	}
	j.m.pending.Set(float64(j.store.Len()))
}

// Sweep drops the entries whose lookback ended and counts them.
func (j *Joiner) Sweep(ctx context.Context) {
	err := j.store.Sweep(ctx, j.opts.Now(), func(e *Entry) {
		j.m.expired.WithLabelValues(e.Service, e.Kind()).Inc()
	})
	if err != nil {
		j.log.Warn("pending store sweep failed", "err", err)
	}
	j.m.pending.Set(float64(j.store.Len()))
}

// Close stops taking predictions, stores the queued ones (itself when Run
// never started, else by waiting for Run's worker, bounded by ctx) and
// closes the store.
func (j *Joiner) Close(ctx context.Context) error {
	j.sendMu.Lock()
	if !j.closed {
		j.closed = true
		close(j.queue)
		close(j.closing)
	}
	j.sendMu.Unlock()
	var err error
	if j.runs.Load() {
		select {
		case <-j.done:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	} else {
		j.work()
	}
	return errors.Join(err, j.store.Close())
}

// Flush waits until every prediction offered before it was stored (or
// failed to be), for tests and the benchmark. It needs Run.
func (j *Joiner) Flush(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	want := j.offered.Load()
	for j.stored.Load() < want {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	return nil
}
