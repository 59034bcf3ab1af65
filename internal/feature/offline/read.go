package offline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"

	"github.com/sluice-ml/sluice/internal/feature"
)

// colSpec is one column to read from a Parquet file.
type colSpec struct {
	name     string       // column name in the file
	typ      feature.Type // what to convert it to; KindUnixTimestamp reads a timestamp as ns
	optional bool         // a missing column reads as nulls instead of failing
}

// sourceFiles lists the Parquet files of a file source's path: the file
// itself, or the *.parquet files of a folder in name order. Relative paths
// are resolved against dir. Display names keep the path as written.
//
// A folder without Parquet files lists nothing, which readers take as "no
// rows yet", not an error: a push source's batch folder is created before
// its first offline push writes a file, and materialization or a
// historical retrieval in between must still work. A path that does not
// exist is still an error.
func sourceFiles(dir, path string) (full, display []string, err error) {
	p := filepath.FromSlash(path)
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, nil, fmt.Errorf("source %s: %w", path, err)
	}
	if !st.IsDir() {
		return []string{p}, []string{path}, nil
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil, nil, fmt.Errorf("source %s: %w", path, err)
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".parquet") {
			continue
		}
		full = append(full, filepath.Join(p, e.Name()))
		display = append(display, filepath.Join(path, e.Name()))
	}
	return full, display, nil
}

// colReader reads one leaf column of a row group row by row, converting
// values to a feature type.
type colReader struct {
	file, name string
	typ        feature.Type
	conv       func(parquet.Value, *feature.Value) error // scalar conversion into v's scalar field
	listDef    int                                       // definition level at which a list has elements
	maxDef     int
	missing    bool
	index      int

	pages parquet.Pages
	vals  parquet.ValueReader
	buf   []parquet.Value
	i, n  int
	tmp   feature.Value
}

func (c *colReader) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: column '%s': %s", c.file, c.name, fmt.Sprintf(format, args...))
}

// peek returns the next value without consuming it; ok is false at the end
// of the column chunk.
func (c *colReader) peek() (parquet.Value, bool, error) {
	for empty := 0; c.i >= c.n; empty++ {
		// A reader that keeps returning no values and no error would spin.
		if empty > 64 {
			return parquet.Value{}, false, c.errorf("read values: no progress")
		}
		if c.vals == nil {
			p, err := c.pages.ReadPage()
			if errors.Is(err, io.EOF) {
				return parquet.Value{}, false, nil
			}
			if err != nil {
				return parquet.Value{}, false, c.errorf("read page: %v", err)
			}
			c.vals = p.Values()
		}
		n, err := c.vals.ReadValues(c.buf)
		c.i, c.n = 0, n
		if errors.Is(err, io.EOF) {
			c.vals = nil
		} else if err != nil {
			return parquet.Value{}, false, c.errorf("read values: %v", err)
		}
	}
	return c.buf[c.i], true, nil
}

// read reads the next row's value into v.
func (c *colReader) read(v *feature.Value) error {
	*v = feature.Value{}
	if c.missing {
		v.Null = true
		return nil
	}
	pv, ok, err := c.peek()
	if err != nil {
		return err
	}
	if !ok {
		return c.errorf("fewer values than rows")
	}
	c.i++
	if !c.typ.List {
		if pv.IsNull() {
			v.Null = true
			return nil
		}
		return c.conv(pv, v)
	}
	if pv.DefinitionLevel() < c.listDef {
		// A null or empty list; both read as null.
		v.Null = true
		c.skipRest()
		return nil
	}
	n := 0
	for {
		if pv.IsNull() {
			return c.errorf("null list element")
		}
		if err := c.conv(pv, &c.tmp); err != nil {
			return err
		}
		appendElem(c.typ.Kind, v, &c.tmp)
		n++
		next, ok, err := c.peek()
		if err != nil {
			return err
		}
		if !ok || next.RepetitionLevel() == 0 {
			break
		}
		pv = next
		c.i++
	}
	if c.typ.Len > 0 && n != c.typ.Len {
		return c.errorf("a row has %d elements, %s needs %d", n, c.typ, c.typ.Len)
	}
	return nil
}

