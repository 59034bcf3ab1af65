package record

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

// records returns n sample records i = first … first+n-1, one millisecond
// apart from t0.
func records(first, n int) []*Record {
	out := make([]*Record, n)
	for i := range out {
		out[i] = sample(first+i, t0.Add(time.Duration(first+i)*time.Millisecond))
	}
	return out
}

func requireIDs(t *testing.T, got []*Record, first, n int) {
	t.Helper()
	require.Len(t, got, n)
	for i, r := range got {
		require.Equal(t, "req-"+itoa(first+i), r.RequestID, "record %d", i)
	}
}

func readDir(t *testing.T, path string, opts ReadOptions) []*Record {
	t.Helper()
	src, err := OpenFiles(path, opts)
	require.NoError(t, err)
	got, err := ReadAll(t.Context(), src)
	require.NoError(t, err)
	return got
}

func TestFileSinkRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	line, err := Encode(sample(100, t0))
	require.NoError(t, err)
	maxBytes := int64(len(line)+1) * 5 // about five records per file
	s, err := NewFileSink(FileOptions{Dir: dir, Base: "rec", MaxBytes: maxBytes}, nil)
	require.NoError(t, err)

	// Batches of varying size, so rotation happens inside batches too.
	next := 0
	for _, size := range []int{1, 7, 3, 12, 1, 1, 20} {
		n, err := s.Write(t.Context(), records(next, size))
		require.NoError(t, err)
		require.Equal(t, size, n)
		next += size
	}
	require.NoError(t, s.Close(t.Context()))

	files := s.Files()
	require.Greater(t, len(files), 5)
	require.True(t, slices.IsSorted(files), "file names sort in creation order: %v", files)
	for _, f := range files {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		require.LessOrEqual(t, fi.Size(), maxBytes, f)
		require.Positive(t, fi.Size(), f)
		require.Regexp(t, `^rec-\d{8}T\d{6}\.\d{3}Z-\d{6}\.jsonl$`, filepath.Base(f))
	}
	onDisk, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.Equal(t, files, onDisk, "no other files (no temporaries) left behind")

	requireIDs(t, readDir(t, dir, ReadOptions{}), 0, next)
	requireIDs(t, readDir(t, filepath.Join(dir, "rec-*.jsonl"), ReadOptions{}), 0, next)
	requireIDs(t, readDir(t, files[1], ReadOptions{}), 5, 5)
}

func TestFileSinkBigRecordGetsItsOwnFile(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileSink(FileOptions{Dir: dir, MaxBytes: 10}, nil)
	require.NoError(t, err)
	n, err := s.Write(t.Context(), records(0, 3))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, s.Close(t.Context()))
	require.Len(t, s.Files(), 3)
	requireIDs(t, readDir(t, dir, ReadOptions{}), 0, 3)
}

func TestFileSinkRotatesByAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s, err := NewFileSink(FileOptions{Dir: dir, MaxAge: time.Minute}, nil)
		require.NoError(t, err)
		ctx := context.Background()
		write := func(first, n int) {
			t.Helper()
			got, err := s.Write(ctx, records(first, n))
			require.NoError(t, err)
			require.Equal(t, n, got)
		}
		write(0, 2)
		time.Sleep(59 * time.Second)
		write(2, 2) // same file: 59s old
		time.Sleep(time.Second)
		write(4, 3) // 60s: a new file
		time.Sleep(10 * time.Minute)
		write(7, 1) // an idle gap makes one more file, not ten
		require.NoError(t, s.Close(ctx))

		files := s.Files()
		require.Len(t, files, 3)
		require.True(t, slices.IsSorted(files))
		require.Contains(t, files[1], "T000100.000Z") // the bubble's clock starts at midnight
		requireIDs(t, readDir(t, files[0], ReadOptions{}), 0, 4)
		requireIDs(t, readDir(t, files[1], ReadOptions{}), 4, 3)
		requireIDs(t, readDir(t, dir, ReadOptions{}), 0, 8)
	})
}

