package accuracy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketEntries = []byte("entries")
	bucketExpiry  = []byte("expiry") // 8-byte big-endian expiry + key → nil
)

// Bolt is the embedded Store: one bbolt file, for one process. Entries
// survive a restart. When an update would keep more than maxEntries, the
// entries that expire soonest are evicted and passed to onEvict.
type Bolt struct {
	db      *bolt.DB
	max     int
	onEvict func(*Entry)

	mu sync.Mutex // protects n
	n  int
}

// OpenBolt opens (or creates) the store at path. onEvict may be nil.
func OpenBolt(path string, maxEntries int, onEvict func(*Entry)) (*Bolt, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("accuracy store folder: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true})
	if err != nil {
		return nil, fmt.Errorf("open accuracy store %s: %w", path, err)
	}
	s := &Bolt{db: db, max: maxEntries, onEvict: onEvict}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketEntries)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketExpiry); err != nil {
			return err
		}
		s.n = b.Stats().KeyN
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open accuracy store %s: %w", path, err)
	}
	return s, nil
}

func expiryKey(exp int64, key []byte) []byte {
	b := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(b, uint64(exp))
	return append(b, key...)
}

// Update applies fn to keys in one transaction.
func (s *Bolt) Update(_ context.Context, keys []string, fn func(i int, old *Entry) *Entry) error {
	var evicted []*Entry
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n
	err := s.db.Update(func(tx *bolt.Tx) error {
		n = s.n
		evicted = evicted[:0]
		eb, xb := tx.Bucket(bucketEntries), tx.Bucket(bucketExpiry)
		for i, k := range keys {
			kb := []byte(k)
			var old *Entry
			if raw := eb.Get(kb); raw != nil {
				e, err := decodeEntry(raw)
				if err != nil {
					// A value that does not decode is dropped, not fatal.
					_ = eb.Delete(kb)
					n--
				} else {
					old = e
				}
			}
			ne := fn(i, old)
			if ne == old && old != nil {
				continue
			}
			if old != nil {
				if err := xb.Delete(expiryKey(old.Expires, kb)); err != nil {
					return err
				}
			}
			if ne == nil {
				if old != nil {
					if err := eb.Delete(kb); err != nil {
						return err
					}
					n--
				}
				continue
			}
			raw, err := encodeEntry(ne)
			if err != nil {
				return err
			}
			if err := eb.Put(kb, raw); err != nil {
				return err
			}
			if err := xb.Put(expiryKey(ne.Expires, kb), nil); err != nil {
				return err
			}
			if old == nil {
				n++
			}
		}
		c := xb.Cursor()
		for n > s.max {
			xk, _ := c.First()
			if xk == nil {
				break
			}
			kb := append([]byte(nil), xk[8:]...)
			if err := c.Delete(); err != nil {
				return err
			}
			if raw := eb.Get(kb); raw != nil {
				if e, err := decodeEntry(raw); err == nil {
					evicted = append(evicted, e)
				}
				if err := eb.Delete(kb); err != nil {
					return err
				}
				n--
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("accuracy store update: %w", err)
	}
	s.n = n
	if s.onEvict != nil {
		for _, e := range evicted {
			s.onEvict(e)
		}
	}
	return nil
}

// Sweep deletes the entries whose expiry is at or before now.
func (s *Bolt) Sweep(_ context.Context, now time.Time, fn func(*Entry)) error {
	limit := now.UnixNano()
	for {
		var gone []*Entry
		more := false
		s.mu.Lock()
		n := s.n
		err := s.db.Update(func(tx *bolt.Tx) error {
			n = s.n
			gone = gone[:0]
			eb, xb := tx.Bucket(bucketEntries), tx.Bucket(bucketExpiry)
			c := xb.Cursor()
			for xk, _ := c.First(); xk != nil; xk, _ = c.First() {
				if int64(binary.BigEndian.Uint64(xk[:8])) > limit {
					break
				}
				if len(gone) >= 10_000 { // bounded transactions
					more = true
					break
				}
				kb := append([]byte(nil), xk[8:]...)
				if err := c.Delete(); err != nil {
					return err
				}
				if raw := eb.Get(kb); raw != nil {
					if e, err := decodeEntry(raw); err == nil {
						gone = append(gone, e)
					}
					if err := eb.Delete(kb); err != nil {
						return err
					}
					n--
				}
			}
			return nil
		})
		if err == nil {
			s.n = n
		}
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("accuracy store sweep: %w", err)
		}
		if fn != nil {
			for _, e := range gone {
				fn(e)
			}
		}
		if !more {
			return nil
		}
	}
}

// Len is the number of entries.
func (s *Bolt) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Close closes the file.
func (s *Bolt) Close() error {
	if s == nil || s.db == nil {
		return errors.New("accuracy store not open")
	}
	return s.db.Close()
}
