package serving

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// schemaStores are the real online stores the schema tests run on: the
// embedded bbolt file and Redis (SLUICE_REDIS_ADDR, default
// 127.0.0.1:6379, under a fresh key prefix that is deleted afterwards).
func schemaStores() map[string]func(t *testing.T) online.Store {
	return map[string]func(t *testing.T) online.Store{
		"embedded": func(t *testing.T) online.Store {
			t.Helper()
			s, err := embedded.Open(filepath.Join(t.TempDir(), "online.db"), embedded.Options{NoSync: true})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			return s
		},
		"redis": func(t *testing.T) online.Store {
			t.Helper()
			addr := os.Getenv("SLUICE_REDIS_ADDR")
			if addr == "" {
				addr = "127.0.0.1:6379"
			}
			var b [6]byte
			_, _ = rand.Read(b[:])
			s, err := redis.Open(t.Context(), "", redis.Options{Addrs: []string{addr}, KeyPrefix: "sluicetest:schema:" + hex.EncodeToString(b[:]) + ":"})
			require.NoError(t, err, "the schema tests need Redis at %s", addr)
			t.Cleanup(func() {
				require.NoError(t, s.DeletePrefix(context.Background()))
				require.NoError(t, s.Close())
			})
			return s
		},
	}
}

// schemaRepo is a repository with one view, "v" (entity user), fed by
// the push source "v_push", with schema fields.
func schemaRepo(tb testing.TB, fields ...string) *registry.Repo {
	tb.Helper()
	v := &feature.View{Name: "v", Entities: []string{"user"}, Online: true, Source: "v_push"}
	for _, f := range fields {
		name, dtype, ok := strings.Cut(f, " ")
		require.True(tb, ok, f)
		v.Schema = append(v.Schema, feature.Field{Name: name, Type: mustType(tb, dtype)})
	}
	return &registry.Repo{
		Project:  "test",
		Entities: map[string]*feature.Entity{"user": {Name: "user", JoinKey: "user_id", ValueType: feature.Type{Kind: feature.KindInt64}}},
		Sources: map[string]*feature.Source{
			"v_file": {Name: "v_file", Kind: feature.SourceFile, Path: "data/v.parquet", TimestampField: "event_timestamp"},
			"v_push": {Name: "v_push", Kind: feature.SourcePush, BatchSource: "v_file"},
		},
		Views: map[string]*feature.View{"v": v},
	}
}

// want is one expected value of a read: its status and, when PRESENT, the
// value as JSON would show it.
type want struct {
	st  Status
	val any
}

// readAll reads every feature of the current view "v" for users 1 and 2
// and returns, per feature, the two values; it fails on any error.
func readAll(t *testing.T, srv *Server, h *holder) map[string][2]want {
	t.Helper()
	v := h.Current().Views["v"]
	var refs []string
	for _, f := range v.Schema {
		refs = append(refs, "v:"+f.Name)
	}
	resp, err := srv.GetOnlineFeatures(t.Context(), &Request{Features: refs, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2)}}})
	require.NoError(t, err, "a schema change never fails a read")
	out := make(map[string][2]want)
	for i, f := range v.Schema {
		col := resp.Results[1+i]
		var w [2]want
		for r := range 2 {
			w[r].st = col.Statuses[r]
			if col.Statuses[r] != StatusPresent {
				require.True(t, col.Values[r].Null, "feature %s row %d: a value that is not PRESENT is null", f.Name, r)
				continue
			}
			w[r].val = jsonValue(t, col.Values[r], f.Type)
		}
		out[f.Name] = w
	}
	return out
}

// jsonValue is how the HTTP answer shows v.
func jsonValue(t *testing.T, v feature.Value, ty feature.Type) any {
	t.Helper()
	switch {
	case ty.List:
		return v.F32s
	case ty.Kind == feature.KindInt64 || ty.Kind == feature.KindInt32:
		return v.I64
	case ty.Kind == feature.KindFloat32 || ty.Kind == feature.KindFloat64:
		return v.F64
	case ty.Kind == feature.KindString:
		return v.S
	}
	t.Fatalf("type %s", ty)
	return nil
}

func present(a, b any) [2]want { return [2]want{{StatusPresent, a}, {StatusPresent, b}} }

var notFound = [2]want{{st: StatusNotFound}, {st: StatusNotFound}}

