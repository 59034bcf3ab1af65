package accuracy

import (
	"context"
	"time"
)

// Store keeps the entries waiting for their other half. Implementations
// are safe for concurrent use.
type Store interface {
	// Update reads the entries of keys, calls fn once per key with the
	// stored entry (nil when absent) and stores what fn returns: a new
	// entry, nil to delete, or the old pointer to leave it. A store may
	// call fn more than once for a key (a lost compare-and-set retries), so
	// fn must derive everything from old. The updates of one call are
	// applied together where the store can (Bolt), else key by key (KV).
	Update(ctx context.Context, keys []string, fn func(i int, old *Entry) *Entry) error
	// Sweep deletes the entries that expired at now and passes each to
	// fn.
	Sweep(ctx context.Context, now time.Time, fn func(*Entry)) error
	// Len is the number of entries kept.
	Len() int
	// Close releases the store.
	Close() error
}
