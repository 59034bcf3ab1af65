package servingapi

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
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
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
		v.Schema = append(v.Schema, feature.Field{Name: name, Type: servingtest.MustType(tb, dtype)})
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
	st  serving.Status
	val any
}

// readAll reads every feature of the current view "v" for users 1 and 2
// and returns, per feature, the two values; it fails on any error.
func readAll(t *testing.T, srv *serving.Server, h *servingtest.Holder) map[string][2]want {
	t.Helper()
	v := h.Current().Views["v"]
	var refs []string
	for _, f := range v.Schema {
		refs = append(refs, "v:"+f.Name)
	}
	resp, err := srv.GetOnlineFeatures(t.Context(), &serving.Request{Features: refs, Entities: map[string][]feature.Value{"user_id": {i64(1), i64(2)}}})
	require.NoError(t, err, "a schema change never fails a read")
	out := make(map[string][2]want)
	for i, f := range v.Schema {
		col := resp.Results[1+i]
		var w [2]want
		for r := range 2 {
			w[r].st = col.Statuses[r]
			if col.Statuses[r] != serving.StatusPresent {
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

func present(a, b any) [2]want {
	return [2]want{{serving.StatusPresent, a}, {serving.StatusPresent, b}}
}

var notFound = [2]want{{st: serving.StatusNotFound}, {st: serving.StatusNotFound}}

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
					h := &servingtest.Holder{}
					h.P.Store(schemaRepo(t, old...))
					reg := prometheus.NewRegistry()
					srv := serving.New(h, store, serving.Options{Now: func() time.Time { return now }}, nil, reg)
					rep, err := srv.Push(t.Context(), "v_push", oldRows, serving.PushOnline)
					require.NoError(t, err)
					require.Equal(t, 2, rep.Views[0].Written)

					h.P.Store(schemaRepo(t, tc.fields...))
					require.Equal(t, tc.want, readAll(t, srv, h))
					// Over HTTP too: 200, never a 500.
					hd := NewHandler(srv, HandlerOptions{MaxBodyBytes: 1 << 16}, nil, nil)
					rec := httptest.NewRecorder()
					hd.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/get-online-features",
						strings.NewReader(`{"features":["v:`+strings.Fields(tc.fields[0])[0]+`"],"entities":{"user_id":[1,2]}}`)))
					require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

					missing := 0
					for _, w := range tc.want {
						for _, x := range w {
							if x.st == serving.StatusNotFound {
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
					rep, err = srv.Push(t.Context(), "v_push", df, serving.PushOnline)
					require.NoError(t, err)
					require.Equal(t, serving.PushViewReport{View: "v", Written: 2}, rep.Views[0])
					require.Equal(t, full, readAll(t, srv, h))
					rep, err = srv.Push(t.Context(), "v_push", df, serving.PushOnline)
					require.NoError(t, err)
					require.Equal(t, serving.PushViewReport{View: "v", Skipped: 2}, rep.Views[0], "rewritten once, then newer-wins as before")
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

// TestSchemaLookupOutage: a row whose schema is not cached, read while
// the store's metadata does not answer, is 503 online_store_unavailable
// over HTTP (serving's TestSchemaLookup holds the rest of the lookup).
func TestSchemaLookupOutage(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Put(t, "user_live", i64(1), now.Add(-time.Minute), feature.Value{I64: 4})
	ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: 1}})
	require.NoError(t, err)
	k := servingtest.RowKey(online.Key{View: "user_live", Entity: ek})
	r := f.Store.Rows[k]
	r.Schema = feature.Fingerprint([]feature.Field{{Name: "level", Type: servingtest.MustType(t, "Int32")}})
	f.Store.Rows[k] = r
	f.Store.SetMetaErr(online.ErrUnavailable)
	code, body := f.post(t, "/get-online-features", `{"features":["user_live:level"],"entities":{"user_id":[1]}}`)
	require.Equal(t, http.StatusServiceUnavailable, code, string(body))
	var e map[string]string
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, serving.ReasonStoreUnavailable, e["reason"])
}
