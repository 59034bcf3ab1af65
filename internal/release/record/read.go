package record

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DefaultMaxRecordBytes bounds one JSONL line when ReadOptions.MaxRecordBytes
// is 0.
const DefaultMaxRecordBytes = 16 << 20

// Source yields records in recorded order.
type Source interface {
	// Next returns the next record, or io.EOF after the last one. It
	// returns promptly once ctx is done.
	Next(ctx context.Context) (*Record, error)
	// Close releases the source.
	Close() error
}

// ReadOptions select what a reader yields.
type ReadOptions struct {
	// From and To bound Record.Time to [From, To); a zero bound is open.
	From, To time.Time
	// Service, when set, yields only that service's records (a stream
	// reader reads only its subject).
	Service string
	// SkipBad skips malformed records, counting them (Skipped), instead of
	// failing with a *LineError or *MessageError.
	SkipBad bool
	// MaxRecordBytes bounds one JSONL line; a longer one is malformed.
	// Default DefaultMaxRecordBytes. JSONL files only.
	MaxRecordBytes int
}

func (o *ReadOptions) match(r *Record) bool {
	if !o.From.IsZero() && r.Time.Before(o.From) {
		return false
	}
	if !o.To.IsZero() && !r.Time.Before(o.To) {
		return false
	}
	return o.Service == "" || r.Service == o.Service
}

// LineError is a malformed line in a JSONL recording.
type LineError struct {
	File string
	Line int
	Err  error
}

// Error reads "file:line: what is wrong".
func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

// Unwrap returns the cause, e.g. a *VersionError.
func (e *LineError) Unwrap() error { return e.Err }

// FileReader reads JSONL recordings: one file, or several in name order,
// which for a FileSink's files is the order they were written in.
type FileReader struct {
	files   []string
	opts    ReadOptions
	idx     int                                      // index into files of the open file
	open    func(name string) (io.ReadCloser, error) // nil: os.Open
	release func() error                             // closes a bucket client; nil when none
	f       io.ReadCloser
	br      *bufio.Reader
	line    int
	buf     []byte
	skipped int
}

// OpenFiles opens the JSONL recording at path: a file; a directory, whose
// *.jsonl files are read in name order; or a glob pattern (filepath.Match
// syntax), whose matches are read in the order of their base names. A
// directory or pattern without files is an error. Records are yielded in
// file order and, within a file, line order; blank lines are ignored.
func OpenFiles(path string, opts ReadOptions) (*FileReader, error) {
	if opts.MaxRecordBytes <= 0 {
		opts.MaxRecordBytes = DefaultMaxRecordBytes
	}
	files, err := recordingFiles(path)
	if err != nil {
		return nil, err
	}
	return &FileReader{files: files, opts: opts, idx: -1}, nil
}

func recordingFiles(path string) ([]string, error) {
	if strings.ContainsAny(path, "*?[") {
		files, err := filepath.Glob(path)
		if err != nil {
			return nil, fmt.Errorf("recording pattern %q: %w", path, err)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no recording files match %q", path)
		}
		slices.SortFunc(files, func(a, b string) int {
			if c := strings.Compare(filepath.Base(a), filepath.Base(b)); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		return files, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open recording: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("open recording: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.jsonl recording files in %s", path)
	}
	slices.Sort(files)
	return files, nil
}

// Files returns the files the reader reads, in order.
func (r *FileReader) Files() []string { return slices.Clone(r.files) }

// Skipped returns how many malformed lines SkipBad has skipped so far.
func (r *FileReader) Skipped() int { return r.skipped }

// Next returns the next record in range, or io.EOF after the last file.
// A malformed line is a *LineError unless ReadOptions.SkipBad is set.
func (r *FileReader) Next(ctx context.Context) (*Record, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		rec, err := Decode(line)
		if err != nil {
			if r.opts.SkipBad {
				r.skipped++
				continue
			}
			return nil, &LineError{File: r.files[r.idx], Line: r.line, Err: err}
		}
		if r.opts.match(rec) {
			return rec, nil
		}
	}
}

// readLine returns the next line (without its newline) across files, or
// io.EOF after the last. The slice is valid until the next call.
func (r *FileReader) readLine() ([]byte, error) {
	for {
		if r.f == nil {
			if r.idx+1 >= len(r.files) {
				return nil, io.EOF
			}
			r.idx++
			var f io.ReadCloser
			var err error
			if r.open != nil {
				f, err = r.open(r.files[r.idx])
			} else {
				f, err = os.Open(r.files[r.idx])
			}
			if err != nil {
				return nil, fmt.Errorf("open recording: %w", err)
			}
			r.f, r.line = f, 0
			if r.br == nil {
				r.br = bufio.NewReaderSize(f, 64<<10)
			} else {
				r.br.Reset(f)
			}
		}
		line, tooLong, err := r.readSlice()
		if len(line) > 0 || tooLong || err == nil {
			r.line++
			if tooLong {
				if !r.opts.SkipBad {
					return nil, &LineError{
						File: r.files[r.idx], Line: r.line,
						Err: fmt.Errorf("line longer than %d bytes", r.opts.MaxRecordBytes),
					}
				}
				r.skipped++
				continue
			}
			return line, nil
		}
		if !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %s: %w", r.files[r.idx], err)
		}
		if err := r.closeFile(); err != nil {
			return nil, err
		}
	}
}

// readSlice reads one line, keeping at most MaxRecordBytes of it. It
// returns err == nil only for a line ended by a newline; a last line
// without one comes with io.EOF.
func (r *FileReader) readSlice() (line []byte, tooLong bool, err error) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !tooLong {
			if len(r.buf)+len(chunk) > r.opts.MaxRecordBytes+1 { // +1: the newline
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(r.buf, []byte("\n")), tooLong, err
	}
}

func (r *FileReader) closeFile() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return fmt.Errorf("close recording: %w", err)
	}
	return nil
}

// Close closes the open file, if any.
func (r *FileReader) Close() error {
	r.idx = len(r.files)
	err := r.closeFile()
	if r.release != nil {
		err = errors.Join(err, r.release())
		r.release = nil
	}
	return err
}

// ReadAll returns every record src yields, in order, and closes src.
func ReadAll(ctx context.Context, src Source) ([]*Record, error) {
	var out []*Record
	for {
		rec, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, src.Close()
		}
		if err != nil {
			_ = src.Close()
			return out, err
		}
		out = append(out, rec)
	}
}