func TestFileSinkRestartNeverClobbers(t *testing.T) {
	// In a bubble both sinks see the same clock reading, so the second
	// wants the first one's file name.
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		ctx := context.Background()
		first, err := NewFileSink(FileOptions{Dir: dir}, nil)
		require.NoError(t, err)
		_, err = first.Write(ctx, records(0, 3))
		require.NoError(t, err)
		require.NoError(t, first.Close(ctx))

		second, err := NewFileSink(FileOptions{Dir: dir}, nil)
		require.NoError(t, err)
		_, err = second.Write(ctx, records(3, 2))
		require.NoError(t, err)
		require.NoError(t, second.Close(ctx))

		require.NotEqual(t, first.Files(), second.Files())
		require.Less(t, first.Files()[0], second.Files()[0])
		requireIDs(t, readDir(t, dir, ReadOptions{}), 0, 5)
	})
}

func TestFileSinkIdleLeavesNoFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileSink(FileOptions{Dir: filepath.Join(dir, "sub")}, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
	require.NoError(t, s.Close(t.Context()), "Close is idempotent")
	entries, err := os.ReadDir(filepath.Join(dir, "sub"))
	require.NoError(t, err)
	require.Empty(t, entries)
	_, err = s.Write(t.Context(), records(0, 1))
	require.ErrorContains(t, err, "closed")
}

func TestFileSinkSkipsRecordsThatCannotBeEncoded(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileSink(FileOptions{Dir: dir}, nil)
	require.NoError(t, err)
	recs := records(0, 3)
	recs[1].Service = ""
	n, err := s.Write(t.Context(), recs)
	require.Equal(t, 2, n)
	require.ErrorContains(t, err, "no service")
	require.NoError(t, s.Close(t.Context()))
	got := readDir(t, dir, ReadOptions{})
	require.Len(t, got, 2)
	require.Equal(t, "req-0", got[0].RequestID)
	require.Equal(t, "req-2", got[1].RequestID)
}

func TestNewFileSinkRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string]FileOptions{
		"no dir":       {},
		"slash base":   {Dir: t.TempDir(), Base: "a/b"},
		"glob base":    {Dir: t.TempDir(), Base: "a*"},
		"negative age": {Dir: t.TempDir(), MaxAge: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewFileSink(opts, nil)
			require.Error(t, err)
		})
	}
}

// writeFile writes lines to dir/name.
func writeFile(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600))
	return path
}

func encoded(t *testing.T, first, n int) []string {
	t.Helper()
	var out []string
	for _, r := range records(first, n) {
		b, err := Encode(r)
		require.NoError(t, err)
		out = append(out, string(b)+"\n")
	}
	return out
}

func TestFileReaderTimeRangeAndService(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileSink(FileOptions{Dir: dir, MaxBytes: 4096}, nil)
	require.NoError(t, err)
	recs := records(0, 50)
	recs[12].Service = "other"
	_, err = s.Write(t.Context(), recs)
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
	require.Greater(t, len(s.Files()), 2)

	got := readDir(t, dir, ReadOptions{From: t0.Add(10 * time.Millisecond), To: t0.Add(20 * time.Millisecond)})
	requireIDs(t, got, 10, 10) // [from, to): 10 … 19

	got = readDir(t, dir, ReadOptions{To: t0.Add(3 * time.Millisecond)})
	requireIDs(t, got, 0, 3)
	got = readDir(t, dir, ReadOptions{From: t0.Add(47 * time.Millisecond)})
	requireIDs(t, got, 47, 3)

	got = readDir(t, dir, ReadOptions{Service: "other"})
	requireIDs(t, got, 12, 1)
	require.Len(t, readDir(t, dir, ReadOptions{Service: "parcel-eta"}), 49)
}