// TestSchemaChanges: rows written under one schema and read under an
// edited one. Reordered, appended, removed and retyped features each read
// the right value or NOT_FOUND, never another feature's value and never
// an error; pushing the same rows again (same timestamps) under the new
// schema rewrites them, and then every feature is PRESENT.
func TestSchemaChanges(t *testing.T) {
	old := []string{"a Float32", "b Float32", "n Int64", "s String", "e Array(Float32, 2)"}
	oldRows := map[string][]any{
		"user_id": {1, 2}, "a": {1.5, -1.5}, "b": {2.5, -2.5}, "n": {7, -7}, "s": {"x", "y"},
		"e": {[]any{0.5, 1.0}, []any{2.0, 4.0}}, "event_timestamp": {"2026-01-02T11:50:00Z", "2026-01-02T11:51:00Z"},
	}
	e1, e2 := []float32{0.5, 1}, []float32{2, 4}
	cases := []struct {
		name   string
		fields []string
		want   map[string][2]want
	}{
		{
			name:   "reorder two same-type features",
			fields: []string{"b Float32", "a Float32", "n Int64", "s String", "e Array(Float32, 2)"},
			want:   map[string][2]want{"a": present(1.5, -1.5), "b": present(2.5, -2.5), "n": present(int64(7), int64(-7)), "s": present("x", "y"), "e": present(e1, e2)},
		},
		{
			name:   "append one",
			fields: append(append([]string{}, old...), "c Float32"),
			want:   map[string][2]want{"a": present(1.5, -1.5), "b": present(2.5, -2.5), "n": present(int64(7), int64(-7)), "s": present("x", "y"), "e": present(e1, e2), "c": notFound},
		},
		{
			name:   "remove one",
			fields: []string{"a Float32", "n Int64", "s String", "e Array(Float32, 2)"},
			want:   map[string][2]want{"a": present(1.5, -1.5), "n": present(int64(7), int64(-7)), "s": present("x", "y"), "e": present(e1, e2)},
		},
		{
			name:   "retype one",
			fields: []string{"a Float32", "b Float32", "n Float64", "s String", "e Array(Float32, 2)"},
			want:   map[string][2]want{"a": present(1.5, -1.5), "b": present(2.5, -2.5), "n": notFound, "s": present("x", "y"), "e": present(e1, e2)},
		},
		{
			name:   "retype a list's length",
			fields: []string{"a Float32", "b Float32", "n Int64", "s String", "e Array(Float32, 3)"},
			want:   map[string][2]want{"a": present(1.5, -1.5), "b": present(2.5, -2.5), "n": present(int64(7), int64(-7)), "s": present("x", "y"), "e": notFound},
		},
		{
			name:   "all at once",
			fields: []string{"s String", "n Float64", "new Int64", "b Float32"},
			want:   map[string][2]want{"s": present("x", "y"), "n": notFound, "new": notFound, "b": present(2.5, -2.5)},
		},
	}
	for storeName, open := range schemaStores() {
		t.Run(storeName, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					store := open(t)
					h := &holder{}
					h.p.Store(schemaRepo(t, old...))
					reg := prometheus.NewRegistry()
					srv := New(h, store, Options{Now: func() time.Time { return now }}, nil, reg)
					rep, err := srv.Push(t.Context(), "v_push", oldRows, PushOnline)
					require.NoError(t, err)
					require.Equal(t, 2, rep.Views[0].Written)

					h.p.Store(schemaRepo(t, tc.fields...))
					require.Equal(t, tc.want, readAll(t, srv, h))
					// Over HTTP too: 200, never a 500.
					hd := NewHandler(srv, HandlerOptions{MaxBodyBytes: 1 << 16})
					rec := httptest.NewRecorder()
					hd.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/get-online-features",
						strings.NewReader(`{"features":["v:`+strings.Fields(tc.fields[0])[0]+`"],"entities":{"user_id":[1,2]}}`)))
					require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

					missing := 0
					for _, w := range tc.want {
						for _, x := range w {
							if x.st == StatusNotFound {
								missing++
							}
						}
					}
					require.Equal(t, float64(missing), counterSum(t, reg, "sluice_feature_unreadable_values_total"))

					// Re-push the same rows, same timestamps, under the new
					// schema: they are rewritten, not skipped.
					df := map[string][]any{"user_id": {1, 2}, "event_timestamp": oldRows["event_timestamp"]}
					full := make(map[string][2]want)
					for _, f := range tc.fields {
						name, dtype, _ := strings.Cut(f, " ")
						switch dtype {
						case "Float32", "Float64":
							df[name], full[name] = []any{0.25, 0.75}, present(0.25, 0.75)
						case "Int64":
							df[name], full[name] = []any{3, 4}, present(int64(3), int64(4))
						case "String":
							df[name], full[name] = []any{"p", "q"}, present("p", "q")
						case "Array(Float32, 2)":
							df[name], full[name] = []any{[]any{1.0, 2.0}, []any{3.0, 4.0}}, present([]float32{1, 2}, []float32{3, 4})
						case "Array(Float32, 3)":
							df[name], full[name] = []any{[]any{1.0, 2.0, 3.0}, []any{3.0, 4.0, 5.0}}, present([]float32{1, 2, 3}, []float32{3, 4, 5})
						default:
							t.Fatalf("dtype %s", dtype)
						}
					}
					rep, err = srv.Push(t.Context(), "v_push", df, PushOnline)
					require.NoError(t, err)
					require.Equal(t, PushViewReport{View: "v", Written: 2}, rep.Views[0])
					require.Equal(t, full, readAll(t, srv, h))
					rep, err = srv.Push(t.Context(), "v_push", df, PushOnline)
					require.NoError(t, err)
					require.Equal(t, PushViewReport{View: "v", Skipped: 2}, rep.Views[0], "rewritten once, then newer-wins as before")
				})
			}
		})
	}
}