func (c *colReader) skipRest() {
	for {
		next, ok, err := c.peek()
		if err != nil || !ok || next.RepetitionLevel() == 0 {
			return
		}
		c.i++
	}
}

func appendElem(k feature.Kind, v, e *feature.Value) {
	switch k {
	case feature.KindInt32, feature.KindInt64:
		v.I64s = append(v.I64s, e.I64)
	case feature.KindFloat32:
		v.F32s = append(v.F32s, float32(e.F64))
	case feature.KindFloat64:
		v.F64s = append(v.F64s, e.F64)
	case feature.KindString:
		v.Ss = append(v.Ss, e.S)
	case feature.KindBytes:
		v.Ss = append(v.Ss, string(e.B))
	case feature.KindBool:
		v.Bools = append(v.Bools, e.Bool)
	default: // lists of timestamps do not exist (ParseType rejects them)
	}
}

// physName names a leaf's physical type as Parquet does ("BYTE_ARRAY").
func physName(t parquet.Type) string { return t.Kind().String() }

// converter returns the conversion of a leaf column's values to kind k, or
// an error when the column's type cannot hold it.
func converter(leaf parquet.Node, k feature.Kind) (func(parquet.Value, *feature.Value) error, bool) {
	t := leaf.Type()
	pk := t.Kind()
	lt := t.LogicalType()
	switch k {
	case feature.KindInt32, feature.KindInt64:
		switch pk {
		case parquet.Int32:
			return func(p parquet.Value, v *feature.Value) error { v.I64 = int64(p.Int32()); return nil }, true
		case parquet.Int64:
			return func(p parquet.Value, v *feature.Value) error { v.I64 = p.Int64(); return nil }, true
		default: // not an integer column
		}
	case feature.KindFloat32, feature.KindFloat64:
		switch pk {
		case parquet.Float:
			return func(p parquet.Value, v *feature.Value) error { v.F64 = float64(p.Float()); return nil }, true
		case parquet.Double:
			return func(p parquet.Value, v *feature.Value) error { v.F64 = p.Double(); return nil }, true
		case parquet.Int32:
			return func(p parquet.Value, v *feature.Value) error { v.F64 = float64(p.Int32()); return nil }, true
		case parquet.Int64:
			if lt != nil && lt.Value != nil {
				if _, ts := lt.Value.(*format.TimestampType); ts {
					return nil, false
				}
			}
			return func(p parquet.Value, v *feature.Value) error { v.F64 = float64(p.Int64()); return nil }, true
		default: // not a numeric column
		}
	case feature.KindString:
		if pk == parquet.ByteArray || pk == parquet.FixedLenByteArray {
			return func(p parquet.Value, v *feature.Value) error { v.S = string(p.ByteArray()); return nil }, true
		}
	case feature.KindBytes:
		if pk == parquet.ByteArray || pk == parquet.FixedLenByteArray {
			return func(p parquet.Value, v *feature.Value) error {
				v.B = append([]byte(nil), p.ByteArray()...)
				return nil
			}, true
		}
	case feature.KindBool:
		if pk == parquet.Boolean {
			return func(p parquet.Value, v *feature.Value) error { v.Bool = p.Boolean(); return nil }, true
		}
	case feature.KindUnixTimestamp:
		return timestampConverter(leaf)
	default: // KindInvalid
	}
	return nil, false
}

const julianUnixEpoch = 2440588

