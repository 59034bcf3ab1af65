package record

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testEntries returns n entries e-first … with data of size bytes.
func testEntries(first, n, size int) []entry {
	out := make([]entry, n)
	for i := range out {
		out[i] = entry{
			id:      fmt.Sprintf("e-%d", first+i),
			service: "parcel-eta",
			data:    bytes.Repeat([]byte{byte('a' + (first+i)%26)}, size),
		}
	}
	return out
}

func openSpool(t *testing.T, opts SpoolOptions) *Spool {
	t.Helper()
	s, err := OpenSpool(opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// drainAll peeks and acks batches of at most batch entries until the spool
// is empty, returning the ids in drain order.
func drainAll(t *testing.T, s *Spool, batch int) []string {
	t.Helper()
	var ids []string
	for range 100_000 {
		es, err := s.peek(batch, maxPeekBytes)
		require.NoError(t, err)
		if len(es) == 0 {
			return ids
		}
		for _, e := range es {
			ids = append(ids, e.id)
		}
		require.NoError(t, s.ack(len(es)))
	}
	t.Fatal("spool never drained")
	return nil
}

func entryIDs(es []entry) []string {
	if len(es) == 0 {
		return nil
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.id
	}
	return out
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	require.NoError(t, err)
	return files
}

func TestSpoolAppendPeekAckReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(SpoolOptions{Dir: dir}, nil)
	require.NoError(t, err)
	in := testEntries(0, 10, 100)
	n, err := s.append(in)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	recs, size := s.Pending()
	require.Equal(t, 10, recs)
	require.Equal(t, int64(len(spoolMagic))+10*frameSize(in[0]), size)

	got, err := s.peek(4, maxPeekBytes)
	require.NoError(t, err)
	require.Equal(t, entryIDs(in[:4]), entryIDs(got))
	require.Equal(t, in[0].service, got[0].service)
	require.Equal(t, in[0].data, got[0].data)
	again, err := s.peek(4, maxPeekBytes)
	require.NoError(t, err)
	require.Equal(t, entryIDs(got), entryIDs(again), "peek does not drain")
	require.NoError(t, s.ack(4))
	require.Equal(t, 6, s.pendingRecords())
	require.NoError(t, s.Close())

	// A restart resumes after the drained records.
	s = openSpool(t, SpoolOptions{Dir: dir})
	recovered, damaged, cut := s.Recovered()
	require.Equal(t, 6, recovered)
	require.Zero(t, damaged)
	require.Zero(t, cut)
	require.Equal(t, entryIDs(in[4:]), drainAll(t, s, 3))
	require.Empty(t, segmentFiles(t, dir), "a drained spool leaves no segments")
	_, err = os.Stat(filepath.Join(dir, cursorName))
	require.ErrorIs(t, err, os.ErrNotExist)

	// Appends after a full drain start a new segment.
	_, err = s.append(testEntries(10, 2, 10))
	require.NoError(t, err)
	require.Equal(t, []string{"e-10", "e-11"}, drainAll(t, s, 10))
}

func TestSpoolDrainsSegmentsInOrder(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, SpoolOptions{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 2048})
	var want []string
	for i := range 10 {
		es := testEntries(i*13, 13, 90+i)
		n, err := s.append(es)
		require.NoError(t, err)
		require.Equal(t, 13, n)
		want = append(want, entryIDs(es)...)
	}
	segs := segmentFiles(t, dir)
	require.Greater(t, len(segs), 5, "appends roll segments")
	for _, f := range segs {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		require.LessOrEqual(t, fi.Size(), int64(2048))
	}

	// Drain part, reopen (a restart), drain the rest: order is kept and
	// drained segments are removed as the drain passes them.
	var first []string
	for len(first) < 25 {
		es, err := s.peek(25-len(first), maxPeekBytes)
		require.NoError(t, err)
		require.NotEmpty(t, es)
		first = append(first, entryIDs(es)...)
		require.NoError(t, s.ack(len(es)))
	}
	require.Equal(t, want[:25], first)
	require.Less(t, len(segmentFiles(t, dir)), len(segs))
	require.NoError(t, s.Close())
	s = openSpool(t, SpoolOptions{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 2048})
	recovered, _, _ := s.Recovered()
	require.Equal(t, 130-25, recovered)
	require.Equal(t, want[25:], drainAll(t, s, 7))
	require.Empty(t, segmentFiles(t, dir))
}

