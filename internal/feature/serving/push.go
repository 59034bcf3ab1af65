package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// PushTo says where pushed rows go.
type PushTo uint8

// The push targets, named as Feast's PushMode.
const (
	PushOnline PushTo = iota
	PushOffline
	PushOnlineAndOffline
)

// ParsePushTo parses Feast's "to" field: "online" (the default when
// empty), "offline" or "online_and_offline".
func ParsePushTo(s string) (PushTo, error) {
	switch s {
	case "", "online":
		return PushOnline, nil
	case "offline":
		return PushOffline, nil
	case "online_and_offline":
		return PushOnlineAndOffline, nil
	}
	return 0, invalidf(ReasonInvalidRequest, "to '%s': want online, offline or online_and_offline", s)
}

// PushViewReport is what a push wrote to one view.
type PushViewReport struct {
	View    string `json:"view"`
	Written int    `json:"written"`
	Skipped int    `json:"skipped"` // not newer than the stored row
	// HotWritten counts rows also written to the view's hot copy (rows
	// of its hot entities).
	HotWritten int `json:"hot_written,omitempty"`
}

// PushOfflineReport is what a push appended to the offline store.
type PushOfflineReport struct {
	// Source is the batch source the rows were appended to.
	Source string `json:"source"`
	// File is the new Parquet file, as the source's path joined with
	// its name ("" when there were no rows to write).
	File string `json:"file"`
	Rows int    `json:"rows"`
}

// PushReport is what a push did.
type PushReport struct {
	Rows  int              `json:"rows"`
	Views []PushViewReport `json:"views"`
	// Offline is set when the push wrote to the offline store.
	Offline *PushOfflineReport `json:"offline,omitempty"`
}

// Push writes rows of the push source named source to the online store,
// into every online view that reads that source. df holds the rows as
// columns by name (decoded JSON values or plain Go values): each view's
// join keys, its features (after the source's field mapping) and the event
// timestamp column (the source's timestamp_field, its batch source's, or
// "event_timestamp"), plus the created timestamp column when the source
// names one. A row only replaces an older stored row. Every row is
// checked before anything is written; a row whose event or created
// timestamp is further in the future than the tolerance
// (Options.FutureTolerance, else the repository's
// future_timestamp_tolerance) refuses the push with timestamp_in_future.
// A successful online push counts as the views' latest success for
// freshness.
//
// PushOffline appends the rows as a new Parquet file to the push source's
// batch source, which must be a folder source (see pushOffline);
// PushOnlineAndOffline does that first and then writes online. When the
// online write fails after the offline append, the offline rows stay and
// the error says so.
func (s *Server) Push(ctx context.Context, source string, df map[string][]any, to PushTo) (PushReport, error) {
	repo := s.repos.Current()
	if repo == nil {
		return PushReport{}, unavailablef(ReasonRegistryNotLoaded, "no feature registry is loaded")
	}
	src, ok := repo.Sources[source]
	if !ok || src.Kind != feature.SourcePush {
		return PushReport{}, invalidf(ReasonUnknownPushSource, "unknown push source '%s'", source)
	}
	var target offlineTarget
	if to != PushOnline {
		var err error
		if target, err = resolveOfflineTarget(repo, src); err != nil {
			return PushReport{}, err
		}
	}
	// Every row is checked and encoded before anything is written.
	in, err := s.readPush(repo, src, df)
	if err != nil {
		return PushReport{}, err
	}
	var off offlineRows
	if to != PushOnline {
		if off, err = buildOfflineRows(in, target); err != nil {
			return PushReport{}, err
		}
	}
	var on onlineRows
	if to != PushOffline {
		if on, err = buildOnlineRows(in); err != nil {
			return PushReport{}, err
		}
	}

	rep := PushReport{Rows: in.n, Views: []PushViewReport{}}
	if to != PushOnline {
		offRep, err := s.pushOffline(ctx, source, target, off, in.now)
		if err != nil {
			return rep, err
		}
		rep.Offline = &offRep
		if to == PushOffline {
			return rep, nil
		}
	}
	err = s.pushOnline(ctx, on, in.n, in.now, &rep)
	if err != nil && rep.Offline != nil {
		return rep, offlineKept(source, rep.Offline, err)
	}
	return rep, err
}

