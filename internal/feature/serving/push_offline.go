package serving

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/objstore"
)

// pushFilePrefix starts the names of the files offline pushes append.
const pushFilePrefix = "push"

// offlineTarget is the folder source an offline push appends to.
type offlineTarget struct {
	batch  *feature.Source
	folder string // the source's folder, resolved against the repository
}

// resolveOfflineTarget returns the batch source of push source src, which
// must be a file source whose path is a folder. A folder path that does
// not exist yet (and does not end in .parquet) is created.
func resolveOfflineTarget(repo *registry.Repo, src *feature.Source) (offlineTarget, error) {
	if src.BatchSource == "" {
		return offlineTarget{}, invalidf(ReasonPushOfflineNoBatchSource,
			"push source '%s' has no batch_source, so there is no offline store to push to", src.Name)
	}
	b, ok := repo.Sources[src.BatchSource]
	if !ok || b.Kind != feature.SourceFile {
		return offlineTarget{}, invalidf(ReasonPushOfflineNoBatchSource,
			"push source '%s': batch source '%s' is not a file source", src.Name, src.BatchSource)
	}
	if objstore.IsURI(b.Path) {
		return offlineTarget{}, invalidf(ReasonPushOfflineNeedsFolder,
			"push source '%s': batch source '%s' is on object storage (%s); an offline push appends a Parquet file to a local folder only, so push to the online store or write the file to the bucket",
			src.Name, b.Name, b.Path)
	}
	p := filepath.FromSlash(b.Path)
	if !filepath.IsAbs(p) {
		p = filepath.Join(repo.Dir, p)
	}
	needsFolder := func(what string) error {
		return invalidf(ReasonPushOfflineNeedsFolder,
			"push source '%s': batch source '%s' has path '%s', %s; an offline push appends a new Parquet file, so the path must be a folder of .parquet files",
			src.Name, b.Name, b.Path, what)
	}
	st, err := os.Stat(p)
	switch {
	case err == nil && st.IsDir():
	case err == nil:
		return offlineTarget{}, needsFolder("a single file")
	case errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(strings.ToLower(b.Path), ".parquet"):
		return offlineTarget{}, needsFolder("which does not exist and names a file")
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(p, 0o755); err != nil { //nolint:gosec // G301: a data folder of the repository, readable like the generator's
			return offlineTarget{}, apierr.Errorf(apierr.KindInternal, ReasonOfflineWriteFailed,
				"push source '%s': create the folder of batch source '%s': %v", src.Name, b.Name, err)
		}
	default:
		return offlineTarget{}, apierr.Errorf(apierr.KindInternal, ReasonOfflineWriteFailed,
			"push source '%s': batch source '%s': %v", src.Name, b.Name, err)
	}
	return offlineTarget{batch: b, folder: p}, nil
}

// pushInput is a push's rows after the common checks.
type pushInput struct {
	repo       *registry.Repo
	src        *feature.Source
	df         map[string][]any
	n          int
	column     func(name string) string // the df column of a view column
	events     []int64
	created    []int64
	hasCreated []bool
	now        time.Time
}

// offlineRows is the file an offline push writes: its columns and rows.
type offlineRows struct {
	cols []offline.Column
	rows [][]feature.Value
}

// offlineCol is one column of the file and where its values come from.
type offlineCol struct {
	col      offline.Column
	from     string // the df column; "" for the timestamp columns
	data     []any  // nil: the df has no such column, the values are null
	key      bool   // a join key: null is not allowed when required
	required bool   // a view of the pushed source reads it
	owner    string // the view that added it, for error messages
}

