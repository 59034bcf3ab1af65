package record

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Spool defaults and limits.
const (
	// DefaultSpoolMaxBytes bounds a spool whose options leave MaxBytes 0.
	DefaultSpoolMaxBytes = 1 << 30
	// MinSpoolMaxBytes is the smallest bound a spool takes.
	MinSpoolMaxBytes = 16 << 10
	// maxSegmentBytes caps the default segment size.
	maxSegmentBytes = 64 << 20
	// maxFramePayload bounds one frame's payload; a larger length field is
	// corruption (records are far smaller: NATS refuses messages over 1 MiB
	// by default).
	maxFramePayload = 64 << 20
)

// SpoolPolicy says what a Writer does with a record that does not fit in
// its full spool.
type SpoolPolicy string

// The spool policies.
const (
	// SpoolDropNewest discards the record that does not fit and counts it
	// (WriterStats.DroppedByPolicy): the writer keeps taking records, and
	// what the spool already holds is kept. The default.
	SpoolDropNewest SpoolPolicy = "drop_newest"
	// SpoolBlock makes the writer wait for room (the drainer frees a
	// segment once the sink stored it). Offer still never blocks: the
	// writer's queue fills and Offer drops, so the loss moves in front of
	// "accepted" (WriterStats.Dropped). What is still queued when Close
	// gives up is dropped by policy.
	SpoolBlock SpoolPolicy = "block"
)

// SpoolOptions configures a Spool.
type SpoolOptions struct {
	// Dir holds the segment files; it is created if missing. One process
	// uses a directory at a time (it is locked).
	Dir string
	// MaxBytes bounds the spool's files on disk together. Default
	// DefaultSpoolMaxBytes; at least MinSpoolMaxBytes.
	MaxBytes int64
	// SegmentBytes is the size at which the spool starts a new segment
	// file. Default MaxBytes/8, at most 64 MiB. A drained segment's space
	// is freed when the whole segment has been stored.
	SegmentBytes int64
	// Full is the policy for a record that does not fit. Default
	// SpoolDropNewest.
	Full SpoolPolicy
}

// Spool is a Writer's local store for records its sink could not take: an
// append-only sequence of segment files in one directory, read back in
// order.
//
// A segment is the 8-byte magic "SLSPOOL1" followed by frames: a
// little-endian uint32 payload length, the payload's CRC-32C (uint32) and
// the payload (the dedup id, the service and the record's JSON). Each
// append is one write per segment followed by fsync, so an append that
// returned is on disk. Space is bounded by MaxBytes over all segment
// files. A cursor file remembers how far the drain got; it is replaced
// (not fsynced) after each drained batch, so a crash can make the next
// process publish some records again, which the dedup ids absorb.
//
// Open checks every segment: a torn or corrupt tail (a crash during an
// append, a bad disk) is cut off at the last good frame and its bytes are
// counted (TruncatedBytes). Segments from an earlier process are only
// read; appends go to new segments. A Spool is used by one Writer.
type Spool struct {
	opts SpoolOptions
	log  *slog.Logger
	lock *os.File

	mu      sync.Mutex // protects the fields below
	segs    []*segment // oldest first; the last takes appends when w is set
	w       *os.File   // append handle of the last segment; nil: the next append starts a segment
	rf      *os.File   // read handle of segs[0]
	rseq    uint64     // segment rf reads
	bytes   int64      // the segments' sizes together
	records int        // frames after the cursor
	cur     position   // the first frame not yet drained, in segs[0]
	peeked  []position // after each entry of the last peek
	nextSeq uint64
	closed  bool
	space   chan struct{} // signalled when a drained segment is removed

	recovered int   // records found at open
	truncated int64 // corrupt bytes cut off at open
}

// segment is one spool file.
type segment struct {
	seq    uint64
	path   string
	size   int64 // bytes on disk, header included
	frames int   // frames in it
}

// position is a place in the first segment: a byte offset and the number
// of frames before it.
type position struct {
	off   int64
	frame int
}

var (
	spoolMagic  = []byte("SLSPOOL1")
	cursorMagic = []byte("SLCUR1\x00\x00")
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)

	errSpoolFull     = errors.New("spool full")
	errSpoolTooLarge = errors.New("record larger than the spool")
	errSpoolClosed   = errors.New("spool closed")
)

