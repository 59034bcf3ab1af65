package offline

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Column is one column of a file written by Writer. Every column is
// nullable; a list column is a Parquet LIST of its element kind, and a
// KindUnixTimestamp column is a TIMESTAMP(NANOS) INT64.
type Column struct {
	Name string
	Type feature.Type
}

// writerRowGroupRows bounds how many rows a Writer buffers before it
// flushes a row group.
const writerRowGroupRows = 32 << 10

// Writer writes rows of feature values to a Parquet file, streaming: it
// holds at most one row group in memory.
type Writer struct {
	pw    *parquet.GenericWriter[any] // rows are written with WriteRows; T is unused
	cols  []Column
	leaf  []int         // leaf column index of each column
	order []int         // columns in leaf order
	rows  []parquet.Row // buffered rows, flushed in batches
	n     int           // rows buffered
}

// writerBatch is how many rows Write buffers before handing them to the
// Parquet writer.
const writerBatch = 256

// orderedGroup is a Parquet group whose fields keep the order they were
// declared in (parquet.Group sorts them by name).
type orderedGroup struct {
	parquet.Group
	names []string
}

func (g orderedGroup) Fields() []parquet.Field {
	byName := make(map[string]parquet.Field, len(g.names))
	for _, f := range g.Group.Fields() {
		byName[f.Name()] = f
	}
	out := make([]parquet.Field, 0, len(g.names))
	for _, n := range g.names {
		out = append(out, byName[n])
	}
	return out
}

func columnNode(t feature.Type) (parquet.Node, error) {
	var n parquet.Node
	switch t.Kind {
	case feature.KindInt32:
		n = parquet.Int(32)
	case feature.KindInt64:
		n = parquet.Int(64)
	case feature.KindFloat32:
		n = parquet.Leaf(parquet.FloatType)
	case feature.KindFloat64:
		n = parquet.Leaf(parquet.DoubleType)
	case feature.KindString:
		n = parquet.String()
	case feature.KindBytes:
		n = parquet.Leaf(parquet.ByteArrayType)
	case feature.KindBool:
		n = parquet.Leaf(parquet.BooleanType)
	case feature.KindUnixTimestamp:
		if t.List {
			return nil, fmt.Errorf("lists of %s are not supported", t.Kind)
		}
		n = parquet.Timestamp(parquet.Nanosecond)
	default:
		return nil, fmt.Errorf("type %s is not supported", t)
	}
	if t.List {
		n = parquet.List(n)
	}
	return parquet.Optional(n), nil
}

// NewWriter returns a Writer of the given columns to w. Close it to write
// the file's footer.
func NewWriter(w io.Writer, cols []Column) (*Writer, error) {
	g := orderedGroup{Group: parquet.Group{}}
	for _, c := range cols {
		if _, dup := g.Group[c.Name]; dup {
			return nil, fmt.Errorf("duplicate column '%s'", c.Name)
		}
		n, err := columnNode(c.Type)
		if err != nil {
			return nil, fmt.Errorf("column '%s': %w", c.Name, err)
		}
		g.Group[c.Name] = n
		g.names = append(g.names, c.Name)
	}
	schema := parquet.NewSchema("sluice", g)
	wr := &Writer{cols: cols, leaf: make([]int, len(cols)), rows: make([]parquet.Row, writerBatch)}
	for i, c := range cols {
		path := []string{c.Name}
		if c.Type.List {
			path = append(path, "list", "element")
		}
		lc, ok := schema.Lookup(path...)
		if !ok {
			return nil, fmt.Errorf("column '%s': not found in the written schema", c.Name)
		}
		wr.leaf[i] = lc.ColumnIndex
	}
	wr.order = make([]int, len(cols))
	for i := range cols {
		wr.order[i] = i
	}
	// Sort columns by leaf index (a small insertion sort: few columns).
	for i := 1; i < len(wr.order); i++ {
		for j := i; j > 0 && wr.leaf[wr.order[j]] < wr.leaf[wr.order[j-1]]; j-- {
			wr.order[j], wr.order[j-1] = wr.order[j-1], wr.order[j]
		}
	}
	wr.pw = parquet.NewGenericWriter[any](w, schema, parquet.Compression(&parquet.Snappy),
		parquet.MaxRowsPerRowGroup(writerRowGroupRows))
	return wr, nil
}

