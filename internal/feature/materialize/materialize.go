// Package materialize copies feature views from their offline sources into
// the online store: for each view, the latest row per entity in a time
// window.
//
// Runs are idempotent and never move a value backwards in time: the online
// store keeps a row only when it is newer than the stored one (by event
// timestamp, then created timestamp), so running the same window twice
// writes nothing the second time and an earlier window cannot replace
// newer values. Overwrite turns the guard off to correct history.
//
// Each view's state (feature.ViewState: watermark, last success, newest
// event timestamp) is kept in the online store's metadata and written only
// after all of the view's rows are written. The watermark is clamped to
// the time of the run, so a window ending in the future cannot make later
// incremental runs skip data.
//
// Memory: a run keeps one encoded row per distinct entity of the view in
// the window (its key and payload) and nothing per source row, so memory
// grows with the number of entities, not with the size of the source.
package materialize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// DefaultBatchSize is how many rows go to the online store per Write when
// Options.BatchSize is zero.
const DefaultBatchSize = 2000

// neverMaterializedLookback is how far back an incremental run of a view
// that was never materialized and has no TTL starts (Feast's 52 weeks).
const neverMaterializedLookback = 52 * 7 * 24 * time.Hour

// Options tune a Materializer.
type Options struct {
	// Now is the clock; nil means time.Now. Windows are clamped to it.
	Now func() time.Time
	// BatchSize is how many rows go to the online store per Write
	// (DefaultBatchSize when zero).
	BatchSize int
	// Progress, when set, receives a one-line progress display per view
	// (rows read and rows/s): redrawn in place on a terminal, one line a
	// second otherwise.
	Progress io.Writer
	// Pushgateway, when set, is the URL of a Prometheus Pushgateway that
	// receives each materialized view's freshness gauges after a run.
	Pushgateway string
	// LateOverlap starts incremental runs this long before the watermark,
	// so rows that arrived late (with event timestamps before the last
	// run's end) are still picked up. Re-reading the overlap is harmless:
	// rows already stored are skipped.
	LateOverlap time.Duration
	// FutureTolerance is how far past the time of the run a source row's
	// event or created timestamp may be; rows beyond it are skipped and
	// counted (ViewReport.Future), never stored. Zero takes the
	// repository's future_timestamp_tolerance (default 5m); negative
	// means no limit.
	FutureTolerance time.Duration
}

// ViewReport is what a run did for one view.
type ViewReport struct {
	View       string
	Start, End time.Time // the window read (End clamped to the time of the run)
	RowsRead   int64     // source rows in the window
	Entities   int64     // distinct entities in the window: rows offered to the store
	Written    int64     // rows the store kept
	Skipped    int64     // rows the store already had, or had newer
	HotWritten int64     // rows written to the view's hot subset
	// Future counts source rows skipped because their event or created
	// timestamp is more than the future tolerance past the time of the
	// run. Rows after the window's end are only read, and counted, when
	// the window reaches the time of the run.
	Future int64
	// SchemaChanged is set when an incremental run found the view's
	// schema changed since its last run and re-read its whole window to
	// rewrite the rows of the old schema.
	SchemaChanged bool
	Duration      time.Duration
	// Note explains a view that was not materialized (offline-only, or
	// nothing to do); empty otherwise.
	Note string
	// Err is the view's failure, nil when it succeeded.
	Err error
}

// viewReportJSON is ViewReport's JSON form: snake_case keys like the rest
// of the HTTP API, the duration in seconds and the error as its message.
type viewReportJSON struct {
	View            string     `json:"view"`
	Start           *time.Time `json:"start,omitempty"`
	End             *time.Time `json:"end,omitempty"`
	RowsRead        int64      `json:"rows_read"`
	Entities        int64      `json:"entities"`
	Written         int64      `json:"written"`
	Skipped         int64      `json:"skipped"`
	HotWritten      int64      `json:"hot_written"`
	Future          int64      `json:"future,omitempty"`
	SchemaChanged   bool       `json:"schema_changed,omitempty"`
	DurationSeconds float64    `json:"duration_seconds"`
	RowsPerSecond   float64    `json:"rows_per_second"`
	Note            string     `json:"note,omitempty"`
	Error           string     `json:"error,omitempty"`
}

