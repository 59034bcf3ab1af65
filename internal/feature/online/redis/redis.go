// Package redis is the online store on Redis (standalone, Cluster or
// Sentinel) through go-redis v9.
//
// Layout: one string key per (view, entity),
//
//	sluice:<project>:v:<view>:<entity key bytes>  →  feature.AppendRecord bytes
//	sluice:<project>:m:<name>                     →  metadata document
//
// Keys carry no hash tag, so one view's keys spread over every Cluster
// slot instead of hot-spotting one node. Reads are one MGET (standalone,
// Sentinel) or a pipeline of GETs that go-redis splits per node (Cluster).
// Writes run a small Lua script per key that compares the stored 16-byte
// timestamp prefix and only replaces an older row (or one with the same
// timestamps written under another schema), so a write never moves a
// value backwards even with concurrent writers. DeleteView scans each
// master for the view's prefix and UNLINKs in batches: a full scan, but
// only on the rare delete, so reads pay nothing (a per-view generation
// counter would add a round trip to every read).
//
// Redis has the store's timeouts to take a command (the write timeout) and
// to answer it (the read timeout), counted from when the command is sent on
// a connection, and the caller's deadline bounds the whole call; the wait
// for a pooled connection (the pool timeout) and the dial (the dial
// timeout) are bounded on their own and are not part of Redis's budget, so
// a loaded client machine does not spend it before Redis sees the command.
// No command is retried, so a hung Redis costs a call at most its timeouts.
// Errors from Redis wrap online.ErrUnavailable. A circuit breaker (guard.go) fails calls at once
// after a run of failures and lets one probe through per interval; the
// client reconnects by itself when Redis comes back. Options.TLS makes the
// connections TLS (mTLS with a client certificate).
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// Mode selects the Redis deployment.
type Mode string

// Modes.
const (
	Standalone Mode = "standalone"
	Cluster    Mode = "cluster"
	Sentinel   Mode = "sentinel"
)

// Options configure Open.
type Options struct {
	Mode       Mode     // default Standalone
	Addrs      []string // server (standalone), seed nodes (cluster) or sentinels
	MasterName string   // sentinel only
	Username   string
	Password   string
	DB         int // standalone and sentinel only

	// DialTimeout bounds a new connection: the dial and its handshake;
	// default DefaultDialTimeout.
	DialTimeout time.Duration
	// ReadTimeout is how long Redis has to answer a command once it is
	// sent; default DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout is how long Redis has to take a command (or a
	// pipelined batch) once the connection is ours; default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// PoolTimeout is how long a call waits for a pooled connection when
	// every one is busy; default DefaultPoolTimeout. Such a wait is
	// congestion of this client, not a fault of Redis: a call that ends
	// in it fails but does not count towards the circuit breaker.
	PoolTimeout time.Duration
	PoolSize    int // per node; default go-redis's (10 per CPU)
	// TLS, when set, makes every connection (to sentinels too) TLS with
	// it; an empty ServerName verifies each dialled host. Nil: plaintext.
	TLS *tls.Config

	// BreakerFailures is how many calls in a row must fail (Redis down,
	// or no answer within the timeout) before the circuit breaker opens
	// and calls fail at once; default DefaultBreakerFailures, negative
	// disables the breaker.
	BreakerFailures int
	// BreakerProbe is how long the open breaker refuses calls before it
	// lets one through to probe Redis; default DefaultBreakerProbe.
	BreakerProbe time.Duration
	// Logger receives the breaker's state changes; nil discards.
	Logger *slog.Logger

	// KeyPrefix overrides "sluice:<project>:"; tests use it to isolate.
	KeyPrefix string
}

// Timeout defaults, used when Options leaves them zero.
const (
	DefaultDialTimeout  = time.Second
	DefaultReadTimeout  = 500 * time.Millisecond
	DefaultWriteTimeout = 500 * time.Millisecond
	// DefaultPoolTimeout is longer than the read timeout: a burst of
	// more concurrent calls than connections on a busy machine waits its
	// turn instead of failing.
	DefaultPoolTimeout = time.Second
)

// Store is a Redis-backed online.Store.
type Store struct {
	c         goredis.UniversalClient
	cluster   *goredis.ClusterClient // nil unless Mode is Cluster
	prefix    string
	writeSHA  string
	mode      Mode
	batchSize int

	// The timeouts go-redis applies to each command; guard names them
	// in errors.
	readTimeout, writeTimeout, poolTimeout time.Duration
	breaker                                *breaker
}