func timestampConverter(leaf parquet.Node) (func(parquet.Value, *feature.Value) error, bool) {
	t := leaf.Type()
	switch t.Kind() {
	case parquet.Int96:
		return func(p parquet.Value, v *feature.Value) error {
			i := p.Int96()
			nanos := int64(uint64(i[1])<<32 | uint64(i[0]))
			v.I64 = (int64(i[2])-julianUnixEpoch)*86400e9 + nanos
			return nil
		}, true
	case parquet.Int64:
		mult := int64(1) // plain INT64: nanoseconds
		if lt := t.LogicalType(); lt != nil && lt.Value != nil {
			switch lv := lt.Value.(type) {
			case *format.TimestampType:
				switch lv.Unit.Value.(type) {
				case *format.MilliSeconds:
					mult = 1e6
				case *format.MicroSeconds:
					mult = 1e3
				}
			case *format.IntType: // a plain integer: nanoseconds
			default:
				return nil, false
			}
		} else if ct := t.ConvertedType(); ct != nil {
			switch *ct {
			case deprecated.TimestampMillis:
				mult = 1e6
			case deprecated.TimestampMicros:
				mult = 1e3
			default: // any other annotation: a plain integer in nanoseconds
			}
		}
		return func(p parquet.Value, v *feature.Value) error {
			x := p.Int64()
			if mult > 1 && (x > math.MaxInt64/mult || x < math.MinInt64/mult) {
				return errors.New("timestamp out of range")
			}
			v.I64 = x * mult
			return nil
		}, true
	default: // no other physical type holds a timestamp
	}
	return nil, false
}

// leafOf finds the single leaf column of a top-level column and the
// definition level at which its list (if any) has elements.
func leafOf(schema *parquet.Schema, name string) (parquet.LeafColumn, int, error) {
	var path []string
	for _, p := range schema.Columns() {
		if p[0] != name {
			continue
		}
		if path != nil {
			return parquet.LeafColumn{}, 0, errors.New("nested columns (structs, maps) are not supported")
		}
		path = p
	}
	if path == nil {
		return parquet.LeafColumn{}, 0, errNoColumn
	}
	lc, ok := schema.Lookup(path...)
	if !ok {
		return parquet.LeafColumn{}, 0, errNoColumn
	}
	if lc.MaxRepetitionLevel > 1 {
		return parquet.LeafColumn{}, 0, errors.New("nested lists are not supported")
	}
	var node parquet.Node = schema
	def, listDef := 0, 0
	for _, p := range path {
		var next parquet.Node
		for _, f := range node.Fields() {
			if f.Name() == p {
				next = f
				break
			}
		}
		if next == nil {
			return parquet.LeafColumn{}, 0, errNoColumn
		}
		if next.Optional() || next.Repeated() {
			def++
		}
		if next.Repeated() {
			listDef = def
		}
		node = next
	}
	return lc, listDef, nil
}

var errNoColumn = errors.New("no such column")

// fileScanner reads projected columns of one Parquet file.
type fileScanner struct {
	display string
	f       io.ReaderAt
	closer  io.Closer // nil when there is nothing to close
	pf      *parquet.File
	cols    []*colReader
}

// openScanner opens a Parquet file on disk and resolves the columns to
// read.
func openScanner(path, display string, specs []colSpec) (s *fileScanner, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", display, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // best effort: err is already being returned
		return nil, fmt.Errorf("stat %s: %w", display, err)
	}
	return openScannerAt(f, f, st.Size(), display, specs, 0)
}