const (
	frameHeader   = 8
	segmentSuffix = ".spool"
	cursorName    = "cursor"
	lockName      = "LOCK"
)

// OpenSpool opens (creating if needed) the spool in opts.Dir, locks it,
// checks its segments and finds where the drain stopped. A nil logger
// discards.
func OpenSpool(opts SpoolOptions, logger *slog.Logger) (*Spool, error) {
	if opts.Dir == "" {
		return nil, errors.New("open spool: no directory")
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultSpoolMaxBytes
	}
	if opts.MaxBytes < MinSpoolMaxBytes {
		return nil, fmt.Errorf("open spool: max bytes %d below %d", opts.MaxBytes, MinSpoolMaxBytes)
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = min(opts.MaxBytes/8, maxSegmentBytes)
	}
	switch opts.Full {
	case "":
		opts.Full = SpoolDropNewest
	case SpoolDropNewest, SpoolBlock:
	default:
		return nil, fmt.Errorf("open spool: unknown full policy %q", opts.Full)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	lock, err := lockDir(filepath.Join(opts.Dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("open spool %s: %w", opts.Dir, err)
	}
	s := &Spool{
		opts:  opts,
		log:   logger.With("component", "record_spool", "dir", opts.Dir),
		lock:  lock,
		space: make(chan struct{}, 1),
	}
	if err := s.load(); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open spool %s: %w", opts.Dir, err)
	}
	s.recovered = s.records
	if s.records > 0 || s.truncated > 0 {
		s.log.Info("recording spool opened", "records", s.records, "bytes", s.bytes, "truncated_bytes", s.truncated)
	}
	return s, nil
}

// load lists and checks the segments and applies the cursor.
func (s *Spool) load() error {
	names, err := filepath.Glob(filepath.Join(s.opts.Dir, "*"+segmentSuffix))
	if err != nil {
		return err
	}
	for _, name := range names {
		seq, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(name), segmentSuffix), 10, 64)
		if err != nil {
			continue // not ours
		}
		s.segs = append(s.segs, &segment{seq: seq, path: name})
	}
	slices.SortFunc(s.segs, func(a, b *segment) int { return cmp.Compare(a.seq, b.seq) })
	cseq, coff, cok := s.readCursor()
	var keep []*segment
	for _, g := range s.segs {
		s.nextSeq = max(s.nextSeq, g.seq+1)
		if cok && g.seq < cseq {
			// Drained before the last run stopped; removal did not finish.
			if err := os.Remove(g.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		offs, cut, err := scanSegment(g.path)
		if err != nil {
			return err
		}
		if cut > 0 {
			s.truncated += cut
			s.log.Warn("recording spool segment has a corrupt tail; cut off", "file", g.path, "bytes", cut)
		}
		g.frames = len(offs) - 1
		g.size = offs[len(offs)-1]
		if g.frames == 0 {
			if err := os.Remove(g.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		if cok && g.seq == cseq && len(keep) == 0 {
			i, found := slices.BinarySearch(offs, coff)
			if !found {
				s.log.Warn("recording spool cursor is not at a frame; draining the segment from its start", "file", g.path, "offset", coff)
				i = 0
			}
			s.cur = position{off: offs[i], frame: i}
		}
		keep = append(keep, g)
	}
	s.segs = keep
	if len(keep) > 0 && (!cok || keep[0].seq != cseq) {
		s.cur = position{off: int64(len(spoolMagic))}
	}
	for i, g := range s.segs {
		s.bytes += g.size
		s.records += g.frames
		if i == 0 {
			s.records -= s.cur.frame
		}
	}
	if len(s.segs) == 0 {
		return s.removeCursor()
	}
	if s.segs[0].frames == s.cur.frame {
		return s.dropFirstLocked()
	}
	return nil
}

// scanSegment checks a segment file frame by frame and cuts off whatever
// follows the last good frame. It returns the offset of every frame and,
// last, the end of the good data, and how many bytes it cut.
func scanSegment(path string) (offs []int64, cut int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	offs, end := parseSegment(data)
	if end == int64(len(data)) {
		return offs, 0, nil
	}
	cut = int64(len(data)) - end
	if end == 0 {
		// Not even the magic: the file holds nothing readable. Rewrite it
		// as an empty segment (which load then removes).
		cut = int64(len(data))
		offs = []int64{int64(len(spoolMagic))}
		return offs, cut, os.WriteFile(path, spoolMagic, 0o600)
	}
	return offs, cut, truncateSync(path, end)
}

// parseSegment returns the offsets of the good frames of a segment file
// followed by the end of the good data (0 when the magic is wrong).
func parseSegment(data []byte) (offs []int64, end int64) {
	if !bytes.HasPrefix(data, spoolMagic) {
		return []int64{0}, 0
	}
	off := int64(len(spoolMagic))
	offs = []int64{off}
	for {
		_, n, ok := parseFrame(data[off:])
		if !ok {
			return offs, off
		}
		off += int64(n)
		offs = append(offs, off)
	}
}

// parseFrame decodes the frame at the start of b and returns it and its
// length, or ok false when b does not start with a whole, intact frame.
func parseFrame(b []byte) (e entry, n int, ok bool) {
	if len(b) < frameHeader {
		return entry{}, 0, false
	}
	size := binary.LittleEndian.Uint32(b)
	sum := binary.LittleEndian.Uint32(b[4:])
	if size > maxFramePayload || uint64(len(b)-frameHeader) < uint64(size) {
		return entry{}, 0, false
	}
	p := b[frameHeader : frameHeader+int(size)]
	if crc32.Checksum(p, castagnoli) != sum {
		return entry{}, 0, false
	}
	e, ok = decodePayload(p)
	return e, frameHeader + int(size), ok
}

// decodePayload splits a frame payload into its entry; the entry's fields
// share p's memory.
func decodePayload(p []byte) (entry, bool) {
	id, p, ok := cutString(p)
	if !ok {
		return entry{}, false
	}
	service, p, ok := cutString(p)
	if !ok || len(p) == 0 {
		return entry{}, false
	}
	return entry{id: id, service: service, data: p}, true
}

func cutString(p []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return "", nil, false
	}
	return string(p[k : k+int(n)]), p[k+int(n):], true
}

// appendFrame appends e's frame to b.
func appendFrame(b []byte, e entry) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	b = binary.AppendUvarint(b, uint64(len(e.id)))
	b = append(b, e.id...)
	b = binary.AppendUvarint(b, uint64(len(e.service)))
	b = append(b, e.service...)
	b = append(b, e.data...)
	p := b[start+frameHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(p)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(p, castagnoli))
	return b
}

// frameSize is the size of e's frame.
func frameSize(e entry) int64 {
	return int64(frameHeader + uvarintLen(len(e.id)) + len(e.id) + uvarintLen(len(e.service)) + len(e.service) + len(e.data))
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// truncateSync cuts path to size and fsyncs it.
func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Pending returns the records the spool holds (not yet drained) and the
// size of its segment files.
func (s *Spool) Pending() (records int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records, s.bytes
}

// pendingRecords is Pending's record count.
func (s *Spool) pendingRecords() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records
}

// Recovered returns the records the spool held when it was opened and the
// corrupt bytes Open cut off.
func (s *Spool) Recovered() (records int, truncatedBytes int64) {
	return s.recovered, s.truncated
}

// Policy returns the spool's full policy.
func (s *Spool) Policy() SpoolPolicy { return s.opts.Full }

// Dir returns the spool's directory.
func (s *Spool) Dir() string { return s.opts.Dir }

// fits reports whether e fits in an empty spool.
func (s *Spool) fits(e entry) bool {
	return int64(len(spoolMagic))+frameSize(e) <= s.opts.MaxBytes
}

// append writes es in order, one write and fsync per segment touched, and
// returns how many it wrote. It stops at the first entry that does not
// fit (errSpoolFull; errSpoolTooLarge when it never could) or at an I/O
// error; a failed write is cut off again, so readers never see a torn
// frame.
func (s *Spool) append(es []entry) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errSpoolClosed
	}
	magic := int64(len(spoolMagic))
	var buf []byte
	n := 0
	for n < len(es) {
		if s.w == nil {
			if err := s.newSegmentLocked(); err != nil {
				return n, err
			}
		}
		seg := s.segs[len(s.segs)-1]
		buf = buf[:0]
		k := n
		var stop error
		for ; k < len(es); k++ {
			e := es[k]
			size := frameSize(e)
			if !s.fits(e) {
				stop = errSpoolTooLarge
				break
			}
			if s.bytes+int64(len(buf))+size > s.opts.MaxBytes {
				stop = errSpoolFull
				break
			}
			if used := seg.size + int64(len(buf)); used > magic && used+size > s.opts.SegmentBytes {
				break // this segment is full
			}
			buf = appendFrame(buf, e)
		}
		if len(buf) > 0 {
			if err := s.writeLocked(seg, buf, k-n); err != nil {
				return n, err
			}
			n = k
		}
		if stop != nil {
			return n, stop
		}
		if n < len(es) {
			s.rollLocked()
		}
	}
	return n, nil
}

