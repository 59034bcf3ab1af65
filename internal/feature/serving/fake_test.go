package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// fakeStore is an in-memory online.Store with error injection.
type fakeStore struct {
	mu   sync.Mutex
	rows map[string]feature.Record
	meta map[string][]byte
	err  error // returned by every call when set
	// metaErr is returned by GetMeta and PutMeta when set.
	metaErr error
	reads   int // Read calls
	keys    int // keys read
}

func newFakeStore() *fakeStore {
	return &fakeStore{rows: make(map[string]feature.Record), meta: make(map[string][]byte)}
}

func rowKey(k online.Key) string { return k.View + "\x00" + string(k.Entity) }

func (f *fakeStore) Read(_ context.Context, keys []online.Key) ([]online.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.reads++
	f.keys += len(keys)
	out := make([]online.Result, len(keys))
	for i, k := range keys {
		if r, ok := f.rows[rowKey(k)]; ok {
			out[i] = online.Result{Found: true, Record: feature.Record{EventTS: r.EventTS, CreatedTS: r.CreatedTS, Schema: r.Schema, Payload: append([]byte(nil), r.Payload...)}}
		}
	}
	return out, nil
}

func (f *fakeStore) Write(_ context.Context, entries []online.Entry, opts online.WriteOptions) (online.WriteStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return online.WriteStats{}, f.err
	}
	var st online.WriteStats
	for _, e := range entries {
		k := rowKey(e.Key)
		if old, ok := f.rows[k]; ok && !opts.Overwrite && !e.Record.Replaces(old) {
			st.Skipped++
			continue
		}
		f.rows[k] = e.Record
		st.Written++
	}
	return st, nil
}

func (f *fakeStore) DeleteView(context.Context, string) error { return nil }

func (f *fakeStore) GetMeta(_ context.Context, name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.metaErr != nil {
		return nil, f.metaErr
	}
	return f.meta[name], nil
}

func (f *fakeStore) PutMeta(_ context.Context, name string, v []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if f.metaErr != nil {
		return f.metaErr
	}
	f.meta[name] = append([]byte(nil), v...)
	return nil
}

func (f *fakeStore) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeStore) Close() error { return nil }

func (f *fakeStore) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fakeStore) setMetaErr(err error) {
	f.mu.Lock()
	f.metaErr = err
	f.mu.Unlock()
}

// holder is a swappable RepoSource.
type holder struct{ p atomic.Pointer[registry.Repo] }

func (h *holder) Current() *registry.Repo { return h.p.Load() }

// now is the fixed clock of the tests.
var now = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

func mustType(tb testing.TB, s string) feature.Type {
	tb.Helper()
	ty, err := feature.ParseType(s)
	require.NoError(tb, err)
	return ty
}

// testRepo builds a small repository by hand:
//   - user_stats (user): clicks Int64, score Float32, name String, emb Array(Float32, 3); ttl 1h, withhold
//   - user_flags (user): active Bool, tags Array(String); ttl 1h, flag
//   - route_stats (route): eta Float64, blob Bytes; no ttl
//   - user_recent (user): recent Int64; ttl 1h; hot subset user_recent__hot (keys 1 and 5, ttl 5m)
//   - user_live (user) from push source user_push: level Int64; no ttl
//   - offline_only (user): x Int64, not online
//   - services: eta_svc = user_stats:clicks,score + route_stats (all)
func testRepo(tb testing.TB) *registry.Repo {
	tb.Helper()
	t := tb
	i64 := feature.Type{Kind: feature.KindInt64}
	user := &feature.Entity{Name: "user", JoinKey: "user_id", ValueType: i64}
	route := &feature.Entity{Name: "route", JoinKey: "route_id", ValueType: feature.Type{Kind: feature.KindString}}
	views := []*feature.View{
		{Name: "user_stats", Entities: []string{"user"}, TTL: time.Hour, Online: true, Source: "user_file", Schema: []feature.Field{
			{Name: "clicks", Type: i64},
			{Name: "score", Type: mustType(t, "Float32")},
			{Name: "name", Type: mustType(t, "String")},
			{Name: "emb", Type: mustType(t, "Array(Float32, 3)")},
		}},
		{
			Name: "user_flags", Entities: []string{"user"}, TTL: time.Hour, Online: true, Source: "user_file", StalePolicy: feature.StaleFlag,
			Schema: []feature.Field{{Name: "active", Type: mustType(t, "Bool")}, {Name: "tags", Type: mustType(t, "Array(String)")}},
		},
		{
			Name: "route_stats", Entities: []string{"route"}, Online: true, Source: "route_file",
			Schema: []feature.Field{{Name: "eta", Type: mustType(t, "Float64")}, {Name: "blob", Type: mustType(t, "Bytes")}},
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

// fixture is a Server over a fake store and the test repository.
type fixture struct {
	repo  *registry.Repo
	hold  *holder
	store *fakeStore
	srv   *Server
	h     *Handler
	reg   *prometheus.Registry
	logs  *syncBuffer
}

func newFixture(tb testing.TB, opts Options) *fixture {
	tb.Helper()
	t := tb
	f := &fixture{repo: testRepo(t), hold: &holder{}, store: newFakeStore(), reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	f.hold.p.Store(f.repo)
	if opts.Now == nil {
		opts.Now = func() time.Time { return now }
	}
	logger := slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.srv = New(f.hold, f.store, opts, logger, f.reg)
	f.h = NewHandler(f.srv, HandlerOptions{MaxBodyBytes: 1 << 16, Metrics: promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{})})
	// Every online view with a ttl was materialized a minute ago.
	for _, v := range f.repo.Views {
		f.setState(t, v.Name, now.Add(-time.Minute))
	}
	return f
}

func (f *fixture) setState(tb testing.TB, view string, last time.Time) {
	tb.Helper()
	b, err := json.Marshal(feature.ViewState{LastSuccess: last, NewestEventTS: last.Add(-time.Minute), Watermark: last})
	require.NoError(tb, err)
	f.store.meta[feature.ViewStateName(view)] = b
}

// put stores one row of view for a single-key entity.
func (f *fixture) put(tb testing.TB, view string, key feature.Value, ev time.Time, vals ...feature.Value) {
	tb.Helper()
	v := f.repo.Views[view]
	if v == nil {
		v = f.repo.Views[strings.TrimSuffix(view, "__hot")]
	}
	kind := f.repo.Entities[v.Entities[0]].ValueType.Kind
	ek, err := feature.AppendEntityKey(nil, []feature.Kind{kind}, []feature.Value{key})
	require.NoError(tb, err)
	payload, err := feature.AppendValues(nil, v.Schema, vals)
	require.NoError(tb, err)
	f.store.rows[rowKey(online.Key{View: view, Entity: ek})] = feature.Record{EventTS: ev.UnixNano(), Payload: payload}
}

// post sends body to path and returns the status and decoded body.
func (f *fixture) post(tb testing.TB, path, body string) (int, []byte) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

func (f *fixture) counter(tb testing.TB, name string, labels map[string]string) float64 {
	tb.Helper()
	mfs, err := f.reg.Gather()
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

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type onlineKey = online.Key

const time10m = 10 * time.Minute

func emb3() feature.Value { return feature.Value{F32s: []float32{1, 2, 3}} }