// Write writes one row: one value per column, in column order.
func (w *Writer) Write(vals []feature.Value) error {
	if len(vals) != len(w.cols) {
		return fmt.Errorf("write row: %d values for %d columns", len(vals), len(w.cols))
	}
	row := w.rows[w.n][:0]
	for _, i := range w.order {
		c := w.cols[i]
		v := &vals[i]
		col := w.leaf[i]
		if v.Null {
			row = append(row, parquet.NullValue().Level(0, 0, col))
			continue
		}
		if !c.Type.List {
			pv, err := scalarValue(c.Type.Kind, v)
			if err != nil {
				return fmt.Errorf("write column '%s': %w", c.Name, err)
			}
			row = append(row, pv.Level(0, 1, col))
			continue
		}
		n := listLen(c.Type.Kind, v)
		if n == 0 {
			row = append(row, parquet.NullValue().Level(0, 1, col))
			continue
		}
		for j := range n {
			rep := 1
			if j == 0 {
				rep = 0
			}
			row = append(row, listElem(c.Type.Kind, v, j).Level(rep, 2, col))
		}
	}
	w.rows[w.n] = row
	w.n++
	if w.n == len(w.rows) {
		return w.flush()
	}
	return nil
}

func (w *Writer) flush() error {
	if w.n == 0 {
		return nil
	}
	_, err := w.pw.WriteRows(w.rows[:w.n])
	w.n = 0
	if err != nil {
		return fmt.Errorf("write rows: %w", err)
	}
	return nil
}

// Close flushes buffered rows and writes the file footer; it does not close
// the underlying io.Writer.
func (w *Writer) Close() error {
	if err := w.flush(); err != nil {
		return err
	}
	if err := w.pw.Close(); err != nil {
		return fmt.Errorf("close parquet writer: %w", err)
	}
	return nil
}

func scalarValue(k feature.Kind, v *feature.Value) (parquet.Value, error) {
	switch k {
	case feature.KindInt32:
		return parquet.Int32Value(int32(v.I64)), nil
	case feature.KindInt64, feature.KindUnixTimestamp:
		return parquet.Int64Value(v.I64), nil
	case feature.KindFloat32:
		return parquet.FloatValue(float32(v.F64)), nil
	case feature.KindFloat64:
		return parquet.DoubleValue(v.F64), nil
	case feature.KindString:
		return parquet.ByteArrayValue([]byte(v.S)), nil
	case feature.KindBytes:
		return parquet.ByteArrayValue(v.B), nil
	case feature.KindBool:
		return parquet.BooleanValue(v.Bool), nil
	default:
		return parquet.Value{}, fmt.Errorf("type %s is not supported", k)
	}
}

func listLen(k feature.Kind, v *feature.Value) int {
	switch k {
	case feature.KindInt32, feature.KindInt64:
		return len(v.I64s)
	case feature.KindFloat32:
		return len(v.F32s)
	case feature.KindFloat64:
		return len(v.F64s)
	case feature.KindString, feature.KindBytes:
		return len(v.Ss)
	case feature.KindBool:
		return len(v.Bools)
	default:
		return 0
	}
}

func listElem(k feature.Kind, v *feature.Value, j int) parquet.Value {
	switch k {
	case feature.KindInt32:
		return parquet.Int32Value(int32(v.I64s[j]))
	case feature.KindInt64:
		return parquet.Int64Value(v.I64s[j])
	case feature.KindFloat32:
		return parquet.FloatValue(v.F32s[j])
	case feature.KindFloat64:
		return parquet.DoubleValue(v.F64s[j])
	case feature.KindString, feature.KindBytes:
		return parquet.ByteArrayValue([]byte(v.Ss[j]))
	default:
		return parquet.BooleanValue(v.Bools[j])
	}
}

// writeAtomic writes out, a Parquet file of cols, with the rows fill
// writes, through a temporary file renamed over out once complete.
func writeAtomic(out string, cols []Column, fill func(w *Writer) error) (err error) {
	tmpOut, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create output: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmpOut.Close() // best effort: err is already being returned
			_ = os.Remove(tmpOut.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmpOut, 1<<20)
	w, err := NewWriter(bw, cols)
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := fill(w); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := tmpOut.Close(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	//nolint:gosec // G302: the output is a dataset for the operator's training jobs and gets the usual 0644 of a created file
	if err := os.Chmod(tmpOut.Name(), 0o644); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := os.Rename(tmpOut.Name(), out); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