// writeScript stores ARGV[1] under KEYS[1] unless ARGV[2] is "0" and the
// stored row is as new or newer. Rows start with two little-endian int64
// timestamps (event, created); they are compared byte by byte from the
// most significant byte, with the sign bit flipped so negative values sort
// first. Lua numbers are doubles and cannot hold nanosecond timestamps
// exactly, and Lua string comparison follows the locale, hence the bytes.
// With equal timestamps the row is still replaced when its schema id
// (bytes 17-25: the record tag and the id, see feature.AppendRecord)
// differs from the stored one's, as feature.Record.Replaces says: a
// legacy row has no tag there, so it always differs.
const writeScript = `
local new = ARGV[1]
if ARGV[2] == '0' then
  local old = redis.call('GET', KEYS[1])
  if old and #old >= 16 then
    local newer = false
    local decided = false
    for base = 0, 8, 8 do
      for i = 8, 1, -1 do
        local x = string.byte(new, base + i)
        local y = string.byte(old, base + i)
        if i == 8 then
          x = (x + 128) % 256
          y = (y + 128) % 256
        end
        if x ~= y then
          newer = x > y
          decided = true
          break
        end
      end
      if decided then break end
    end
    if not decided then
      newer = string.sub(new, 17, 25) ~= string.sub(old, 17, 25)
    end
    if not newer then return 0 end
  end
end
redis.call('SET', KEYS[1], new)
return 1
`

// Open connects to Redis and checks that it answers. project names the
// key namespace.
func Open(ctx context.Context, project string, opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("open redis online store: no addresses")
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.PoolTimeout <= 0 {
		opts.PoolTimeout = DefaultPoolTimeout
	}
	prefix := opts.KeyPrefix
	if prefix == "" {
		if project == "" {
			return nil, errors.New("open redis online store: empty project")
		}
		prefix = "sluice:" + project + ":"
	}
	if opts.BreakerFailures == 0 {
		opts.BreakerFailures = DefaultBreakerFailures
	}
	if opts.BreakerProbe <= 0 {
		opts.BreakerProbe = DefaultBreakerProbe
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		prefix: prefix, mode: opts.Mode, batchSize: 1000,
		readTimeout: opts.ReadTimeout, writeTimeout: opts.WriteTimeout, poolTimeout: opts.PoolTimeout,
		breaker: newBreaker(opts.BreakerFailures, opts.BreakerProbe, opts.Logger.With("component", "online_store", "store", "redis")),
	}
	// go-redis applies ReadTimeout and WriteTimeout to the socket from
	// the moment it reads or writes (and the caller's deadline when it is
	// sooner: ContextTimeoutEnabled); PoolTimeout bounds the wait for a
	// connection and DialTimeout a new one. MaxRetries -1: a retried
	// timeout would cost the caller twice the timeout; a dead pooled
	// connection is found before use by the pool's health check.
	poolTimeout := opts.PoolTimeout
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch opts.Mode {
	case "", Standalone:
		s.mode = Standalone
		s.c = goredis.NewClient(&goredis.Options{
			Addr: opts.Addrs[0], Username: opts.Username, Password: opts.Password, DB: opts.DB,
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
			PoolSize: opts.PoolSize, PoolTimeout: poolTimeout, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
			DisableIdentity: true, MaintNotificationsConfig: maint, TLSConfig: opts.TLS,
		})
	case Cluster:
		s.cluster = goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: opts.Addrs, Username: opts.Username, Password: opts.Password,
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
			PoolSize: opts.PoolSize, PoolTimeout: poolTimeout, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
			DisableIdentity: true, MaintNotificationsConfig: maint, TLSConfig: opts.TLS,
		})
		s.c = s.cluster
	case Sentinel:
		if opts.MasterName == "" {
			return nil, errors.New("open redis online store: sentinel mode needs master_name")
		}
		s.c = goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: opts.MasterName, SentinelAddrs: opts.Addrs,
			Username: opts.Username, Password: opts.Password, DB: opts.DB,
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
			PoolSize: opts.PoolSize, PoolTimeout: poolTimeout, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
			DisableIdentity: true, TLSConfig: opts.TLS,
		})
	default:
		return nil, fmt.Errorf("open redis online store: unknown mode %q (want standalone, cluster or sentinel)", opts.Mode)
	}
	s.writeSHA = goredis.NewScript(writeScript).Hash()
	if err := s.openPing(ctx); err != nil {
		_ = s.c.Close()
		return nil, fmt.Errorf("open redis online store: %w", err)
	}
	return s, nil
}