// openScannerAt opens the Parquet file r of size bytes and resolves the
// columns to read; closer (may be nil) is closed with the scanner, or on
// error. bufSize is parquet-go's read buffer per column (0: its default).
func openScannerAt(r io.ReaderAt, closer io.Closer, size int64, display string, specs []colSpec, bufSize int) (s *fileScanner, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: corrupt Parquet file: %v", display, r)
		}
		if err != nil && closer != nil {
			_ = closer.Close() // best effort: err is already being returned
		}
	}()
	// Check the footer before parquet-go decodes it: parquet-go allocates
	// whatever lengths the metadata declares.
	if _, err := readMetadata(r, size); err != nil {
		return nil, fmt.Errorf("%s: corrupt Parquet file: %w", display, err)
	}
	// Synchronous reads: the async mode reads pages on goroutines, where a
	// panic on corrupt data could not be recovered.
	popts := []parquet.FileOption{
		parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true),
		parquet.FileReadMode(parquet.ReadModeSync),
	}
	if bufSize > 0 {
		popts = append(popts, parquet.ReadBufferSize(bufSize))
	}
	pf, err := parquet.OpenFile(r, size, popts...)
	if err != nil {
		return nil, fmt.Errorf("%s: corrupt Parquet file: %w", display, err)
	}
	s = &fileScanner{display: display, f: r, closer: closer, pf: pf}
	schema := pf.Schema()
	for _, sp := range specs {
		c := &colReader{file: display, name: sp.name, typ: sp.typ, buf: make([]parquet.Value, 256)}
		lc, listDef, err := leafOf(schema, sp.name)
		switch {
		case errors.Is(err, errNoColumn) && sp.optional:
			c.missing = true
			s.cols = append(s.cols, c)
			continue
		case err != nil:
			return nil, c.errorf("%v", err)
		}
		isList := lc.MaxRepetitionLevel > 0
		if isList != sp.typ.List {
			kind := "a scalar"
			if isList {
				kind = "a list"
			}
			return nil, c.errorf("%s column cannot hold %s", kind, sp.typ)
		}
		conv, ok := converter(lc.Node, sp.typ.Kind)
		if !ok {
			what := sp.typ.String()
			if sp.typ.Kind == feature.KindUnixTimestamp {
				what = "a timestamp"
			}
			return nil, c.errorf("type %s cannot hold %s", typeName(lc.Node.Type()), what)
		}
		c.conv, c.listDef, c.maxDef = conv, listDef, lc.MaxDefinitionLevel
		c.index = lc.ColumnIndex
		s.cols = append(s.cols, c)
	}
	return s, nil
}

func typeName(t parquet.Type) string {
	name := physName(t)
	if lt := t.LogicalType(); lt != nil && lt.Value != nil {
		name += " (" + lt.String() + ")"
	}
	return name
}

// scan calls fn for every row with the row's values (one per spec; the
// slice is reused between calls).
func (s *fileScanner) scan(ctx context.Context, fn func(vals []feature.Value) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: corrupt Parquet file: %v", s.display, r)
		}
	}()
	vals := make([]feature.Value, len(s.cols))
	mdGroups := s.pf.Metadata().RowGroups
	for g, rg := range s.pf.RowGroups() {
		chunks := rg.ColumnChunks()
		for _, c := range s.cols {
			if c.missing {
				continue
			}
			// Check the page headers before parquet-go trusts their sizes.
			if err := checkPages(s.f, &mdGroups[g].Columns[c.index].MetaData); err != nil {
				return c.errorf("row group %d: %v", g, err)
			}
		}
		for _, c := range s.cols {
			if c.missing {
				continue
			}
			c.pages = chunks[c.index].Pages()
			c.vals, c.i, c.n = nil, 0, 0
		}
		nrows := rg.NumRows()
		err := func() error {
			defer func() {
				for _, c := range s.cols {
					if c.pages != nil {
						_ = c.pages.Close() // read-only pages: nothing to lose on close
						c.pages = nil
					}
				}
			}()
			for r := range nrows {
				if r&4095 == 0 {
					if err := ctx.Err(); err != nil {
						return err
					}
				}
				for i, c := range s.cols {
					if err := c.read(&vals[i]); err != nil {
						return err
					}
				}
				if err := fn(vals); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *fileScanner) close() error {
	if s.closer == nil {
		return nil
	}
	return s.closer.Close()
}

// columnNames lists a file's top-level column names.
func (s *fileScanner) columnNames() []string {
	var out []string
	for _, p := range s.pf.Schema().Columns() {
		if !slices.Contains(out, p[0]) {
			out = append(out, p[0])
		}
	}
	return out
}
