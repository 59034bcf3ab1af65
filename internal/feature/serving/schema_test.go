package serving

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// TestLegacyRowsKeepTheirSchema: rows written before rows carried their
// schema decode with the view's schema as this version first saw it, so
// a later reorder does not swap their values.
func TestLegacyRowsKeepTheirSchema(t *testing.T) {
	f := newFixture(t, Options{})
	// A legacy row: no schema id.
	f.Put(t, "user_stats", i64(1), now.Add(-time.Minute), feature.Value{I64: 5}, feature.Value{F64: 0.5}, feature.Value{S: "n"}, servingtest.Emb3())
	require.Zero(t, f.Store.Rows[servingtest.RowKey(online.Key{View: "user_stats", Entity: userKey(t, 1)})].Schema)
	f.srv.refresh(t.Context()) // the server starts: first contact
	legacy, found, err := online.LoadSchema(t.Context(), f.Store, "user_stats", 0)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, f.Repo.Views["user_stats"].Schema, legacy)

	// The definitions change: clicks and score swap places, name is
	// retyped.
	v := *f.Repo.Views["user_stats"]
	v.Schema = []feature.Field{v.Schema[1], v.Schema[0], {Name: "name", Type: servingtest.MustType(t, "Bytes")}, v.Schema[3]}
	repo := *f.Repo
	repo.Views = map[string]*feature.View{"user_stats": &v}
	f.Hold.P.Store(&repo)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{
		Features: []string{"user_stats:score", "user_stats:clicks", "user_stats:name", "user_stats:emb"},
		Entities: map[string][]feature.Value{"user_id": {i64(1)}},
	})
	require.NoError(t, err)
	require.InDelta(t, 0.5, resp.Results[1].Values[0].F64, 0)
	require.Equal(t, int64(5), resp.Results[2].Values[0].I64)
	require.Equal(t, []Status{StatusPresent, StatusPresent, StatusNotFound, StatusPresent},
		[]Status{resp.Results[1].Statuses[0], resp.Results[2].Statuses[0], resp.Results[3].Statuses[0], resp.Results[4].Statuses[0]})
	require.Contains(t, f.Logs.String(), `"reason":"retyped"`)
}

// TestLegacyRowFirstSeenOnRead: without a recorded legacy schema, the
// first read of a legacy row records the current schema as it.
func TestLegacyRowFirstSeenOnRead(t *testing.T) {
	f := newFixture(t, Options{})
	f.Put(t, "user_live", i64(1), now.Add(-time.Minute), feature.Value{I64: 9})
	resp, err := f.srv.GetOnlineFeatures(t.Context(), &Request{Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}})
	require.NoError(t, err)
	require.Equal(t, StatusPresent, resp.Results[1].Statuses[0])
	require.Equal(t, int64(9), resp.Results[1].Values[0].I64)
	require.Contains(t, f.Store.Meta, feature.SchemaMetaName("user_live", 0))
}

// TestUnreadableRows: a row of an unrecorded schema, or one that does not
// decode, reads NOT_FOUND for its values; the request and its other rows
// still answer.
func TestUnreadableRows(t *testing.T) {
	f := newFixture(t, Options{})
	f.srv.refresh(t.Context())
	f.Put(t, "user_live", i64(1), now.Add(-time.Minute), feature.Value{I64: 1})
	f.Put(t, "user_live", i64(2), now.Add(-time.Minute), feature.Value{I64: 2})
	f.Put(t, "user_live", i64(3), now.Add(-time.Minute), feature.Value{I64: 3})
	f.Put(t, "user_live", i64(4), now.Add(-time.Minute), feature.Value{I64: 4})
	id := feature.Fingerprint(f.Repo.Views["user_live"].Schema)
	set := func(user int64, fn func(r *feature.Record)) {
		k := servingtest.RowKey(online.Key{View: "user_live", Entity: userKey(t, user)})
		r := f.Store.Rows[k]
		fn(&r)
		f.Store.Rows[k] = r
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
	require.Equal(t, 2.0, f.Counter(t, "sluice_feature_unreadable_values_total", map[string]string{"view": "user_live", "reason": "unknown_schema"}))
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_unreadable_values_total", map[string]string{"view": "user_live", "reason": "corrupt_row"}))
	require.Contains(t, f.Logs.String(), `"reason":"corrupt_row"`)

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
	f.Put(t, "user_live", i64(1), now.Add(-time.Minute), feature.Value{I64: 4})
	k := servingtest.RowKey(online.Key{View: "user_live", Entity: userKey(t, 1)})
	setSchema := func(id feature.SchemaID) {
		r := f.Store.Rows[k]
		r.Schema = id
		f.Store.Rows[k] = r
	}
	req := &Request{Features: []string{"user_live:level"}, Entities: map[string][]feature.Value{"user_id": {i64(1)}}}
	setSchema(0x77)
	f.Store.Meta[feature.SchemaMetaName("user_live", 0x77)] = feature.EncodeSchema(f.Repo.Views["user_live"].Schema)
	resp, err := f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0])

	// A recorded schema (the view's before "level" was retyped).
	old := []feature.Field{{Name: "level", Type: servingtest.MustType(t, "Int32")}}
	setSchema(feature.Fingerprint(old))
	f.Store.SetMetaErr(online.ErrUnavailable)
	// Unavailable (503 at the edges: servingapi's TestSchemaLookupOutage).
	_, err = f.srv.GetOnlineFeatures(t.Context(), req)
	servingtest.RequireReason(t, err, ReasonStoreUnavailable, "")
	ie, _ := errors.AsType[*apierr.Error](err)
	require.Equal(t, apierr.KindUnavailable, ie.Kind)
	f.Store.SetMetaErr(nil)
	resp, err = f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0], "schema not recorded yet")
	f.Store.Meta[feature.SchemaMetaName("user_live", feature.Fingerprint(old))] = feature.EncodeSchema(old)
	resp, err = f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0], "unknown schemas are looked up again only after a while")
	f.srv.layouts.mu.Lock()
	clear(f.srv.layouts.m)
	f.srv.layouts.mu.Unlock()
	resp, err = f.srv.GetOnlineFeatures(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, StatusNotFound, resp.Results[1].Statuses[0], "Int32 → Int64 is a retype")
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_unreadable_values_total", map[string]string{"view": "user_live", "reason": "retyped"}))
}

func userKey(t *testing.T, id int64) []byte {
	t.Helper()
	k, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: id}})
	require.NoError(t, err)
	return k
}
