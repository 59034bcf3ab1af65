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
	"syscall"
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
// Open checks every segment. A damaged frame (a bad disk, a stray write)
// is skipped to the next intact one, which Open finds by scanning forward
// for a frame whose length, structure and CRC check out: every intact
// record is kept, and the records in the damaged stretch are counted as
// records (Recovered). A torn or damaged tail with no intact frame after
// it (a crash during an append) is cut off and its bytes are counted.
// Segments from an earlier process are only read; appends go to new
// segments. A Spool is used by one Writer.
type Spool struct {
	opts SpoolOptions
	log  *slog.Logger
	lock *os.File

	mu      sync.Mutex // protects the fields below
	segs    []*segment // oldest first; the last takes appends when w is set
	w       appendFile // append handle of the last segment; nil: the next append starts a segment
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
	damaged   int   // records found damaged at open (not in recovered)
	truncated int64 // corrupt bytes cut off at open

	writeErrs    map[string]bool                  // write error causes already logged
	onWriteError func(cause string)               // counts a write error; set by the Writer
	openAppend   func(string) (appendFile, error) // opens a new segment for appends
}

// appendFile is what appends write to: an *os.File (tests inject
// failures through SpoolOptions-free hooks).
type appendFile interface {
	Write([]byte) (int, error)
	Sync() error
	Truncate(int64) error
	Close() error
}

func openAppendFile(path string) (appendFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
}

// segment is one spool file.
type segment struct {
	seq    uint64
	path   string
	size   int64 // bytes on disk, header included
	frames int   // frames in it
	// skips maps the start of each damaged stretch Open found (which
	// holds no intact frame) to the next intact frame after it.
	skips map[int64]int64
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
		opts:       opts,
		log:        logger.With("component", "record_spool", "dir", opts.Dir),
		lock:       lock,
		space:      make(chan struct{}, 1),
		writeErrs:  map[string]bool{},
		openAppend: openAppendFile,
	}
	if err := s.load(); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("open spool %s: %w", opts.Dir, err)
	}
	s.recovered = s.records
	switch {
	case s.damaged > 0:
		s.log.Error("recording spool opened with damaged records; they are lost, the intact ones are kept",
			"records", s.records, "damaged_records", s.damaged, "bytes", s.bytes, "truncated_bytes", s.truncated)
	case s.records > 0 || s.truncated > 0:
		s.log.Info("recording spool opened", "records", s.records, "bytes", s.bytes, "truncated_bytes", s.truncated)
	}
	return s, nil
}

// load lists and checks the segments and applies the cursor.
func (s *Spool) load() error {
	if err := s.listSegments(); err != nil {
		return err
	}
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
		offs, err := s.checkSegment(g)
		if err != nil {
			return err
		}
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
	for _, g := range s.segs {
		s.bytes += g.size
		s.records += g.frames
	}
	if len(s.segs) == 0 {
		return s.removeCursor()
	}
	s.records -= s.cur.frame
	if s.segs[0].frames == s.cur.frame {
		return s.dropFirstLocked()
	}
	return nil
}

// listSegments lists the segment files of the spool folder in sequence
// order, passing over files that are not segments.
func (s *Spool) listSegments() error {
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
	return nil
}

// checkSegment scans segment g, cutting off a torn or corrupt tail and
// noting its damaged stretches (both counted and logged), sets its frame
// count and size, and returns the end offset of each frame.
func (s *Spool) checkSegment(g *segment) ([]int64, error) {
	sc, cut, err := scanSegment(g.path)
	if err != nil {
		return nil, err
	}
	offs := sc.ends
	if cut > 0 {
		s.truncated += cut
		s.log.Warn("recording spool segment has a torn or corrupt tail; cut off", "file", g.path, "bytes", cut)
	}
	if sc.damaged > 0 {
		s.damaged += sc.damaged
		s.log.Error("recording spool segment has damaged frames; skipped to the next intact ones",
			"file", g.path, "damaged_records", sc.damaged, "stretches", len(sc.skips))
	}
	if len(sc.skips) > 0 {
		g.skips = sc.skips
	}
	g.frames = len(offs) - 1
	g.size = offs[len(offs)-1]
	return offs, nil
}

// scanSegment checks a segment file frame by frame, skipping damaged
// stretches, and cuts off a torn or damaged tail. It returns what it
// found and how many bytes it cut.
func scanSegment(path string) (sc scan, cut int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return scan{}, 0, err
	}
	if !bytes.HasPrefix(data, spoolMagic) {
		// Not even the magic: the file holds nothing readable. Rewrite it
		// as an empty segment (which load then removes).
		sc = scan{ends: []int64{int64(len(spoolMagic))}}
		return sc, int64(len(data)), os.WriteFile(path, spoolMagic, 0o600)
	}
	sc = scanFrames(data, int64(len(spoolMagic)))
	if sc.end == int64(len(data)) {
		return sc, 0, nil
	}
	return sc, int64(len(data)) - sc.end, truncateSync(path, sc.end)
}