func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestLegacyRowsKeepTheirSchema: rows written before rows carried their
// schema decode with the view's schema as this version first saw it, so
// a later reorder does not swap their values.
func TestLegacyRowsKeepTheirSchema(t *testing.T) {
	f := newFixture(t, Options{})
	// A legacy row: no schema id.
	f.put(t, "user_stats", i64(1), now.Add(-time.Minute), feature.Value{I64: 5}, feature.Value{F64: 0.5}, feature.Value{S: "n"}, emb3())
	require.Zero(t, f.store.rows[rowKey(online.Key{View: "user_stats", Entity: userKey(t, 1)})].Schema)
	f.srv.refresh(t.Context()) // the server starts: first contact
	legacy, found, err := online.LoadSchema(t.Context(), f.store, "user_stats", 0)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, f.repo.Views["user_stats"].Schema, legacy)

	// The definitions change: clicks and score swap places, name is
	// retyped.
	v := *f.repo.Views["user_stats"]
	v.Schema = []feature.Field{v.Schema[1], v.Schema[0], {Name: "name", Type: mustType(t, "Bytes")}, v.Schema[3]}
	repo := *f.repo
	repo.Views = map[string]*feature.View{"user_stats": &v}
	f.hold.p.Store(&repo)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_stats:score", "user_stats:clicks", "user_stats:name", "user_stats:emb"},
		Entities: map[string][]feature.Value{"user_id": {i64(1)}},
	})
	require.NoError(t, err)
	require.InDelta(t, 0.5, resp.Results[1].Values[0].F64, 0)
	require.Equal(t, int64(5), resp.Results[2].Values[0].I64)
	require.Equal(t, []Status{StatusPresent, StatusPresent, StatusNotFound, StatusPresent},
		[]Status{resp.Results[1].Statuses[0], resp.Results[2].Statuses[0], resp.Results[3].Statuses[0], resp.Results[4].Statuses[0]})
	require.Contains(t, f.logs.String(), `"reason":"retyped"`)
}

// TestLegacyRowFirstSeenOnRead: without a recorded legacy schema, the
// first read of a legacy row records the current schema as it.
func TestLegacyRowFirstSeenOnRead(t *testing.T) {
	f := newFixture(t, Options{})
	f.put(t, "user_live", i64(1), now.Add(-time.Minute), feature.Value{I64: 9})
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}})
	require.NoError(t, err)
	require.Equal(t, StatusPresent, resp.Results[1].Statuses[0])
	require.Equal(t, int64(9), resp.Results[1].Values[0].I64)
	require.Contains(t, f.store.meta, feature.SchemaMetaName("user_live", 0))
}