// buildOfflineRows converts the pushed rows to the batch source's file
// layout: its timestamp column, its created timestamp column (the push
// time for rows without one), and the join keys and features of every
// view that reads the batch source, directly or through a push source,
// under their source column names (the batch source's field mapping
// reversed). Columns of the pushed source's views must be in df; the
// other views' columns are written when df has them and as nulls
// otherwise, so every view can still read the folder. Every value is
// checked here, before anything is written.
func buildOfflineRows(in pushInput, t offlineTarget) (offlineRows, error) {
	b := t.batch
	tsCol := b.TimestampField
	if tsCol == "" {
		tsCol = "event_timestamp"
	}
	tsType := feature.Type{Kind: feature.KindUnixTimestamp}
	oc := &offlineColumns{in: &in, b: b, cols: []offlineCol{{col: offline.Column{Name: tsCol, Type: tsType}}}}
	if b.CreatedTimestampColumn != "" {
		if b.CreatedTimestampColumn == tsCol {
			return offlineRows{}, invalidf(ReasonInvalidRequest, "batch source '%s': the created timestamp column is the event timestamp column '%s'", b.Name, tsCol)
		}
		oc.cols = append(oc.cols, offlineCol{col: offline.Column{Name: b.CreatedTimestampColumn, Type: tsType}})
	}
	oc.index = make(map[string]int, 8)
	for i, c := range oc.cols {
		oc.index[c.col.Name] = i
	}
	for _, v := range batchViews(in.repo, b) {
		if err := oc.addView(v); err != nil {
			return offlineRows{}, err
		}
	}
	return oc.rows()
}

// offlineColumns gathers the columns of a batch source's file layout for
// the pushed rows in: the timestamp columns first, then each view's.
type offlineColumns struct {
	in    *pushInput
	b     *feature.Source
	cols  []offlineCol
	index map[string]int // column name -> index into cols
}

// batchViews returns the views that read batch source b, directly or
// through a push source, by name.
func batchViews(repo *registry.Repo, b *feature.Source) []*feature.View {
	var views []*feature.View
	for _, v := range repo.Views {
		s := repo.Sources[v.Source]
		if v.Source == b.Name || (s != nil && s.Kind == feature.SourcePush && s.BatchSource == b.Name) {
			views = append(views, v)
		}
	}
	slices.SortFunc(views, func(x, y *feature.View) int { return strings.Compare(x.Name, y.Name) })
	return views
}

// fileColumn returns the batch source's column name of field name: the
// field mapping reversed.
func fileColumn(b *feature.Source, name string) string {
	for col, to := range b.FieldMapping {
		if to == name {
			return col
		}
	}
	return name
}

// addView adds the join keys and features of view v.
func (oc *offlineColumns) addView(v *feature.View) error {
	for _, en := range v.Entities {
		e, ok := oc.in.repo.Entities[en]
		if !ok {
			return apierr.Errorf(apierr.KindInternal, ReasonInternal, "feature view '%s': entity '%s' is not defined", v.Name, en)
		}
		if err := oc.add(v, e.JoinKey, feature.Type{Kind: e.ValueType.Kind}, true); err != nil {
			return err
		}
	}
	for _, f := range v.Schema {
		if err := oc.add(v, f.Name, f.Type, false); err != nil {
			return err
		}
	}
	return nil
}

// add adds the column of field name of view v, or merges it with the
// column another view added: both must read it as one type, and neither
// as a timestamp column. A column the pushed source's views read must be
// in the pushed rows.
func (oc *offlineColumns) add(v *feature.View, name string, typ feature.Type, key bool) error {
	in, b := oc.in, oc.b
	required := v.Source == in.src.Name
	fc := fileColumn(b, name)
	if i, ok := oc.index[fc]; ok {
		c := &oc.cols[i]
		if c.col.Type != typ {
			return invalidf(ReasonInvalidRequest, "batch source '%s': column '%s' is %s for view '%s' but %s for view '%s'",
				b.Name, fc, c.col.Type, c.owner, typ, v.Name)
		}
		if c.from == "" && c.owner == "" {
			return invalidf(ReasonInvalidRequest, "batch source '%s': view '%s' reads its timestamp column '%s' as '%s'", b.Name, v.Name, fc, name)
		}
		c.required = c.required || required
		c.key = c.key || key
		return nil
	}
	from := in.column(name)
	data, ok := in.df[from]
	if !ok && required {
		return invalidf(ReasonMissingColumn, "push source '%s': the rows have no column '%s'", in.src.Name, from)
	}
	oc.index[fc] = len(oc.cols)
	oc.cols = append(oc.cols, offlineCol{col: offline.Column{Name: fc, Type: typ}, from: from, data: data, key: key, required: required, owner: v.Name})
	return nil
}

