package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// TileSchema is the schema id of stored tile rows: never a view's own
// schema, so nothing reads tiles as feature values.
var TileSchema = feature.Fingerprint([]feature.Field{{Name: "__stream_tiles__", Type: feature.Type{Kind: feature.KindBytes}}})

// Options tune an Aggregator.
type Options struct {
	Batch int           // events per fetch (default 500)
	Wait  time.Duration // longest wait for a fetch (default 1s)
	// PruneMargin is how many tiles beyond the longest window are kept,
	// for readers whose clocks lag the aggregator's (default 2).
	PruneMargin int64
	// MaxAttempts bounds the compare-and-set retries of one batch
	// (default 50); past it the batch is not acknowledged and comes back.
	MaxAttempts int
	Now         func() time.Time
}

func (o *Options) defaults() {
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.Wait <= 0 {
		o.Wait = time.Second
	}
	if o.PruneMargin <= 0 {
		o.PruneMargin = 2
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 50
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Aggregator applies one stream source's events to the tiles of every
// online stream feature view that reads it.
type Aggregator struct {
	opts    Options
	src     Source
	store   online.Store
	views   []*viewAgg
	m       *metrics
	logger  *slog.Logger
	stateAt time.Time // last ViewState write
}

type viewAgg struct {
	view   *feature.View
	spec   *aggregate.Spec
	dec    *aggregate.Decoder
	newest int64 // newest applied event time
	dirty  bool  // applied something since the last ViewState write
	counts [5]int64
}

// Views returns the names of the stream feature views that read source.
func Views(repo *registry.Repo, source string) []string {
	var out []string
	for name, v := range repo.Views {
		if v.Stream != nil && v.Source == source && v.Online {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// New returns an aggregator of repo's stream source source, reading src
// and writing store.
func New(repo *registry.Repo, source string, src Source, store online.Store, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Aggregator, error) {
	opts.defaults()
	s := repo.Sources[source]
	if s == nil || s.Kind != feature.SourceStream {
		return nil, fmt.Errorf("'%s' is not a stream source of the repository", source)
	}
	a := &Aggregator{opts: opts, src: src, store: store, m: newMetrics(reg), logger: logger}
	for _, name := range Views(repo, source) {
		v := repo.Views[name]
		spec := repo.StreamSpec(name)
		keys, kinds := repo.JoinKeys(name)
		fields := map[string]string{}
		for col, to := range s.FieldMapping {
			fields[to] = col
		}
		a.views = append(a.views, &viewAgg{view: v, spec: spec, dec: aggregate.NewDecoder(spec, s.TimestampField, keys, kinds, fields)})
	}
	if len(a.views) == 0 {
		return nil, fmt.Errorf("no online stream feature view reads source '%s'", source)
	}
	return a, nil
}

// Run consumes events until ctx ends: fetch a batch, apply it, and
// acknowledge it once its tiles are written. A batch that fails is not
// acknowledged and is delivered again.
func (a *Aggregator) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		msgs, err := a.src.Fetch(ctx, a.opts.Batch, a.opts.Wait)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			a.logger.Warn("fetch stream events", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		if len(msgs) == 0 {
			a.flushState(ctx, false)
			continue
		}
		if err := a.Apply(ctx, msgs); err != nil {
			if ctx.Err() != nil {
				break
			}
			a.logger.Warn("apply stream events (they will be delivered again)", "events", len(msgs), "err", err)
			sleep(ctx, time.Second)
			continue
		}
		if err := a.src.Ack(ctx, msgs); err != nil {
			a.logger.Warn("acknowledge stream events (they will be delivered again, and not counted twice)", "err", err)
		}
		a.flushState(ctx, false)
	}
	a.flushState(context.WithoutCancel(ctx), true)
	return nil //nolint:nilerr // ctx ended: a shutdown, not a failure (fetch and apply errors are retried)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// The outcome label values, by index.
var outcomes = [...]string{
	aggregate.Applied: "applied", aggregate.Duplicate: "duplicate", aggregate.Late: "late", aggregate.Expired: "expired", 4: "malformed",
}

const malformed = 4

// pending is one (view, entity) of a batch: its events and the state
// last written for it.
type pending struct {
	va      *viewAgg
	key     online.Key
	evs     []aggregate.Event
	payload []byte // what this batch wrote; nil when nothing to write
	done    bool
	counts  [5]int64
}

// Apply applies msgs to the tiles and returns once every changed tile is
// stored.
func (a *Aggregator) Apply(ctx context.Context, msgs []Message) error {
	byKey := map[string]*pending{}
	var order []*pending
	for vi, va := range a.views {
		var key []byte
		for _, m := range msgs {
			ev := aggregate.Event{Seq: m.Seq, Arrival: m.Arrival}
			var err error
			key, err = va.dec.Decode(m.Data, &ev, key[:0])
			if err != nil {
				va.counts[malformed]++
				a.m.events.WithLabelValues(va.view.Name, outcomes[malformed]).Inc()
				if va.counts[malformed] <= 10 || va.counts[malformed]%1000 == 0 {
					a.logger.Warn("malformed stream event dropped", "view", va.view.Name, "seq", m.Seq, "err", err)
				}
				continue
			}
			id := strconv.Itoa(vi) + "\x00" + string(key)
			p := byKey[id]
			if p == nil {
				p = &pending{va: va, key: online.Key{View: va.view.Name, Entity: bytes.Clone(key)}}
				byKey[id] = p
				order = append(order, p)
			}
			p.evs = append(p.evs, ev)
		}
	}
	left := order
	for attempt := 0; len(left) > 0; attempt++ {
		if attempt == a.opts.MaxAttempts {
			return fmt.Errorf("%d entities still conflict after %d attempts", len(left), attempt)
		}
		if err := a.attempt(ctx, left); err != nil {
			return err
		}
		var again []*pending
		for _, p := range left {
			if !p.done {
				again = append(again, p)
				a.m.conflict.WithLabelValues(p.va.view.Name).Inc()
			}
		}
		left = again
	}
	now := a.opts.Now()
	for _, p := range order {
		va := p.va
		for o, c := range p.counts {
			if c > 0 {
				va.counts[o] += c
				a.m.events.WithLabelValues(va.view.Name, outcomes[o]).Add(float64(c))
			}
		}
		if p.counts[aggregate.Applied] > 0 {
			va.dirty = true
			for _, ev := range p.evs {
				va.newest = max(va.newest, ev.Time)
			}
		}
	}
	for _, va := range a.views {
		if va.newest > 0 {
			a.m.newest.WithLabelValues(va.view.Name).Set(float64(va.newest) / 1e9)
			a.m.lag.WithLabelValues(va.view.Name).Set(now.Sub(time.Unix(0, va.newest)).Seconds())
		}
	}
	return nil
}

// attempt reads the states of ps, applies their events and writes the
// changed ones with a compare-and-set on the version; the entries whose
// write lost to another process stay not done.
func (a *Aggregator) attempt(ctx context.Context, ps []*pending) error {
	keys := make([]online.Key, len(ps))
	for i, p := range ps {
		keys[i] = p.key
	}
	res, err := a.store.Read(ctx, keys)
	if err != nil {
		return fmt.Errorf("read tiles: %w", err)
	}
	if len(res) != len(keys) {
		return fmt.Errorf("read tiles: %d rows for %d keys", len(res), len(keys))
	}
	now := a.opts.Now().UnixNano()
	var entries []online.Entry
	var writing []*pending
	for i, p := range ps {
		st := aggregate.NewState()
		if res[i].Found {
			if res[i].Record.Schema != TileSchema {
				return fmt.Errorf("view '%s': a stored row is not stream tiles (schema %s)", p.key.View, res[i].Record.Schema)
			}
			if st, err = aggregate.Decode(res[i].Record.Payload, p.va.spec); err != nil {
				return fmt.Errorf("view '%s': stored tiles: %w", p.key.View, err)
			}
		}
		p.counts = [5]int64{}
		for j := range p.evs {
			p.counts[st.Apply(p.va.spec, &p.evs[j])]++
		}
		if p.counts[aggregate.Applied] == 0 {
			p.done, p.payload = true, nil
			continue
		}
		st.Prune(p.va.spec, now, a.opts.PruneMargin)
		st.Version++
		p.payload = st.Append(nil, p.va.spec)
		entries = append(entries, online.Entry{Key: p.key, Record: feature.Record{EventTS: int64(st.Version), Schema: TileSchema, Payload: p.payload}})
		writing = append(writing, p)
	}
	if len(entries) == 0 {
		return nil
	}
	stats, err := a.store.Write(ctx, entries, online.WriteOptions{})
	if err != nil {
		return fmt.Errorf("write tiles: %w", err)
	}
	if stats.Skipped == 0 {
		for _, p := range writing {
			p.done = true
		}
		return nil
	}
	// Some writes lost the compare-and-set: the ones whose stored row is
	// not what this batch wrote are retried on the new state.
	for i, p := range writing {
		keys[i] = p.key
	}
	res, err = a.store.Read(ctx, keys[:len(writing)])
	if err != nil {
		return fmt.Errorf("read tiles back: %w", err)
	}
	for i, p := range writing {
		p.done = res[i].Found && bytes.Equal(res[i].Record.Payload, p.payload)
	}
	return nil
}

// flushState records each view's ViewState (newest event time, last
// success) at most once a second, or now when force is set.
func (a *Aggregator) flushState(ctx context.Context, force bool) {
	now := a.opts.Now()
	if !force && now.Sub(a.stateAt) < time.Second {
		return
	}
	a.stateAt = now
	for _, va := range a.views {
		if !va.dirty {
			continue
		}
		name := feature.ViewStateName(va.view.Name)
		var st feature.ViewState
		if b, err := a.store.GetMeta(ctx, name); err == nil && b != nil {
			_ = json.Unmarshal(b, &st) // a broken state is replaced
		}
		if nt := time.Unix(0, va.newest).UTC(); nt.After(st.NewestEventTS) {
			st.NewestEventTS = nt
		}
		st.LastSuccess = now.UTC()
		st.Watermark = now.UTC()
		st.Rows = va.counts[aggregate.Applied]
		b, _ := json.Marshal(st)
		if err := a.store.PutMeta(ctx, name, b); err != nil {
			a.logger.Warn("record stream feature view state", "view", va.view.Name, "err", err)
			continue
		}
		va.dirty = false
	}
}

// Counts returns how many events of each outcome the aggregator has
// handled for view ("applied", "duplicate", "late", "expired",
// "malformed").
func (a *Aggregator) Counts(view string) map[string]int64 {
	for _, va := range a.views {
		if va.view.Name == view {
			out := map[string]int64{}
			for i, c := range va.counts {
				out[outcomes[i]] = c
			}
			return out
		}
	}
	return nil
}