// scan is what scanFrames found.
type scan struct {
	// ends are the drain positions: the start offset, then the end of
	// every intact frame, in order.
	ends []int64
	// end is the end of the readable data: what follows is a torn or
	// damaged tail with no intact frame.
	end int64
	// skips maps the start of each damaged stretch to the next intact
	// frame.
	skips map[int64]int64
	// damaged counts the records in the damaged stretches and the tail.
	damaged int
}

// maxResyncWork bounds the payload bytes one resynchronisation checksums
// while it looks for the next intact frame, so a large stretch of garbage
// costs bounded time; past it, the rest is treated as a damaged tail.
const maxResyncWork = 256 << 20

// scanFrames reads the frames of data from off on. After a frame that
// does not check out it scans forward, byte by byte, for the next intact
// frame and counts the records the stretch in between held.
func scanFrames(data []byte, off int64) scan {
	sc := scan{ends: []int64{off}}
	marker := ""
	for off < int64(len(data)) {
		if e, n, ok := parseFrame(data[off:]); ok {
			if marker == "" {
				marker = idMarker(e.id)
			}
			off += int64(n)
			sc.ends = append(sc.ends, off)
			continue
		}
		next := resync(data, off+1)
		if next < 0 {
			if _, whole := frameExtent(data[off:]); whole {
				// A complete frame that does not check out, and maybe
				// more: damaged records. An incomplete one is a torn
				// append (a crash), which was never a stored record.
				sc.damaged += countDamaged(data[off:], marker)
			}
			sc.end = off
			return sc
		}
		if sc.skips == nil {
			sc.skips = map[int64]int64{}
		}
		sc.skips[off] = next
		if marker == "" {
			e, _, _ := parseFrame(data[next:])
			marker = idMarker(e.id)
		}
		sc.damaged += countDamaged(data[off:next], marker)
		off = next
	}
	sc.end = off
	return sc
}

// resync returns the offset of the first intact frame at or after from,
// or -1 when there is none (or finding it would cost more than
// maxResyncWork).
func resync(data []byte, from int64) int64 {
	work := 0
	for q := from; q+frameHeader <= int64(len(data)); q++ {
		size, whole := frameExtent(data[q:])
		if !whole {
			continue
		}
		p := data[q+frameHeader : q+int64(size)]
		if _, ok := decodePayload(p); !ok {
			continue
		}
		if work += len(p); work > maxResyncWork {
			return -1
		}
		if crc32.Checksum(p, castagnoli) == binary.LittleEndian.Uint32(data[q+4:]) {
			return q
		}
	}
	return -1
}

// frameExtent returns the length of the frame whose header starts b and
// whether all of it is in b.
func frameExtent(b []byte) (int, bool) {
	if len(b) < frameHeader {
		return 0, false
	}
	size := binary.LittleEndian.Uint32(b)
	if size > maxFramePayload || uint64(len(b)-frameHeader) < uint64(size) {
		return 0, false
	}
	return frameHeader + int(size), true
}

// idMarker is the part of a record id that every record of one writer
// shares (up to the last '-': the writer's random prefix), or "" when the
// id has none worth matching.
func idMarker(id string) string {
	i := strings.LastIndexByte(id, '-')
	if i < 1 {
		return ""
	}
	return id[:i+1]
}

