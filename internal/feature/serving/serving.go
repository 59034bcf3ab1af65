package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/infer"
)

// RepoSource hands out the current registry snapshot. A snapshot is
// immutable; a new one replaces it as a whole (registry.Holder does this).
type RepoSource interface {
	// Current returns the snapshot to serve, or nil when none is loaded.
	Current() *registry.Repo
}

// Defaults for Options fields left zero.
const (
	DefaultEventTimeTolerance = 5 * time.Minute
	DefaultStateCacheTTL      = time.Second
	DefaultAlertInterval      = time.Minute
	DefaultGaugeInterval      = 15 * time.Second
)

// Options tune a Server. The zero value is usable.
type Options struct {
	// Now is the clock that ages are measured against. Default time.Now.
	Now func() time.Time
	// EventTimeTolerance is how far past a request's event timestamp a
	// feature's own timestamp may be before the request is refused with
	// event_timestamp_too_old. Default DefaultEventTimeTolerance (5m);
	// negative means no tolerance.
	EventTimeTolerance time.Duration
	// StateCacheTTL is how long a view's freshness state (its ViewState)
	// is reused before it is read again from the store. Default 1s;
	// negative reads it on every request.
	StateCacheTTL time.Duration
	// AlertInterval is the least time between two stale_feature_alert
	// log events for the same view. Default 1m.
	AlertInterval time.Duration
	// GaugeInterval is how often Run refreshes the freshness gauges of
	// every online view. Default 15s.
	GaugeInterval time.Duration
	// FutureTolerance is how far in the future a pushed row's event or
	// created timestamp may be before the push is refused with
	// timestamp_in_future. Zero takes the repository's
	// future_timestamp_tolerance (default 5m); negative means no limit.
	FutureTolerance time.Duration
}

// Status is a returned value's status. Values and names are Feast's
// FieldStatus (ServingService.proto).
type Status uint8

// The statuses.
const (
	StatusInvalid       Status = 0
	StatusPresent       Status = 1 // the value is there and fresh
	StatusNullValue     Status = 2 // the row is there but the value is null
	StatusNotFound      Status = 3 // no row for the entity
	StatusOutsideMaxAge Status = 4 // the row is older than the view's ttl
)

var statusNames = [...]string{"INVALID", "PRESENT", "NULL_VALUE", "NOT_FOUND", "OUTSIDE_MAX_AGE"}

// String returns the Feast name, e.g. "OUTSIDE_MAX_AGE".
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "INVALID"
}

// Request is a GetOnlineFeatures request.
type Request struct {
	// Features are "view:feature" references, answered in this order.
	// Exactly one of Features and FeatureService is set.
	Features []string
	// FeatureService names a feature service whose features to read.
	FeatureService string
	// Entities are the entity rows as columns, by join key; every column
	// has the same length. An Int32/Int64 key's values are in Value.I64,
	// a String key's in Value.S, a Bytes key's in Value.B.
	Entities map[string][]feature.Value
	// FullFeatureNames names feature columns "view__feature" instead of
	// "feature".
	FullFeatureNames bool
	// EventTimestamp, when set, is the time the request is about: a
	// feature whose event timestamp is later than it (plus the tolerance)
	// makes the request fail with event_timestamp_too_old.
	EventTimestamp *time.Time
}

// Column is one response column; element j belongs to entity row j.
type Column struct {
	Values          []feature.Value
	Statuses        []Status
	EventTimestamps []time.Time
}

// Response is a GetOnlineFeatures answer, column-oriented like Feast's:
// Results[i] is the column named FeatureNames[i]. The first EntityColumns
// columns echo the request's join keys (status PRESENT, timestamp the
// Unix epoch); the feature columns follow in request order.
type Response struct {
	FeatureNames  []string
	Types         []feature.Type
	EntityColumns int
	Results       []Column
}

// epoch is the event timestamp of entity columns and missing values.
var epoch = time.Unix(0, 0).UTC()

