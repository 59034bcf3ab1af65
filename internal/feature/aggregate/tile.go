package aggregate

import (
	"math"
	"slices"
	"sort"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Event is one decoded stream event.
type Event struct {
	Seq     uint64 // stream sequence number: the event's identity
	Arrival int64  // when the stream stored it, ns since the epoch
	Time    int64  // event time, ns since the epoch
	// Values holds one value per Spec column; NaN marks a column the
	// event does not carry.
	Values []float64
}

// Outcome says what Apply did with an event.
type Outcome uint8

// The outcomes.
const (
	Applied   Outcome = iota // added to its tile
	Duplicate                // its tile had applied it already (a replay)
	Late                     // older than its arrival minus the allowed lateness: dropped
	Expired                  // its tile is older than every window: dropped
)

// colState is one column's aggregate in one tile.
type colState struct {
	n        int64
	sum, sq  partials
	min, max float64
	lastTS   int64
	lastSeq  uint64
	last     float64
}

func (c *colState) add(x float64, ts int64, seq uint64) {
	if c.n == 0 || x < c.min {
		c.min = x
	}
	if c.n == 0 || x > c.max {
		c.max = x
	}
	if c.n == 0 || ts > c.lastTS || (ts == c.lastTS && seq > c.lastSeq) {
		c.lastTS, c.lastSeq, c.last = ts, seq, x
	}
	c.n++
	c.sum = c.sum.add(x)
	c.sq = c.sq.add(x * x)
}

// merge folds o into c.
func (c *colState) merge(o *colState) {
	if o.n == 0 {
		return
	}
	if c.n == 0 || o.min < c.min {
		c.min = o.min
	}
	if c.n == 0 || o.max > c.max {
		c.max = o.max
	}
	if c.n == 0 || o.lastTS > c.lastTS || (o.lastTS == c.lastTS && o.lastSeq > c.lastSeq) {
		c.lastTS, c.lastSeq, c.last = o.lastTS, o.lastSeq, o.last
	}
	c.n += o.n
	c.sum = c.sum.merge(o.sum)
	c.sq = c.sq.merge(o.sq)
}

type tile struct {
	idx    int64
	events int64
	seqs   []uint64 // applied sequence numbers, ascending
	cols   []colState
}

// State is one entity's tiles of one stream view: what the online store
// keeps per (view, entity), and what historical retrieval rebuilds from
// the event log.
type State struct {
	// Version counts the writes of this state; the online store's
	// compare-and-set on it keeps concurrent aggregators from losing
	// each other's updates.
	Version uint64
	// Newest is the newest applied event time (ns), 0 before any.
	Newest int64
	// floor is the lowest tile index still kept: tiles below it were
	// pruned (they lie outside every window from then on).
	floor int64
	tiles []tile // ascending idx
}

// NewState returns an empty state.
func NewState() *State { return &State{floor: math.MinInt64} }

// Empty reports whether no event was ever applied.
func (st *State) Empty() bool { return st.Newest == 0 && len(st.tiles) == 0 }

// Apply adds ev to its tile unless it is late, expired or already there.
func (st *State) Apply(s *Spec, ev *Event) Outcome {
	if ev.Time < ev.Arrival-s.lateness {
		return Late
	}
	idx := s.tileOf(ev.Time)
	if idx < st.floor {
		return Expired
	}
	i := sort.Search(len(st.tiles), func(i int) bool { return st.tiles[i].idx >= idx })
	if i == len(st.tiles) || st.tiles[i].idx != idx {
		st.tiles = slices.Insert(st.tiles, i, tile{idx: idx, cols: make([]colState, len(s.Columns))})
	}
	t := &st.tiles[i]
	j, found := slices.BinarySearch(t.seqs, ev.Seq)
	if found {
		return Duplicate
	}
	t.seqs = slices.Insert(t.seqs, j, ev.Seq)
	t.events++
	for c := range t.cols {
		if c < len(ev.Values) && !math.IsNaN(ev.Values[c]) {
			t.cols[c].add(ev.Values[c], ev.Time, ev.Seq)
		}
	}
	if ev.Time > st.Newest || st.Newest == 0 {
		st.Newest = ev.Time
	}
	return Applied
}

// Prune drops the tiles no window at time now or later reads, keeping
// margin extra tiles for readers whose clocks lag.
func (st *State) Prune(s *Spec, now int64, margin int64) {
	floor := s.tileOf(now) - s.maxTiles + 1 - margin
	if floor <= st.floor {
		return
	}
	st.floor = floor
	i := sort.Search(len(st.tiles), func(i int) bool { return st.tiles[i].idx >= floor })
	st.tiles = slices.Delete(st.tiles, 0, i)
}

// Values computes every feature of s at time t (ns) into out (one per
// feature). Count and sum of an empty window are 0; the other functions
// are null there, and stddev below two values.
func (st *State) Values(s *Spec, t int64, out []feature.Value) {
	cur := s.tileOf(t)
	accs := make([]colState, len(s.groups))
	events := make([]int64, len(s.groups))
	for gi, g := range s.groups {
		lo := cur - g.tiles + 1
		for ti := range st.tiles {
			tl := &st.tiles[ti]
			if tl.idx < lo || tl.idx > cur {
				continue
			}
			events[gi] += tl.events
			if g.col >= 0 {
				accs[gi].merge(&tl.cols[g.col])
			}
		}
	}
	for fi, f := range s.feats {
		out[fi] = value(f, events[f.group], &accs[f.group])
	}
}

func value(f feat, events int64, c *colState) feature.Value {
	null := feature.Value{Null: true}
	switch f.fn {
	case Count:
		if f.col < 0 {
			return feature.Value{I64: events}
		}
		return feature.Value{I64: c.n}
	case Sum:
		return feature.Value{F64: c.sum.value()}
	case Mean:
		if c.n == 0 {
			return null
		}
		return feature.Value{F64: c.sum.value() / float64(c.n)}
	case Min:
		if c.n == 0 {
			return null
		}
		return feature.Value{F64: c.min}
	case Max:
		if c.n == 0 {
			return null
		}
		return feature.Value{F64: c.max}
	case Last:
		if c.n == 0 {
			return null
		}
		return feature.Value{F64: c.last}
	case Stddev:
		if c.n < 2 {
			return null
		}
		n := float64(c.n)
		sum, sq := c.sum.value(), c.sq.value()
		v := (sq - sum*(sum/n)) / (n - 1)
		if v < 0 {
			v = 0
		}
		return feature.Value{F64: math.Sqrt(v)}
	default:
		return null
	}
}