// countDamaged estimates how many records a damaged stretch held. The
// stretch starts at a frame and holds no intact frame (resync would have
// stopped at it), so every frame start in it is a damaged record: its
// first byte; the frames its length fields chain to whose own header is
// still plausible; and every place where a writer's id prefix (marker)
// sits where a frame's id would. It is at least 1; a frame whose header
// and id were both hit is missed.
func countDamaged(region []byte, marker string) int {
	starts := map[int]bool{0: true}
	for p := 0; ; {
		n, whole := frameExtent(region[p:])
		if !whole || p+n >= len(region) {
			break
		}
		p += n
		if _, ok := frameExtent(region[p:]); !ok {
			break
		}
		starts[p] = true
	}
	if len(marker) >= 2 {
		m := []byte(marker)
		for i := 0; i < len(region); {
			j := bytes.Index(region[i:], m)
			if j < 0 {
				break
			}
			at := i + j
			// [header 8][uvarint id length: one byte][id ...]
			if s := at - 1 - frameHeader; s > 0 && int(region[at-1]) >= len(m) && region[at-1] < 0x80 {
				starts[s] = true
			}
			i = at + 1
		}
	}
	return len(starts)
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

// Recovered returns the intact records the spool held when it was
// opened, the records Open found damaged (lost), and the bytes of torn
// or corrupt tail it cut off.
func (s *Spool) Recovered() (records, damaged int, truncatedBytes int64) {
	return s.recovered, s.damaged, s.truncated
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
		s.writeErrorLocked("append", err)
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
	f, err := s.openAppend(path)
	if err != nil {
		s.writeErrorLocked("create segment", err)
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
		s.writeErrorLocked("create segment", err)
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
	g, err := s.drainSegmentLocked()
	if g == nil || err != nil {
		return nil, err
	}
	if next, ok := g.skips[s.cur.off]; ok {
		s.cur.off = next // a damaged stretch Open found and counted
	}
	base := s.cur.off // the file offset of buf[0]
	buf, err := s.readAt(base, min(g.size-base, max(maxBytes, frameHeader)))
	if err != nil {
		return nil, err
	}
	var out []entry
	pos := s.cur
	for len(out) < maxEntries && pos.frame < g.frames {
		if _, skip := g.skips[pos.off]; skip {
			break // the next peek starts past the damaged stretch
		}
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
			return nil, s.resyncLocked(g, pos)
		}
		pos = position{off: pos.off + need, frame: pos.frame + 1}
		out = append(out, e)
		s.peeked = append(s.peeked, pos)
	}
	return out, nil
}

// drainSegmentLocked returns the segment the drain position is in, with
// its file open for reading: drained segments are dropped first, except
// the last (the writer's). It returns nil when nothing is left to drain.
func (s *Spool) drainSegmentLocked() (*segment, error) {
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
	return g, nil
}

// resyncLocked handles a frame at pos (the drain position) that went bad
// after Open checked it: the rest of the segment is scanned again, the
// drain moves to the next intact frame, and the records in between (the
// frames Open counted there, less the intact ones left: exact) are
// dropped and reported with a *spoolCorruptError, whose frames may be 0
// (the caller peeks again). A read error is returned as is.
func (s *Spool) resyncLocked(g *segment, pos position) error {
	rest, err := s.readAt(pos.off, g.size-pos.off)
	if err != nil {
		return err
	}
	sc := scanFrames(rest, 0)
	intact := len(sc.ends) - 1
	lost := g.frames - pos.frame - intact
	next := g.size
	if n, ok := sc.skips[0]; ok {
		next = pos.off + n
	} else if intact > 0 {
		next = pos.off // cannot happen: the frame at pos did not check out
	}
	if len(sc.skips) > 0 {
		if g.skips == nil {
			g.skips = map[int64]int64{}
		}
		for from, to := range sc.skips {
			g.skips[pos.off+from] = pos.off + to
		}
	}
	s.cur = position{off: next, frame: g.frames - intact}
	if s.cur.off > g.size {
		s.cur.off = g.size
	}
	s.records -= lost
	s.writeCursorLocked()
	return &spoolCorruptError{path: g.path, frames: max(lost, 0)}
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
		s.writeErrorLocked("save cursor", err)
		s.log.Warn("recording spool cursor not saved", "err", err, "cause", writeErrorCause(err))
	}
}

// setWriteErrorHook makes f count each write error by cause.
func (s *Spool) setWriteErrorHook(f func(cause string)) {
	s.mu.Lock()
	s.onWriteError = f
	s.mu.Unlock()
}

// writeErrorLocked counts a write error by its cause and logs the first
// of each cause (ENOSPC, EIO, ...) at error level, naming the operation:
// the operator learns why the spool failed, once, not per record.
func (s *Spool) writeErrorLocked(op string, err error) {
	cause := writeErrorCause(err)
	if s.onWriteError != nil {
		s.onWriteError(cause)
	}
	if s.writeErrs[cause] {
		return
	}
	s.writeErrs[cause] = true
	s.log.Error("recording spool write failed", "op", op, "cause", cause, "err", err,
		"hint", writeErrorHints[cause])
}

// The causes a spool write error is counted under: a fixed set, so the
// metric's label stays bounded.
var writeErrorCauses = []struct {
	errno syscall.Errno
	cause string
}{
	{syscall.ENOSPC, "enospc"},
	{syscall.EDQUOT, "edquot"},
	{syscall.EIO, "eio"},
	{syscall.EROFS, "erofs"},
	{syscall.EACCES, "eacces"},
	{syscall.EPERM, "eperm"},
	{syscall.ENOENT, "enoent"},
	{syscall.EMFILE, "emfile"},
	{syscall.ENFILE, "enfile"},
	{syscall.EFBIG, "efbig"},
}

var writeErrorHints = map[string]string{
	"enospc": "the spool's file system is full: free space or move the spool; records that do not fit are lost and counted",
	"edquot": "the disk quota of the spool's owner is used up",
	"eio":    "the disk reported an I/O error: check the device (dmesg); spooled records may be damaged",
	"erofs":  "the spool's file system is read-only",
	"eacces": "the process may not write the spool directory",
	"eperm":  "the process may not write the spool directory",
	"other":  "see err",
}

// writeErrorCause names err's errno (lower case), or "other".
func writeErrorCause(err error) string {
	for _, c := range writeErrorCauses {
		if errors.Is(err, c.errno) {
			return c.cause
		}
	}
	return "other"
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