func TestFileReaderMalformedLines(t *testing.T) {
	dir := t.TempDir()
	good := encoded(t, 0, 4)
	v2, err := os.ReadFile(filepath.Join("testdata", "v2.jsonl"))
	require.NoError(t, err)
	writeFile(t, dir, "a-1.jsonl", good[0], "\n", "  \n", good[1])
	writeFile(t, dir, "a-2.jsonl", good[2], "{not json\n", string(v2), good[3], `{"schema":1,"torn`)

	src, err := OpenFiles(dir, ReadOptions{})
	require.NoError(t, err)
	var got []*Record
	for {
		r, err := src.Next(t.Context())
		if err != nil {
			var le *LineError
			require.ErrorAs(t, err, &le)
			require.Equal(t, filepath.Join(dir, "a-2.jsonl"), le.File)
			require.Equal(t, 2, le.Line)
			require.ErrorContains(t, err, "a-2.jsonl:2: decode record")
			break
		}
		got = append(got, r)
	}
	require.NoError(t, src.Close())
	requireIDs(t, got, 0, 3)

	src, err = OpenFiles(dir, ReadOptions{SkipBad: true})
	require.NoError(t, err)
	got, err = ReadAll(t.Context(), src)
	require.NoError(t, err)
	requireIDs(t, got, 0, 4)
	require.Equal(t, 3, src.Skipped()) // bad JSON, schema 2, torn last line

	// The version error survives the wrapping, naming file and line.
	src, err = OpenFiles(filepath.Join("testdata", "v2.jsonl"), ReadOptions{})
	require.NoError(t, err)
	_, err = ReadAll(t.Context(), src)
	var ve *VersionError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, 2, ve.Version)
	require.ErrorContains(t, err, "v2.jsonl:1: unsupported record schema version 2")
}

func TestFileReaderLongLines(t *testing.T) {
	dir := t.TempDir()
	good := encoded(t, 0, 3)
	path := writeFile(t, dir, "x.jsonl", good[0], strings.Repeat("x", 200<<10)+"\n", good[1], good[2])

	src, err := OpenFiles(path, ReadOptions{MaxRecordBytes: 100 << 10})
	require.NoError(t, err)
	_, err = ReadAll(t.Context(), src)
	require.ErrorContains(t, err, "x.jsonl:2: line longer than 102400 bytes")

	src, err = OpenFiles(path, ReadOptions{MaxRecordBytes: 100 << 10, SkipBad: true})
	require.NoError(t, err)
	got, err := ReadAll(t.Context(), src)
	require.NoError(t, err)
	requireIDs(t, got, 0, 3)
	require.Equal(t, 1, src.Skipped())

	// A long line within the limit reads fine (it spans many buffer fills).
	big := sample(9, t0)
	big.Inputs[0].Data = []byte("[" + strings.Repeat("0.5,", 100_000) + "1]")
	b, err := Encode(big)
	require.NoError(t, err)
	path = writeFile(t, dir, "big.jsonl", string(b)+"\n")
	got = readDir(t, path, ReadOptions{})
	require.Len(t, got, 1)
	require.Equal(t, big.Inputs[0].Data, got[0].Inputs[0].Data)
}

func TestOpenFilesErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenFiles(dir, ReadOptions{})
	require.ErrorContains(t, err, "no *.jsonl recording files in")
	_, err = OpenFiles(filepath.Join(dir, "*.jsonl"), ReadOptions{})
	require.ErrorContains(t, err, "no recording files match")
	_, err = OpenFiles(filepath.Join(dir, "missing.jsonl"), ReadOptions{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestFileReaderHonoursContext(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.jsonl", encoded(t, 0, 3)...)
	src, err := OpenFiles(dir, ReadOptions{})
	require.NoError(t, err)
	defer src.Close()
	ctx, cancel := context.WithCancel(t.Context())
	_, err = src.Next(ctx)
	require.NoError(t, err)
	cancel()
	_, err = src.Next(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, src.Close())
	_, err = src.Next(t.Context())
	require.True(t, errors.Is(err, io.EOF), "a closed reader is at its end: %v", err)
}

func TestFileReaderTooLongLastLine(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "x.jsonl", append(encoded(t, 0, 1), strings.Repeat("y", 5000))...)
	src, err := OpenFiles(path, ReadOptions{MaxRecordBytes: 1024, SkipBad: true})
	require.NoError(t, err)
	got, err := ReadAll(t.Context(), src)
	require.NoError(t, err)
	requireIDs(t, got, 0, 1)
	require.Equal(t, 1, src.Skipped(), "a torn, over-long last line is skipped and counted")

	src, err = OpenFiles(path, ReadOptions{MaxRecordBytes: 1024})
	require.NoError(t, err)
	_, err = ReadAll(t.Context(), src)
	require.ErrorContains(t, err, "x.jsonl:2: line longer than 1024 bytes")
}