// Server serves online feature reads and pushes from one online store. It
// is safe for concurrent use.
type Server struct {
	repos   RepoSource
	store   online.Store
	opts    Options
	logger  *slog.Logger
	metrics *metrics
	plans   planCache
	states  stateCache
	layouts layoutCache
	schemas online.SchemaRecorder
	// statusCounters are metrics.values resolved per status.
	statusCounters [len(statusNames)]prometheus.Counter

	alertMu        sync.Mutex // protects lastAlert and lastUnreadable
	lastAlert      map[string]time.Time
	lastUnreadable map[string]time.Time // view + "\x00" + reason

	// Per-request scratch, reused to keep the read path's allocations
	// (and so GC pauses in its tail latency) down.
	selBufs sync.Pool // *[]byte: plan cache keys
	scratch sync.Pool // *readScratch
}

// Bounds on what goes back to the scratch pools, so one huge request does
// not pin its buffers for good.
const (
	maxPooledSelKey = 64 << 10
	maxPooledRows   = 1 << 14
)

// readScratch is one read's working memory; nothing in it outlives the
// read or reaches the response.
type readScratch struct {
	entBuf []byte           // entity keys, back to back
	ents   [][]byte         // ents[si*n+r]: key set si's key of entity row r
	vals   []feature.Value  // one row's join-key values
	keys   []online.Key     // the store keys to read
	hotIdx []int            // hotIdx[vi*n+r]: row r of view vi in keys, or -1
	dst    []*feature.Value // one stored row's decode destinations
}

func (s *Server) getScratch() *readScratch {
	if sc, ok := s.scratch.Get().(*readScratch); ok {
		return sc
	}
	return &readScratch{}
}

// putScratch drops what sc references and pools it again.
func (s *Server) putScratch(sc *readScratch) {
	if len(sc.keys) > maxPooledRows || len(sc.ents) > maxPooledRows || cap(sc.entBuf) > maxPooledRows*64 {
		return
	}
	clear(sc.ents)
	clear(sc.vals)
	clear(sc.keys)
	clear(sc.dst)
	sc.entBuf, sc.ents, sc.vals, sc.keys, sc.hotIdx, sc.dst = sc.entBuf[:0], sc.ents[:0], sc.vals[:0], sc.keys[:0], sc.hotIdx[:0], sc.dst[:0]
	s.scratch.Put(sc)
}

// grow returns s resized to n elements, reusing its array when it can;
// the elements are not cleared.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// New builds a Server reading repos' current snapshot and store. A nil
// logger discards; a nil registerer leaves the metrics unregistered.
func New(repos RepoSource, store online.Store, opts Options, logger *slog.Logger, reg prometheus.Registerer) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	switch {
	case opts.EventTimeTolerance == 0:
		opts.EventTimeTolerance = DefaultEventTimeTolerance
	case opts.EventTimeTolerance < 0:
		opts.EventTimeTolerance = 0
	}
	if opts.StateCacheTTL == 0 {
		opts.StateCacheTTL = DefaultStateCacheTTL
	}
	if opts.AlertInterval <= 0 {
		opts.AlertInterval = DefaultAlertInterval
	}
	if opts.GaugeInterval <= 0 {
		opts.GaugeInterval = DefaultGaugeInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		repos:     repos,
		store:     store,
		opts:      opts,
		logger:    logger.With("component", "feature_serving"),
		metrics:   newMetrics(reg),
		lastAlert: make(map[string]time.Time),

		lastUnreadable: make(map[string]time.Time),
	}
	s.states.m = make(map[string]stateEntry)
	s.selBufs.New = func() any { return new([]byte) }
	for i, n := range statusNames {
		s.statusCounters[i] = s.metrics.values.WithLabelValues(n)
	}
	return s
}