// readPush checks a push's columns and reads its timestamps: every column
// has one value per row, the event timestamp column is there and parses,
// the created timestamp column parses where it has values, and no row is
// dated too far in the future.
func (s *Server) readPush(repo *registry.Repo, src *feature.Source, df map[string][]any) (pushInput, error) {
	tsField, createdField := timestampFields(repo, src)
	return s.readInput(repo, src, df, sourceColumns(src), tsField, createdField)
}

// readInput is readPush with the df column of each view column given by
// column and the timestamp columns named.
func (s *Server) readInput(repo *registry.Repo, src *feature.Source, df map[string][]any, column func(string) string, tsField, createdField string) (pushInput, error) {
	n := -1
	first := ""
	for _, name := range sortedKeys(df) {
		if n < 0 {
			n, first = len(df[name]), name
		} else if len(df[name]) != n {
			return pushInput{}, invalidf(ReasonEntityLengthMismatch, "column '%s' has %d values but '%s' has %d", name, len(df[name]), first, n)
		}
	}
	in := pushInput{repo: repo, src: src, df: df, n: max(n, 0), column: column}
	if err := in.readEvents(tsField); err != nil {
		return pushInput{}, err
	}
	if err := in.readCreated(createdField); err != nil {
		return pushInput{}, err
	}
	in.now = s.opts.Now()
	if err := checkFuture(in.column(tsField), in.column(createdField), in.events, in.created, in.hasCreated, in.now, s.futureTolerance(repo)); err != nil {
		return pushInput{}, err
	}
	return in, nil
}

// sourceColumns returns the df column that holds a view column: the
// inverse of the source's field mapping.
func sourceColumns(src *feature.Source) func(name string) string {
	colFor := make(map[string]string, len(src.FieldMapping))
	for from, to := range src.FieldMapping {
		colFor[to] = from
	}
	return func(name string) string {
		if c, ok := colFor[name]; ok {
			return c
		}
		return name
	}
}

// timestampFields names a push source's event and created timestamp
// columns: its own, else its batch source's; the event timestamp
// defaults to "event_timestamp".
func timestampFields(repo *registry.Repo, src *feature.Source) (ts, created string) {
	ts, created = src.TimestampField, src.CreatedTimestampColumn
	if b, ok := repo.Sources[src.BatchSource]; ok {
		if ts == "" {
			ts = b.TimestampField
		}
		if created == "" {
			created = b.CreatedTimestampColumn
		}
	}
	if ts == "" {
		ts = "event_timestamp"
	}
	return ts, created
}

// need returns the df column of view column name, which must be there.
func (in *pushInput) need(name string) ([]any, error) {
	c, ok := in.df[in.column(name)]
	if !ok {
		return nil, invalidf(ReasonMissingColumn, "push source '%s': the rows have no column '%s'", in.src.Name, in.column(name))
	}
	return c, nil
}

// readEvents parses every row's event timestamp.
func (in *pushInput) readEvents(tsField string) error {
	col, err := in.need(tsField)
	if err != nil {
		return err
	}
	in.events = make([]int64, in.n)
	for r := range in.n {
		t, err := toTime(col[r])
		if err != nil {
			return invalidf(ReasonInvalidColumnValue, "column '%s' row %d: %v", in.column(tsField), r, err)
		}
		in.events[r] = t.UnixNano()
	}
	return nil
}

// readCreated parses the created timestamps the client sent: the column
// is optional, and so is each of its values.
func (in *pushInput) readCreated(createdField string) error {
	in.created = make([]int64, in.n)
	in.hasCreated = make([]bool, in.n)
	if createdField == "" {
		return nil
	}
	col, ok := in.df[in.column(createdField)]
	if !ok {
		return nil
	}
	for r := range in.n {
		if col[r] == nil {
			continue
		}
		t, err := toTime(col[r])
		if err != nil {
			return invalidf(ReasonInvalidColumnValue, "column '%s' row %d: %v", in.column(createdField), r, err)
		}
		in.created[r] = t.UnixNano()
		in.hasCreated[r] = true
	}
	return nil
}

// onlineRows are a push's rows encoded for the online store, view by view.
type onlineRows struct {
	views   []*feature.View // the push source's online views, by name
	entries []online.Entry
	spans   [][2]int         // spans[vi]: view vi's entries
	newest  []int64          // newest[vi]: view vi's newest event timestamp
	hot     [][]online.Entry // hot[vi]: view vi's rows for its hot copy
}

