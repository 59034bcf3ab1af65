package serving

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// read answers a compiled request, in steps: check the entity columns and
// every view's freshness, encode the entity keys, read every (view,
// entity) row in one store call, then fill the response columns view by
// view.
func (s *Server) read(ctx context.Context, p *plan, entities map[string][]feature.Value, eventTS *time.Time) (*Response, error) {
	if p.od != nil {
		return s.readOnDemand(ctx, p, entities, eventTS)
	}
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
	if err := sc.entityKeys(p, entities, n); err != nil {
		return nil, err
	}
	sc.storeKeys(p)
	results, err := s.readRows(ctx, sc.keys)
	if err != nil {
		return nil, err
	}
	s.combineTiles(p, results, sc.rows, now)

	f := filler{s: s, p: p, sc: sc, now: now, eventTS: eventTS, results: results, resp: s.newResponse(p, entities, n)}
	if eventTS != nil {
		f.limit = eventTS.Add(s.opts.EventTimeTolerance)
	}
	for vi := range p.views {
		if err := f.view(ctx, vi); err != nil {
			return nil, err
		}
	}
	for st, c := range f.counts {
		if c > 0 {
			s.statusCounters[st].Add(float64(c))
		}
	}
	return f.resp, nil
}

// readScratch is one read's working memory; nothing in it outlives the
// read or reaches the response.
type readScratch struct {
	rows   int             // entity rows of the read
	entBuf []byte          // entity keys, back to back
	ents   [][]byte        // ents[si*rows+r]: key set si's key of entity row r
	vals   []feature.Value // one row's join-key values
	keys   []online.Key    // the store keys to read
	hotIdx []int           // hotIdx[vi*rows+r]: row r of view vi in keys, or -1
	at     []int           // one stored row's decode destinations (cells of the response's values)
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
	sc.entBuf, sc.ents, sc.vals, sc.keys, sc.hotIdx, sc.at = sc.entBuf[:0], sc.ents[:0], sc.vals[:0], sc.keys[:0], sc.hotIdx[:0], sc.at[:0]
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

// entityKeys encodes the key of each of n entity rows once per distinct
// join-key combination of p (see ent).
func (sc *readScratch) entityKeys(p *plan, entities map[string][]feature.Value, n int) error {
	sc.rows = n
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
			var err error
			if buf, err = feature.AppendEntityKey(buf, p.setKinds[si], vals); err != nil {
				sc.entBuf = buf
				return invalidf(ReasonInvalidEntityValue, "entity row %d: %v", r, err)
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
	return nil
}

// ent returns key set si's key of entity row r.
func (sc *readScratch) ent(si, r int) []byte { return sc.ents[si*sc.rows+r] }

// storeKeys lists the store keys of the read: every view's row of each
// entity, view after view, then the hot-subset rows of the views that
// have one (hotIdx says where each sits).
func (sc *readScratch) storeKeys(p *plan) {
	n := sc.rows
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
			keys = append(keys, online.Key{View: vp.view.Name, Entity: sc.ent(vp.keySet, r)})
		}
	}
	if anyHot {
		sc.hotIdx = grow(sc.hotIdx, len(p.views)*n)
	}
	for vi, vp := range p.views {
		if vp.hot == nil {
			continue
		}
		for r := range n {
			e := sc.ent(vp.keySet, r)
			if vp.hot.members != nil {
				if _, ok := vp.hot.members[string(e)]; !ok {
					sc.hotIdx[vi*n+r] = -1
					continue
				}
			}
			sc.hotIdx[vi*n+r] = len(keys)
			keys = append(keys, online.Key{View: vp.hot.view, Entity: e})
		}
	}
	sc.keys = keys
}

// readRows reads every key in one store call: one result per key, in
// order.
func (s *Server) readRows(ctx context.Context, keys []online.Key) ([]online.Result, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	results, err := s.store.Read(ctx, keys)
	if err != nil {
		return nil, storeError("read online features", err)
	}
	if len(results) != len(keys) {
		return nil, apierr.Errorf(apierr.KindInternal, ReasonInternal, "online store answered %d rows for %d keys", len(results), len(keys))
	}
	return results, nil
}