// GetOnlineFeatures reads the requested features of the request's entity
// rows. Errors are *infer.Error: KindInvalid for bad requests (reasons
// unknown_feature, unknown_feature_view, unknown_feature_service,
// unknown_entity_key, missing_entity_key, invalid_entity_value,
// event_timestamp_too_old, ...) and KindUnavailable for a stale view
// (feature_view_stale) or an unreachable store (online_store_unavailable).
func (s *Server) GetOnlineFeatures(ctx context.Context, req *Request) (*Response, error) {
	start := time.Now()
	resp, err := s.getOnlineFeatures(ctx, req)
	s.observe(start, err)
	return resp, err
}

func (s *Server) observe(start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		outcome = ReasonInternal
		if ie, ok := errors.AsType[*infer.Error](err); ok && ie.Reason != "" {
			outcome = ie.Reason
		} else if errors.Is(err, context.Canceled) {
			outcome = "canceled"
		} else if errors.Is(err, context.DeadlineExceeded) {
			outcome = "deadline_exceeded"
		}
	}
	s.metrics.reads.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
}

func (s *Server) getOnlineFeatures(ctx context.Context, req *Request) (*Response, error) {
	p, err := s.plan(req.Features, req.FeatureService, req.FullFeatureNames)
	if err != nil {
		return nil, err
	}
	return s.read(ctx, p, req.Entities, req.EventTimestamp)
}

// plan returns the compiled plan of a feature selection against the
// current registry snapshot.
func (s *Server) plan(features []string, service string, full bool) (*plan, error) {
	repo := s.repos.Current()
	if repo == nil {
		return nil, unavailablef(ReasonRegistryNotLoaded, "no feature registry is loaded")
	}
	bp := s.selBufs.Get().(*[]byte)
	p, buf, err := s.plans.get(repo, features, service, full, *bp)
	if cap(buf) <= maxPooledSelKey {
		*bp = buf[:0]
		s.selBufs.Put(bp)
	}
	return p, err
}