// MarshalJSON writes the report with snake_case keys ("rows_read",
// "duration_seconds", ...); a zero window (an offline-only view) is left
// out and Err becomes "error", its message.
func (r ViewReport) MarshalJSON() ([]byte, error) {
	j := viewReportJSON{
		View: r.View, RowsRead: r.RowsRead, Entities: r.Entities, Written: r.Written, Skipped: r.Skipped,
		HotWritten: r.HotWritten, Future: r.Future, SchemaChanged: r.SchemaChanged, DurationSeconds: r.Duration.Seconds(), RowsPerSecond: r.RowsPerSecond(), Note: r.Note,
	}
	if !r.Start.IsZero() || !r.End.IsZero() {
		start, end := r.Start.UTC(), r.End.UTC()
		j.Start, j.End = &start, &end
	}
	if r.Err != nil {
		j.Error = r.Err.Error()
	}
	return json.Marshal(j)
}

// RowsPerSecond is the view's source read rate.
func (r ViewReport) RowsPerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.RowsRead) / r.Duration.Seconds()
}

// Report is what a run did, one entry per selected view in name order.
type Report struct {
	Views []ViewReport `json:"views"`
}

// scanFunc streams a view's source rows with event timestamps in
// [start, end]; offline.ScanView in production.
type scanFunc func(ctx context.Context, repo *registry.Repo, view *feature.View, start, end time.Time, fn func(offline.Row) error) error

// Materializer copies feature views into an online store. It is safe for
// concurrent use, but concurrent runs over the same view race on its state.
type Materializer struct {
	repo  *registry.Repo
	store online.Store
	opts  Options
	log   *slog.Logger
	met   *metrics
	scan  scanFunc
	// schemas records the schemas of the rows written (once per view and
	// schema for this Materializer).
	schemas online.SchemaRecorder
}

// New returns a Materializer for repo's views writing to store. A nil
// logger discards; a nil registerer leaves the metrics unregistered.
func New(repo *registry.Repo, store online.Store, opts Options, logger *slog.Logger, reg prometheus.Registerer) *Materializer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Materializer{
		repo:  repo,
		store: store,
		opts:  opts,
		log:   logger,
		met:   newMetrics(reg),
		scan:  offline.ScanView,
	}
}

// Run materializes views (all views when empty) over [start, end], end
// clamped to now. Offline-only views are reported and skipped. A view that
// fails is reported with its error and leaves its state untouched; the
// others still run, and the returned error joins the failures. With
// overwrite, stored rows are replaced even when newer and the watermark
// may move backwards.
func (m *Materializer) Run(ctx context.Context, start, end time.Time, views []string, overwrite bool) (Report, error) {
	if end.Before(start) {
		return Report{}, apierr.Errorf(apierr.KindInvalid, ReasonInvalidWindow, "materialize: end %s is before start %s", fmtTime(end), fmtTime(start))
	}
	sel, err := m.selectViews(views)
	if err != nil {
		return Report{}, err
	}
	now := m.opts.Now().UTC()
	end = minTime(end, now)
	return m.runEach(ctx, sel, func(v *feature.View) (ViewReport, error) {
		if start.After(end) {
			return ViewReport{
				View: v.Name, Start: start, End: end,
				Note: fmt.Sprintf("nothing to do: start %s is in the future", fmtTime(start)),
			}, nil
		}
		return m.materializeView(ctx, v, start, end, now, overwrite)
	})
}