// newResponse lays out the response's columns for n rows, one array per
// kind of slice for all of them, and fills in the entity columns. The
// arrays come from s's pool when an edge gave some back (release), so a
// read that an edge encodes and drops allocates next to nothing; a Go
// API caller keeps what it gets, as before. The feature cells are left
// for the filler, which writes every one of them in full.
func (s *Server) newResponse(p *plan, entities map[string][]feature.Value, n int) *Response {
	cells := n * len(p.cols)
	var m *respMem
	if c := memClass(cells); c < len(s.respMems) {
		m, _ = s.respMems[c].Get().(*respMem)
	}
	if m == nil {
		m = &respMem{}
	}
	m.cols = grow(m.cols, len(p.names))
	m.statuses = grow(m.statuses, n*len(p.names))
	m.stamps = grow(m.stamps, n*len(p.names))
	m.values = grow(m.values, cells)
	m.pointers = false
	for _, t := range p.types[len(p.keys):] {
		if t.List || t.Kind == feature.KindString || t.Kind == feature.KindBytes {
			m.pointers = true
			break
		}
	}
	m.resp = Response{
		FeatureNames:  p.names,
		Types:         p.types,
		EntityColumns: len(p.keys),
		Results:       m.cols,
		mem:           m,
	}
	statuses, stamps, values := m.statuses, m.stamps, m.values
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
		m.cols[i] = c
	}
	return &m.resp
}

// respMem is the memory of one read's response: the Response itself and
// the arrays its columns slice. Only the edges, which encode a response
// and drop it, give it back to the pool (release).
type respMem struct {
	resp     Response
	cols     []Column
	statuses []Status
	stamps   []time.Time
	values   []feature.Value
	// pointers says the feature values may hold strings, bytes or lists,
	// which release clears so the pool keeps none of them alive.
	pointers bool
}

// memClassCells are the size classes of pooled respMems, in feature
// values (192 bytes each): a read takes memory of its own class, so a
// small answer, which a caller may keep, never holds a large one's
// memory alive. Larger responses are left to the collector.
var memClassCells = [...]int{1 << 10, 1 << 13, 1 << 16}

// memClass returns the size class of cells feature values,
// len(memClassCells) when there is none.
func memClass(cells int) int {
	for c, limit := range memClassCells {
		if cells <= limit {
			return c
		}
	}
	return len(memClassCells)
}

// Release gives the memory of a response that GetOnlineFeatures
// answered back to s, for the next read to reuse: a 100-row answer of 50
// features is about 1 MB of values, which a caller that reads often
// otherwise leaves to the collector. Calling it is optional. After it,
// resp, its columns and their slices must not be used; values copied out
// of them stay valid (their strings, byte slices and lists are never
// written again), and it must be released once at most. Release of a
// response s did not build does nothing.
func (s *Server) Release(resp *Response) { s.release(resp) }

// release is Release; the edges call it once they have encoded resp.
func (s *Server) release(resp *Response) {
	m := resp.mem
	if m == nil || &m.resp != resp {
		return
	}
	c := memClass(cap(m.values))
	if c >= len(s.respMems) {
		return
	}
	if m.pointers {
		clear(m.values)
	}
	clear(m.cols) // the request's entity columns, Unreadable
	m.resp = Response{}
	s.respMems[c].Put(m)
}

// filler fills one read's feature columns from the rows the store
// answered, and counts the statuses it gives.
type filler struct {
	s       *Server
	p       *plan
	sc      *readScratch
	now     time.Time
	eventTS *time.Time // the request's event_timestamp, if any
	limit   time.Time  // *eventTS plus the tolerance
	results []online.Result
	resp    *Response
	counts  [len(statusNames)]int
}

// hotOutcome is how a row's hot-subset lookup went.
type hotOutcome uint8

const (
	hotNone hotOutcome = iota // no hot subset, or the entity is not in it
	hotHit                    // the hot row answers
	hotMiss                   // the cold row answers instead
)

// view fills view vi's columns row by row and counts its hot-subset hits
// and misses.
func (f *filler) view(ctx context.Context, vi int) error {
	vp := &f.p.views[vi]
	var hits, misses int
	for r := range f.sc.rows {
		res, hot := f.pick(vp, vi, r)
		switch hot {
		case hotHit:
			hits++
		case hotMiss:
			misses++
		case hotNone:
		}
		if !res.Found {
			f.notFound(vi, r)
			continue
		}
		if err := f.row(ctx, vi, r, res); err != nil {
			return err
		}
	}
	if vp.hot != nil {
		if hits > 0 {
			f.s.metrics.hotReads.WithLabelValues(vp.view.Name, "hit").Add(float64(hits))
		}
		if misses > 0 {
			f.s.metrics.hotReads.WithLabelValues(vp.view.Name, "miss").Add(float64(misses))
		}
	}
	return nil
}

// pick returns the stored row that answers entity row r of view vi. Only
// hot members are looked up in the hot subset; a member whose hot row is
// missing, past the hot ttl or older than the cold row (a push reached the
// cold view first) falls back to the cold row.
func (f *filler) pick(vp *viewPlan, vi, r int) (online.Result, hotOutcome) {
	n := f.sc.rows
	res := f.results[vi*n+r]
	if vp.hot == nil {
		return res, hotNone
	}
	hi := f.sc.hotIdx[vi*n+r]
	if hi < 0 {
		return res, hotNone
	}
	hot := f.results[hi]
	if hot.Found && (vp.hot.ttl <= 0 || f.now.Sub(time.Unix(0, hot.Record.EventTS)) <= vp.hot.ttl) &&
		(!res.Found || !res.Record.Newer(hot.Record)) {
		return hot, hotHit
	}
	return res, hotMiss
}

