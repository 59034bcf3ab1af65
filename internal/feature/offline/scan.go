package offline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// ScanView streams the rows of view's source whose event timestamp lies in
// [start, end] (both inclusive), file by file and row group by row group,
// reading only the columns the view needs. A push source is scanned
// through its batch source. fn's Row slices are reused between calls:
// copy them to keep them (strings and list slices inside values are not
// reused). Errors name the file and column.
func ScanView(ctx context.Context, repo *registry.Repo, view *feature.View, start, end time.Time, fn func(Row) error) error {
	src, err := viewSource(repo, view)
	if err != nil {
		return err
	}
	keys, kinds := repo.JoinKeys(view.Name)
	return scanSource(ctx, repo.Dir, src, keys, kinds, view.Schema, start.UnixNano(), end.UnixNano(), fn)
}

// viewSource returns the file source backing view.
func viewSource(repo *registry.Repo, view *feature.View) (*feature.Source, error) {
	src, ok := repo.Sources[view.Source]
	if !ok {
		return nil, fmt.Errorf("view '%s': unknown source '%s'", view.Name, view.Source)
	}
	if src.Kind == feature.SourcePush {
		if src.BatchSource == "" {
			return nil, fmt.Errorf("view '%s': push source '%s' has no batch source to read offline", view.Name, src.Name)
		}
		b, ok := repo.Sources[src.BatchSource]
		if !ok {
			return nil, fmt.Errorf("view '%s': push source '%s': unknown batch source '%s'", view.Name, src.Name, src.BatchSource)
		}
		src = b
	}
	if src.Kind != feature.SourceFile {
		return nil, fmt.Errorf("view '%s': source '%s' is not a file source", view.Name, src.Name)
	}
	return src, nil
}

// Historical writes to out (a Parquet file, replaced atomically) the
// point-in-time join of the entity rows in entities (a .parquet or .csv
// file with the views' join key columns and event_timestamp; other
// columns are kept) with the features refs name. For each entity row at
// time ts and each view, the view's source row of the same keys with the
// latest event timestamp in [ts − ttl, ts] (no lower bound when the view's
// ttl is 0) supplies the features, ties broken by the largest created
// timestamp; no such row gives nulls. Every entity row is kept, in input
// order, duplicates included. Feature columns are named after the feature,
// or view__feature when two requested features (or an entity column)
// share a name. Memory stays bounded by Options.MemoryBudget: inputs are
// hash-partitioned by entity key into temporary files and joined one
// partition at a time. Features of on-demand views are computed per row
// from the joined features they read and the row's request data (entity
// columns named after the request fields) by the expressions serving
// runs; a value that cannot be computed is null. Features of stream
// feature views are computed from their stream's event log by the tile
// arithmetic serving runs (see historicalStream).
func Historical(ctx context.Context, repo *registry.Repo, entities string, refs []feature.FeatureRef, out string, opts Options) error {
	if hasStream(repo, refs) {
		return historicalStream(ctx, repo, entities, refs, out, opts)
	}
	if hasOnDemand(repo, refs) {
		return historicalOnDemand(ctx, repo, entities, refs, out, opts)
	}
	var plans []*viewPlan
	byView := map[string]*viewPlan{}
	for _, ref := range refs {
		view := repo.Views[ref.View]
		if view == nil {
			return fmt.Errorf("unknown feature view '%s'", ref.View)
		}
		p := byView[ref.View]
		if p == nil {
			src, err := viewSource(repo, view)
			if err != nil {
				return err
			}
			keys, kinds := repo.JoinKeys(view.Name)
			p = &viewPlan{view: view, src: src, keys: keys, kinds: kinds}
			byView[ref.View] = p
			plans = append(plans, p)
		}
		names := ref.Features
		if len(names) == 0 {
			for _, f := range view.Schema {
				names = append(names, f.Name)
			}
		}
		for _, n := range names {
			i := slices.IndexFunc(view.Schema, func(f feature.Field) bool { return f.Name == n })
			if i < 0 {
				return fmt.Errorf("feature view '%s' has no feature '%s'", view.Name, n)
			}
			if slices.Contains(p.pick, i) {
				continue
			}
			p.pick = append(p.pick, i)
			p.fields = append(p.fields, view.Schema[i])
		}
	}
	if len(plans) == 0 {
		return errors.New("no features requested")
	}
	return historical(ctx, repo.Dir, plans, entities, out, opts)
}
