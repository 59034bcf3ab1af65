package aggregate

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/sluice-ml/sluice/internal/feature"
)

// ErrCorrupt reports stored tiles that do not decode.
var ErrCorrupt = errors.New("corrupt stream tiles")

const stateTag = 1

// Append appends st's storage form to dst: a tag, the layout id, the
// version, newest event time and prune floor, then each tile with its
// sequence numbers (delta-coded) and column aggregates.
func (st *State) Append(dst []byte, s *Spec) []byte {
	dst = append(dst, stateTag)
	dst = binary.LittleEndian.AppendUint64(dst, s.id)
	dst = binary.AppendUvarint(dst, st.Version)
	dst = binary.AppendVarint(dst, st.Newest)
	dst = binary.AppendVarint(dst, st.floor)
	dst = binary.AppendUvarint(dst, uint64(len(st.tiles)))
	for i := range st.tiles {
		t := &st.tiles[i]
		dst = binary.AppendVarint(dst, t.idx)
		dst = binary.AppendUvarint(dst, uint64(t.events))
		dst = binary.AppendUvarint(dst, uint64(len(t.seqs)))
		prev := uint64(0)
		for _, q := range t.seqs {
			dst = binary.AppendUvarint(dst, q-prev)
			prev = q
		}
		for c := range t.cols {
			cs := &t.cols[c]
			dst = binary.AppendUvarint(dst, uint64(cs.n))
			if cs.n == 0 {
				continue
			}
			dst = appendPartials(dst, cs.sum)
			dst = appendPartials(dst, cs.sq)
			dst = appendF64(dst, cs.min)
			dst = appendF64(dst, cs.max)
			dst = binary.AppendVarint(dst, cs.lastTS)
			dst = binary.AppendUvarint(dst, cs.lastSeq)
			dst = appendF64(dst, cs.last)
		}
	}
	return dst
}

func appendF64(dst []byte, x float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
}

func appendPartials(dst []byte, p partials) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(p)))
	for _, x := range p {
		dst = appendF64(dst, x)
	}
	return dst
}

// Decode parses a stored state. Tiles of another layout (the view's tile
// size or columns changed) are dropped: the state keeps its version, so
// the next write still replaces the stored one, and starts over.
func Decode(b []byte, s *Spec) (*State, error) { return decode(b, s, false) }

// DecodeForRead is Decode for a state that is only read (Values): it
// skips the applied sequence numbers and allocates the tiles in a few
// blocks. Apply must not be called on its result.
func DecodeForRead(b []byte, s *Spec) (*State, error) { return decode(b, s, true) }

func decode(b []byte, s *Spec, readOnly bool) (*State, error) {
	d := dec{b: b}
	if d.byte() != stateTag {
		return nil, ErrCorrupt
	}
	id := d.u64()
	st := NewState()
	st.Version = d.uvarint()
	if d.bad {
		return nil, ErrCorrupt
	}
	if id != s.id {
		return st, nil
	}
	st.Newest = d.varint()
	st.floor = d.varint()
	nt := d.count(2)
	st.tiles = make([]tile, 0, nt)
	var cols []colState
	var floats []float64
	if readOnly {
		cols = make([]colState, nt*len(s.Columns))
		floats = make([]float64, 0, len(d.b)/8)
	}
	for ti := range nt {
		t := tile{idx: d.varint(), events: int64(d.uvarint())}
		ns := d.count(1)
		if !readOnly {
			t.seqs = make([]uint64, ns)
		}
		prev := uint64(0)
		for i := range ns {
			prev += d.uvarint()
			if !readOnly {
				t.seqs[i] = prev
			}
		}
		if readOnly {
			n := len(s.Columns)
			t.cols = cols[ti*n : (ti+1)*n : (ti+1)*n]
		} else {
			t.cols = make([]colState, len(s.Columns))
		}
		for c := range t.cols {
			cs := &t.cols[c]
			cs.n = int64(d.uvarint())
			if cs.n == 0 {
				continue
			}
			if readOnly {
				cs.sum, floats = d.partialsInto(floats)
				cs.sq, floats = d.partialsInto(floats)
			} else {
				cs.sum = d.partials()
				cs.sq = d.partials()
			}
			cs.min, cs.max = d.f64(), d.f64()
			cs.lastTS, cs.lastSeq, cs.last = d.varint(), d.uvarint(), d.f64()
		}
		if d.bad || t.events < 0 {
			return nil, ErrCorrupt
		}
		if n := len(st.tiles); n > 0 && st.tiles[n-1].idx >= t.idx {
			return nil, ErrCorrupt
		}
		st.tiles = append(st.tiles, t)
	}
	if d.bad || len(d.b) != 0 {
		return nil, ErrCorrupt
	}
	return st, nil
}

