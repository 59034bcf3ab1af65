// Package servingtest holds the fixtures the feature server's tests
// share, those of package serving (the Go API) and of package servingapi
// (its edges): an in-memory online store with error injection, a
// swappable registry snapshot, a small hand-built repository and the
// rows that cover every status. It imports neither package, so that
// serving's own tests can use it.
package servingtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// Store is an in-memory online.Store with error injection.
// Tests read and set its fields directly while no call is under way.
type Store struct {
	mu sync.Mutex // protects everything below while calls are under way
	// Rows are the stored rows by RowKey; Meta the metadata by name.
	Rows map[string]feature.Record
	Meta map[string][]byte
	// Reads counts Read calls; Keys the keys they read.
	Reads int
	Keys  int

	err     error // returned by every call when set
	metaErr error // returned by GetMeta and PutMeta when set
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{Rows: make(map[string]feature.Record), Meta: make(map[string][]byte)}
}

// RowKey is the map key of k in Store.Rows.
func RowKey(k online.Key) string { return k.View + "\x00" + string(k.Entity) }

// Read implements online.Store.
func (f *Store) Read(_ context.Context, keys []online.Key) ([]online.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.Reads++
	f.Keys += len(keys)
	out := make([]online.Result, len(keys))
	for i, k := range keys {
		if r, ok := f.Rows[RowKey(k)]; ok {
			out[i] = online.Result{Found: true, Record: feature.Record{EventTS: r.EventTS, CreatedTS: r.CreatedTS, Schema: r.Schema, Payload: append([]byte(nil), r.Payload...)}}
		}
	}
	return out, nil
}

// Write implements online.Store: newer records win unless
// opts.Overwrite.
func (f *Store) Write(_ context.Context, entries []online.Entry, opts online.WriteOptions) (online.WriteStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return online.WriteStats{}, f.err
	}
	var st online.WriteStats
	for _, e := range entries {
		k := RowKey(e.Key)
		if old, ok := f.Rows[k]; ok && !opts.Overwrite && !e.Record.Replaces(old) {
			st.Skipped++
			continue
		}
		f.Rows[k] = e.Record
		st.Written++
	}
	return st, nil
}

// DeleteView implements online.Store; it deletes nothing.
func (f *Store) DeleteView(context.Context, string) error { return nil }

// GetMeta implements online.Store.
func (f *Store) GetMeta(_ context.Context, name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.metaErr != nil {
		return nil, f.metaErr
	}
	return f.Meta[name], nil
}

// PutMeta implements online.Store.
func (f *Store) PutMeta(_ context.Context, name string, v []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if f.metaErr != nil {
		return f.metaErr
	}
	f.Meta[name] = append([]byte(nil), v...)
	return nil
}

// Ping implements online.Store: the injected error, if any.
func (f *Store) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close implements online.Store.
func (f *Store) Close() error { return nil }

// SetErr makes every call fail with err (nil: none).
func (f *Store) SetErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// SetMetaErr makes GetMeta and PutMeta fail with err (nil: none).
func (f *Store) SetMetaErr(err error) {
	f.mu.Lock()
	f.metaErr = err
	f.mu.Unlock()
}

// Holder is a swappable registry snapshot source (serving.RepoSource).
type Holder struct{ P atomic.Pointer[registry.Repo] }

// Current returns the stored snapshot.
func (h *Holder) Current() *registry.Repo { return h.P.Load() }

// Now is the fixed clock of the tests.
var Now = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

// MustType parses a feature type or fails tb.
func MustType(tb testing.TB, s string) feature.Type {
	tb.Helper()
	ty, err := feature.ParseType(s)
	require.NoError(tb, err)
	return ty
}

