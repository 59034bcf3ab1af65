package offline

import (
	"context"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Row is one source row of a feature view.
type Row struct {
	Keys      []feature.Value // join key values, in the view's entity order
	EventTS   int64           // ns since the epoch, UTC
	CreatedTS int64           // ns since the epoch, UTC; 0 when the source has none
	Values    []feature.Value // the view's features, in schema order
}

// defaultTimestampField is the event timestamp column of a source that
// does not name one.
const defaultTimestampField = "event_timestamp"

// sourceColumn returns the source column that holds name, reversing the
// source's field mapping (source column -> feature/join key name).
func sourceColumn(src *feature.Source, name string) string {
	for col, to := range src.FieldMapping {
		if to == name {
			return col
		}
	}
	return name
}

// scanSource streams the rows of a file source with event ts in [start,
// end] (ns, inclusive): join key columns converted to keyKinds, features to
// schema's types.
func scanSource(ctx context.Context, dir string, src *feature.Source, keys []string, keyKinds []feature.Kind,
	schema []feature.Field, start, end int64, fn func(Row) error,
) error {
	files, release, err := sourceData(ctx, dir, src)
	if err != nil {
		return err
	}
	defer release()
	tsField := src.TimestampField
	if tsField == "" {
		tsField = defaultTimestampField
	}
	specs := make([]colSpec, 0, 2+len(keys)+len(schema))
	specs = append(specs, colSpec{name: tsField, typ: feature.Type{Kind: feature.KindUnixTimestamp}})
	hasCreated := src.CreatedTimestampColumn != ""
	if hasCreated {
		specs = append(specs, colSpec{name: src.CreatedTimestampColumn, typ: feature.Type{Kind: feature.KindUnixTimestamp}})
	}
	nk := len(specs)
	for i, k := range keys {
		specs = append(specs, colSpec{name: sourceColumn(src, k), typ: feature.Type{Kind: keyKinds[i]}})
	}
	nf := len(specs)
	for _, f := range schema {
		specs = append(specs, colSpec{name: sourceColumn(src, f.Name), typ: f.Type})
	}
	row := Row{Keys: make([]feature.Value, len(keys)), Values: make([]feature.Value, len(schema))}
	for _, file := range files {
		s, err := file.open(ctx, specs)
		if err != nil {
			return err
		}
		err = s.scan(ctx, func(vals []feature.Value) error {
			ts := vals[0]
			if ts.Null || ts.I64 < start || ts.I64 > end {
				return nil
			}
			row.EventTS = ts.I64
			row.CreatedTS = 0
			if hasCreated && !vals[1].Null {
				row.CreatedTS = vals[1].I64
			}
			copy(row.Keys, vals[nk:nf])
			copy(row.Values, vals[nf:])
			return fn(row)
		})
		_ = s.close() // read-only scan: a close error cannot lose data
		if err != nil {
			return err
		}
	}
	return nil
}