type dec struct {
	b   []byte
	bad bool
}

func (d *dec) byte() byte {
	if len(d.b) < 1 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *dec) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		d.b = nil
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *dec) f64() float64 { return math.Float64frombits(d.u64()) }

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length whose elements take at least min bytes each, so
// a corrupt length cannot allocate more than the input could hold.
func (d *dec) count(minBytes int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/minBytes) {
		d.bad = true
		d.b = nil
		return 0
	}
	return int(n)
}

// partialsInto reads partials into the free capacity of arena, returning
// them (capped, so appending to them copies) and the grown arena.
func (d *dec) partialsInto(arena []float64) (partials, []float64) {
	n := d.count(8)
	start := len(arena)
	for range n {
		arena = append(arena, d.f64())
	}
	return partials(arena[start:len(arena):len(arena)]), arena
}

func (d *dec) partials() partials {
	n := d.count(8)
	p := make(partials, n)
	for i := range p {
		p[i] = d.f64()
	}
	return p
}

// countEvents adds the ev events of tile idx to the event count of each
// window group whose window, ending at tile cur, holds that tile.
func (s *Spec) countEvents(idx, cur, ev int64, events []int64) {
	for gi, g := range s.groups {
		if idx > cur-g.tiles && idx <= cur {
			events[gi] += ev
		}
	}
}

// mergeColumn merges column c's state in tile idx into the accumulator of
// each window group of that column whose window, ending at tile cur,
// holds that tile.
func (s *Spec) mergeColumn(c int, idx, cur int64, cs *colState, accs []colState) {
	for gi, g := range s.groups {
		if g.col == c && idx > cur-g.tiles && idx <= cur {
			accs[gi].merge(cs)
		}
	}
}

// ValuesAt computes the features of a stored state at time t (ns), as
// Decode followed by State.Values would, in one pass over the bytes and
// without building the tiles: the read path. found is false when no event
// was ever applied (or the tiles are of another layout); newest is the
// newest applied event time.
func ValuesAt(b []byte, s *Spec, t int64, out []feature.Value) (newest int64, found bool, err error) {
	d := dec{b: b}
	if d.byte() != stateTag {
		return 0, false, ErrCorrupt
	}
	id := d.u64()
	d.uvarint() // version
	if d.bad {
		return 0, false, ErrCorrupt
	}
	if id != s.id {
		return 0, false, nil
	}
	newest = d.varint()
	d.varint() // floor
	nt := d.count(2)
	cur := s.tileOf(t)
	accs := make([]colState, len(s.groups))
	events := make([]int64, len(s.groups))
	var scratch [2][]float64
	prev, first := int64(0), true
	for range nt {
		idx := d.varint()
		ev := int64(d.uvarint())
		if !first && idx <= prev {
			return 0, false, ErrCorrupt
		}
		prev, first = idx, false
		for range d.count(1) {
			d.uvarint()
		}
		s.countEvents(idx, cur, ev, events)
		for c := range s.Columns {
			var cs colState
			cs.n = int64(d.uvarint())
			if cs.n == 0 {
				continue
			}
			for k := range 2 {
				n := d.count(8)
				scratch[k] = scratch[k][:0]
				for range n {
					scratch[k] = append(scratch[k], d.f64())
				}
			}
			cs.sum, cs.sq = scratch[0], scratch[1]
			cs.min, cs.max = d.f64(), d.f64()
			cs.lastTS, cs.lastSeq, cs.last = d.varint(), d.uvarint(), d.f64()
			s.mergeColumn(c, idx, cur, &cs, accs)
		}
		if d.bad || ev < 0 {
			return 0, false, ErrCorrupt
		}
	}
	if d.bad || len(d.b) != 0 {
		return 0, false, ErrCorrupt
	}
	if newest == 0 && nt == 0 {
		return 0, false, nil
	}
	for fi, f := range s.feats {
		out[fi] = value(f, events[f.group], &accs[f.group])
	}
	return newest, true, nil
}