// RunIncremental materializes views (all views when empty) from where
// each one's last run ended up to end (clamped to now). A view never
// materialized starts at now − ttl, or 52 weeks ago when it has no ttl.
func (m *Materializer) RunIncremental(ctx context.Context, end time.Time, views []string) (Report, error) {
	sel, err := m.selectViews(views)
	if err != nil {
		return Report{}, err
	}
	now := m.opts.Now().UTC()
	end = minTime(end, now)
	return m.runEach(ctx, sel, func(v *feature.View) (ViewReport, error) {
		st, found, err := m.loadState(ctx, v.Name)
		if err != nil {
			return ViewReport{View: v.Name}, err
		}
		var start time.Time
		// Rows of an older schema must be rewritten, and the old
		// watermark would skip them: re-read as if never materialized.
		changed := found && st.Schema != "" && st.Schema != feature.Fingerprint(v.Schema).String()
		switch {
		case found && !st.Watermark.IsZero() && !changed:
			start = st.Watermark.Add(-m.opts.LateOverlap)
		case v.TTL > 0:
			start = now.Add(-v.TTL)
		default:
			start = now.Add(-neverMaterializedLookback)
		}
		if start.After(end) {
			return ViewReport{
				View: v.Name, Start: start, End: end,
				Note: fmt.Sprintf("nothing to do: already materialized up to %s", fmtTime(start)),
			}, nil
		}
		if changed {
			m.log.Info("feature view schema changed since its last materialization; re-reading its whole window",
				"view", v.Name, "start", start, "old_schema", st.Schema)
		}
		vr, err := m.materializeView(ctx, v, start, end, now, false)
		vr.SchemaChanged = changed
		return vr, err
	})
}

// runEach runs fn for each online view, collects the reports and pushes
// the freshness gauges.
func (m *Materializer) runEach(ctx context.Context, sel []*feature.View, fn func(*feature.View) (ViewReport, error)) (Report, error) {
	var rep Report
	var errs []error
	for _, v := range sel {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("materialize: %w", err))
			break
		}
		if !v.Online {
			rep.Views = append(rep.Views, ViewReport{View: v.Name, Note: "offline-only view (online: false), skipped"})
			continue
		}
		if v.Stream != nil {
			rep.Views = append(rep.Views, ViewReport{View: v.Name, Note: "stream feature view (sluice features aggregate keeps it online), skipped"})
			continue
		}
		vr, err := fn(v)
		vr.View = v.Name
		if err != nil {
			err = fmt.Errorf("materialize view '%s': %w", v.Name, err)
			vr.Err = err
			errs = append(errs, err)
			m.log.Error("materialize view", "view", v.Name, "err", err)
		} else if vr.Note == "" {
			m.log.Info("materialized view", "view", v.Name,
				"start", vr.Start, "end", vr.End, "rows_read", vr.RowsRead,
				"written", vr.Written, "skipped", vr.Skipped, "duration_seconds", vr.Duration.Seconds())
		}
		rep.Views = append(rep.Views, vr)
	}
	if m.opts.Pushgateway != "" {
		m.push(ctx, rep)
	}
	return rep, errors.Join(errs...)
}

// selectViews resolves names to views in name order; empty means all.
func (m *Materializer) selectViews(names []string) ([]*feature.View, error) {
	if len(names) == 0 {
		names = slices.Sorted(maps.Keys(m.repo.Views))
	} else {
		names = slices.Clone(names)
		slices.Sort(names)
		names = slices.Compact(names)
	}
	out := make([]*feature.View, 0, len(names))
	var unknown []string
	for _, n := range names {
		v, ok := m.repo.Views[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		out = append(out, v)
	}
	if len(unknown) > 0 {
		return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownFeatureView, "materialize: unknown feature view '%s'", joinQuoted(unknown))
	}
	return out, nil
}

