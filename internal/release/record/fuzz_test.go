package record

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary lines to the record decoder: it must never
// panic, and whatever it accepts must encode again and decode to the same
// encoding (so a replay writes back what it read).
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"v1.jsonl", "v2.jsonl"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for line := range bytes.Lines(data) {
			f.Add(bytes.TrimSpace(line))
		}
	}
	f.Add([]byte(`{"schema":1}`))
	f.Add([]byte(`{"schema":1,"request_id":"a","time":"2026-01-01T00:00:00+14:00","service":"s","arms":{"primary":{"status":200,"outputs":{"y":[null,1e308]}}}}`))
	f.Add([]byte(`{"schema":1,"request_id":"a","time":"0001-01-01T00:30:00+01:00","service":"s","arms":{"primary":{"status":200}}}`))
	f.Add([]byte(`{"schema":1,"request_id":"a","time":"2026-01-01T00:00:00Z","service":"s","request":{"id":12345678901234567890},"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["aGk="]}],"arms":{"primary":{"status":500,"reason":"boom"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data)
		if err != nil {
			if r != nil {
				t.Fatalf("Decode returned a record with error %v", err)
			}
			return
		}
		first, err := Encode(r)
		if err != nil {
			t.Fatalf("accepted record does not encode: %v\ninput: %q", err, data)
		}
		again, err := Decode(first)
		if err != nil {
			t.Fatalf("encoded record does not decode: %v\nencoded: %s", err, first)
		}
		second, err := Encode(again)
		if err != nil {
			t.Fatalf("second encode: %v", err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("encoding not stable:\n%s\n%s", first, second)
		}
	})
}

// FuzzFileReader reads arbitrary file contents as a JSONL recording with
// SkipBad and a small line limit: no panic, and every line is either a
// record or counted as skipped.
func FuzzFileReader(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "v1.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(append(append([]byte{}, data...), "\n\n{torn"...))
	f.Add([]byte("\n\r\n  \n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(dir, "f.jsonl")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		src, err := OpenFiles(path, ReadOptions{SkipBad: true, MaxRecordBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadAll(context.Background(), src)
		if err != nil {
			t.Fatalf("SkipBad reader failed: %v", err)
		}
		lines := 0
		for line := range bytes.Lines(content) {
			if len(bytes.TrimSpace(line)) > 0 {
				lines++
			}
		}
		if len(got)+src.Skipped() != lines {
			t.Fatalf("%d records + %d skipped != %d non-blank lines", len(got), src.Skipped(), lines)
		}
	})
}
