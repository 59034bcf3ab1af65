package serving

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// Reasons a value of an existing row is answered NOT_FOUND; the reason
// label of sluice_feature_unreadable_values_total and of the
// feature_row_unreadable log event.
const (
	unreadableNotInRow = "not_in_row"     // the row's schema lacks the feature (added since)
	unreadableRetyped  = "retyped"        // the row has the feature with another type
	unreadableUnknown  = "unknown_schema" // the row's schema is not recorded in the store
	unreadableCorrupt  = "corrupt_row"    // the row does not decode with its schema
)

// unknownSchemaRetry is how long a row schema that the store has no record
// of is taken as unknown before it is looked up again.
const unknownSchemaRetry = 10 * time.Second

// maxCachedLayouts bounds the layout cache; it is cleared when full. Each
// entry is one (view, current schema, row schema): a handful per view.
const maxCachedLayouts = 4096

// rowLayout says how rows of one schema decode into a view's current
// schema.
type rowLayout struct {
	// m maps the row's schema to the current one; m.Old is nil when the
	// row's schema is unknown (then no feature is readable).
	m feature.Mapping
	// expires, when set, is when an unknown schema is looked up again.
	expires time.Time
}

// reason returns why current field fi cannot be read from such a row, or
// "" when it can.
func (l *rowLayout) reason(fi int) string {
	if l.m.Old == nil {
		return unreadableUnknown
	}
	switch l.m.State[fi] {
	case feature.FieldNotInRow:
		return unreadableNotInRow
	case feature.FieldRetyped:
		return unreadableRetyped
	default:
		return ""
	}
}

type layoutKey struct {
	view     string
	cur, row feature.SchemaID
}

// layoutCache caches rowLayouts, so the store's schema metadata is read
// once per (view, current schema, row schema), not per request.
type layoutCache struct {
	mu sync.RWMutex // protects m
	m  map[layoutKey]*rowLayout
}

// layout returns how vp's rows written with schema id row decode into the
// view's current schema.
func (s *Server) layout(ctx context.Context, vp *viewPlan, row feature.SchemaID, now time.Time) (*rowLayout, error) {
	k := layoutKey{view: vp.view.Name, cur: vp.schema, row: row}
	s.layouts.mu.RLock()
	l := s.layouts.m[k]
	s.layouts.mu.RUnlock()
	if l != nil && (l.expires.IsZero() || now.Before(l.expires)) {
		return l, nil
	}
	l, err := s.loadLayout(ctx, vp.view, row, now)
	if err != nil {
		return nil, err
	}
	s.layouts.mu.Lock()
	if s.layouts.m == nil || len(s.layouts.m) >= maxCachedLayouts {
		s.layouts.m = make(map[layoutKey]*rowLayout)
	}
	s.layouts.m[k] = l
	s.layouts.mu.Unlock()
	return l, nil
}

// loadLayout reads the schema of v's rows of schema id row from the
// store. Legacy rows (id zero) of a view that has no legacy schema yet are
// this process's first contact with the view: their schema is recorded as
// the current one (see online.SchemaRecorder).
func (s *Server) loadLayout(ctx context.Context, v *feature.View, row feature.SchemaID, now time.Time) (*rowLayout, error) {
	schema, found, err := online.LoadSchema(ctx, s.store, v.Name, row)
	if err == nil && !found && row == 0 {
		if _, err = s.schemas.Record(ctx, s.store, v.Name, v.Schema); err == nil {
			schema, found, err = online.LoadSchema(ctx, s.store, v.Name, 0)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, online.ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, storeError("read schema of feature view '"+v.Name+"'", err)
	default:
		// A schema document that does not parse, is not the schema its
		// id says, or could not be read or recorded for another reason:
		// never decode with a guess. The row's values read NOT_FOUND.
		s.logger.Warn("feature_row_schema_unreadable", "view", v.Name, "schema", row.String(), "err", err)
		found = false
	}
	if !found {
		return &rowLayout{m: feature.Mapping{State: make([]feature.FieldState, len(v.Schema))}, expires: now.Add(unknownSchemaRetry)}, nil
	}
	return &rowLayout{m: feature.MapSchema(schema, v.Schema)}, nil
}

// unreadable counts a value of an existing row answered NOT_FOUND, and
// logs it at most once per AlertInterval per view and reason. cause is
// the decode error of a corrupt row, nil otherwise.
func (s *Server) unreadable(view, reason string, row feature.SchemaID, cause error, now time.Time) {
	s.metrics.unreadable.WithLabelValues(view, reason).Inc()
	key := view + "\x00" + reason
	s.alertMu.Lock()
	last, ok := s.lastUnreadable[key]
	fire := !ok || now.Sub(last) >= s.opts.AlertInterval || now.Before(last)
	if fire {
		s.lastUnreadable[key] = now
	}
	s.alertMu.Unlock()
	if fire {
		args := []any{
			"view", view, "reason", reason, "row_schema", row.String(),
			"hint", "values read NOT_FOUND until the view is re-materialized or pushed",
		}
		if cause != nil {
			args = append(args, "err", cause)
		}
		s.logger.Warn("feature_row_unreadable", args...)
	}
}