// openPings is how many pings Open sends before it gives up on a Redis
// that does not answer in time.
const openPings = DefaultBreakerFailures

// openPing is Open's check that Redis answers. The first ping also dials
// and shakes hands, and on a loaded machine one exchange may miss the read
// timeout without anything being wrong with Redis; a start-up must not fail
// on that. So a ping that timed out is sent again, up to openPings in all
// (as many as open the breaker); any other failure (a refused connection,
// a wrong password) fails at once.
func (s *Store) openPing(ctx context.Context) error {
	var err error
	for range openPings {
		if err = s.Ping(ctx); err == nil || !errors.Is(err, errStoreTimeout) {
			return err
		}
	}
	return err
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%s: %w: %w", op, online.ErrUnavailable, err)
}

func (s *Store) rowKey(view string, entity []byte) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + 3 + len(view) + len(entity))
	b.WriteString(s.prefix)
	b.WriteString("v:")
	b.WriteString(view)
	b.WriteByte(':')
	b.Write(entity)
	return b.String()
}

func (s *Store) metaKey(name string) string { return s.prefix + "m:" + name }

// checkView rejects view names that would make one view's keys a prefix
// match of another's.
func checkView(view string) error {
	if view == "" || strings.ContainsAny(view, ":*?[]\\") {
		return fmt.Errorf("view name %q: must be non-empty without ':', '*', '?', '[', ']' or '\\'", view)
	}
	return nil
}

// read is Read without the breaker and the timeout.
func (s *Store) read(ctx context.Context, keys []online.Key) ([]online.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read redis: %w", err)
	}
	out := make([]online.Result, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rks := make([]string, len(keys))
	for i, k := range keys {
		rks[i] = s.rowKey(k.View, k.Entity)
	}
	if s.cluster == nil {
		vals, err := s.c.MGet(ctx, rks...).Result()
		if err != nil {
			return nil, unavailable("read redis", err)
		}
		for i, k := range keys {
			if str, ok := vals[i].(string); ok {
				if err := fill(&out[i], k.View, str); err != nil {
					return nil, err
				}
			}
		}
		return out, nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*goredis.StringCmd, len(rks))
	for i, k := range rks {
		cmds[i] = pipe.Get(ctx, k)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, unavailable("read redis", err)
	}
	for i, k := range keys {
		str, err := cmds[i].Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, unavailable("read redis", err)
		}
		if err := fill(&out[i], k.View, str); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func fill(r *online.Result, view, v string) error {
	rec, err := feature.ParseRecord([]byte(v)) // the conversion copies: the caller owns Payload
	if err != nil {
		return fmt.Errorf("read redis: view '%s': %w", view, err)
	}
	*r = online.Result{Found: true, Record: rec}
	return nil
}

// write is Write without the breaker: pipelined, one atomic
// compare-and-set script call per entry, in batches.
func (s *Store) write(ctx context.Context, entries []online.Entry, opts online.WriteOptions) (online.WriteStats, error) {
	var st online.WriteStats
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("write redis: %w", err)
	}
	over := "0"
	if opts.Overwrite {
		over = "1"
	}
	for start := 0; start < len(entries); start += s.batchSize {
		batch := entries[start:min(start+s.batchSize, len(entries))]
		vals := make([]string, len(batch))
		keys := make([]string, len(batch))
		for i, e := range batch {
			if err := checkView(e.Key.View); err != nil {
				return st, fmt.Errorf("write redis: %w", err)
			}
			keys[i] = s.rowKey(e.Key.View, e.Key.Entity)
			vals[i] = string(feature.AppendRecord(make([]byte, 0, feature.RecordHeader+len(e.Record.Payload)), e.Record))
		}
		res, err := s.runWrites(ctx, keys, vals, over)
		if err != nil {
			return st, err
		}
		for _, n := range res {
			if n == 1 {
				st.Written++
			} else {
				st.Skipped++
			}
		}
	}
	return st, nil
}