// TestUnreadableRows: a row of an unrecorded schema, or one that does not
// decode, reads NOT_FOUND for its values; the request and its other rows
// still answer.
func TestUnreadableRows(t *testing.T) {
	f := newFixture(t, Options{})
	f.srv.refresh(t.Context())
	f.put(t, "user_live", i64(1), now.Add(-time.Minute), feature.Value{I64: 1})
	f.put(t, "user_live", i64(2), now.Add(-time.Minute), feature.Value{I64: 2})
	f.put(t, "user_live", i64(3), now.Add(-time.Minute), feature.Value{I64: 3})
	f.put(t, "user_live", i64(4), now.Add(-time.Minute), feature.Value{I64: 4})
	id := feature.Fingerprint(f.repo.Views["user_live"].Schema)
	set := func(user int64, fn func(r *feature.Record)) {
		k := rowKey(online.Key{View: "user_live", Entity: userKey(t, user)})
		r := f.store.rows[k]
		fn(&r)
		f.store.rows[k] = r
	}
	set(1, func(r *feature.Record) { r.Schema = id })
	set(2, func(r *feature.Record) { r.Schema = 0x5eed }) // never recorded
	set(3, func(r *feature.Record) { r.Schema, r.Payload = id, []byte{1, 0x80} })
	set(4, func(r *feature.Record) { r.Schema = feature.SchemaUnreadable }) // a later version's storage form
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2), i64(3), i64(4)}},
	})
	require.NoError(t, err)
	require.Equal(t, []Status{StatusPresent, StatusNotFound, StatusNotFound, StatusNotFound}, resp.Results[1].Statuses)
	require.Equal(t, int64(1), resp.Results[1].Values[0].I64)
	require.Equal(t, 2.0, f.counter(t, "sluice_feature_unreadable_values_total", map[string]string{"view": "user_live", "reason": "unknown_schema"}))
	require.Equal(t, 1.0, f.counter(t, "sluice_feature_unreadable_values_total", map[string]string{"view": "user_live", "reason": "corrupt_row"}))
	require.Contains(t, f.logs.String(), `"reason":"corrupt_row"`)

	// Their timestamps do not count against a request's event time:
	// their values are not used.
	evTS := now.Add(-time.Hour)
	resp, err = f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(2), i64(3)}}, EventTimestamp: &evTS,
	})
	require.NoError(t, err)
	require.Equal(t, []Status{StatusNotFound, StatusNotFound}, resp.Results[1].Statuses)
}

// TestSchemaLookup: a row schema whose document is not the schema its id
// names is never used (NOT_FOUND); when the store cannot answer the
// lookup, the read fails with 503 like any store failure, and answers once
// the store is back.
func TestSchemaLookup(t *testing.T) {
	f := newFixture(t, Options{})
	f.put(t, "user_live", i64(1), now.Add(-time.Minute), feature.Value{I64: 4})
	k := rowKey(online.Key{View: "user_live", Entity: userKey(t, 1)})
	setSchema := func(id feature.SchemaID) {
		r := f.store.rows[k]
		r.Schema = id
		f.store.rows[k] = r
	}
	req := &Request{Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}}
	setSchema(0x77)
	f.store.meta[feature.SchemaMetaName("user_live", 0x77)] = feature.EncodeSchema(f.repo.Views["user_live"].Schema)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0])

	// A recorded schema (the view's before "level" was retyped).
	old := []feature.Field{{Name: "level", Type: mustType(t, "Int32")}}
	setSchema(feature.Fingerprint(old))
	f.store.setMetaErr(online.ErrUnavailable)
	code, body := f.post(t, "/get-online-features", `{"features":["user_live:level"],"entities":{"user_id":[1]}}`)
	require.Equal(t, http.StatusServiceUnavailable, code, string(body))
	var e map[string]string
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, ReasonStoreUnavailable, e["reason"])
	f.store.setMetaErr(nil)
	resp, err = f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0], "schema not recorded yet")
	f.store.meta[feature.SchemaMetaName("user_live", feature.Fingerprint(old))] = feature.EncodeSchema(old)
	resp, err = f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0], "unknown schemas are looked up again only after a while")
	f.srv.layouts.mu.Lock()
	clear(f.srv.layouts.m)
	f.srv.layouts.mu.Unlock()
	resp, err = f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0], "Int32 → Int64 is a retype")
	require.Equal(t, 1.0, f.counter(t, "sluice_feature_unreadable_values_total", map[string]string{"view": "user_live", "reason": "retyped"}))
}

func userKey(t *testing.T, id int64) []byte {
	t.Helper()
	k, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: id}})
	require.NoError(t, err)
	return k
}
