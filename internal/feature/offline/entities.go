package offline

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/sluice-ml/sluice/internal/feature"
)

// EntityTimestampColumn is the entity rows' timestamp column: each row
// asks for the feature values as of this time.
const EntityTimestampColumn = "event_timestamp"

// entityReader streams the rows of an entity file (Parquet or CSV).
type entityReader struct {
	cols []Column // every column of the file; join keys typed by their entity, the timestamp as KindUnixTimestamp
	ts   int      // index of the timestamp column
	each func(ctx context.Context, fn func(vals []feature.Value) error) error
	size int64 // file size in bytes
	done func() error
}

// openEntities opens an entity file. keyKinds gives the kinds of the join
// keys the requested views need; each must be a column of the file.
func openEntities(path string, keyKinds map[string]feature.Kind) (*entityReader, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("entity rows: %w", err)
	}
	var r *entityReader
	switch strings.ToLower(filepath.Ext(path)) {
	case ".parquet":
		r, err = openParquetEntities(path, keyKinds)
	case ".csv":
		r, err = openCSVEntities(path, keyKinds)
	default:
		return nil, fmt.Errorf("entity rows %s: want a .parquet or .csv file", path)
	}
	if err != nil {
		return nil, err
	}
	r.size = st.Size()
	return r, nil
}

func checkEntityColumns(path string, names []string, keyKinds map[string]feature.Kind) error {
	need := []string{EntityTimestampColumn}
	for k := range keyKinds {
		need = append(need, k)
	}
	for _, n := range need {
		found := false
		for _, c := range names {
			found = found || c == n
		}
		if !found {
			return fmt.Errorf("entity rows %s: no column '%s'", path, n)
		}
	}
	return nil
}

// inferType returns the feature type of a Parquet leaf column.
func inferType(lc parquet.LeafColumn) (feature.Type, bool) {
	t := lc.Node.Type()
	var k feature.Kind
	switch t.Kind() {
	case parquet.Boolean:
		k = feature.KindBool
	case parquet.Int32:
		k = feature.KindInt32
	case parquet.Int64:
		k = feature.KindInt64
		if lt := t.LogicalType(); lt != nil {
			if _, ok := lt.Value.(*format.TimestampType); ok {
				k = feature.KindUnixTimestamp
			}
		}
	case parquet.Int96:
		k = feature.KindUnixTimestamp
	case parquet.Float:
		k = feature.KindFloat32
	case parquet.Double:
		k = feature.KindFloat64
	case parquet.ByteArray:
		k = feature.KindBytes
		if lt := t.LogicalType(); lt != nil {
			if _, ok := lt.Value.(*format.StringType); ok {
				k = feature.KindString
			}
		}
	case parquet.FixedLenByteArray:
		k = feature.KindBytes
	default:
		return feature.Type{}, false
	}
	list := lc.MaxRepetitionLevel > 0
	if list && k == feature.KindUnixTimestamp {
		return feature.Type{}, false
	}
	return feature.Type{Kind: k, List: list}, true
}

func openParquetEntities(path string, keyKinds map[string]feature.Kind) (*entityReader, error) {
	probe, err := openScanner(path, path, nil)
	if err != nil {
		return nil, err
	}
	names := probe.columnNames()
	schema := probe.pf.Schema()
	_ = probe.close() // read-only probe; a close error cannot lose data
	if err := checkEntityColumns(path, names, keyKinds); err != nil {
		return nil, err
	}
	r := &entityReader{ts: -1}
	var specs []colSpec
	for _, n := range names {
		var typ feature.Type
		if k, ok := keyKinds[n]; ok {
			typ = feature.Type{Kind: k}
		} else if n == EntityTimestampColumn {
			typ = feature.Type{Kind: feature.KindUnixTimestamp}
			r.ts = len(specs)
		} else {
			lc, _, err := leafOf(schema, n)
			if err != nil {
				return nil, fmt.Errorf("entity rows %s: column '%s': %w", path, n, err)
			}
			t, ok := inferType(lc)
			if !ok {
				return nil, fmt.Errorf("entity rows %s: column '%s': type %s is not supported", path, n, typeName(lc.Node.Type()))
			}
			typ = t
		}
		specs = append(specs, colSpec{name: n, typ: typ})
		r.cols = append(r.cols, Column{Name: n, Type: typ})
	}
	s, err := openScanner(path, path, specs)
	if err != nil {
		return nil, err
	}
	r.each = s.scan
	r.done = s.close
	return r, nil
}

func openCSVEntities(path string, keyKinds map[string]feature.Kind) (*entityReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("entity rows: %w", err)
	}
	cr := csv.NewReader(f)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		_ = f.Close() // best effort: the read error is what the caller needs
		return nil, fmt.Errorf("entity rows %s: read header: %w", path, err)
	}
	header = append([]string(nil), header...)
	if err := checkEntityColumns(path, header, keyKinds); err != nil {
		_ = f.Close() // best effort: the read error is what the caller needs
		return nil, err
	}
	r := &entityReader{ts: -1, done: f.Close}
	for i, n := range header {
		typ := feature.Type{Kind: feature.KindString}
		if k, ok := keyKinds[n]; ok {
			typ = feature.Type{Kind: k}
		} else if n == EntityTimestampColumn {
			typ = feature.Type{Kind: feature.KindUnixTimestamp}
			r.ts = i
		}
		r.cols = append(r.cols, Column{Name: n, Type: typ})
	}
	r.each = func(ctx context.Context, fn func(vals []feature.Value) error) error {
		vals := make([]feature.Value, len(header))
		for line := 2; ; line++ {
			if line&4095 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			rec, err := cr.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("entity rows %s: %w", path, err)
			}
			for i, s := range rec {
				v, err := parseCSVValue(r.cols[i].Type.Kind, s)
				if err != nil {
					return fmt.Errorf("entity rows %s: line %d: column '%s': %w", path, line, header[i], err)
				}
				vals[i] = v
			}
			if err := fn(vals); err != nil {
				return err
			}
		}
	}
	return r, nil
}

var csvTimeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02",
}

func parseCSVValue(k feature.Kind, s string) (feature.Value, error) {
	if s == "" {
		return feature.Value{Null: true}, nil
	}
	switch k {
	case feature.KindInt32, feature.KindInt64:
		x, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return feature.Value{}, fmt.Errorf("%q is not an integer", s)
		}
		return feature.Value{I64: x}, nil
	case feature.KindBytes:
		return feature.Value{B: []byte(s)}, nil
	case feature.KindUnixTimestamp:
		s = strings.TrimSpace(s)
		for _, l := range csvTimeLayouts {
			if t, err := time.Parse(l, s); err == nil {
				return feature.Value{I64: t.UnixNano()}, nil
			}
		}
		return feature.Value{}, fmt.Errorf("%q is not a timestamp (want RFC 3339, e.g. 2026-01-02T15:04:05Z)", s)
	default:
		return feature.Value{S: s}, nil
	}
}
