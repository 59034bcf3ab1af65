package serving

import (
	"context"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// WriteToOnlineStore writes rows straight into one online feature view,
// as Feast's FeatureStore.write_to_online_store and its feature server's
// POST /write-to-online-store do (Feast's remote online store sends its
// writes there). df holds the rows as columns: the view's join keys, its
// features by feature name (or by the source column its source's
// field_mapping maps to the feature), the event timestamp, and optionally
// the created timestamp. The event timestamp column is the view source's
// timestamp field when df has it, else "event_timestamp" (what Feast's
// remote online store sends); the created one is the source's created
// timestamp column, else "created".
//
// Rows are checked, encoded and written as a push writes them (newer
// wins, the future tolerance, the view's hot copy, its freshness state),
// but only to this view, not to every view of its source.
func (s *Server) WriteToOnlineStore(ctx context.Context, view string, df map[string][]any) (PushReport, error) {
	repo := s.repos.Current()
	if repo == nil {
		return PushReport{}, unavailablef(ReasonRegistryNotLoaded, "no feature registry is loaded")
	}
	v, ok := repo.Views[view]
	if !ok {
		return PushReport{}, invalidf(ReasonUnknownView, "unknown feature view '%s'", view)
	}
	if !v.Online {
		return PushReport{}, invalidf(ReasonViewNotOnline, "feature view '%s' is not online", view)
	}
	if v.Stream != nil {
		return PushReport{}, invalidf(ReasonInvalidRequest, "feature view '%s' is a stream feature view: its aggregator keeps its tiles; publish events to its stream instead", view)
	}
	src := repo.Sources[v.Source]
	if src == nil {
		src = &feature.Source{Name: v.Source}
	}
	mapped := sourceColumns(src)
	column := func(name string) string {
		if _, ok := df[name]; ok {
			return name
		}
		return mapped(name)
	}
	tsField, createdField := timestampFields(repo, src)
	if _, ok := df[column(tsField)]; !ok {
		tsField = "event_timestamp"
	}
	if _, ok := df[column(createdField)]; createdField == "" || !ok {
		createdField = "created"
	}
	in, err := s.readInput(repo, src, df, column, tsField, createdField)
	if err != nil {
		return PushReport{}, err
	}
	on := onlineRows{
		views:  []*feature.View{v},
		spans:  make([][2]int, 1),
		newest: make([]int64, 1),
		hot:    make([][]online.Entry, 1),
	}
	if err := on.addView(in, 0); err != nil {
		return PushReport{}, err
	}
	rep := PushReport{Rows: in.n, Views: []PushViewReport{}}
	return rep, s.pushOnline(ctx, on, in.n, in.now, &rep)
}
