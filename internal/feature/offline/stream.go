package offline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// hasStream reports whether refs name a stream feature view.
func hasStream(repo *registry.Repo, refs []feature.FeatureRef) bool {
	return slices.ContainsFunc(refs, func(r feature.FeatureRef) bool {
		v := repo.Views[r.View]
		return v != nil && v.Stream != nil
	})
}

// streamHistView is one requested stream feature view.
type streamHistView struct {
	view   *feature.View
	spec   *aggregate.Spec
	keys   []string
	kinds  []feature.Kind
	keyCol []int                        // entity file column of each join key
	events map[string][]aggregate.Event // by entity key, in arrival order
	pick   []int                        // features wanted, indexes into the schema
}

// historicalStream is Historical for requests that name stream feature
// views. The other requested features are joined first (as Historical
// does it); then, for each entity row at time ts, each stream view's
// features are computed from its stream's event log (the stream source's
// batch source) by the tile arithmetic the aggregator and serving run:
// the events that had arrived by ts (the batch source's
// created_timestamp_column; without one, every event counts as arrived at
// its event time), late ones dropped, combined over the windows at ts.
// An entity with no applied event by ts gets nulls, as serving answers
// NOT_FOUND for it. Feature columns of stream views follow the others.
// The events of the requested views are held in memory.
func historicalStream(ctx context.Context, repo *registry.Repo, entities string, refs []feature.FeatureRef, out string, opts Options) (err error) {
	others, views, err := splitStreamRefs(repo, refs)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(opts.TempDir, "sluice-stream-")
	if err != nil {
		return fmt.Errorf("create spill folder: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	baseFile := entities
	if len(others) > 0 {
		baseFile = filepath.Join(tmp, "joined.parquet")
		if err := Historical(ctx, repo, entities, others, baseFile, opts); err != nil {
			return err
		}
	}
	keyKinds := map[string]feature.Kind{}
	for _, hv := range views {
		if err := loadStreamEvents(ctx, repo, hv); err != nil {
			return err
		}
		for i, k := range hv.keys {
			keyKinds[k] = hv.kinds[i]
		}
	}
	er, err := openEntities(baseFile, keyKinds)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, er.done()) }()
	outCols, err := streamOutputColumns(er, views)
	if err != nil {
		return err
	}
	return writeStream(ctx, out, er, outCols, views)
}

// splitStreamRefs splits refs into the refs of non-stream views (others)
// and one streamHistView per requested stream view, whose pick holds the
// schema indexes of its requested features in request order.
func splitStreamRefs(repo *registry.Repo, refs []feature.FeatureRef) ([]feature.FeatureRef, []*streamHistView, error) {
	var others []feature.FeatureRef
	var views []*streamHistView
	for _, ref := range refs {
		v := repo.Views[ref.View]
		if v == nil || v.Stream == nil {
			others = append(others, ref)
			continue
		}
		hv := &streamHistView{view: v, spec: repo.StreamSpec(v.Name)}
		if hv.spec == nil {
			return nil, nil, fmt.Errorf("stream feature view '%s' is not compiled", v.Name)
		}
		names := ref.Features
		if len(names) == 0 {
			for _, f := range v.Schema {
				names = append(names, f.Name)
			}
		}
		for _, n := range names {
			i := slices.IndexFunc(v.Schema, func(f feature.Field) bool { return f.Name == n })
			if i < 0 {
				return nil, nil, fmt.Errorf("feature view '%s' has no feature '%s'", v.Name, n)
			}
			if !slices.Contains(hv.pick, i) {
				hv.pick = append(hv.pick, i)
			}
		}
		if i := slices.IndexFunc(views, func(x *streamHistView) bool { return x.view.Name == v.Name }); i >= 0 {
			for _, p := range hv.pick {
				if !slices.Contains(views[i].pick, p) {
					views[i].pick = append(views[i].pick, p)
				}
			}
			continue
		}
		hv.keys, hv.kinds = repo.JoinKeys(v.Name)
		views = append(views, hv)
	}
	return others, views, nil
}

// streamOutputColumns names the output columns: the entity columns, then
// each stream view's requested features (view__feature where a name is
// not unique). It also finds each view's join key columns.
func streamOutputColumns(er *entityReader, views []*streamHistView) ([]Column, error) {
	outCols := slices.Clone(er.cols)
	names := map[string]int{}
	for _, c := range outCols {
		names[c.Name]++
	}
	for _, hv := range views {
		for _, p := range hv.pick {
			names[hv.view.Schema[p].Name]++
		}
	}
	for _, hv := range views {
		for _, k := range hv.keys {
			hv.keyCol = append(hv.keyCol, slices.IndexFunc(er.cols, func(c Column) bool { return c.Name == k }))
		}
		for _, p := range hv.pick {
			f := hv.view.Schema[p]
			name := f.Name
			if names[name] > 1 {
				name = hv.view.Name + "__" + f.Name
			}
			if slices.ContainsFunc(outCols, func(c Column) bool { return c.Name == name }) {
				return nil, fmt.Errorf("feature '%s' is requested twice or clashes with an entity column", name)
			}
			outCols = append(outCols, Column{Name: name, Type: f.Type})
		}
	}
	return outCols, nil
}