// writeLocked appends buf, holding frames frames, to seg (the append
// target) and fsyncs it.
func (s *Spool) writeLocked(seg *segment, buf []byte, frames int) error {
	_, err := s.w.Write(buf)
	if err == nil {
		err = s.w.Sync()
	}
	if err != nil {
		// Cut the write off again; if that fails too, stop appending to
		// this file (the next Open cuts the torn tail and counts it).
		if terr := errors.Join(s.w.Truncate(seg.size), s.w.Sync()); terr != nil {
			s.rollLocked()
		}
		return fmt.Errorf("spool append: %w", err)
	}
	seg.size += int64(len(buf))
	seg.frames += frames
	s.bytes += int64(len(buf))
	s.records += frames
	return nil
}

// newSegmentLocked starts a segment file and makes it the append target.
func (s *Spool) newSegmentLocked() error {
	seq := s.nextSeq
	s.nextSeq++
	path := filepath.Join(s.opts.Dir, fmt.Sprintf("%020d%s", seq, segmentSuffix))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("spool segment: %w", err)
	}
	_, err = f.Write(spoolMagic)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(s.opts.Dir)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("spool segment: %w", err)
	}
	s.w = f
	if len(s.segs) == 0 {
		s.cur = position{off: int64(len(spoolMagic))}
	}
	s.segs = append(s.segs, &segment{seq: seq, path: path, size: int64(len(spoolMagic))})
	s.bytes += int64(len(spoolMagic))
	return nil
}

