package record

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultMaxFileBytes is the size at which a JSONL file is rotated when
// FileOptions.MaxBytes is 0.
const DefaultMaxFileBytes = 64 << 20

// fileTimeLayout is the UTC timestamp in file names: fixed width, so names
// sort in creation order.
const fileTimeLayout = "20060102T150405.000Z"

// FileOptions configures a FileSink.
type FileOptions struct {
	// Dir is the directory the files go to; it is created if missing.
	Dir string
	// Base starts every file name: <Base>-<UTC timestamp>-<seq>.jsonl.
	// Default "records". It may not contain a path separator or a glob
	// character. Give replicas sharing a directory different bases.
	Base string
	// MaxBytes rotates to a new file before a record would take the current
	// one past this size (a larger record gets a file of its own). 0 means
	// DefaultMaxFileBytes; a negative value disables size rotation.
	MaxBytes int64
	// MaxAge rotates to a new file on the first write after the current one
	// is this old. 0 disables age rotation.
	MaxAge time.Duration
	// OnRotate, when set, is called (with the sink's lock held: it must
	// not block or call the sink) each time a file is finished: on
	// rotation and on Close. An Archiver's Kick.
	OnRotate func()
}

// FileSink writes records as JSON lines to size- and age-rotated files.
//
// Files are created on the first write after a rotation (so an idle sink
// leaves no empty files) with O_EXCL under a fresh name, and appended to
// under their final name: a new process never reopens or clobbers an older
// file, and readers of the directory see every write batch as soon as it
// is written, which lets diff read a recording that is still growing. Each
// Write is one write(2) of whole lines; the file is fsynced (and the
// directory with it) on rotation and on Close. A crash can leave at most a
// torn last line, which readers report, or skip with ReadOptions.SkipBad.
type FileSink struct {
	opts FileOptions
	log  *slog.Logger

	mu      sync.Mutex // protects the fields below
	f       *os.File
	name    string
	size    int64
	opened  time.Time
	seq     int
	buf     []byte
	closed  bool
	created []string
}

// NewFileSink checks opts and creates opts.Dir. A nil logger discards.
func NewFileSink(opts FileOptions, logger *slog.Logger) (*FileSink, error) {
	if opts.Dir == "" {
		return nil, errors.New("file sink: no directory")
	}
	if opts.Base == "" {
		opts.Base = "records"
	}
	if strings.ContainsAny(opts.Base, `/\*?[`) {
		return nil, fmt.Errorf("file sink: base name %q may not contain a path separator or glob character", opts.Base)
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxFileBytes
	}
	if opts.MaxAge < 0 {
		return nil, fmt.Errorf("file sink: negative max age %s", opts.MaxAge)
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("file sink: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &FileSink{opts: opts, log: logger.With("component", "record_file_sink", "dir", opts.Dir)}, nil
}

// Write appends recs as JSON lines, rotating files as configured. Records
// that fail to encode are skipped and reported in err; an I/O error stops
// the write.
func (s *FileSink) Write(_ context.Context, recs []*Record) (int, error) {
	var encErrs []error
	n := 0
	err := s.writeLines(len(recs), func(i int) []byte {
		b, err := Encode(recs[i])
		if err != nil {
			encErrs = append(encErrs, err)
			return nil
		}
		return b
	}, func(int) { n++ })
	return n, errors.Join(append(encErrs, err)...)
}

// writeEntries appends the entries' encodings as lines (see Write).
func (s *FileSink) writeEntries(_ context.Context, es []entry, stored []bool) error {
	return s.writeLines(len(es), func(i int) []byte { return es[i].data }, func(i int) { stored[i] = true })
}

// writeLines appends line(i) for i < n (nil: skipped) and calls done(i)
// for each line once it is written; an I/O error stops it.
func (s *FileSink) writeLines(n int, line func(int) []byte, done func(int)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("file sink: closed")
	}
	var pending []int // lines in s.buf not yet written
	commit := func() {
		for _, i := range pending {
			done(i)
		}
		pending = pending[:0]
	}
	for i := range n {
		b := line(i)
		if b == nil {
			continue
		}
		if s.needRotate(int64(len(s.buf)) + int64(len(b)+1)) {
			if err := s.flush(); err != nil {
				return err
			}
			commit()
			if err := s.rotate(); err != nil {
				return err
			}
		}
		s.buf = append(s.buf, b...)
		s.buf = append(s.buf, '\n')
		pending = append(pending, i)
	}
	if err := s.flush(); err != nil {
		return err
	}
	commit()
	return nil
}

// needRotate reports whether the current file must be closed before
// unflushed bytes go to it (a file that does not exist yet counts as full).
func (s *FileSink) needRotate(unflushed int64) bool {
	if s.f == nil {
		return true
	}
	if s.size+int64(len(s.buf)) == 0 {
		return false // an empty file takes any record, however large
	}
	if s.opts.MaxBytes > 0 && s.size+unflushed > s.opts.MaxBytes {
		return true
	}
	return s.opts.MaxAge > 0 && time.Since(s.opened) >= s.opts.MaxAge
}

// flush writes s.buf to the current file in one call.
func (s *FileSink) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	n, err := s.f.Write(s.buf)
	s.size += int64(n)
	s.buf = s.buf[:0]
	if err != nil {
		// The file may end in a torn line now: leave it, so the next
		// write starts a fresh file instead of appending to the tear.
		err = fmt.Errorf("file sink: write %s: %w", s.name, err)
		return errors.Join(err, s.closeFile())
	}
	return nil
}

// rotate closes the current file (fsynced) and opens a new one.
func (s *FileSink) rotate() error {
	if err := s.closeFile(); err != nil {
		return err
	}
	now := time.Now()
	stamp := now.UTC().Format(fileTimeLayout)
	// O_EXCL: if an earlier process used this name in the same
	// millisecond, take the next sequence number rather than append to
	// (or truncate) its file.
	for range 1000 {
		name := filepath.Join(s.opts.Dir, fmt.Sprintf("%s-%s-%06d.jsonl", s.opts.Base, stamp, s.seq))
		s.seq++
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("file sink: %w", err)
		}
		s.f, s.name, s.size, s.opened = f, name, 0, now
		s.created = append(s.created, name)
		if err := syncDir(s.opts.Dir); err != nil {
			return err
		}
		s.log.Debug("recording file opened", "file", name)
		return nil
	}
	return fmt.Errorf("file sink: no free file name for %s-%s", s.opts.Base, stamp)
}

// closeFile fsyncs and closes the current file, if any.
func (s *FileSink) closeFile() error {
	if s.f == nil {
		return nil
	}
	f, name := s.f, s.name
	s.f = nil
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("file sink: close %s: %w", name, err)
	}
	err = syncDir(s.opts.Dir)
	if s.opts.OnRotate != nil {
		s.opts.OnRotate()
	}
	return err
}

// Current returns the path of the file being written, or "" when none is
// open.
func (s *FileSink) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return ""
	}
	return s.name
}

// Close flushes, fsyncs and closes the current file. It does not wait on
// ctx: local disk writes are not abandoned halfway.
func (s *FileSink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.f != nil {
		err = s.flush()
	}
	return errors.Join(err, s.closeFile())
}

// Files returns the paths of the files this sink created, oldest first.
func (s *FileSink) Files() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.created...)
}

// syncDir fsyncs a directory so that file creations in it survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("file sink: sync %s: %w", dir, err)
	}
	return nil
}