// buildOnlineRows encodes every row for every online view that reads the
// push source.
func buildOnlineRows(in pushInput) (onlineRows, error) {
	var views []*feature.View
	for _, v := range in.repo.Views {
		if v.Source == in.src.Name && v.Online {
			views = append(views, v)
		}
	}
	slices.SortFunc(views, func(a, b *feature.View) int { return strings.Compare(a.Name, b.Name) })
	o := onlineRows{
		views:  views,
		spans:  make([][2]int, len(views)),
		newest: make([]int64, len(views)),
		hot:    make([][]online.Entry, len(views)),
	}
	for vi := range views {
		if err := o.addView(in, vi); err != nil {
			return onlineRows{}, err
		}
	}
	return o, nil
}

// addView encodes every row for view vi: its entity key, its features in
// the view's row encoding, and a copy for the view's hot subset when the
// entity is a hot member, so a push is not shadowed by an older hot row.
func (o *onlineRows) addView(in pushInput, vi int) error {
	v := o.views[vi]
	o.spans[vi][0] = len(o.entries)
	keys, err := in.viewKeys(v)
	if err != nil {
		return err
	}
	featCols := make([][]any, len(v.Schema))
	for fi, f := range v.Schema {
		if featCols[fi], err = in.need(f.Name); err != nil {
			return err
		}
	}
	hot, err := pushHotPlan(in.repo, v)
	if err != nil {
		return err
	}
	vals := make([]feature.Value, len(v.Schema))
	schema := feature.Fingerprint(v.Schema)
	for r := range in.n {
		ek, err := keys.encode(r)
		if err != nil {
			return err
		}
		for fi, f := range v.Schema {
			if vals[fi], err = ToValue(featCols[fi][r], f.Type); err != nil {
				return invalidf(ReasonInvalidColumnValue, "column '%s' row %d (feature '%s:%s', %s): %v", in.column(f.Name), r, v.Name, f.Name, f.Type, err)
			}
		}
		payload, err := feature.AppendValues(nil, v.Schema, vals)
		if err != nil {
			return invalidf(ReasonInvalidColumnValue, "row %d of view '%s': %v", r, v.Name, err)
		}
		rec := feature.Record{EventTS: in.events[r], CreatedTS: in.created[r], Schema: schema, Payload: payload}
		o.entries = append(o.entries, online.Entry{Key: online.Key{View: v.Name, Entity: ek}, Record: rec})
		if hot != nil {
			if _, member := hot.members[string(ek)]; member || hot.members == nil {
				o.hot[vi] = append(o.hot[vi], online.Entry{Key: online.Key{View: hot.view, Entity: ek}, Record: rec})
			}
		}
		o.newest[vi] = max(o.newest[vi], in.events[r])
	}
	o.spans[vi][1] = len(o.entries)
	return nil
}

// pushKeys are the entity key columns of one view in a push.
type pushKeys struct {
	kinds []feature.Kind
	cols  [][]any
	names []string
	vals  []feature.Value // one row's key values
}

// viewKeys finds the df columns of view v's entity keys.
func (in *pushInput) viewKeys(v *feature.View) (pushKeys, error) {
	var k pushKeys
	for _, en := range v.Entities {
		e, ok := in.repo.Entities[en]
		if !ok {
			return pushKeys{}, apierr.Errorf(apierr.KindInternal, ReasonInternal, "feature view '%s': entity '%s' is not defined", v.Name, en)
		}
		c, err := in.need(e.JoinKey)
		if err != nil {
			return pushKeys{}, err
		}
		k.kinds = append(k.kinds, e.ValueType.Kind)
		k.cols = append(k.cols, c)
		k.names = append(k.names, e.JoinKey)
	}
	k.vals = make([]feature.Value, len(k.kinds))
	return k, nil
}

// encode returns row r's entity key; a key value may not be null.
func (k *pushKeys) encode(r int) ([]byte, error) {
	for ki, kind := range k.kinds {
		kv, err := ToValue(k.cols[ki][r], feature.Type{Kind: kind})
		if err == nil && kv.Null {
			err = fmt.Errorf("null")
		}
		if err != nil {
			return nil, invalidf(ReasonInvalidEntityValue, "entity key '%s' row %d: %v", k.names[ki], r, err)
		}
		k.vals[ki] = kv
	}
	ek, err := feature.AppendEntityKey(nil, k.kinds, k.vals)
	if err != nil {
		return nil, invalidf(ReasonInvalidEntityValue, "row %d: %v", r, err)
	}
	return ek, nil
}