// rollLocked stops appending to the current segment.
func (s *Spool) rollLocked() {
	if s.w != nil {
		_ = s.w.Close() // every write was fsynced
		s.w = nil
	}
}

// spoolCorruptError reports frames that went bad after Open checked them.
type spoolCorruptError struct {
	path   string
	frames int
}

func (e *spoolCorruptError) Error() string {
	return fmt.Sprintf("spool segment %s: %d records unreadable (corrupted on disk)", e.path, e.frames)
}

// peek returns up to max entries (and about maxBytes, at least one entry)
// from the drain position on, in append order, without draining them;
// ack drains a prefix of them. It returns nothing when the spool is
// empty. Frames that have gone bad on disk since Open are skipped, and
// reported with a *spoolCorruptError naming how many.
func (s *Spool) peek(maxEntries int, maxBytes int64) ([]entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peeked = s.peeked[:0]
	if s.closed {
		return nil, errSpoolClosed
	}
	for len(s.segs) > 0 && s.cur.frame >= s.segs[0].frames {
		if len(s.segs) == 1 {
			return nil, nil
		}
		if err := s.dropFirstLocked(); err != nil {
			return nil, err
		}
	}
	if len(s.segs) == 0 {
		return nil, nil
	}
	g := s.segs[0]
	if s.rf == nil || s.rseq != g.seq {
		if s.rf != nil {
			_ = s.rf.Close()
		}
		f, err := os.Open(g.path)
		if err != nil {
			s.rf = nil
			return nil, fmt.Errorf("spool read: %w", err)
		}
		s.rf, s.rseq = f, g.seq
	}
	base := s.cur.off // the file offset of buf[0]
	buf, err := s.readAt(base, min(g.size-base, max(maxBytes, frameHeader)))
	if err != nil {
		return nil, err
	}
	var out []entry
	pos := s.cur
	for len(out) < maxEntries && pos.frame < g.frames {
		b := buf[pos.off-base:]
		need := int64(-1) // the frame's length, when its header is intact
		if len(b) >= frameHeader {
			if size := binary.LittleEndian.Uint32(b); size <= maxFramePayload && pos.off+frameHeader+int64(size) <= g.size {
				need = frameHeader + int64(size)
			}
		} else if len(out) > 0 {
			break // the header is past maxBytes: the next peek reads it
		}
		if need > int64(len(b)) {
			if len(out) > 0 {
				break // the frame is past maxBytes: the next peek reads it
			}
			// A first frame larger than maxBytes: read all of it.
			if buf, err = s.readAt(pos.off, need); err != nil {
				return nil, err
			}
			base, b = pos.off, buf
		}
		var e entry
		ok := need > 0
		if ok {
			var n int
			e, n, ok = parseFrame(b[:need])
			ok = ok && int64(n) == need
		}
		if !ok {
			if len(out) > 0 {
				break // return the good ones; the next peek reports this
			}
			lost := g.frames - pos.frame
			s.records -= lost
			s.cur = position{off: g.size, frame: g.frames}
			s.writeCursorLocked()
			return nil, &spoolCorruptError{path: g.path, frames: lost}
		}
		pos = position{off: pos.off + need, frame: pos.frame + 1}
		out = append(out, e)
		s.peeked = append(s.peeked, pos)
	}
	return out, nil
}