// materializeView reads the view's window, keeps the latest row per
// entity, writes them and then records the view's state.
func (m *Materializer) materializeView(ctx context.Context, v *feature.View, start, end, now time.Time, overwrite bool) (ViewReport, error) {
	began := time.Now()
	vr := ViewReport{View: v.Name, Start: start, End: end}
	_, kinds := m.repo.JoinKeys(v.Name)
	hot, err := hotKeys(v, kinds)
	if err != nil {
		return vr, err
	}
	prog := newProgress(m.opts.Progress, v.Name, time.Now)
	schema := feature.Fingerprint(v.Schema)

	// Rows dated past now + the tolerance are skipped and counted. A
	// window that reaches now is scanned on to the end of time to count
	// them (only future rows lie there); rows after the window's end but
	// within the tolerance are left for the next run.
	endNS, scanEnd := end.UnixNano(), end
	limit := int64(math.MaxInt64)
	if tol := m.futureTolerance(); tol >= 0 {
		limit = now.Add(tol).UnixNano()
		if !end.Before(now) {
			scanEnd = time.Unix(0, math.MaxInt64).UTC()
		}
	}

	// latest holds the newest row of each entity seen so far, keyed by
	// the entity's storage key. An exact tie goes to the later row.
	latest := make(map[string]feature.Record)
	var key []byte
	err = m.scan(ctx, m.repo, v, start, scanEnd, func(r offline.Row) error {
		if r.EventTS > endNS || r.EventTS > limit || r.CreatedTS > limit {
			if r.EventTS > limit || r.CreatedTS > limit {
				vr.Future++
			}
			return nil
		}
		vr.RowsRead++
		prog.update(vr.RowsRead)
		var err error
		key, err = feature.AppendEntityKey(key[:0], kinds, r.Keys)
		if err != nil {
			return fmt.Errorf("source row %d: entity key: %w", vr.RowsRead, err)
		}
		rec, seen := latest[string(key)]
		if seen && rec.Newer(feature.Record{EventTS: r.EventTS, CreatedTS: r.CreatedTS}) {
			return nil
		}
		payload, err := feature.AppendValues(rec.Payload[:0], v.Schema, r.Values)
		if err != nil {
			return fmt.Errorf("source row %d: %w", vr.RowsRead, err)
		}
		latest[string(key)] = feature.Record{EventTS: r.EventTS, CreatedTS: r.CreatedTS, Schema: schema, Payload: payload}
		return nil
	})
	if vr.Future > 0 {
		m.met.rows.WithLabelValues(v.Name, "future").Add(float64(vr.Future))
		m.log.Warn("skipped source rows dated in the future", "view", v.Name, "rows", vr.Future,
			"limit", time.Unix(0, limit).UTC())
	}
	if err != nil {
		vr.Duration = time.Since(began)
		prog.done(vr.RowsRead, "failed")
		return vr, fmt.Errorf("scan source: %w", err)
	}
	vr.Entities = int64(len(latest))

	// The rows' schema is recorded before any row is visible, so a
	// reader can always decode them by name.
	if _, err := m.schemas.Record(ctx, m.store, v.Name, v.Schema); err != nil {
		vr.Duration = time.Since(began)
		prog.done(vr.RowsRead, "failed")
		return vr, err
	}

	// Write in key order: B-tree stores take sorted inserts best.
	newestTS, err := m.writeLatest(ctx, v, latest, hot, overwrite, &vr)
	if err != nil {
		vr.Duration = time.Since(began)
		prog.done(vr.RowsRead, "failed")
		return vr, err
	}

	// Only now, with every row written, record the view's state.
	if v.Hot != nil {
		if err := m.recordState(ctx, v.Hot.View, end, now, newestTS, vr.HotWritten, overwrite, schema); err != nil {
			return vr, err
		}
	}
	if err := m.recordState(ctx, v.Name, end, now, newestTS, vr.Written, overwrite, schema); err != nil {
		return vr, err
	}
	vr.Duration = time.Since(began)
	m.met.duration.WithLabelValues(v.Name).Observe(vr.Duration.Seconds())
	m.met.lastMaterial.WithLabelValues(v.Name).Set(float64(now.UnixNano()) / 1e9)
	prog.done(vr.RowsRead, fmt.Sprintf("written %s  skipped %s", commas(vr.Written), commas(vr.Skipped)))
	return vr, nil
}