func TestSpoolPeekBoundsBytes(t *testing.T) {
	s := openSpool(t, SpoolOptions{Dir: t.TempDir()})
	_, err := s.append(testEntries(0, 5, 400))
	require.NoError(t, err)
	_, err = s.append(testEntries(5, 1, 5000))
	require.NoError(t, err)
	es, err := s.peek(100, 1000)
	require.NoError(t, err)
	require.Equal(t, []string{"e-0", "e-1"}, entryIDs(es))
	require.NoError(t, s.ack(2))
	es, err = s.peek(100, 1000)
	require.NoError(t, err)
	require.Equal(t, []string{"e-2", "e-3"}, entryIDs(es))
	require.NoError(t, s.ack(2))
	es, err = s.peek(100, 1000)
	require.NoError(t, err)
	require.Equal(t, []string{"e-4"}, entryIDs(es))
	require.NoError(t, s.ack(1))
	es, err = s.peek(100, 1000)
	require.NoError(t, err)
	require.Equal(t, []string{"e-5"}, entryIDs(es), "a record larger than the byte bound comes alone")
	require.Len(t, es[0].data, 5000)
}

func TestSpoolBound(t *testing.T) {
	dir := t.TempDir()
	const maxBytes = 16 << 10
	s := openSpool(t, SpoolOptions{Dir: dir, MaxBytes: maxBytes, SegmentBytes: 4 << 10})
	es := testEntries(0, 100, 500)
	n, err := s.append(es)
	require.ErrorIs(t, err, errSpoolFull)
	require.Positive(t, n)
	require.Less(t, n, 100)
	_, size := s.Pending()
	require.LessOrEqual(t, size, int64(maxBytes))
	var onDisk int64
	for _, f := range segmentFiles(t, dir) {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		onDisk += fi.Size()
	}
	require.Equal(t, size, onDisk, "the bound counts the files on disk")

	// One too large for any spool.
	_, err = s.append(testEntries(1000, 1, maxBytes))
	require.ErrorIs(t, err, errSpoolTooLarge)

	// Draining a whole segment frees its space and says so. (A peek
	// returns records from one segment at most.)
	got, err := s.peek(n, maxPeekBytes)
	require.NoError(t, err)
	require.Less(t, len(got), n)
	require.NoError(t, s.ack(len(got)))
	select {
	case <-s.spaceFreed():
	default:
		t.Fatal("no space signal after a segment was drained")
	}
	m, err := s.append(es[n:])
	require.ErrorIs(t, err, errSpoolFull)
	require.Positive(t, m)
	require.Equal(t, entryIDs(es[len(got):n+m]), drainAll(t, s, 50), "the spool kept the oldest and took more once drained")
}