// rows converts every pushed row to the file layout, checking each value.
func (oc *offlineColumns) rows() (offlineRows, error) {
	in, cols := oc.in, oc.cols
	out := offlineRows{cols: make([]offline.Column, len(cols)), rows: make([][]feature.Value, in.n)}
	for i, c := range cols {
		out.cols[i] = c.col
	}
	vals := make([]feature.Value, in.n*len(cols))
	for r := range in.n {
		row := vals[r*len(cols) : (r+1)*len(cols) : (r+1)*len(cols)]
		row[0] = feature.Value{I64: in.events[r]}
		next := 1
		if oc.b.CreatedTimestampColumn != "" {
			ct := in.now.UnixNano()
			if in.hasCreated[r] {
				ct = in.created[r]
			}
			row[1] = feature.Value{I64: ct}
			next = 2
		}
		for ci := next; ci < len(cols); ci++ {
			v, err := cols[ci].value(r)
			if err != nil {
				return offlineRows{}, err
			}
			row[ci] = v
		}
		out.rows[r] = row
	}
	return out, nil
}

// value converts row r of the column's pushed data (null where the rows
// have no such column); a required join key must not be null.
func (c *offlineCol) value(r int) (feature.Value, error) {
	if c.data == nil {
		return feature.Value{Null: true}, nil
	}
	v, err := ToValue(c.data[r], c.col.Type)
	if err == nil && v.Null && c.key && c.required {
		err = errors.New("null")
	}
	if err != nil {
		if c.key {
			return v, invalidf(ReasonInvalidEntityValue, "entity key '%s' row %d: %v", c.from, r, err)
		}
		return v, invalidf(ReasonInvalidColumnValue, "column '%s' row %d (%s, view '%s'): %v", c.from, r, c.col.Type, c.owner, err)
	}
	return v, nil
}

// pushOffline appends rows to t's folder as one new Parquet file. No rows
// write no file.
func (s *Server) pushOffline(ctx context.Context, source string, t offlineTarget, rows offlineRows, now time.Time) (PushOfflineReport, error) {
	rep := PushOfflineReport{Source: t.batch.Name, Rows: len(rows.rows)}
	if len(rows.rows) == 0 {
		return rep, nil
	}
	p, err := offline.AppendFile(ctx, t.folder, pushFilePrefix, now, rows.cols, rows.rows)
	if err != nil {
		if ctx.Err() != nil {
			return rep, fmt.Errorf("push source '%s': append to batch source '%s': %w", source, t.batch.Name, err)
		}
		return rep, &apierr.Error{
			Kind: apierr.KindInternal, Reason: ReasonOfflineWriteFailed,
			Msg: fmt.Sprintf("push source '%s': append to batch source '%s'", source, t.batch.Name), Err: err,
		}
	}
	rep.File = path.Join(filepath.ToSlash(t.batch.Path), filepath.Base(p))
	s.logger.Info("offline push", "push_source", source, "batch_source", t.batch.Name, "file", rep.File, "rows", len(rows.rows))
	return rep, nil
}

// offlineKept marks err, an online write's failure after the offline
// append succeeded: the offline rows stay.
func offlineKept(source string, off *PushOfflineReport, err error) error {
	what := fmt.Sprintf("push source '%s': the rows were appended to the offline store (%s) and stay there, but the online write failed", source, off.File)
	if e, ok := errors.AsType[*apierr.Error](err); ok {
		return &apierr.Error{Kind: e.Kind, Reason: e.Reason, Msg: what + ": " + e.Msg, Err: e.Err}
	}
	return fmt.Errorf("%s: %w", what, err)
}
