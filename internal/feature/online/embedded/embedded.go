// Package embedded is the default online store: one bbolt file, no server.
// Each feature view has its own bucket (keyed by entity key, holding
// feature.AppendRecord bytes), so deleting a view drops one bucket;
// metadata lives in the "_meta" bucket. bbolt allows many concurrent
// readers and one writer; reads never block on writes.
package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// Options tune Open.
type Options struct {
	// LockTimeout bounds the wait for the file lock another process holds
	// (default 1s).
	LockTimeout time.Duration
	// NoSync skips fsync on commit: faster bulk loads, but a crash can
	// lose the last writes. The data can be re-materialized.
	NoSync bool
	// ReadOnly opens the file shared, for readers only.
	ReadOnly bool
}

// ErrLocked reports a store file that another process holds open.
var ErrLocked = errors.New("online store file is locked by another process")

// Store is a bbolt-backed online.Store.
type Store struct {
	db   *bolt.DB
	path string
}

var (
	metaBucket = []byte("_meta")
	viewPrefix = "view/"
)

// keyMark is prepended to every entity key, because bbolt rejects empty
// keys and views without entities have an empty entity key.
const keyMark = 'k'

// Open opens or creates the store file at path, creating its directory.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if !opts.ReadOnly {
		//nolint:gosec // G301: same access as the 0644 store file inside, so a serving process under another account can open it read-only
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("open online store: %w", err)
		}
	}
	db, err := bolt.Open(path, 0o644, &bolt.Options{
		Timeout:        opts.LockTimeout,
		NoSync:         opts.NoSync,
		ReadOnly:       opts.ReadOnly,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open online store %s: %w (waited %s; stop the other sluice process or use the redis online store to share data)", path, ErrLocked, opts.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("open online store %s: %w", path, err)
	}
	return &Store{db: db, path: path}, nil
}

// Path returns the store's file.
func (s *Store) Path() string { return s.path }

func viewBucket(view string) []byte { return []byte(viewPrefix + view) }

// CountRows returns how many entity rows the store holds for view (0 for
// a view never written). It walks the view's pages: meant for status
// pages, not the serving path.
func (s *Store) CountRows(ctx context.Context, view string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("count rows of view '%s': %w", view, err)
	}
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(viewBucket(view)); b != nil {
			n = int64(b.Stats().KeyN)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count rows of view '%s': %w", view, err)
	}
	return n, nil
}