// Repo builds a small repository by hand:
//   - user_stats (user): clicks Int64, score Float32, name String, emb Array(Float32, 3); ttl 1h, withhold
//   - user_flags (user): active Bool, tags Array(String); ttl 1h, flag
//   - route_stats (route): eta Float64, blob Bytes; no ttl
//   - user_recent (user): recent Int64; ttl 1h; hot subset user_recent__hot (keys 1 and 5, ttl 5m)
//   - user_live (user) from push source user_push: level Int64; no ttl
//   - offline_only (user): x Int64, not online
//   - services: eta_svc = user_stats:clicks,score + route_stats (all)
func Repo(tb testing.TB) *registry.Repo {
	tb.Helper()
	t := tb
	i64 := feature.Type{Kind: feature.KindInt64}
	user := &feature.Entity{Name: "user", JoinKey: "user_id", ValueType: i64}
	route := &feature.Entity{Name: "route", JoinKey: "route_id", ValueType: feature.Type{Kind: feature.KindString}}
	views := []*feature.View{
		{Name: "user_stats", Entities: []string{"user"}, TTL: time.Hour, Online: true, Source: "user_file", Schema: []feature.Field{
			{Name: "clicks", Type: i64},
			{Name: "score", Type: MustType(t, "Float32")},
			{Name: "name", Type: MustType(t, "String")},
			{Name: "emb", Type: MustType(t, "Array(Float32, 3)")},
		}},
		{
			Name: "user_flags", Entities: []string{"user"}, TTL: time.Hour, Online: true, Source: "user_file", StalePolicy: feature.StaleFlag,
			Schema: []feature.Field{{Name: "active", Type: MustType(t, "Bool")}, {Name: "tags", Type: MustType(t, "Array(String)")}},
		},
		{
			Name: "route_stats", Entities: []string{"route"}, Online: true, Source: "route_file",
			Schema: []feature.Field{{Name: "eta", Type: MustType(t, "Float64")}, {Name: "blob", Type: MustType(t, "Bytes")}},
		},
		{
			Name: "user_recent", Entities: []string{"user"}, TTL: time.Hour, Online: true, Source: "user_file",
			Schema: []feature.Field{{Name: "recent", Type: i64}},
			Hot:    &feature.HotSubset{View: "user_recent__hot", Keys: []feature.Value{{I64: 1}, {I64: 5}}, TTL: 5 * time.Minute},
		},
		{
			Name: "user_live", Entities: []string{"user"}, Online: true, Source: "user_push",
			Schema: []feature.Field{{Name: "level", Type: i64}},
		},
		{Name: "offline_only", Entities: []string{"user"}, Source: "user_file", Schema: []feature.Field{{Name: "x", Type: i64}}},
	}
	r := &registry.Repo{
		Project:  "test",
		Entities: map[string]*feature.Entity{"user": user, "route": route},
		Sources: map[string]*feature.Source{
			"user_file":  {Name: "user_file", Kind: feature.SourceFile, Path: "data/users.parquet", TimestampField: "event_timestamp"},
			"route_file": {Name: "route_file", Kind: feature.SourceFile, Path: "data/routes.parquet", TimestampField: "ts"},
			"user_push":  {Name: "user_push", Kind: feature.SourcePush, BatchSource: "user_file"},
		},
		Views: make(map[string]*feature.View),
		Services: map[string]*feature.Service{"eta_svc": {Name: "eta_svc", Features: []feature.FeatureRef{
			{View: "user_stats", Features: []string{"clicks", "score"}}, {View: "route_stats"},
		}}},
	}
	for _, v := range views {
		r.Views[v.Name] = v
	}
	return r
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes: a log
// handler's destination.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Fixture is what a test's server is built over: a repository, a
// swappable snapshot of it, a Store, a registry and a logger writing JSON
// lines at debug level to Logs.
type Fixture struct {
	Repo   *registry.Repo
	Hold   *Holder
	Store  *Store
	Reg    *prometheus.Registry
	Logs   *SyncBuffer
	Logger *slog.Logger
}

// NewFixture returns a Fixture over repo (Repo's when nil) in which every
// view was materialized a minute before Now.
func NewFixture(tb testing.TB, repo *registry.Repo) *Fixture {
	tb.Helper()
	if repo == nil {
		repo = Repo(tb)
	}
	f := &Fixture{Repo: repo, Hold: &Holder{}, Store: NewStore(), Reg: prometheus.NewRegistry(), Logs: &SyncBuffer{}}
	f.Hold.P.Store(f.Repo)
	f.Logger = slog.New(slog.NewJSONHandler(f.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, v := range f.Repo.Views {
		f.SetState(tb, v.Name, Now.Add(-time.Minute))
	}
	return f
}

// SetState records view's freshness state: last materialized at last, its
// newest event a minute before.
func (f *Fixture) SetState(tb testing.TB, view string, last time.Time) {
	tb.Helper()
	b, err := json.Marshal(feature.ViewState{LastSuccess: last, NewestEventTS: last.Add(-time.Minute), Watermark: last})
	require.NoError(tb, err)
	f.Store.Meta[feature.ViewStateName(view)] = b
}

// Put stores one row of view (a "__hot" view is its base's hot copy) for
// a single-key entity.
func (f *Fixture) Put(tb testing.TB, view string, key feature.Value, ev time.Time, vals ...feature.Value) {
	tb.Helper()
	v := f.Repo.Views[view]
	if v == nil {
		v = f.Repo.Views[strings.TrimSuffix(view, "__hot")]
	}
	kind := f.Repo.Entities[v.Entities[0]].ValueType.Kind
	ek, err := feature.AppendEntityKey(nil, []feature.Kind{kind}, []feature.Value{key})
	require.NoError(tb, err)
	payload, err := feature.AppendValues(nil, v.Schema, vals)
	require.NoError(tb, err)
	f.Store.Rows[RowKey(online.Key{View: view, Entity: ek})] = feature.Record{EventTS: ev.UnixNano(), Payload: payload}
}

// Counter returns the value of the counter or gauge name in Reg whose
// labels include labels; 0 when there is none.
func (f *Fixture) Counter(tb testing.TB, name string, labels map[string]string) float64 {
	tb.Helper()
	mfs, err := f.Reg.Gather()
	require.NoError(tb, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := make(map[string]string)
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// Seed stores rows of Repo's views that cover every status:
//   - user 1: fresh user_stats and user_flags rows (PRESENT)
//   - user 2: a fresh user_stats row whose name and emb are null (NULL_VALUE)
//   - user 3: nothing (NOT_FOUND)
//   - user 4: user_stats and user_flags rows two hours old (OUTSIDE_MAX_AGE;
//     withheld for user_stats, flagged with the value for user_flags)
//   - route r1: a route_stats row a year old (no ttl: PRESENT)
func (f *Fixture) Seed(tb testing.TB) {
	tb.Helper()
	i64 := func(n int64) feature.Value { return feature.Value{I64: n} }
	f64 := func(x float64) feature.Value { return feature.Value{F64: x} }
	str := func(s string) feature.Value { return feature.Value{S: s} }
	null := feature.Value{Null: true}
	fresh := Now.Add(-10 * time.Minute)
	old := Now.Add(-2 * time.Hour)
	f.Put(tb, "user_stats", i64(1), fresh, i64(7), f64(0.5), str("ann"), feature.Value{F32s: []float32{1, 2.5, -3}})
	f.Put(tb, "user_stats", i64(2), fresh, i64(0), f64(1.25), null, null)
	f.Put(tb, "user_stats", i64(4), old, i64(9), f64(2), str("dan"), feature.Value{F32s: []float32{0, 0, 1}})
	f.Put(tb, "user_flags", i64(1), fresh, feature.Value{Bool: true}, feature.Value{Ss: []string{"a", "b"}})
	f.Put(tb, "user_flags", i64(4), old, feature.Value{Bool: false}, feature.Value{Ss: []string{}})
	f.Put(tb, "route_stats", str("r1"), Now.AddDate(-1, 0, 0), f64(31.5), feature.Value{B: []byte{0, 1, 2, 255}})
}

// RequireReason fails tb unless err is an *apierr.Error with reason whose
// message mentions mention.
func RequireReason(tb testing.TB, err error, reason, mention string) {
	tb.Helper()
	require.Error(tb, err)
	ie, ok := errors.AsType[*apierr.Error](err)
	require.True(tb, ok, "want *apierr.Error, got %T: %v", err, err)
	require.Equal(tb, reason, ie.Reason, err.Error())
	require.Contains(tb, err.Error(), mention)
}

// Emb3 is a value of user_stats' emb.
func Emb3() feature.Value { return feature.Value{F32s: []float32{1, 2, 3}} }

// Wide is an embedded (bbolt) store holding 1,000 users' rows of the view
// "wide" (50 Float32 features, f00 = 0, f01 = 0.25, ...), written a
// minute before Now and materialized then, and Repo with that view added;
// refs are the features' references.
func Wide(tb testing.TB) (store *embedded.Store, repo *registry.Repo, refs []string) {
	tb.Helper()
	store, err := embedded.Open(filepath.Join(tb.TempDir(), "online.db"), embedded.Options{NoSync: true})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = store.Close() })

	repo = Repo(tb)
	v := &feature.View{Name: "wide", Entities: []string{"user"}, TTL: 24 * time.Hour, Online: true, Source: "user_file"}
	refs = make([]string, 50)
	vals := make([]feature.Value, 50)
	for i := range 50 {
		name := fmt.Sprintf("f%02d", i)
		v.Schema = append(v.Schema, feature.Field{Name: name, Type: feature.Type{Kind: feature.KindFloat32}})
		refs[i] = "wide:" + name
		vals[i] = feature.Value{F64: float64(i) / 4}
	}
	repo.Views[v.Name] = v

	ctx := tb.Context()
	payload, err := feature.AppendValues(nil, v.Schema, vals)
	require.NoError(tb, err)
	var entries []online.Entry
	for u := range int64(1000) {
		ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: u}})
		require.NoError(tb, err)
		entries = append(entries, online.Entry{Key: online.Key{View: "wide", Entity: ek}, Record: feature.Record{EventTS: Now.Add(-time.Minute).UnixNano(), Schema: feature.Fingerprint(v.Schema), Payload: payload}})
	}
	_, err = store.Write(ctx, entries, online.WriteOptions{})
	require.NoError(tb, err)
	require.NoError(tb, store.PutMeta(ctx, feature.ViewStateName("wide"), []byte(`{"last_success":"2026-01-02T11:59:00Z"}`)))
	return store, repo, refs
}

// WideIDs are the user ids of a request for n of Wide's users.
func WideIDs(n int) []int64 {
	ids := make([]int64, n)
	for i := range n {
		ids[i] = int64((i * 97) % 1000)
	}
	return ids
}

// WideKeys are the store keys of WideIDs(n)'s rows of the view "wide".
func WideKeys(tb testing.TB, n int) []online.Key {
	tb.Helper()
	keys := make([]online.Key, n)
	for i, id := range WideIDs(n) {
		ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: id}})
		require.NoError(tb, err)
		keys[i] = online.Key{View: "wide", Entity: ek}
	}
	return keys
}
