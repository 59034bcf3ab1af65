// Package online defines the online store: where the latest feature row of
// each (feature view, entity) lives for low-latency reads. Implementations
// live in subpackages (online/embedded, online/redis) and all pass the
// shared conformance suite in online/onlinetest.
//
// Every view's rows are kept under their own keys, so a view can be
// deleted or expire without touching other views (Feast's Redis layout
// keeps all views of an entity in one hash and cannot).
//
// Every row carries the id of the schema it was written with
// (feature.Record.Schema), and the schemas of a view's rows are kept in
// the store's metadata (SchemaRecorder, LoadSchema), so a reader never
// decodes a row with another schema's layout.
package online

import (
	"context"
	"errors"

	"github.com/sluice-ml/sluice/internal/feature"
)

// ErrUnavailable reports an online store that cannot be reached or
// answered too late. Serving maps it to 503 online_store_unavailable.
var ErrUnavailable = errors.New("online store unavailable")

// Key names one stored row: a view and an entity key (feature.AppendEntityKey).
type Key struct {
	View   string
	Entity []byte
}

// Entry is one row to write.
type Entry struct {
	Key    Key
	Record feature.Record
}

// Result is one read row. Found is false when nothing is stored.
type Result struct {
	Found  bool
	Record feature.Record // Payload is owned by the caller
}

// WriteOptions tune Write.
type WriteOptions struct {
	// Overwrite replaces stored rows even when they are newer; without it
	// a row only replaces an older one, or one with the same timestamps
	// written under another schema (feature.Record.Replaces), so a write
	// never moves a value backwards in time.
	Overwrite bool
}

// WriteStats count what a Write did.
type WriteStats struct {
	Written int // rows stored
	Skipped int // rows not stored because the stored row is newer, or the same under the same schema
}

// Store is an online store. Implementations are safe for concurrent use.
type Store interface {
	// Read fetches keys in one round trip where the store allows it and
	// returns one Result per key, in order. A store that cannot answer
	// returns an error wrapping ErrUnavailable.
	Read(ctx context.Context, keys []Key) ([]Result, error)
	// Write stores entries; within one call a later entry for the same key
	// competes with earlier ones by timestamps like any other write. It is
	// atomic per key, not across keys.
	Write(ctx context.Context, entries []Entry, opts WriteOptions) (WriteStats, error)
	// DeleteView removes every row of view.
	DeleteView(ctx context.Context, view string) error
	// GetMeta and PutMeta keep small metadata documents (materialization
	// watermarks, last-run times) next to the data. GetMeta returns
	// (nil, nil) for a missing name.
	GetMeta(ctx context.Context, name string) ([]byte, error)
	PutMeta(ctx context.Context, name string, value []byte) error
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Close releases the store.
	Close() error
}
