package httpapi

import (
	"encoding/binary"
	"math"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
)

// appendScalars appends the scalar at the scanner's position to out, as
// appendElement does, and, for FP32 and INT64 data, the run of numbers
// that follows it in the same array: k is how many elements it appended.
// n is the shape's element count (-1 when unknown) and count the elements
// read so far; a run stops before the element that would exceed n, so the
// caller reports the excess as it would for any element.
//
// FP32 and INT64 numbers, the common payloads, take kservewire's
// one-function scanners (no Number, no datatype switch, no bookkeeping of
// the caller per element). Whatever those leave (malformed literals,
// values strconv must decide, other datatypes, anything but a number after
// a comma) goes back to the caller's general path, which also words every
// error, so the two paths accept, round and reject alike.
func (d *decoder) appendScalars(out []byte, t *inputState, count, n int) (_ []byte, k int, err error) {
	room := math.MaxInt
	if n >= 0 {
		room = n - count
	}
	switch t.dt {
	case infer.FP32:
		out, k = d.s.appendFloat32Run(out, room)
	case infer.Int64:
		out, k = d.s.appendInt64Run(out, room)
	default: // every other datatype: the general path, one element
	}
	if k > 0 {
		return out, k, nil
	}
	out, err = d.appendElement(out, t, count)
	return out, 1, err
}

// appendFloat32Run appends at most room FP32 elements: the number at the
// scanner's position and those that follow it after commas, as long as
// kservewire.ScanFloat32 answers each. The scanner ends just after the
// last element it appended (or where it started, when k is 0), before the
// comma of any element it left.
func (s *scanner) appendFloat32Run(out []byte, room int) (_ []byte, k int) {
	for at := s.pos; k < room; {
		f, end, ok := kservewire.ScanFloat32(s.buf, at)
		if !ok {
			break
		}
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
		s.pos = end
		k++
		if at, ok = s.nextRunElement(); !ok {
			break
		}
	}
	return out, k
}

// appendInt64Run is appendFloat32Run for INT64 elements.
func (s *scanner) appendInt64Run(out []byte, room int) (_ []byte, k int) {
	for at := s.pos; k < room; {
		v, end, ok := kservewire.ScanInt64(s.buf, at)
		if !ok {
			break
		}
		out = binary.LittleEndian.AppendUint64(out, uint64(v))
		s.pos = end
		k++
		if at, ok = s.nextRunElement(); !ok {
			break
		}
	}
	return out, k
}

// nextRunElement returns where the next element starts when a ',' (with
// space around it) and a number follow the scanner's position; it moves
// nothing, so an element the run does not take is left, comma and all, to
// the caller's general path.
func (s *scanner) nextRunElement() (at int, ok bool) {
	i := s.pos
	for i < len(s.buf) && isSpace(s.buf[i]) {
		i++
	}
	if i >= len(s.buf) || s.buf[i] != ',' {
		return 0, false
	}
	i++
	for i < len(s.buf) && isSpace(s.buf[i]) {
		i++
	}
	if i >= len(s.buf) || (s.buf[i] != '-' && s.buf[i]-'0' > 9) {
		return 0, false
	}
	return i, true
}

// isSpace reports JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