// notFound marks row r of view vi's columns NOT_FOUND.
func (f *filler) notFound(vi, r int) {
	for _, ci := range f.p.views[vi].cols {
		f.setNotFound(ci, r)
	}
}

func (f *filler) setNotFound(ci, r int) {
	col := &f.resp.Results[len(f.p.keys)+ci]
	col.Values[r] = feature.Value{Null: true}
	col.Statuses[r] = StatusNotFound
	col.EventTimestamps[r] = epoch
	f.counts[StatusNotFound]++
}

// row fills row r of view vi's columns from its stored row res and gives
// each value its status: present, null, outside max age (withheld or
// not, by the view's stale policy) or not found when the row cannot be
// read.
func (f *filler) row(ctx context.Context, vi, r int, res online.Result) error {
	vp := &f.p.views[vi]
	v := vp.view
	lay, corrupt, err := f.decode(ctx, vp, r, res.Record)
	if err != nil {
		return err
	}
	// Values of an unknown schema or a corrupt row are not used.
	usable := corrupt == nil && rowSchema(vp, lay) != nil
	ev := time.Unix(0, res.Record.EventTS).UTC()
	expired := v.TTL > 0 && f.now.Sub(ev) > v.TTL
	withheld := expired && v.StalePolicy == feature.StaleWithhold
	if f.eventTS != nil && usable && !withheld && ev.After(f.limit) {
		return &apierr.Error{Kind: apierr.KindInvalid, Reason: ReasonEventTimestampTooOld, Msg: fmt.Sprintf(
			"feature view '%s', entity row %d: the stored row is from %s, after the request's event_timestamp %s plus the %s tolerance: the request would use data from its own future",
			v.Name, r, ev.Format(time.RFC3339Nano), f.eventTS.UTC().Format(time.RFC3339Nano), f.s.opts.EventTimeTolerance)}
	}
	for _, ci := range vp.cols {
		why := ""
		switch {
		case corrupt != nil:
			why = unreadableCorrupt
		case lay != nil:
			why = lay.reason(f.p.cols[ci].field)
		}
		if why != "" {
			f.setNotFound(ci, r)
			col := &f.resp.Results[len(f.p.keys)+ci]
			if col.Unreadable == nil {
				col.Unreadable = make([]string, len(col.Values))
			}
			col.Unreadable[r] = why
			f.s.unreadable(v.Name, why, res.Record.Schema, corrupt, f.now)
			continue
		}
		col := &f.resp.Results[len(f.p.keys)+ci]
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
		f.counts[st]++
	}
	return nil
}

// decode decodes a stored row straight into row r of vp's columns. A row
// written with another schema decodes with that schema, by feature name
// (never by position): lay maps it, its features that the current schema
// lacks are skipped, and current features it lacks, or has with another
// type, are left for row to mark. lay is nil for a row of the current
// schema. A row that does not decode (corrupt) is not a request error:
// the other rows still answer.
func (f *filler) decode(ctx context.Context, vp *viewPlan, r int, rec feature.Record) (lay *rowLayout, corrupt, err error) {
	if rec.Schema != vp.schema {
		if lay, err = f.s.layout(ctx, vp, rec.Schema, f.now); err != nil {
			return nil, nil, err
		}
	}
	schema := rowSchema(vp, lay)
	if schema == nil {
		return lay, nil, nil // an unknown schema: nothing to decode
	}
	// Feature column ci's row r is cell ci*n+r of the response's values.
	n := f.sc.rows
	at := grow(f.sc.at, len(schema))
	f.sc.at = at
	for fi := range schema {
		ci := -1
		switch {
		case lay == nil:
			ci = vp.fieldCols[fi]
		case lay.m.ToCur[fi] >= 0:
			ci = vp.fieldCols[lay.m.ToCur[fi]]
		}
		if ci < 0 {
			at[fi] = -1
		} else {
			at[fi] = ci*n + r
		}
	}
	return lay, feature.DecodeValuesAt(rec.Payload, schema, f.resp.mem.values, at), nil
}

// rowSchema is the schema a row decodes with: the view's own, or the
// one lay maps from (nil when unknown).
func rowSchema(vp *viewPlan, lay *rowLayout) []feature.Field {
	if lay == nil {
		return vp.view.Schema
	}
	return lay.m.Old
}
