package serving

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// BenchmarkGetOnlineFeatures reads 1 entity × 50 Float32 features from
// the embedded (bbolt) store through the Go API.
func BenchmarkGetOnlineFeatures(b *testing.B) {
	srv, refs, _ := wideServer(b)
	ctx := b.Context()
	req := &Request{Features: refs, Entities: map[string][]feature.Value{"user_id": {{I64: 42}}}}
	resp, err := srv.GetOnlineFeatures(ctx, req)
	require.NoError(b, err)
	require.Equal(b, StatusPresent, resp.Results[50].Statuses[0])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srv.GetOnlineFeatures(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// wideServer is a Server over servingtest.Wide's embedded store (1,000
// users' rows of the view "wide", 50 Float32 features); it returns the
// features' references and the store too.
func wideServer(tb testing.TB) (*Server, []string, online.Store) {
	tb.Helper()
	store, repo, refs := servingtest.Wide(tb)
	h := &servingtest.Holder{}
	h.P.Store(repo)
	return New(h, store, Options{Now: func() time.Time { return now }}, nil, nil), refs, store
}

// BenchmarkGetOnlineFeaturesOlderSchema is BenchmarkGetOnlineFeatures
// with the rows written under an older schema (the features in reverse
// order): the read decodes them by name through the cached mapping.
func BenchmarkGetOnlineFeaturesOlderSchema(b *testing.B) {
	store, err := embedded.Open(filepath.Join(b.TempDir(), "online.db"), embedded.Options{NoSync: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = store.Close() })

	repo := servingtest.Repo(b)
	v := &feature.View{Name: "wide", Entities: []string{"user"}, TTL: 24 * time.Hour, Online: true, Source: "user_file"}
	var old []feature.Field
	refs := make([]string, 50)
	vals := make([]feature.Value, 50)
	for i := range 50 {
		name := fmt.Sprintf("f%02d", i)
		v.Schema = append(v.Schema, feature.Field{Name: name, Type: feature.Type{Kind: feature.KindFloat32}})
		old = append([]feature.Field{{Name: name, Type: feature.Type{Kind: feature.KindFloat32}}}, old...)
		refs[i] = "wide:" + name
		vals[i] = feature.Value{F64: float64(49-i) / 4} // old[i] is f(49-i)
	}
	repo.Views[v.Name] = v
	h := &servingtest.Holder{}
	h.P.Store(repo)

	ctx := b.Context()
	var rec online.SchemaRecorder
	oldID, err := rec.Record(ctx, store, "wide", old)
	require.NoError(b, err)
	payload, err := feature.AppendValues(nil, old, vals)
	require.NoError(b, err)
	ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: 42}})
	require.NoError(b, err)
	_, err = store.Write(ctx, []online.Entry{{Key: online.Key{View: "wide", Entity: ek}, Record: feature.Record{EventTS: now.Add(-time.Minute).UnixNano(), Schema: oldID, Payload: payload}}}, online.WriteOptions{})
	require.NoError(b, err)
	require.NoError(b, store.PutMeta(ctx, feature.ViewStateName("wide"), []byte(`{"last_success":"2026-01-02T11:59:00Z"}`)))

	srv := New(h, store, Options{Now: func() time.Time { return now }}, nil, nil)
	req := &Request{Features: refs, Entities: map[string][]feature.Value{"user_id": {{I64: 42}}}}
	resp, err := srv.GetOnlineFeatures(ctx, req)
	require.NoError(b, err)
	require.Equal(b, StatusPresent, resp.Results[50].Statuses[0])
	require.InDelta(b, 49.0/4, resp.Results[50].Values[0].F64, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srv.GetOnlineFeatures(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// wideRequest is a request for every feature of the view "wide" for n
// users (of wideServer's 1,000).
func wideRequest(refs []string, n int) *Request {
	ids := make([]feature.Value, n)
	for i, id := range servingtest.WideIDs(n) {
		ids[i] = feature.Value{I64: id}
	}
	return &Request{Features: refs, Entities: map[string][]feature.Value{"user_id": ids}}
}

// BenchmarkGetOnlineFeatures100x50 reads 100 entities × 50 Float32
// features from the embedded store: the store read alone, the Go API
// (in-process serving, dropping the answer or giving it back with
// Release). Its "http" case, POST /get-online-features through the
// handler, is servingapi's BenchmarkGetOnlineFeatures100x50.
func BenchmarkGetOnlineFeatures100x50(b *testing.B) {
	srv, refs, store := wideServer(b)
	ctx := b.Context()
	req := wideRequest(refs, 100)
	b.Run("store", func(b *testing.B) {
		keys := servingtest.WideKeys(b, 100)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := store.Read(ctx, keys); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inprocess", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := srv.GetOnlineFeatures(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inprocess-released", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := srv.GetOnlineFeatures(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			srv.Release(resp)
		}
	})
}
