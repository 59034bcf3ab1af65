package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/infer"
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
	n := -1
	first := ""
	for _, name := range sortedKeys(df) {
		if n < 0 {
			n, first = len(df[name]), name
		} else if len(df[name]) != n {
			return PushReport{}, invalidf(ReasonEntityLengthMismatch, "column '%s' has %d values but '%s' has %d", name, len(df[name]), first, n)
		}
	}
	n = max(n, 0)

	// The source column that holds a view column: the inverse of the
	// field mapping.
	colFor := make(map[string]string, len(src.FieldMapping))
	for from, to := range src.FieldMapping {
		colFor[to] = from
	}
	column := func(name string) string {
		if c, ok := colFor[name]; ok {
			return c
		}
		return name
	}
	tsField, createdField := src.TimestampField, src.CreatedTimestampColumn
	if b, ok := repo.Sources[src.BatchSource]; ok {
		if tsField == "" {
			tsField = b.TimestampField
		}
		if createdField == "" {
			createdField = b.CreatedTimestampColumn
		}
	}
	if tsField == "" {
		tsField = "event_timestamp"
	}
	need := func(name string) ([]any, error) {
		c, ok := df[column(name)]
		if !ok {
			return nil, invalidf(ReasonMissingColumn, "push source '%s': the rows have no column '%s'", source, column(name))
		}
		return c, nil
	}
	tsCol, err := need(tsField)
	if err != nil {
		return PushReport{}, err
	}
	events := make([]int64, n)
	created := make([]int64, n)
	hasCreated := make([]bool, n) // the client sent a created timestamp
	for r := range n {
		t, err := toTime(tsCol[r])
		if err != nil {
			return PushReport{}, invalidf(ReasonInvalidColumnValue, "column '%s' row %d: %v", column(tsField), r, err)
		}
		events[r] = t.UnixNano()
	}
	if createdField != "" {
		if c, ok := df[column(createdField)]; ok {
			for r := range n {
				if c[r] == nil {
					continue
				}
				t, err := toTime(c[r])
				if err != nil {
					return PushReport{}, invalidf(ReasonInvalidColumnValue, "column '%s' row %d: %v", column(createdField), r, err)
				}
				created[r] = t.UnixNano()
				hasCreated[r] = true
			}
		}
	}

	now := s.opts.Now()
	if err := checkFuture(column(tsField), column(createdField), events, created, hasCreated, now, s.futureTolerance(repo)); err != nil {
		return PushReport{}, err
	}
	var off offlineRows
	if to != PushOnline {
		var err error
		in := pushInput{
			repo: repo, src: src, df: df, n: n, column: column,
			events: events, created: created, hasCreated: hasCreated, now: now,
		}
		if off, err = buildOfflineRows(in, target); err != nil {
			return PushReport{}, err
		}
	}

	var views []*feature.View
	if to != PushOffline {
		for _, v := range repo.Views {
			if v.Source == source && v.Online {
				views = append(views, v)
			}
		}
	}
	slices.SortFunc(views, func(a, b *feature.View) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})

	var entries []online.Entry
	spans := make([][2]int, len(views)) // each view's entries
	newest := make([]int64, len(views))
	hotEntries := make([][]online.Entry, len(views))
	for vi, v := range views {
		spans[vi][0] = len(entries)
		var kinds []feature.Kind
		var keyCols [][]any
		var keyNames []string
		for _, en := range v.Entities {
			e, ok := repo.Entities[en]
			if !ok {
				return PushReport{}, infer.Errorf(infer.KindInternal, ReasonInternal, "feature view '%s': entity '%s' is not defined", v.Name, en)
			}
			c, err := need(e.JoinKey)
			if err != nil {
				return PushReport{}, err
			}
			kinds = append(kinds, e.ValueType.Kind)
			keyCols = append(keyCols, c)
			keyNames = append(keyNames, e.JoinKey)
		}
		featCols := make([][]any, len(v.Schema))
		for fi, f := range v.Schema {
			if featCols[fi], err = need(f.Name); err != nil {
				return PushReport{}, err
			}
		}
		// Hot members' rows go to the hot copy too, so a push is not
		// shadowed by an older hot row.
		var hot *hotPlan
		if v.Hot != nil && v.Hot.View != "" {
			var p plan
			vp, err := p.addView(repo, v)
			if err != nil {
				return PushReport{}, infer.Errorf(infer.KindInternal, ReasonInternal, "%v", err)
			}
			hot = vp.hot
		}
		keyVals := make([]feature.Value, len(kinds))
		vals := make([]feature.Value, len(v.Schema))
		schema := feature.Fingerprint(v.Schema)
		for r := range n {
			for ki, k := range kinds {
				kv, err := toValue(keyCols[ki][r], feature.Type{Kind: k})
				if err == nil && kv.Null {
					err = fmt.Errorf("null")
				}
				if err != nil {
					return PushReport{}, invalidf(ReasonInvalidEntityValue, "entity key '%s' row %d: %v", keyNames[ki], r, err)
				}
				keyVals[ki] = kv
			}
			ek, err := feature.AppendEntityKey(nil, kinds, keyVals)
			if err != nil {
				return PushReport{}, invalidf(ReasonInvalidEntityValue, "row %d: %v", r, err)
			}
			for fi, f := range v.Schema {
				if vals[fi], err = toValue(featCols[fi][r], f.Type); err != nil {
					return PushReport{}, invalidf(ReasonInvalidColumnValue, "column '%s' row %d (feature '%s:%s', %s): %v", column(f.Name), r, v.Name, f.Name, f.Type, err)
				}
			}
			payload, err := feature.AppendValues(nil, v.Schema, vals)
			if err != nil {
				return PushReport{}, invalidf(ReasonInvalidColumnValue, "row %d of view '%s': %v", r, v.Name, err)
			}
			rec := feature.Record{EventTS: events[r], CreatedTS: created[r], Schema: schema, Payload: payload}
			entries = append(entries, online.Entry{Key: online.Key{View: v.Name, Entity: ek}, Record: rec})
			if hot != nil {
				if _, member := hot.members[string(ek)]; member || hot.members == nil {
					hotEntries[vi] = append(hotEntries[vi], online.Entry{Key: online.Key{View: hot.view, Entity: ek}, Record: rec})
				}
			}
			newest[vi] = max(newest[vi], events[r])
		}
		spans[vi][1] = len(entries)
	}

	rep := PushReport{Rows: n, Views: []PushViewReport{}}
	if to != PushOnline {
		offRep, err := s.pushOffline(ctx, source, target, off, now)
		if err != nil {
			return rep, err
		}
		rep.Offline = &offRep
		if to == PushOffline {
			return rep, nil
		}
	}
	err = s.pushOnline(ctx, views, entries, spans, hotEntries, newest, n, now, &rep)
	if err != nil && rep.Offline != nil {
		return rep, offlineKept(source, rep.Offline, err)
	}
	return rep, err
}