// Read implements online.Store; all keys are read in one transaction, so
// they are a consistent snapshot.
func (s *Store) Read(ctx context.Context, keys []online.Key) ([]online.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read online store: %w", err)
	}
	out := make([]online.Result, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	var (
		scratch [128]byte // the bbolt key of one entity
		name    [64]byte  // the bucket name of one view
		arena   []byte    // the payload copies, back to back
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		var (
			b        *bolt.Bucket
			cur      *bolt.Cursor // see below
			lastView string
			haveView bool
		)
		for i, k := range keys {
			if !haveView || k.View != lastView {
				b = tx.Bucket(append(append(name[:0], viewPrefix...), k.View...))
				cur = nil
				lastView, haveView = k.View, true
			}
			if b == nil {
				continue
			}
			key := append(append(scratch[:0], keyMark), k.Entity...)
			var v []byte
			// Get builds a fresh cursor whose stack is allocated anew each
			// time; for more than one key of a view, one reused cursor
			// (itself one allocation) is cheaper.
			if cur == nil && (i+1 == len(keys) || keys[i+1].View != k.View) {
				v = b.Get(key)
			} else {
				if cur == nil {
					cur = b.Cursor()
				}
				var ck []byte
				if ck, v = cur.Seek(key); !bytes.Equal(ck, key) {
					v = nil
				}
			}
			if v == nil {
				continue
			}
			r, err := feature.ParseRecord(v)
			if err != nil {
				return fmt.Errorf("view '%s': %w", k.View, err)
			}
			// v is only valid inside the transaction, so the payload is
			// copied once, into an arena shared by this call's rows; a
			// full arena is left to the rows that point into it.
			n := len(r.Payload)
			if cap(arena)-len(arena) < n {
				arena = make([]byte, 0, max(n, min(n*(len(keys)-i), 64<<10)))
			}
			start := len(arena)
			arena = append(arena, r.Payload...)
			r.Payload = arena[start:len(arena):len(arena)]
			out[i] = online.Result{Found: true, Record: r}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read online store: %w", err)
	}
	return out, nil
}

// Write implements online.Store in one transaction: every entry is
// compared with the stored row and put only when it replaces it
// (feature.Record.Replaces: newer, or the same timestamps under another
// schema) or with Overwrite.
// A cancelled ctx rolls the whole transaction back.
func (s *Store) Write(ctx context.Context, entries []online.Entry, opts online.WriteOptions) (online.WriteStats, error) {
	var st online.WriteStats
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("write online store: %w", err)
	}
	if len(entries) == 0 {
		return st, nil
	}
	// Visiting keys in order keeps bbolt on neighbouring pages; the sort
	// is stable, so entries for the same key still compete in call order.
	order := make([]int32, len(entries))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		ka, kb := &entries[a].Key, &entries[b].Key
		if c := strings.Compare(ka.View, kb.View); c != 0 {
			return c
		}
		return bytes.Compare(ka.Entity, kb.Entity)
	})
	err := s.db.Update(func(tx *bolt.Tx) error {
		st = online.WriteStats{}
		var (
			b        *bolt.Bucket
			cur      *bolt.Cursor // reused: a fresh cursor per Get allocates its stack
			lastView string
			haveView bool
			buf, key []byte
		)
		for i, idx := range order {
			e := &entries[idx]
			if i&1023 == 1023 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if !haveView || e.Key.View != lastView {
				var err error
				if b, err = tx.CreateBucketIfNotExists(viewBucket(e.Key.View)); err != nil {
					return fmt.Errorf("create view '%s': %w", e.Key.View, err)
				}
				lastView, haveView = e.Key.View, true
				cur = b.Cursor()
			}
			key = append(append(key[:0], keyMark), e.Key.Entity...) // Put copies the key
			if !opts.Overwrite {
				if k, old := cur.Seek(key); old != nil && bytes.Equal(k, key) {
					if cur, err := feature.ParseRecord(old); err == nil && !e.Record.Replaces(cur) {
						st.Skipped++
						continue
					}
				}
			}
			// bbolt keeps a reference to the value until commit, so each
			// value needs its own bytes; one growing arena keeps that to
			// few allocations.
			need := feature.RecordHeader + len(e.Record.Payload)
			if cap(buf)-len(buf) < need {
				buf = make([]byte, 0, max(need, 64<<10))
			}
			start := len(buf)
			buf = feature.AppendRecord(buf, e.Record)
			if err := b.Put(key, buf[start:len(buf):len(buf)]); err != nil {
				return fmt.Errorf("put view '%s': %w", e.Key.View, err)
			}
			st.Written++
		}
		return ctx.Err()
	})
	if err != nil {
		return online.WriteStats{}, fmt.Errorf("write online store: %w", err)
	}
	return st, nil
}

// DeleteView implements online.Store by dropping the view's bucket.
func (s *Store) DeleteView(ctx context.Context, view string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete view '%s': %w", view, err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		err := tx.DeleteBucket(viewBucket(view))
		if errors.Is(err, bolterrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete view '%s': %w", view, err)
	}
	return nil
}

// GetMeta implements online.Store.
func (s *Store) GetMeta(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get metadata '%s': %w", name, err)
	}
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(metaBucket); b != nil {
			if v := b.Get([]byte(name)); v != nil {
				out = append([]byte{}, v...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get metadata '%s': %w", name, err)
	}
	return out, nil
}

// PutMeta implements online.Store.
func (s *Store) PutMeta(ctx context.Context, name string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put metadata '%s': %w", name, err)
	}
	if name == "" {
		return errors.New("put metadata: empty name")
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), append([]byte{}, value...))
	})
	if err != nil {
		return fmt.Errorf("put metadata '%s': %w", name, err)
	}
	return nil
}

// Ping implements online.Store: the file is open.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(func(*bolt.Tx) error { return nil })
}

// Close implements online.Store.
func (s *Store) Close() error { return s.db.Close() }