// storeError classifies an online store failure.
func storeError(op string, err error) error {
	if errors.Is(err, online.ErrUnavailable) {
		return &infer.Error{Kind: infer.KindUnavailable, Reason: ReasonStoreUnavailable, Msg: op, Err: err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return &infer.Error{Kind: infer.KindInternal, Reason: ReasonInternal, Msg: op, Err: err}
}

// checkEntities validates the entity columns against p and returns the
// number of rows.
func checkEntities(p *plan, entities map[string][]feature.Value) (int, error) {
	n := -1
	first := ""
	for _, k := range p.keys {
		col, ok := entities[k.name]
		if !ok {
			return 0, invalidf(ReasonMissingEntityKey, "missing entity key '%s': the requested features need it", k.name)
		}
		if n < 0 {
			n, first = len(col), k.name
		} else if len(col) != n {
			return 0, invalidf(ReasonEntityLengthMismatch, "entity key '%s' has %d values but '%s' has %d: every entity column needs one value per row", k.name, len(col), first, n)
		}
		for i := range col {
			if col[i].Null {
				return 0, invalidf(ReasonInvalidEntityValue, "entity key '%s' value %d is null", k.name, i)
			}
		}
	}
	if len(entities) > len(p.keys) {
		for name := range entities {
			known := false
			for _, k := range p.keys {
				if k.name == name {
					known = true
					break
				}
			}
			if !known {
				return 0, invalidf(ReasonUnknownEntityKey, "unknown entity key '%s': no requested feature view is keyed by it", name)
			}
		}
	}
	return max(n, 0), nil
}

// read answers a compiled request.
func (s *Server) read(ctx context.Context, p *plan, entities map[string][]feature.Value, eventTS *time.Time) (*Response, error) {
	n, err := checkEntities(p, entities)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	for i := range p.views {
		if err := s.checkView(ctx, p.views[i].view, now); err != nil {
			return nil, err
		}
	}

	sc := s.getScratch()
	defer s.putScratch(sc)

	// Entity keys, once per distinct join-key combination.
	sc.ents = grow(sc.ents, len(p.keySets)*n)
	buf := sc.entBuf[:0]
	for si, set := range p.keySets {
		vals := grow(sc.vals, len(set))
		sc.vals = vals
		for r := range n {
			for j, ki := range set {
				vals[j] = entities[p.keys[ki].name][r]
			}
			start := len(buf)
			if buf, err = feature.AppendEntityKey(buf, p.setKinds[si], vals); err != nil {
				sc.entBuf = buf
				return nil, invalidf(ReasonInvalidEntityValue, "entity row %d: %v", r, err)
			}
			sc.ents[si*n+r] = buf[start:] // re-sliced below, once buf stops growing
		}
	}
	sc.entBuf = buf
	// Rebuild the slices now that buf no longer moves.
	off := 0
	for i, e := range sc.ents {
		l := len(e)
		sc.ents[i] = buf[off : off+l : off+l]
		off += l
	}
	ents := func(si, r int) []byte { return sc.ents[si*n+r] }

	// One read for every (view, entity) row: the cold rows of each view in
	// order, then the hot rows.
	nkeys := len(p.views) * n
	anyHot := false
	for _, vp := range p.views {
		if vp.hot != nil {
			nkeys += n
			anyHot = true
		}
	}
	keys := slices.Grow(sc.keys[:0], nkeys)
	for _, vp := range p.views {
		for r := range n {
			keys = append(keys, online.Key{View: vp.view.Name, Entity: ents(vp.keySet, r)})
		}
	}
	var hotIdx []int
	if anyHot {
		hotIdx = grow(sc.hotIdx, len(p.views)*n)
		sc.hotIdx = hotIdx
	}
	for vi, vp := range p.views {
		if vp.hot == nil {
			continue
		}
		for r := range n {
			e := ents(vp.keySet, r)
			if vp.hot.members != nil {
				if _, ok := vp.hot.members[string(e)]; !ok {
					hotIdx[vi*n+r] = -1
					continue
				}
			}
			hotIdx[vi*n+r] = len(keys)
			keys = append(keys, online.Key{View: vp.hot.view, Entity: e})
		}
	}
	sc.keys = keys
	var results []online.Result
	if len(keys) > 0 {
		results, err = s.store.Read(ctx, keys)
		if err != nil {
			return nil, storeError("read online features", err)
		}
		if len(results) != len(keys) {
			return nil, infer.Errorf(infer.KindInternal, ReasonInternal, "online store answered %d rows for %d keys", len(results), len(keys))
		}
	}

	resp := &Response{
		FeatureNames:  p.names,
		Types:         p.types,
		EntityColumns: len(p.keys),
		Results:       make([]Column, len(p.names)),
	}
	// One allocation per kind of slice for all columns.
	statuses := make([]Status, n*len(p.names))
	stamps := make([]time.Time, n*len(p.names))
	values := make([]feature.Value, n*len(p.cols))
	for i := range p.names {
		c := Column{Statuses: statuses[i*n : (i+1)*n : (i+1)*n], EventTimestamps: stamps[i*n : (i+1)*n : (i+1)*n]}
		if i < len(p.keys) {
			c.Values = entities[p.keys[i].name]
			for r := range n {
				c.Statuses[r] = StatusPresent
				c.EventTimestamps[r] = epoch
			}
		} else {
			ci := i - len(p.keys)
			c.Values = values[ci*n : (ci+1)*n : (ci+1)*n]
		}
		resp.Results[i] = c
	}

	var counts [len(statusNames)]int
	limit := time.Time{}
	if eventTS != nil {
		limit = eventTS.Add(s.opts.EventTimeTolerance)
	}
	for vi := range p.views {
		vp := &p.views[vi]
		v := vp.view
		var hits, misses int
		for r := range n {
			res := results[vi*n+r]
			if vp.hot != nil {
				// Only hot members are looked up there; a member whose
				// hot row is missing, past the hot ttl or older than the
				// cold row (a push reached the cold view first) falls
				// back to the cold row.
				if hi := hotIdx[vi*n+r]; hi >= 0 {
					hot := results[hi]
					if hot.Found && (vp.hot.ttl <= 0 || now.Sub(time.Unix(0, hot.Record.EventTS)) <= vp.hot.ttl) &&
						(!res.Found || !res.Record.Newer(hot.Record)) {
						res = results[hi]
						hits++
					} else {
						misses++
					}
				}
			}
			if !res.Found {
				for ci, c := range p.cols {
					if c.view != vi {
						continue
					}
					col := &resp.Results[len(p.keys)+ci]
					col.Values[r] = feature.Value{Null: true}
					col.Statuses[r] = StatusNotFound
					col.EventTimestamps[r] = epoch
					counts[StatusNotFound]++
				}
				continue
			}
			// Decode straight into the response columns. A row written
			// with another schema decodes with that schema, by feature
			// name (never by position): its features that the current
			// schema lacks are skipped, and current features it lacks,
			// or has with another type, read NOT_FOUND.
			var lay *rowLayout
			rowSchema := v.Schema
			if res.Record.Schema != vp.schema {
				if lay, err = s.layout(ctx, vp, res.Record.Schema, now); err != nil {
					return nil, err
				}
				rowSchema = lay.m.Old
			}
			dst := grow(sc.dst, len(rowSchema))
			sc.dst = dst
			for fi := range rowSchema {
				ci := -1
				switch {
				case lay == nil:
					ci = vp.fieldCols[fi]
				case lay.m.ToCur[fi] >= 0:
					ci = vp.fieldCols[lay.m.ToCur[fi]]
				}
				if ci < 0 {
					dst[fi] = nil
				} else {
					dst[fi] = &resp.Results[len(p.keys)+ci].Values[r]
				}
			}
			var corrupt error
			if rowSchema != nil {
				// A row that does not decode is not a request error: the
				// other rows still answer, and its values read NOT_FOUND.
				corrupt = feature.DecodeValuesInto(res.Record.Payload, rowSchema, dst)
			}
			// Values of an unknown schema or a corrupt row are not used.
			usable := corrupt == nil && rowSchema != nil
			ev := time.Unix(0, res.Record.EventTS).UTC()
			expired := v.TTL > 0 && now.Sub(ev) > v.TTL
			withheld := expired && v.StalePolicy == feature.StaleWithhold
			if eventTS != nil && usable && !withheld && ev.After(limit) {
				return nil, &infer.Error{Kind: infer.KindInvalid, Reason: ReasonEventTimestampTooOld, Msg: fmt.Sprintf(
					"feature view '%s', entity row %d: the stored row is from %s, after the request's event_timestamp %s plus the %s tolerance: the request would use data from its own future",
					v.Name, r, ev.Format(time.RFC3339Nano), eventTS.UTC().Format(time.RFC3339Nano), s.opts.EventTimeTolerance)}
			}
			for ci, c := range p.cols {
				if c.view != vi {
					continue
				}
				col := &resp.Results[len(p.keys)+ci]
				why := ""
				switch {
				case corrupt != nil:
					why = unreadableCorrupt
				case lay != nil:
					why = lay.reason(c.field)
				}
				if why != "" {
					col.Values[r] = feature.Value{Null: true}
					col.Statuses[r] = StatusNotFound
					col.EventTimestamps[r] = epoch
					counts[StatusNotFound]++
					s.unreadable(v.Name, why, res.Record.Schema, corrupt, now)
					continue
				}
				st := StatusPresent
				switch {
				case expired:
					st = StatusOutsideMaxAge
					if withheld {
						col.Values[r] = feature.Value{Null: true}
					}
				case col.Values[r].Null:
					st = StatusNullValue
				}
				col.Statuses[r] = st
				col.EventTimestamps[r] = ev
				counts[st]++
			}
		}
		if vp.hot != nil {
			if hits > 0 {
				s.metrics.hotReads.WithLabelValues(v.Name, "hit").Add(float64(hits))
			}
			if misses > 0 {
				s.metrics.hotReads.WithLabelValues(v.Name, "miss").Add(float64(misses))
			}
		}
	}
	for st, c := range counts {
		if c > 0 {
			s.statusCounters[st].Add(float64(c))
		}
	}
	return resp, nil
}
