package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
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
	// RequestContext is request data for on-demand feature views, by
	// field name, one value per entity row (Feast's request_context;
	// request fields may also be given in Entities). Fields that no
	// requested on-demand view reads are ignored.
	RequestContext map[string][]feature.Value
}

// Column is one response column; element j belongs to entity row j.
type Column struct {
	Values          []feature.Value
	Statuses        []Status
	EventTimestamps []time.Time
	// Unreadable is nil unless a value is NOT_FOUND although its entity's
	// row exists: then Unreadable[j] is why (not_in_row, retyped,
	// unknown_schema, corrupt_row: a schema change not yet materialized,
	// or damage), "" for the others. In-process readers (the gateway) use
	// it to tell "no such entity" from "the stored value cannot be read";
	// the wire APIs answer NOT_FOUND, as Feast does.
	Unreadable []string
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

	// mem is the pooled memory this response was built in (nil when it
	// was not): see Server.release.
	mem *respMem
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
	// respMems holds response memory that the edges gave back once
	// they had encoded the response (release).
	respMems [len(memClassCells)]sync.Pool // *respMem, by size class
}

// Bounds on what goes back to the scratch pools, so one huge request does
// not pin its buffers for good.
const (
	maxPooledSelKey = 64 << 10
	maxPooledRows   = 1 << 14
)

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
// rows. Errors are *apierr.Error: KindInvalid for bad requests (reasons
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
		if ie, ok := errors.AsType[*apierr.Error](err); ok && ie.Reason != "" {
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
	return s.read(ctx, p, p.withContext(req.Entities, req.RequestContext), req.EventTimestamp)
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
		return &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonStoreUnavailable, Msg: op, Err: err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return &apierr.Error{Kind: apierr.KindInternal, Reason: ReasonInternal, Msg: op, Err: err}
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