func TestSpoolLock(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(SpoolOptions{Dir: dir}, nil)
	require.NoError(t, err)
	_, err = OpenSpool(SpoolOptions{Dir: dir}, nil)
	require.ErrorContains(t, err, "in use by another process")
	require.NoError(t, s.Close())
	s, err = OpenSpool(SpoolOptions{Dir: dir}, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestOpenSpoolRejectsBadOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts SpoolOptions
		want string
	}{
		{"no dir", SpoolOptions{}, "no directory"},
		{"tiny", SpoolOptions{Dir: t.TempDir(), MaxBytes: 100}, "below"},
		{"policy", SpoolOptions{Dir: t.TempDir(), Full: "drop_oldest"}, `unknown full policy "drop_oldest"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := OpenSpool(tt.opts, nil)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// Open keeps every intact record of a damaged segment: a damaged frame
// is skipped to the next intact one and counted as a record; only a torn
// or damaged tail is cut (its bytes counted).
func TestSpoolSkipsDamagedFrames(t *testing.T) {
	frame := frameSize(testEntries(0, 1, 100)[0])
	magic := int64(len(spoolMagic))
	all := func(skip ...int) []int {
		var out []int
		for i := range 5 {
			if !slices.Contains(skip, i) {
				out = append(out, i)
			}
		}
		return out
	}
	for _, tt := range []struct {
		name        string
		damage      func(t *testing.T, path string)
		wantRecs    []int // the intact records, by index
		wantDamaged int
		wantCut     int64
	}{
		{"intact", func(*testing.T, string) {}, all(), 0, 0},
		{"torn last frame", func(t *testing.T, path string) {
			t.Helper()
			require.NoError(t, os.Truncate(path, magic+5*frame-3))
		}, all(4), 0, frame - 3},
		{"torn header", func(t *testing.T, path string) {
			t.Helper()
			require.NoError(t, os.Truncate(path, magic+4*frame+5))
		}, all(4), 0, 5},
		{"flipped byte in the last frame", func(t *testing.T, path string) {
			t.Helper()
			flip(t, path, magic+4*frame+20)
		}, all(4), 1, frame},
		{"flipped byte in the second frame", func(t *testing.T, path string) {
			t.Helper()
			flip(t, path, magic+frame+20)
		}, all(1), 1, 0},
		{"absurd length", func(t *testing.T, path string) {
			t.Helper()
			flip(t, path, magic+2*frame+3)
		}, all(2), 1, 0},
		{"8 bytes across two frames", func(t *testing.T, path string) {
			t.Helper()
			for i := range int64(8) {
				flip(t, path, magic+2*frame-4+i)
			}
		}, all(1, 2), 2, 0},
		{"first frame's header", func(t *testing.T, path string) {
			t.Helper()
			for i := range int64(8) {
				flip(t, path, magic+i)
			}
		}, all(0), 1, 0},
		{"garbage after the frames", func(t *testing.T, path string) {
			t.Helper()
			appendBytes(t, path, []byte("\x00\x01garbage"))
		}, all(), 0, 9},
		{"bad magic", func(t *testing.T, path string) {
			t.Helper()
			flip(t, path, 0)
		}, nil, 0, magic + 5*frame},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := OpenSpool(SpoolOptions{Dir: dir}, nil)
			require.NoError(t, err)
			in := testEntries(0, 5, 100)
			_, err = s.append(in)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			segs := segmentFiles(t, dir)
			require.Len(t, segs, 1)
			tt.damage(t, segs[0])

			s = openSpool(t, SpoolOptions{Dir: dir})
			recs, damaged, cut := s.Recovered()
			require.Equal(t, len(tt.wantRecs), recs)
			require.Equal(t, tt.wantDamaged, damaged)
			require.Equal(t, tt.wantCut, cut)
			var want []string
			for _, i := range tt.wantRecs {
				want = append(want, in[i].id)
			}
			require.Equal(t, want, drainAll(t, s, 2))
			require.NoError(t, s.Close())

			// A second open finds nothing left.
			s = openSpool(t, SpoolOptions{Dir: dir})
			recs, damaged, cut = s.Recovered()
			require.Zero(t, recs)
			require.Zero(t, damaged)
			require.Zero(t, cut)
		})
	}
}

func TestSpoolReportsRecordsCorruptedAfterOpen(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, SpoolOptions{Dir: dir})
	es := testEntries(0, 6, 100)
	_, err := s.append(es)
	require.NoError(t, err)
	flip(t, segmentFiles(t, dir)[0], int64(len(spoolMagic))+2*frameSize(es[0])+30)

	got, err := s.peek(10, maxPeekBytes)
	require.NoError(t, err)
	require.Equal(t, []string{"e-0", "e-1"}, entryIDs(got), "the good frames before the bad one")
	require.NoError(t, s.ack(2))
	_, err = s.peek(10, maxPeekBytes)
	var ce *spoolCorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 1, ce.frames, "the damaged record is lost, and counted")
	require.Equal(t, 3, s.pendingRecords())
	require.Equal(t, []string{"e-3", "e-4", "e-5"}, drainAll(t, s, 10), "the drain goes on at the next intact record")
}

func TestSpoolIgnoresStaleCursor(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(SpoolOptions{Dir: dir}, nil)
	require.NoError(t, err)
	_, err = s.append(testEntries(0, 4, 50))
	require.NoError(t, err)
	_, err = s.peek(1, maxPeekBytes)
	require.NoError(t, err)
	require.NoError(t, s.ack(1))
	require.NoError(t, s.Close())
	// A cursor that does not point at a frame boundary (damaged) makes the
	// segment drain from its start: some records twice, none lost.
	b, err := os.ReadFile(filepath.Join(dir, cursorName))
	require.NoError(t, err)
	b[16]++ // the offset
	require.NoError(t, os.WriteFile(filepath.Join(dir, cursorName), b, 0o600))
	s = openSpool(t, SpoolOptions{Dir: dir})
	require.Equal(t, []string{"e-0", "e-1", "e-2", "e-3"}, drainAll(t, s, 10))
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[off] ^= 0xff
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

func appendBytes(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, errors.Join(err, f.Close()))
}

// FuzzSpoolSegment opens a spool whose one segment file holds arbitrary
// bytes (a crash, a bad disk, a foreign file): Open must not fail or
// panic, everything it recovers must drain, and the segment is then clean.
func FuzzSpoolSegment(f *testing.F) {
	var good []byte
	good = append(good, spoolMagic...)
	for _, e := range testEntries(0, 3, 20) {
		good = appendFrame(good, e)
	}
	f.Add(good)
	f.Add(good[:len(good)-4])
	f.Add(append(append([]byte{}, good...), 0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4))
	f.Add([]byte("SLSPOOL1"))
	f.Add([]byte("not a spool"))
	f.Add(appendFrame(append([]byte{}, spoolMagic...), entry{id: "", service: strings.Repeat("s", 200), data: []byte("{}")}))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, fmt.Sprintf("%020d%s", 7, segmentSuffix))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSpool(SpoolOptions{Dir: dir}, nil)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		recovered, damaged, cut := s.Recovered()
		if damaged < 0 || (damaged > 0 && len(data) < frameHeader) {
			t.Fatalf("%d damaged records in %d bytes", damaged, len(data))
		}
		if cut < 0 || cut > int64(len(data)) {
			t.Fatalf("cut %d of %d bytes", cut, len(data))
		}
		drained := 0
		for {
			es, err := s.peek(3, 64)
			if err != nil {
				t.Fatalf("peek: %v", err)
			}
			if len(es) == 0 {
				break
			}
			for _, e := range es {
				if len(e.data) == 0 {
					t.Fatalf("entry %q without data", e.id)
				}
			}
			drained += len(es)
			if err := s.ack(len(es)); err != nil {
				t.Fatal(err)
			}
		}
		if drained != recovered {
			t.Fatalf("drained %d of %d recovered records", drained, recovered)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix)); len(left) != 0 {
			t.Fatalf("segments left after a full drain: %v", left)
		}
	})
}

// FuzzScanFrames runs the frame reader over arbitrary bytes after the
// magic: it must stop, keep its positions in order and inside the data,
// and skip only to frames that check out.
func FuzzScanFrames(f *testing.F) {
	var good []byte
	for _, e := range testEntries(0, 4, 30) {
		good = appendFrame(good, e)
	}
	f.Add(good)
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0xff
	f.Add(bad)
	f.Add([]byte{0xff, 0xff, 0xff, 0x03, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		data := append(bytes.Clone(spoolMagic), body...)
		sc := scanFrames(data, int64(len(spoolMagic)))
		if sc.end > int64(len(data)) || sc.damaged < 0 {
			t.Fatalf("end %d of %d, damaged %d", sc.end, len(data), sc.damaged)
		}
		for i := 1; i < len(sc.ends); i++ {
			if sc.ends[i] <= sc.ends[i-1] || sc.ends[i] > sc.end {
				t.Fatalf("ends out of order: %v (end %d)", sc.ends, sc.end)
			}
		}
		for from, to := range sc.skips {
			if to <= from || to > sc.end {
				t.Fatalf("skip %d -> %d (end %d)", from, to, sc.end)
			}
			if _, _, ok := parseFrame(data[to:]); !ok {
				t.Fatalf("skip %d -> %d lands on no intact frame", from, to)
			}
		}
		if len(sc.skips) > sc.damaged {
			t.Fatalf("%d damaged stretches but %d damaged records", len(sc.skips), sc.damaged)
		}
	})
}