// readAt reads n bytes at off of the segment rf reads.
func (s *Spool) readAt(off, n int64) ([]byte, error) {
	buf := make([]byte, n)
	if _, err := s.rf.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("spool read: %w", err)
	}
	return buf, nil
}

// ack drains the first k entries of the last peek.
func (s *Spool) ack(k int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k <= 0 || k > len(s.peeked) {
		return nil
	}
	p := s.peeked[k-1]
	s.peeked = s.peeked[:0]
	s.records -= p.frame - s.cur.frame
	s.cur = p
	g := s.segs[0]
	if s.cur.frame < g.frames {
		s.writeCursorLocked()
		return nil
	}
	if len(s.segs) > 1 {
		return s.dropFirstLocked()
	}
	// Everything is drained: remove the last segment too (appends start
	// a new one).
	s.rollLocked()
	return s.dropFirstLocked()
}

// dropFirstLocked removes the first segment, fully drained.
func (s *Spool) dropFirstLocked() error {
	g := s.segs[0]
	if s.rf != nil && s.rseq == g.seq {
		_ = s.rf.Close()
		s.rf = nil
	}
	if len(s.segs) == 1 {
		s.rollLocked()
	}
	if err := os.Remove(g.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: remove drained segment: %w", err)
	}
	s.segs = s.segs[1:]
	s.bytes -= g.size
	s.cur = position{off: int64(len(spoolMagic))}
	select {
	case s.space <- struct{}{}:
	default:
	}
	return s.removeCursor()
}

// spaceFreed is signalled when a drained segment is removed.
func (s *Spool) spaceFreed() <-chan struct{} { return s.space }

// writeCursorLocked records the drain position; a failure only means the
// next process drains (and deduplicates) a little more.
func (s *Spool) writeCursorLocked() {
	b := make([]byte, 0, 28)
	b = append(b, cursorMagic...)
	b = binary.LittleEndian.AppendUint64(b, s.segs[0].seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.cur.off))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := filepath.Join(s.opts.Dir, cursorName+".tmp")
	err := os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.opts.Dir, cursorName))
	}
	if err != nil {
		s.log.Warn("recording spool cursor not saved", "err", err)
	}
}

// readCursor returns the saved drain position, ok false when there is
// none or it is damaged.
func (s *Spool) readCursor() (seq uint64, off int64, ok bool) {
	b, err := os.ReadFile(filepath.Join(s.opts.Dir, cursorName))
	if err != nil || len(b) != 28 || !bytes.HasPrefix(b, cursorMagic) ||
		crc32.Checksum(b[:24], castagnoli) != binary.LittleEndian.Uint32(b[24:]) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b[8:]), int64(binary.LittleEndian.Uint64(b[16:])), true
}

func (s *Spool) removeCursor() error {
	err := os.Remove(filepath.Join(s.opts.Dir, cursorName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: remove cursor: %w", err)
	}
	return nil
}

// Close releases the spool's files and its lock; what it holds stays for
// the next Open. A Writer closes its spool.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.rollLocked()
	if s.rf != nil {
		_ = s.rf.Close()
		s.rf = nil
	}
	// A last segment that took no frames is removed (Open would anyway).
	if n := len(s.segs); n > 0 && s.segs[n-1].frames == 0 && (n > 1 || s.cur.frame == 0) {
		_ = os.Remove(s.segs[n-1].path)
		s.bytes -= s.segs[n-1].size
		s.segs = s.segs[:n-1]
	}
	return unlockDir(s.lock)
}