// pushHotPlan returns view v's hot subset as serving reads it, or nil
// when v has none.
func pushHotPlan(repo *registry.Repo, v *feature.View) (*hotPlan, error) {
	if v.Hot == nil || v.Hot.View == "" {
		return nil, nil
	}
	var p plan
	vp, err := p.addView(repo, v)
	if err != nil {
		return nil, apierr.Errorf(apierr.KindInternal, ReasonInternal, "%v", err)
	}
	return vp.hot, nil
}

// pushOnline writes each view's entries (and its hot copy's) to the online
// store and records the push in the views' state.
func (s *Server) pushOnline(ctx context.Context, o onlineRows, n int, now time.Time, rep *PushReport) error {
	for vi, v := range o.views {
		// The rows' schema is recorded before any row is visible.
		if _, err := s.schemas.Record(ctx, s.store, v.Name, v.Schema); err != nil {
			return storeError("push to feature view '"+v.Name+"'", err)
		}
		// One Write per view, so each view's counts are its own.
		st, err := s.store.Write(ctx, o.entries[o.spans[vi][0]:o.spans[vi][1]], online.WriteOptions{})
		if err != nil {
			return storeError("push to feature view '"+v.Name+"'", err)
		}
		s.metrics.pushedRows.WithLabelValues(v.Name, "written").Add(float64(st.Written))
		s.metrics.pushedRows.WithLabelValues(v.Name, "skipped").Add(float64(st.Skipped))
		vr := PushViewReport{View: v.Name, Written: st.Written, Skipped: st.Skipped}
		if len(o.hot[vi]) > 0 {
			hst, err := s.store.Write(ctx, o.hot[vi], online.WriteOptions{})
			if err != nil {
				return storeError("push to the hot copy of feature view '"+v.Name+"'", err)
			}
			vr.HotWritten = hst.Written
		}
		rep.Views = append(rep.Views, vr)
		if err := s.recordPush(ctx, v.Name, now, o.newest[vi], st.Written, n > 0); err != nil {
			return err
		}
	}
	return nil
}

// recordPush updates a view's state after a successful push: the push is
// its latest success, and its newest event timestamp moves forward.
func (s *Server) recordPush(ctx context.Context, view string, now time.Time, newest int64, written int, wrote bool) error {
	name := feature.ViewStateName(view)
	b, err := s.store.GetMeta(ctx, name)
	if err != nil {
		return storeError("read state of feature view '"+view+"'", err)
	}
	var st feature.ViewState
	if b != nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return apierr.Errorf(apierr.KindInternal, ReasonInternal, "feature view '%s': state %s: %v", view, name, err)
		}
	}
	st.LastSuccess = now.UTC()
	if wrote {
		if t := time.Unix(0, newest).UTC(); t.After(st.NewestEventTS) {
			st.NewestEventTS = t
		}
	}
	st.Rows = int64(written)
	out, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode view state: %w", err)
	}
	if err := s.store.PutMeta(ctx, name, out); err != nil {
		return storeError("write state of feature view '"+view+"'", err)
	}
	s.forgetState(view)
	return nil
}

// futureTolerance is how far past now a pushed row's timestamps may be:
// Options.FutureTolerance, else the repository's
// future_timestamp_tolerance; negative means no limit.
func (s *Server) futureTolerance(repo *registry.Repo) time.Duration {
	switch {
	case s.opts.FutureTolerance != 0:
		return s.opts.FutureTolerance
	case repo.Config.FutureTimestampTolerance > 0:
		return repo.Config.FutureTimestampTolerance
	default:
		return registry.DefaultFutureTimestampTolerance
	}
}

// checkFuture refuses rows whose event or created timestamp is more than
// tol past now. Stored, such a row would win every newer-wins compare
// until its date came, so the entity's legitimate pushes would all be
// skipped.
func checkFuture(tsCol, createdCol string, events, created []int64, hasCreated []bool, now time.Time, tol time.Duration) error {
	if tol < 0 {
		return nil
	}
	limit := now.Add(tol).UnixNano()
	bad := func(col string, r int, ts int64) error {
		t := time.Unix(0, ts).UTC()
		return invalidf(ReasonTimestampInFuture,
			"column '%s' row %d: %s is %s in the future (now %s, tolerance %s): a row dated in the future would hide every later push for its entity until then",
			col, r, t.Format(time.RFC3339Nano), t.Sub(now).Round(time.Second), now.UTC().Format(time.RFC3339), tol)
	}
	for r, ts := range events {
		if ts > limit {
			return bad(tsCol, r, ts)
		}
		if hasCreated[r] && created[r] > limit {
			return bad(createdCol, r, created[r])
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