// runWrites runs the script for each key with EVALSHA and falls back to
// EVAL (which also caches the script) for the keys whose node lacks it.
// Entries for the same key stay in order: they go to the same node and a
// node that lacks the script fails all of them.
func (s *Store) runWrites(ctx context.Context, keys, vals []string, over string) ([]int64, error) {
	res := make([]int64, len(keys))
	todo := make([]int, len(keys))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		pipe := s.c.Pipeline()
		cmds := make([]*goredis.Cmd, len(todo))
		for j, i := range todo {
			if attempt == 0 {
				cmds[j] = pipe.EvalSha(ctx, s.writeSHA, []string{keys[i]}, vals[i], over)
			} else {
				cmds[j] = pipe.Eval(ctx, writeScript, []string{keys[i]}, vals[i], over)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are per command, checked below
		var again []int
		for j, i := range todo {
			n, err := cmds[j].Int64()
			if err != nil {
				if attempt == 0 && goredis.HasErrorPrefix(err, "NOSCRIPT") {
					again = append(again, i)
					continue
				}
				return nil, unavailable("write redis", err)
			}
			res[i] = n
		}
		todo = again
	}
	return res, nil
}

// deleteView is DeleteView without the breaker: SCAN each master for the
// view's keys and UNLINK them in batches.
func (s *Store) deleteView(ctx context.Context, view string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete view '%s': %w", view, err)
	}
	if err := checkView(view); err != nil {
		return fmt.Errorf("delete view: %w", err)
	}
	pattern := globEscape(s.prefix+"v:"+view+":") + "*"
	del := func(ctx context.Context, c *goredis.Client) error { return s.deleteMatching(ctx, c, pattern) }
	var err error
	switch {
	case s.cluster != nil:
		err = s.cluster.ForEachMaster(ctx, del)
	default:
		err = s.deleteMatchingUniversal(ctx, pattern)
	}
	if err != nil {
		return unavailable(fmt.Sprintf("delete view '%s'", view), err)
	}
	return nil
}

func (s *Store) deleteMatchingUniversal(ctx context.Context, pattern string) error {
	c, ok := s.c.(*goredis.Client)
	if !ok {
		return fmt.Errorf("unexpected client %T", s.c)
	}
	return s.deleteMatching(ctx, c, pattern)
}

// deleteMatching scans one node. Keys are unlinked one per command so a
// Cluster node never sees a cross-slot multi-key command.
func (s *Store) deleteMatching(ctx context.Context, c *goredis.Client, pattern string) error {
	step := func(cursor uint64) (uint64, error) {
		keys, next, err := c.Scan(ctx, cursor, pattern, int64(s.batchSize)).Result()
		if err != nil {
			return 0, fmt.Errorf("scan: %w", err)
		}
		if len(keys) > 0 {
			pipe := c.Pipeline()
			for _, k := range keys {
				pipe.Unlink(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, fmt.Errorf("unlink: %w", err)
			}
		}
		return next, nil
	}
	var cursor uint64
	for {
		next, err := step(cursor)
		if err != nil {
			return err
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// getMeta is GetMeta without the breaker and the timeout.
func (s *Store) getMeta(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get metadata '%s': %w", name, err)
	}
	v, err := s.c.Get(ctx, s.metaKey(name)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(fmt.Sprintf("get metadata '%s'", name), err)
	}
	return v, nil
}

// putMeta is PutMeta without the breaker and the timeout.
func (s *Store) putMeta(ctx context.Context, name string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put metadata '%s': %w", name, err)
	}
	if err := s.c.Set(ctx, s.metaKey(name), value, 0).Err(); err != nil {
		return unavailable(fmt.Sprintf("put metadata '%s'", name), err)
	}
	return nil
}

// ping is Ping without the breaker and the timeout.
func (s *Store) ping(ctx context.Context) error {
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = s.c.Ping(ctx).Err()
	}
	if err != nil {
		return unavailable("ping redis", err)
	}
	return nil
}

// Close implements online.Store.
func (s *Store) Close() error { return s.c.Close() }

// DeletePrefix removes every key under the store's prefix: all views and
// metadata of the project. Tests use it to clean up after themselves.
func (s *Store) DeletePrefix(ctx context.Context) error {
	pattern := globEscape(s.prefix) + "*"
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return s.deleteMatching(ctx, c, pattern)
		})
	} else {
		err = s.deleteMatchingUniversal(ctx, pattern)
	}
	if err != nil {
		return unavailable("delete prefix", err)
	}
	return nil
}
