package aggregate

import (
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Func is an aggregation function.
type Func uint8

// The aggregation functions.
const (
	Count  Func = iota + 1 // events in the window (of a column: events that carry it)
	Sum                    // sum of the column; 0 for an empty window
	Mean                   // sum / count; null for an empty window
	Min                    // null for an empty window
	Max                    // null for an empty window
	Last                   // the value of the event with the greatest event time (then sequence); null for an empty window
	Stddev                 // sample standard deviation; null below two values
)

var funcNames = [...]string{"", "count", "sum", "mean", "min", "max", "last", "stddev"}

// Funcs lists the function names, for error messages.
const Funcs = "count, sum, mean, min, max, last, stddev"

// ParseFunc parses a function name.
func ParseFunc(s string) (Func, bool) {
	i := slices.Index(funcNames[:], s)
	if i <= 0 {
		return 0, false
	}
	return Func(i), true
}

// String returns the function's name.
func (f Func) String() string {
	if int(f) < len(funcNames) {
		return funcNames[f]
	}
	return "invalid"
}

// Type is the feature type the function yields: Int64 for count,
// Float64 for the others.
func (f Func) Type() feature.Type {
	if f == Count {
		return feature.Type{Kind: feature.KindInt64}
	}
	return feature.Type{Kind: feature.KindFloat64}
}

// Spec is a stream feature view compiled for the tile arithmetic.
// It is immutable and shared.
type Spec struct {
	tile     int64 // ns
	lateness int64 // ns
	// Columns are the aggregated columns, in first-use order; events
	// carry one value per column.
	Columns []string
	feats   []feat
	// groups are the distinct (column, window) pairs of feats: the tiles
	// of each are combined once per read, whatever functions read them.
	groups []group
	// maxTiles is the longest window in tiles.
	maxTiles int64
	// id identifies the tile layout (tile size and columns): stored
	// tiles of another layout are discarded rather than misread.
	id uint64
}

type feat struct {
	fn    Func
	col   int // index into Columns; -1 for a count of events
	tiles int64
	group int // index into Spec.groups
}

type group struct {
	col   int
	tiles int64
}

// NewSpec compiles a stream view. Windows must be positive multiples of
// the tile size.
func NewSpec(v *feature.StreamView) (*Spec, error) {
	if v.Tile <= 0 {
		return nil, fmt.Errorf("tile size %s is not positive", v.Tile)
	}
	if v.AllowedLateness < 0 {
		return nil, fmt.Errorf("allowed lateness %s is negative", v.AllowedLateness)
	}
	s := &Spec{tile: int64(v.Tile), lateness: int64(v.AllowedLateness)}
	for _, a := range v.Aggregations {
		fn, ok := ParseFunc(a.Function)
		if !ok {
			return nil, fmt.Errorf("aggregation '%s': function %q is not one of %s", a.Name, a.Function, Funcs)
		}
		if a.Window <= 0 || a.Window%v.Tile != 0 {
			return nil, fmt.Errorf("aggregation '%s': window %s is not a positive multiple of the tile size %s", a.Name, a.Window, v.Tile)
		}
		f := feat{fn: fn, col: -1, tiles: int64(a.Window / v.Tile)}
		switch {
		case a.Column != "":
			f.col = slices.Index(s.Columns, a.Column)
			if f.col < 0 {
				f.col = len(s.Columns)
				s.Columns = append(s.Columns, a.Column)
			}
		case fn != Count:
			return nil, fmt.Errorf("aggregation '%s': %s needs a column", a.Name, fn)
		}
		g := group{col: f.col, tiles: f.tiles}
		f.group = slices.Index(s.groups, g)
		if f.group < 0 {
			f.group = len(s.groups)
			s.groups = append(s.groups, g)
		}
		s.feats = append(s.feats, f)
		s.maxTiles = max(s.maxTiles, f.tiles)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "tiles/1 %d", s.tile)
	for _, c := range s.Columns {
		fmt.Fprintf(h, "\x00%s", c)
	}
	s.id = h.Sum64()
	return s, nil
}

// Tile is the tile size.
func (s *Spec) Tile() time.Duration { return time.Duration(s.tile) }

// Features is how many features Values fills.
func (s *Spec) Features() int { return len(s.feats) }

// tileOf returns the index of the tile holding time t (ns).
func (s *Spec) tileOf(t int64) int64 {
	q := t / s.tile
	if t%s.tile < 0 {
		q--
	}
	return q
}
