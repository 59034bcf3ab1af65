package accuracy

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// ImportOptions say how a file's columns map to outcomes.
type ImportOptions struct {
	// KeyColumn names the business key's column [key].
	KeyColumn string
	// TimeColumn names the observation time's column [time]; a file
	// without it leaves the time to the arrival.
	TimeColumn string
}

func (o *ImportOptions) defaults() {
	if o.KeyColumn == "" {
		o.KeyColumn = "key"
	}
	if o.TimeColumn == "" {
		o.TimeColumn = "time"
	}
}

// ReadOutcomeFile reads the outcomes of service from a file, by extension:
// .jsonl (one outcome object per line, as POST takes them), .csv (a header
// row; the key and time columns, every other column an observed value) or
// .parquet (flat columns, the same roles; times as RFC 3339 strings or
// TIMESTAMP columns). fn gets them in batches of at most MaxBatch.
func ReadOutcomeFile(path, service string, o ImportOptions, fn func([]Outcome) error) error {
	o.defaults()
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson":
		return readJSONL(f, path, service, fn)
	case ".csv":
		return readCSV(f, path, service, o, fn)
	case ".parquet":
		st, err := f.Stat()
		if err != nil {
			return err
		}
		return readParquet(f, st.Size(), path, service, o, fn)
	default:
		return fmt.Errorf("%s: want a .jsonl, .csv or .parquet file", path)
	}
}

// batcher hands outcomes to fn MaxBatch at a time.
type batcher struct {
	fn  func([]Outcome) error
	buf []Outcome
}

func (b *batcher) add(o Outcome) error {
	b.buf = append(b.buf, o)
	if len(b.buf) >= MaxBatch {
		return b.flush()
	}
	return nil
}

func (b *batcher) flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	err := b.fn(b.buf)
	b.buf = nil
	return err
}

func readJSONL(r io.Reader, path, service string, fn func([]Outcome) error) error {
	b := &batcher{fn: fn}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if text[0] != '{' {
			return fmt.Errorf("%s:%d: want one JSON object per line", path, line)
		}
		outs, err := ParseOutcomes(service, text)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if err := b.add(outs[0]); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s:%d: %w", path, line+1, err)
	}
	return b.flush()
}

func readCSV(r io.Reader, path, service string, o ImportOptions, fn func([]Outcome) error) error {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return fmt.Errorf("%s: header: %w", path, err)
	}
	head = append([]string(nil), head...)
	keyCol, timeCol := -1, -1
	for i, h := range head {
		switch h {
		case o.KeyColumn:
			keyCol = i
		case o.TimeColumn:
			timeCol = i
		}
	}
	if keyCol < 0 {
		return fmt.Errorf("%s: no column %q (the key; --key-column)", path, o.KeyColumn)
	}
	b := &batcher{fn: fn}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out := Outcome{Service: service, Key: rec[keyCol], Values: map[string]float64{}}
		if out.Key == "" || len(out.Key) > maxKeyLen {
			return fmt.Errorf("%s:%d: column %s: the key must be 1 to %d bytes", path, line, o.KeyColumn, maxKeyLen)
		}
		for i, v := range rec {
			switch {
			case i == keyCol:
			case i == timeCol:
				if v == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339Nano, v)
				if err != nil {
					return fmt.Errorf("%s:%d: column %s: %q is not an RFC 3339 time", path, line, head[i], v)
				}
				out.Time = t
			case v == "":
			default:
				x, err := strconv.ParseFloat(v, 64)
				if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
					return fmt.Errorf("%s:%d: column %s: %q is not a finite number", path, line, head[i], v)
				}
				out.Values[head[i]] = x
			}
		}
		if err := b.add(out); err != nil {
			return err
		}
	}
	return b.flush()
}

func readParquet(r io.ReaderAt, size int64, path, service string, o ImportOptions, fn func([]Outcome) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: corrupt Parquet file: %v", path, p)
		}
	}()
	pf, err := parquet.OpenFile(r, size, parquet.FileReadMode(parquet.ReadModeSync))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	leaves := pf.Schema().Fields()
	keyCol, timeCol := -1, -1
	for i, l := range leaves {
		if l.Repeated() || !l.Leaf() {
			return fmt.Errorf("%s: column %s is not a flat column", path, l.Name())
		}
		switch l.Name() {
		case o.KeyColumn:
			keyCol = i
		case o.TimeColumn:
			timeCol = i
		}
	}
	if keyCol < 0 {
		return fmt.Errorf("%s: no column %q (the key; --key-column)", path, o.KeyColumn)
	}
	b := &batcher{fn: fn}
	rows := make([]parquet.Row, 256)
	for _, rg := range pf.RowGroups() {
		rr := rg.Rows()
		for {
			n, rerr := rr.ReadRows(rows)
			for _, row := range rows[:n] {
				out := Outcome{Service: service, Values: map[string]float64{}}
				for _, v := range row {
					c := v.Column()
					if c < 0 || c >= len(leaves) || v.IsNull() {
						continue
					}
					name := leaves[c].Name()
					switch c {
					case keyCol:
						out.Key = valueString(v)
					case timeCol:
						t, ok := valueTime(v, leaves[c])
						if !ok {
							_ = rr.Close()
							return fmt.Errorf("%s: column %s: %v is not a time", path, name, v)
						}
						out.Time = t
					default:
						x, ok := valueFloat(v)
						if !ok {
							continue // a text column that is no observed value
						}
						out.Values[name] = x
					}
				}
				if out.Key == "" || len(out.Key) > maxKeyLen {
					_ = rr.Close()
					return fmt.Errorf("%s: a row's key (%s) is empty or longer than %d bytes", path, o.KeyColumn, maxKeyLen)
				}
				if err := b.add(out); err != nil {
					_ = rr.Close()
					return err
				}
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				_ = rr.Close()
				return fmt.Errorf("%s: %w", path, rerr)
			}
		}
		_ = rr.Close()
	}
	return b.flush()
}

func valueString(v parquet.Value) string {
	switch v.Kind() {
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return string(v.ByteArray())
	case parquet.Int32:
		return strconv.FormatInt(int64(v.Int32()), 10)
	case parquet.Int64:
		return strconv.FormatInt(v.Int64(), 10)
	default:
		return v.String()
	}
}

func valueFloat(v parquet.Value) (float64, bool) {
	var x float64
	switch v.Kind() {
	case parquet.Boolean:
		if v.Boolean() {
			return 1, true
		}
		return 0, true
	case parquet.Int32:
		x = float64(v.Int32())
	case parquet.Int64:
		x = float64(v.Int64())
	case parquet.Float:
		x = float64(v.Float())
	case parquet.Double:
		x = v.Double()
	default:
		return 0, false
	}
	return x, !math.IsNaN(x) && !math.IsInf(x, 0)
}

func valueTime(v parquet.Value, f parquet.Field) (time.Time, bool) {
	switch v.Kind() {
	case parquet.ByteArray:
		t, err := time.Parse(time.RFC3339Nano, string(v.ByteArray()))
		return t, err == nil
	case parquet.Int64:
		lt := f.Type().LogicalType()
		if lt == nil {
			return time.Time{}, false
		}
		ts, ok := lt.Value.(*format.TimestampType)
		if !ok {
			return time.Time{}, false
		}
		switch ts.Unit.Value.(type) {
		case *format.NanoSeconds:
			return time.Unix(0, v.Int64()).UTC(), true
		case *format.MicroSeconds:
			return time.UnixMicro(v.Int64()).UTC(), true
		default:
			return time.UnixMilli(v.Int64()).UTC(), true
		}
	default:
		return time.Time{}, false
	}
}
