package accuracy

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVOptions configure the fleet store.
type KVOptions struct {
	// URL is the NATS server.
	URL string
	// Bucket is the key-value bucket, created when missing.
	Bucket string
	// TTL drops an entry this long after its last write: the lookback.
	TTL time.Duration
	// MaxEntries sizes the bucket (about 2 KiB an entry); a full bucket
	// refuses writes, counted as store errors.
	MaxEntries int
	// TLS and Credentials (a NATS credentials file) secure the
	// connection, as the cluster's.
	TLS         *tls.Config
	Credentials string
	// Conn, when set, is used instead of dialing URL (and not closed).
	Conn *nats.Conn
}

// KV is the fleet Store: a NATS JetStream key-value bucket that every
// replica of a fleet reads and writes, so a prediction served by one
// replica joins an outcome posted to another. Updates are compare-and-set
// on the key's revision, retried when another replica wrote first.
// Expiry is the bucket's TTL (its entries are not counted as they go),
// and its bound is the bucket's size.
type KV struct {
	nc    *nats.Conn
	own   bool
	kv    jetstream.KeyValue
	count atomic.Int64
}

// OpenKV connects and opens (or creates) the bucket.
func OpenKV(ctx context.Context, o KVOptions, logger *slog.Logger) (*KV, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &KV{nc: o.Conn}
	if s.nc == nil {
		opts := []nats.Option{
			nats.Name("sluice-accuracy"), nats.Timeout(5 * time.Second), nats.MaxReconnects(-1),
			nats.ReconnectWait(250 * time.Millisecond),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					logger.Warn("accuracy store nats disconnected", "err", err)
				}
			}),
		}
		if o.TLS != nil {
			opts = append(opts, nats.Secure(o.TLS))
		}
		if o.Credentials != "" {
			opts = append(opts, nats.UserCredentials(o.Credentials))
		}
		nc, err := nats.Connect(o.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("accuracy store: connect %s: %w", o.URL, err)
		}
		s.nc, s.own = nc, true
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		s.closeConn()
		return nil, fmt.Errorf("accuracy store: %w", err)
	}
	cfg := jetstream.KeyValueConfig{Bucket: o.Bucket, History: 1, TTL: o.TTL, Description: "sluice online accuracy: predictions and outcomes waiting to join"}
	if o.MaxEntries > 0 {
		cfg.MaxBytes = int64(o.MaxEntries) * 2048
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		s.closeConn()
		return nil, fmt.Errorf("accuracy store: bucket %s: %w", o.Bucket, err)
	}
	s.kv = kv
	s.refreshCount(ctx)
	return s, nil
}

func (s *KV) closeConn() {
	if s.own {
		s.nc.Close()
	}
}

// kvKey encodes a store key in the characters a KV key allows.
func kvKey(k string) string { return base64.RawURLEncoding.EncodeToString([]byte(k)) }

// maxCASRetries bounds the retries of one key's compare-and-set.
const maxCASRetries = 8

// Update applies fn key by key, each a compare-and-set on its revision.
func (s *KV) Update(ctx context.Context, keys []string, fn func(i int, old *Entry) *Entry) error {
	var errs []error
	for i, k := range keys {
		if err := s.updateOne(ctx, i, kvKey(k), fn); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *KV) updateOne(ctx context.Context, i int, key string, fn func(int, *Entry) *Entry) error {
	for range maxCASRetries {
		var old *Entry
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("accuracy store get: %w", err)
		default:
			rev = e.Revision()
			if d, derr := decodeEntry(e.Value()); derr == nil {
				old = d
			}
		}
		ne := fn(i, old)
		if ne == old && old != nil {
			return nil
		}
		if ne == nil {
			if rev == 0 {
				return nil
			}
			err = s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
		} else {
			raw, eerr := encodeEntry(ne)
			if eerr != nil {
				return eerr
			}
			if rev == 0 {
				_, err = s.kv.Create(ctx, key, raw)
				if err == nil {
					s.count.Add(1)
				}
			} else {
				_, err = s.kv.Update(ctx, key, raw, rev)
			}
		}
		if err == nil {
			return nil
		}
		if !casConflict(err) {
			return fmt.Errorf("accuracy store write: %w", err)
		}
	}
	return fmt.Errorf("accuracy store write: key updated concurrently %d times in a row", maxCASRetries)
}

// casConflict says whether err is a lost compare-and-set.
func casConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}

// Sweep only refreshes the entry count: the bucket's TTL expires entries.
func (s *KV) Sweep(ctx context.Context, _ time.Time, _ func(*Entry)) error {
	s.refreshCount(ctx)
	return nil
}

func (s *KV) refreshCount(ctx context.Context) {
	if st, err := s.kv.Status(ctx); err == nil {
		s.count.Store(int64(st.Values()))
	}
}

// Len is the bucket's entry count as last seen.
func (s *KV) Len() int { return int(s.count.Load()) }

// Close closes the connection when the store dialed it.
func (s *KV) Close() error {
	s.closeConn()
	return nil
}
