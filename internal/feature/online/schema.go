package online

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Schemas. Every stored row carries the id of the schema its payload was
// encoded with (feature.Record.Schema), and the store keeps, per view, the
// schemas its rows were written with, in its metadata: one immutable
// document per (view, schema id) under feature.SchemaMetaName. A reader
// meeting a row of another schema than the current one loads that
// schema's document and decodes the row by feature name
// (feature.MapSchema), never by position.
//
// Rows written before rows carried a schema id (legacy rows, id zero) are
// decoded with the view's legacy schema, feature.SchemaMetaName(view, 0):
// the view's schema when a process of this version first touched the view
// (wrote it, or served or read it). Schemas only change by editing the
// definitions, so that is the schema the legacy rows were written with,
// unless the definitions changed in the same step as the upgrade.

// SchemaRecorder records the schemas rows are written with. It records
// each (view, schema) again only after recordAgain, so a process writing
// many rows costs the store nothing more, and metadata lost with the
// store's data is restored. It is safe for concurrent use; the zero value
// is ready.
type SchemaRecorder struct {
	mu   sync.Mutex           // protects done
	done map[string]time.Time // view + "\x00" + schema id: when recorded
}

// recordAgain is how long a recorded schema is trusted to be in the store.
const recordAgain = time.Minute

// Record makes sure readers of s can decode view's rows written with
// schema: it stores the schema's document under its id and, when the view
// has no legacy schema yet, records schema as that too. Writers call it
// before writing rows, so a row is never visible before its schema.
// It returns the schema's id.
func (r *SchemaRecorder) Record(ctx context.Context, s Store, view string, schema []feature.Field) (feature.SchemaID, error) {
	id := feature.Fingerprint(schema)
	key := view + "\x00" + id.String()
	r.mu.Lock()
	at, done := r.done[key]
	r.mu.Unlock()
	if done && time.Since(at) < recordAgain {
		return id, nil
	}
	doc := feature.EncodeSchema(schema)
	// The document is determined by the id, so writing it again is
	// harmless and needs no read first; concurrent writers agree.
	if err := s.PutMeta(ctx, feature.SchemaMetaName(view, id), doc); err != nil {
		return id, fmt.Errorf("record schema of view '%s': %w", view, err)
	}
	if err := recordLegacy(ctx, s, view, doc); err != nil {
		return id, err
	}
	r.mu.Lock()
	if r.done == nil {
		r.done = make(map[string]time.Time)
	}
	r.done[key] = time.Now()
	r.mu.Unlock()
	return id, nil
}

// recordLegacy stores doc as view's legacy schema unless it has one. Two
// processes of different definitions racing here is the one case where
// the legacy schema could be the later one; it needs a schema change at
// the very moment of the upgrade.
func recordLegacy(ctx context.Context, s Store, view string, doc []byte) error {
	name := feature.SchemaMetaName(view, 0)
	old, err := s.GetMeta(ctx, name)
	if err != nil {
		return fmt.Errorf("read legacy schema of view '%s': %w", view, err)
	}
	if old != nil {
		return nil
	}
	if err := s.PutMeta(ctx, name, doc); err != nil {
		return fmt.Errorf("record legacy schema of view '%s': %w", view, err)
	}
	return nil
}

// LoadSchema returns the schema view's rows of schema id were written
// with, as recorded in s (id zero: the view's legacy schema); found is
// false when none is recorded. A document that does not parse, or is not
// the schema its id names, is an error wrapping feature.ErrCorrupt.
func LoadSchema(ctx context.Context, s Store, view string, id feature.SchemaID) (schema []feature.Field, found bool, err error) {
	name := feature.SchemaMetaName(view, id)
	b, err := s.GetMeta(ctx, name)
	if err != nil {
		return nil, false, fmt.Errorf("read schema %s: %w", name, err)
	}
	if b == nil {
		return nil, false, nil
	}
	schema, err = feature.DecodeSchema(b)
	if err != nil {
		return nil, false, fmt.Errorf("read schema %s: %w: %w", name, feature.ErrCorrupt, err)
	}
	if id != 0 && feature.Fingerprint(schema) != id {
		// Not what the id says: never decode with it.
		return nil, false, fmt.Errorf("read schema %s: %w: the document's fingerprint is %s", name, feature.ErrCorrupt, feature.Fingerprint(schema))
	}
	return schema, true, nil
}