// loadStreamEvents reads a stream view's event log: its source's batch
// source, with the aggregated columns, the arrival time
// (created_timestamp_column) and the stream sequence (sequence_field).
func loadStreamEvents(ctx context.Context, repo *registry.Repo, hv *streamHistView) error {
	src := repo.Sources[hv.view.Source]
	if src == nil || src.Stream == nil {
		return fmt.Errorf("stream feature view '%s': source '%s' is not a stream source", hv.view.Name, hv.view.Source)
	}
	if src.BatchSource == "" {
		return fmt.Errorf("stream feature view '%s': stream source '%s' has no batch_source (the event log historical retrieval reads)", hv.view.Name, src.Name)
	}
	batch := repo.Sources[src.BatchSource]
	if batch == nil || batch.Kind != feature.SourceFile {
		return fmt.Errorf("stream feature view '%s': batch source '%s' is not a file source", hv.view.Name, src.BatchSource)
	}
	var schema []feature.Field
	for _, c := range hv.spec.Columns {
		schema = append(schema, feature.Field{Name: c, Type: feature.Type{Kind: feature.KindFloat64}})
	}
	seqField := src.Stream.SequenceField
	if seqField != "" {
		schema = append(schema, feature.Field{Name: seqField, Type: feature.Type{Kind: feature.KindInt64}})
	}
	hv.events = map[string][]aggregate.Event{}
	var row uint64
	var key []byte
	err := scanSource(ctx, repo.Dir, batch, hv.keys, hv.kinds, schema, math.MinInt64, math.MaxInt64, func(r Row) error {
		row++
		var ok bool
		key, ok = appendKey(key[:0], hv.kinds, r.Keys)
		if !ok {
			return nil
		}
		ev := aggregate.Event{Seq: row, Time: r.EventTS, Arrival: r.EventTS, Values: make([]float64, len(hv.spec.Columns))}
		if batch.CreatedTimestampColumn != "" {
			ev.Arrival = r.CreatedTS
		}
		for i := range hv.spec.Columns {
			if v := r.Values[i]; v.Null || math.IsNaN(v.F64) {
				ev.Values[i] = math.NaN()
			} else {
				ev.Values[i] = v.F64
			}
		}
		if seqField != "" {
			v := r.Values[len(hv.spec.Columns)]
			if v.Null || v.I64 <= 0 {
				return fmt.Errorf("stream feature view '%s': batch source '%s': row %d has no %s", hv.view.Name, batch.Name, row, seqField)
			}
			ev.Seq = uint64(v.I64)
		}
		hv.events[string(key)] = append(hv.events[string(key)], ev)
		return nil
	})
	if err != nil {
		return err
	}
	for _, evs := range hv.events {
		slices.SortFunc(evs, func(a, b aggregate.Event) int {
			return cmp.Or(cmp.Compare(a.Arrival, b.Arrival), cmp.Compare(a.Seq, b.Seq))
		})
	}
	return nil
}

// writeStream writes out: each entity row's columns, then its stream
// features at its timestamp.
func writeStream(ctx context.Context, out string, er *entityReader, outCols []Column, views []*streamHistView) (err error) {
	return writeAtomic(out, outCols, func(w *Writer) error {
		vals := make([][]feature.Value, len(views))
		for i, hv := range views {
			vals[i] = make([]feature.Value, hv.spec.Features())
		}
		row := make([]feature.Value, 0, len(outCols))
		var key []byte
		kv := []feature.Value{}
		err := er.each(ctx, func(in []feature.Value) error {
			row = append(row[:0], in...)
			tsv := in[er.ts]
			for vi, hv := range views {
				kv = kv[:0]
				for _, c := range hv.keyCol {
					kv = append(kv, in[c])
				}
				var ok bool
				key, ok = appendKey(key[:0], hv.kinds, kv)
				st := aggregate.NewState()
				if ok && !tsv.Null {
					for i, evs := 0, hv.events[string(key)]; i < len(evs) && evs[i].Arrival <= tsv.I64; i++ {
						st.Apply(hv.spec, &evs[i])
					}
				}
				stale := hv.view.TTL > 0 && hv.view.StalePolicy == feature.StaleWithhold && tsv.I64-st.Newest > int64(hv.view.TTL)
				if st.Empty() || stale {
					for range hv.pick {
						row = append(row, feature.Value{Null: true})
					}
					continue
				}
				st.Values(hv.spec, tsv.I64, vals[vi])
				for _, p := range hv.pick {
					row = append(row, vals[vi][p])
				}
			}
			if err := w.Write(row); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return nil
	})
}
