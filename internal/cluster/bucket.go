package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Entry is a key's value as last seen.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
	// At is when the value was written, by the server's clock, or when it
	// arrived here when that is earlier (so a skewed clock can only make
	// an entry older, never fresher).
	At time.Time
}

// Bucket is one shared key-value bucket with a local cache of its entries,
// kept current by Run.
type Bucket struct {
	c    *Cluster
	name string
	kv   jetstream.KeyValue

	mu       sync.RWMutex // protects entries and handlers
	entries  map[string]Entry
	handlers []func(Entry, bool)
}

// Name is the bucket's JetStream name.
func (b *Bucket) Name() string { return b.name }

// load reads the current entries into the cache.
func (b *Bucket) load(ctx context.Context) error {
	w, err := b.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil {
				b.c.synced()
				return nil
			}
			b.apply(e, false)
		}
	}
}

// watch keeps the cache current until ctx ends or the watcher stops.
func (b *Bucket) watch(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := b.kv.WatchAll(ctx)
		if err != nil {
			b.c.failed(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		b.drain(ctx, w)
		_ = w.Stop()
	}
}

func (b *Bucket) drain(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			b.c.synced()
			if e != nil {
				b.apply(e, true)
			}
		}
	}
}

// apply puts e in the cache and, when notify and it is newer than what
// the cache held, calls the change handlers.
func (b *Bucket) apply(e jetstream.KeyValueEntry, notify bool) {
	at := e.Created()
	if now := time.Now(); at.After(now) {
		at = now
	}
	en := Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), At: at}
	deleted := e.Operation() != jetstream.KeyValuePut
	b.mu.Lock()
	old, had := b.entries[en.Key]
	if had && old.Revision >= en.Revision {
		b.mu.Unlock()
		return
	}
	if deleted {
		delete(b.entries, en.Key)
	} else {
		b.entries[en.Key] = en
	}
	hs := b.handlers
	b.mu.Unlock()
	if notify {
		for _, h := range hs {
			h(en, deleted)
		}
	}
}

// OnChange calls fn, on Run's watcher goroutine, for every change of the
// bucket seen after it is registered (deleted true for a deletion). fn must
// not block for long.
func (b *Bucket) OnChange(fn func(e Entry, deleted bool)) {
	b.mu.Lock()
	b.handlers = append(b.handlers, fn)
	b.mu.Unlock()
}

// Cached returns the cached entry of key.
func (b *Bucket) Cached(key string) (Entry, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	e, ok := b.entries[key]
	return e, ok
}

// Fresh returns the cached entries whose key starts with prefix and that
// were written within maxAge, but for the key skip.
func (b *Bucket) Fresh(prefix, skip string, maxAge time.Duration) []Entry {
	from := time.Now().Add(-maxAge)
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []Entry
	for k, e := range b.entries {
		if k != skip && strings.HasPrefix(k, prefix) && e.At.After(from) {
			out = append(out, e)
		}
	}
	return out
}

func (b *Bucket) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// done records the outcome of a read or write.
func (b *Bucket) done(err error) error {
	switch {
	case err == nil:
		b.c.synced()
		return nil
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists):
		b.c.synced()
		b.c.m.conflicts.WithLabelValues(b.name).Inc()
		return ErrConflict
	case errors.Is(err, jetstream.ErrKeyNotFound):
		b.c.synced()
		return ErrNotFound
	default:
		b.c.failed(err)
		return err
	}
}

// Get reads key from the server (not the cache).
func (b *Bucket) Get(ctx context.Context, key string) (Entry, error) {
	ctx, cancel := b.op(ctx)
	defer cancel()
	e, err := b.kv.Get(ctx, key)
	if err = b.done(err); err != nil {
		return Entry{}, err
	}
	return Entry{Key: key, Value: e.Value(), Revision: e.Revision(), At: e.Created()}, nil
}

// Update writes value to key if its revision is still rev, or, for rev
// 0, if the key does not exist; ErrConflict otherwise. It returns the new
// revision.
func (b *Bucket) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	ctx, cancel := b.op(ctx)
	defer cancel()
	var n uint64
	var err error
	if rev == 0 {
		n, err = b.kv.Create(ctx, key, value)
	} else {
		n, err = b.kv.Update(ctx, key, value, rev)
	}
	return n, b.done(err)
}

// Put writes value to key whatever its revision.
func (b *Bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, cancel := b.op(ctx)
	defer cancel()
	n, err := b.kv.Put(ctx, key, value)
	return n, b.done(err)
}

// Key turns s into one key token: letters, digits, '-' and '_' stay, any
// other byte becomes '=' and two hex digits.
func Key(s string) string {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '-', ch == '_':
			sb.WriteByte(ch)
		default:
			sb.WriteByte('=')
			sb.WriteByte(hex[ch>>4])
			sb.WriteByte(hex[ch&15])
		}
	}
	if sb.Len() == 0 {
		return "="
	}
	return sb.String()
}
