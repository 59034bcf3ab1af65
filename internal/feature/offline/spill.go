package offline

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path/filepath"
)

// spill manages the temporary files of one Historical run.
type spill struct {
	dir   string
	seed  maphash.Seed
	files []*spillFile
}

// spillFile is an append-only temporary file, written through a buffer
// and then read back once.
type spillFile struct {
	f   *os.File
	w   *bufio.Writer
	err error
	tmp [binary.MaxVarintLen64]byte
}

func (s *spill) create(name string) (*spillFile, error) {
	f, err := os.Create(filepath.Join(s.dir, name))
	if err != nil {
		return nil, fmt.Errorf("create spill file: %w", err)
	}
	sf := &spillFile{f: f, w: bufio.NewWriterSize(f, 64<<10)}
	s.files = append(s.files, sf)
	return sf, nil
}

// part returns the partition of an entity key.
func (s *spill) part(key []byte, n int) int {
	if n <= 1 {
		return 0
	}
	return int(maphash.Bytes(s.seed, key) % uint64(n))
}

func (s *spill) closeAll() {
	for _, f := range s.files {
		_ = f.f.Close() // spill files are scratch, removed with their folder
	}
}

func (f *spillFile) write(b []byte) {
	if f.err == nil {
		_, f.err = f.w.Write(b)
	}
}

func (f *spillFile) uvarint(x uint64) { f.write(binary.AppendUvarint(f.tmp[:0], x)) }
func (f *spillFile) varint(x int64)   { f.write(binary.AppendVarint(f.tmp[:0], x)) }

// record writes b prefixed by its length.
func (f *spillFile) record(b []byte) {
	f.uvarint(uint64(len(b)))
	f.write(b)
}

// reader flushes the file and returns a reader from its start.
func (f *spillFile) reader() (*bufio.Reader, error) {
	if f.err == nil {
		f.err = f.w.Flush()
	}
	if f.err != nil {
		return nil, fmt.Errorf("write spill file: %w", f.err)
	}
	if _, err := f.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read spill file: %w", err)
	}
	return bufio.NewReaderSize(f.f, 64<<10), nil
}

// remove deletes a file that is no longer needed.
func (f *spillFile) remove() {
	_ = f.f.Close() // scratch file: nothing to lose
	_ = os.Remove(f.f.Name())
}

// resultFile records, per entity row index, the matched feature payload of
// one view: payloads are appended to a data file and an index file holds
// (offset+1, length) per row, zero for no match.
type resultFile struct {
	data  *spillFile
	index *os.File
	off   int64
	ent   [16]byte
}

func newResultFile(s *spill, name string, nrows int64) (*resultFile, error) {
	data, err := s.create(name + "-data")
	if err != nil {
		return nil, err
	}
	idx, err := s.create(name + "-index")
	if err != nil {
		return nil, err
	}
	if err := idx.f.Truncate(16 * nrows); err != nil {
		return nil, fmt.Errorf("create spill file: %w", err)
	}
	return &resultFile{data: data, index: idx.f}, nil
}

func (r *resultFile) set(row int64, payload []byte) error {
	binary.LittleEndian.PutUint64(r.ent[:], uint64(r.off+1))
	binary.LittleEndian.PutUint64(r.ent[8:], uint64(len(payload)))
	if _, err := r.index.WriteAt(r.ent[:], 16*row); err != nil {
		return fmt.Errorf("write spill file: %w", err)
	}
	r.data.write(payload)
	r.off += int64(len(payload))
	if r.data.err != nil {
		return fmt.Errorf("write spill file: %w", r.data.err)
	}
	return nil
}

// resultReader reads a resultFile's entries in row order.
type resultReader struct {
	idx  *bufio.Reader
	data *os.File
	ent  [16]byte
	buf  []byte
}

func (r *resultFile) reader() (*resultReader, error) {
	if err := r.data.w.Flush(); err != nil {
		return nil, fmt.Errorf("write spill file: %w", err)
	}
	if _, err := r.index.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read spill file: %w", err)
	}
	return &resultReader{idx: bufio.NewReaderSize(r.index, 64<<10), data: r.data.f}, nil
}

// next returns the next row's payload; ok is false when the row matched
// nothing. The payload is valid until the next call.
func (r *resultReader) next() ([]byte, bool, error) {
	if _, err := io.ReadFull(r.idx, r.ent[:]); err != nil {
		return nil, false, fmt.Errorf("read spill file: %w", err)
	}
	off := int64(binary.LittleEndian.Uint64(r.ent[:]))
	n := int(binary.LittleEndian.Uint64(r.ent[8:]))
	if off == 0 {
		return nil, false, nil
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if _, err := r.data.ReadAt(r.buf, off-1); err != nil && (!errors.Is(err, io.EOF) || n != 0) {
		return nil, false, fmt.Errorf("read spill file: %w", err)
	}
	return r.buf, true, nil
}