// writeLatest writes the latest row of each entity to the online store in
// key order, in batches of BatchSize, and the hot entities' rows to the
// hot subset too, counting them in vr. It returns the newest event time
// written (zero when none).
func (m *Materializer) writeLatest(ctx context.Context, v *feature.View, latest map[string]feature.Record, hot map[string]bool,
	overwrite bool, vr *ViewReport,
) (time.Time, error) {
	var newest int64
	hasNewest := false
	batch := make([]online.Entry, 0, min(m.opts.BatchSize, len(latest)))
	var hotBatch []online.Entry
	wopts := online.WriteOptions{Overwrite: overwrite}
	flush := func() error {
		if len(batch) > 0 {
			st, err := m.store.Write(ctx, batch, wopts)
			if err != nil {
				return fmt.Errorf("write online store: %w", err)
			}
			vr.Written += int64(st.Written)
			vr.Skipped += int64(st.Skipped)
			m.met.rows.WithLabelValues(v.Name, "written").Add(float64(st.Written))
			m.met.rows.WithLabelValues(v.Name, "skipped").Add(float64(st.Skipped))
			batch = batch[:0]
		}
		if len(hotBatch) > 0 {
			st, err := m.store.Write(ctx, hotBatch, wopts)
			if err != nil {
				return fmt.Errorf("write hot subset '%s': %w", v.Hot.View, err)
			}
			vr.HotWritten += int64(st.Written)
			hotBatch = hotBatch[:0]
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(latest)) {
		rec := latest[k]
		if !hasNewest || rec.EventTS > newest {
			newest, hasNewest = rec.EventTS, true
		}
		ek := []byte(k)
		batch = append(batch, online.Entry{Key: online.Key{View: v.Name, Entity: ek}, Record: rec})
		if hot[k] {
			hotBatch = append(hotBatch, online.Entry{Key: online.Key{View: v.Hot.View, Entity: ek}, Record: rec})
		}
		if len(batch) >= m.opts.BatchSize || len(hotBatch) >= m.opts.BatchSize {
			if err := flush(); err != nil {
				return time.Time{}, err
			}
		}
	}
	if err := flush(); err != nil {
		return time.Time{}, err
	}
	if !hasNewest {
		return time.Time{}, nil
	}
	return time.Unix(0, newest).UTC(), nil
}

// futureTolerance is Options.FutureTolerance, else the repository's
// future_timestamp_tolerance; negative means no limit.
func (m *Materializer) futureTolerance() time.Duration {
	switch {
	case m.opts.FutureTolerance != 0:
		return m.opts.FutureTolerance
	case m.repo.Config.FutureTimestampTolerance > 0:
		return m.repo.Config.FutureTimestampTolerance
	default:
		return registry.DefaultFutureTimestampTolerance
	}
}

// hotKeys returns the storage keys of v's hot entities (nil without a hot
// subset). Hot subsets name entities by a single join key value.
func hotKeys(v *feature.View, kinds []feature.Kind) (map[string]bool, error) {
	if v.Hot == nil || len(v.Hot.Keys) == 0 {
		return nil, nil
	}
	if len(kinds) != 1 {
		return nil, fmt.Errorf("hot subset '%s': hot entities need a view with one join key, this one has %d", v.Hot.View, len(kinds))
	}
	set := make(map[string]bool, len(v.Hot.Keys))
	var key []byte
	for i, val := range v.Hot.Keys {
		var err error
		key, err = feature.AppendEntityKey(key[:0], kinds, []feature.Value{val})
		if err != nil {
			return nil, fmt.Errorf("hot subset '%s': key %d: %w", v.Hot.View, i, err)
		}
		set[string(key)] = true
	}
	return set, nil
}

// loadState reads a view's state; found is false when none is stored.
func (m *Materializer) loadState(ctx context.Context, view string) (feature.ViewState, bool, error) {
	var st feature.ViewState
	b, err := m.store.GetMeta(ctx, feature.ViewStateName(view))
	if err != nil {
		return st, false, fmt.Errorf("read view state: %w", err)
	}
	if b == nil {
		return st, false, nil
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("decode view state '%s': %w", feature.ViewStateName(view), err)
	}
	return st, true, nil
}

// recordState updates a view's state after a successful run: the
// watermark only moves forward (unless overwrite), the newest event
// timestamp never moves backwards.
func (m *Materializer) recordState(ctx context.Context, view string, end, now, newest time.Time, written int64, overwrite bool, schema feature.SchemaID) error {
	st, _, err := m.loadState(ctx, view)
	if err != nil {
		if !overwrite {
			return err
		}
		m.log.Warn("replacing unreadable view state", "view", view, "err", err)
		st = feature.ViewState{}
	}
	if overwrite || end.After(st.Watermark) {
		st.Watermark = end
	}
	st.LastSuccess = now
	if newest.After(st.NewestEventTS) {
		st.NewestEventTS = newest
	}
	st.Rows = written
	st.Schema = schema.String()
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode view state: %w", err)
	}
	if err := m.store.PutMeta(ctx, feature.ViewStateName(view), b); err != nil {
		return fmt.Errorf("write view state: %w", err)
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func joinQuoted(names []string) string { return strings.Join(names, "', '") }