// pushOnline writes each view's entries (and its hot copy's) to the online
// store and records the push in the views' state.
func (s *Server) pushOnline(ctx context.Context, views []*feature.View, entries []online.Entry, spans [][2]int,
	hotEntries [][]online.Entry, newest []int64, n int, now time.Time, rep *PushReport,
) error {
	for vi, v := range views {
		// The rows' schema is recorded before any row is visible.
		if _, err := s.schemas.Record(ctx, s.store, v.Name, v.Schema); err != nil {
			return storeError("push to feature view '"+v.Name+"'", err)
		}
		// One Write per view, so each view's counts are its own.
		st, err := s.store.Write(ctx, entries[spans[vi][0]:spans[vi][1]], online.WriteOptions{})
		if err != nil {
			return storeError("push to feature view '"+v.Name+"'", err)
		}
		s.metrics.pushedRows.WithLabelValues(v.Name, "written").Add(float64(st.Written))
		s.metrics.pushedRows.WithLabelValues(v.Name, "skipped").Add(float64(st.Skipped))
		vr := PushViewReport{View: v.Name, Written: st.Written, Skipped: st.Skipped}
		if len(hotEntries[vi]) > 0 {
			hst, err := s.store.Write(ctx, hotEntries[vi], online.WriteOptions{})
			if err != nil {
				return storeError("push to the hot copy of feature view '"+v.Name+"'", err)
			}
			vr.HotWritten = hst.Written
		}
		rep.Views = append(rep.Views, vr)
		if err := s.recordPush(ctx, v.Name, now, newest[vi], st.Written, n > 0); err != nil {
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
			return infer.Errorf(infer.KindInternal, ReasonInternal, "feature view '%s': state %s: %v", view, name, err)
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
