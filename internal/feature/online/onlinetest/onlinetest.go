// Package onlinetest is the conformance suite every online.Store passes:
// newer-wins writes, overwrite, per-view deletion, metadata, concurrency,
// large batches, empty inputs, cancellation, and rows that carry their
// schema (a same-timestamp rewrite under another schema, the recorded
// schemas).
package onlinetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// Run runs the suite. open returns a fresh, empty store for one subtest;
// the suite closes it.
func Run(t *testing.T, open func(t *testing.T) online.Store) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s online.Store)
	}{
		{"ReadMissing", testReadMissing},
		{"WriteThenRead", testWriteThenRead},
		{"MultiViewMultiKeyOrder", testMultiViewOrder},
		{"NewerWins", testNewerWins},
		{"OverwriteReplacesNewer", testOverwrite},
		{"SameKeyTwiceInBatch", testSameKeyTwice},
		{"DeleteViewOnlyThatView", testDeleteView},
		{"Meta", testMeta},
		{"ConcurrentNeverBackwards", testConcurrent},
		{"LargeBatch", testLargeBatch},
		{"EmptyInputs", testEmpty},
		{"CancelledContext", testCancelled},
		{"BinaryEntityKeys", testBinaryKeys},
		{"SchemaRoundTrips", testSchemaRoundTrips},
		{"SameTimestampOtherSchemaRewrites", testSchemaRewrite},
		{"SchemasRecorded", testSchemasRecorded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			c.fn(t, s)
		})
	}
}

// Ent returns the entity key of one int64 join key value.
func Ent(id int64) []byte {
	b, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: id}})
	if err != nil {
		panic(err)
	}
	return b
}

func rec(ev, cr int64, payload string) feature.Record {
	return feature.Record{EventTS: ev, CreatedTS: cr, Payload: []byte(payload)}
}

func write(t *testing.T, s online.Store, opts online.WriteOptions, es ...online.Entry) online.WriteStats {
	t.Helper()
	st, err := s.Write(t.Context(), es, opts)
	require.NoError(t, err)
	return st
}

func read1(t *testing.T, s online.Store, view string, ent []byte) online.Result {
	t.Helper()
	rs, err := s.Read(t.Context(), []online.Key{{View: view, Entity: ent}})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	return rs[0]
}

func testReadMissing(t *testing.T, s online.Store) {
	t.Helper()
	rs, err := s.Read(t.Context(), []online.Key{{View: "v", Entity: Ent(1)}, {View: "nope", Entity: Ent(2)}})
	require.NoError(t, err)
	require.Equal(t, []online.Result{{}, {}}, rs)
}

func testWriteThenRead(t *testing.T, s online.Store) {
	t.Helper()
	payload := string([]byte{0, 1, 2, 0xff, 0, 'x'})
	st := write(t, s, online.WriteOptions{}, online.Entry{Key: online.Key{View: "v", Entity: Ent(7)}, Record: rec(100, 5, payload)})
	require.Equal(t, online.WriteStats{Written: 1}, st)
	r := read1(t, s, "v", Ent(7))
	require.True(t, r.Found)
	require.Equal(t, int64(100), r.Record.EventTS)
	require.Equal(t, int64(5), r.Record.CreatedTS)
	require.Equal(t, []byte(payload), r.Record.Payload)

	// The caller owns the payload: changing it must not change the store.
	r.Record.Payload[0] = 9
	r2 := read1(t, s, "v", Ent(7))
	require.Equal(t, []byte(payload), r2.Record.Payload)

	// An empty payload round-trips as found.
	write(t, s, online.WriteOptions{}, online.Entry{Key: online.Key{View: "v", Entity: Ent(8)}, Record: rec(1, 0, "")})
	r3 := read1(t, s, "v", Ent(8))
	require.True(t, r3.Found)
	require.Empty(t, r3.Record.Payload)
}

func testMultiViewOrder(t *testing.T, s online.Store) {
	t.Helper()
	var es []online.Entry
	for _, v := range []string{"a", "b", "c"} {
		for i := range int64(5) {
			es = append(es, online.Entry{Key: online.Key{View: v, Entity: Ent(i)}, Record: rec(10+i, 0, fmt.Sprintf("%s-%d", v, i))})
		}
	}
	st := write(t, s, online.WriteOptions{}, es...)
	require.Equal(t, 15, st.Written)
	keys := []online.Key{
		{View: "c", Entity: Ent(4)},
		{View: "a", Entity: Ent(0)},
		{View: "b", Entity: Ent(99)},
		{View: "b", Entity: Ent(2)},
		{View: "a", Entity: Ent(0)},
		{View: "zz", Entity: Ent(1)},
		{View: "a", Entity: Ent(3)},
	}
	want := []string{"c-4", "a-0", "", "b-2", "a-0", "", "a-3"}
	rs, err := s.Read(t.Context(), keys)
	require.NoError(t, err)
	require.Len(t, rs, len(keys))
	for i, w := range want {
		if w == "" {
			require.False(t, rs[i].Found, "key %d", i)
			continue
		}
		require.True(t, rs[i].Found, "key %d", i)
		require.Equal(t, w, string(rs[i].Record.Payload), "key %d", i)
	}
}

func testNewerWins(t *testing.T, s online.Store) {
	t.Helper()
	k := online.Key{View: "v", Entity: Ent(1)}
	steps := []struct {
		name    string
		r       feature.Record
		written bool
		want    string
	}{
		{"first", rec(100, 10, "first"), true, "first"},
		{"older event", rec(99, 50, "older"), false, "first"},
		{"same event newer created", rec(100, 11, "created"), true, "created"},
		{"same event older created", rec(100, 9, "oldcreated"), false, "created"},
		{"identical timestamps", rec(100, 11, "same"), false, "created"},
		{"newer event older created", rec(101, 0, "newer"), true, "newer"},
		{"negative event", rec(-5, 0, "neg"), false, "newer"},
	}
	for _, st := range steps {
		got := write(t, s, online.WriteOptions{}, online.Entry{Key: k, Record: st.r})
		if st.written {
			require.Equal(t, online.WriteStats{Written: 1}, got, st.name)
		} else {
			require.Equal(t, online.WriteStats{Skipped: 1}, got, st.name)
		}
		require.Equal(t, st.want, string(read1(t, s, "v", k.Entity).Record.Payload), st.name)
	}
	// Timestamps compare as signed integers, not bytes.
	k2 := online.Key{View: "v", Entity: Ent(2)}
	write(t, s, online.WriteOptions{}, online.Entry{Key: k2, Record: rec(-100, 0, "neg")})
	got := write(t, s, online.WriteOptions{}, online.Entry{Key: k2, Record: rec(-1, 0, "lessneg")})
	require.Equal(t, 1, got.Written)
	got = write(t, s, online.WriteOptions{}, online.Entry{Key: k2, Record: rec(1<<40, 0, "big")})
	require.Equal(t, 1, got.Written)
	got = write(t, s, online.WriteOptions{}, online.Entry{Key: k2, Record: rec(1<<40-1, 1<<62, "smaller")})
	require.Equal(t, 1, got.Skipped)
	require.Equal(t, "big", string(read1(t, s, "v", k2.Entity).Record.Payload))
}

func testOverwrite(t *testing.T, s online.Store) {
	t.Helper()
	k := online.Key{View: "v", Entity: Ent(1)}
	write(t, s, online.WriteOptions{}, online.Entry{Key: k, Record: rec(200, 0, "new")})
	st := write(t, s, online.WriteOptions{Overwrite: true}, online.Entry{Key: k, Record: rec(100, 0, "corrected")})
	require.Equal(t, online.WriteStats{Written: 1}, st)
	r := read1(t, s, "v", k.Entity)
	require.Equal(t, "corrected", string(r.Record.Payload))
	require.Equal(t, int64(100), r.Record.EventTS)
	// After an overwrite, newer-wins compares against the corrected row.
	st = write(t, s, online.WriteOptions{}, online.Entry{Key: k, Record: rec(150, 0, "later")})
	require.Equal(t, 1, st.Written)
}

func testSameKeyTwice(t *testing.T, s online.Store) {
	t.Helper()
	for i, order := range [][2]int64{{1, 2}, {2, 1}} {
		k := online.Key{View: "v", Entity: Ent(int64(i))}
		st := write(t, s, online.WriteOptions{},
			online.Entry{Key: k, Record: rec(order[0], 0, fmt.Sprint(order[0]))},
			online.Entry{Key: k, Record: rec(order[1], 0, fmt.Sprint(order[1]))})
		require.Equal(t, 2, st.Written+st.Skipped, "order %v", order)
		require.Equal(t, "2", string(read1(t, s, "v", k.Entity).Record.Payload), "order %v", order)
	}
}

func testDeleteView(t *testing.T, s online.Store) {
	t.Helper()
	var es []online.Entry
	for i := range int64(50) {
		es = append(es,
			online.Entry{Key: online.Key{View: "drop", Entity: Ent(i)}, Record: rec(1, 0, "d")},
			online.Entry{Key: online.Key{View: "keep", Entity: Ent(i)}, Record: rec(1, 0, "k")},
			online.Entry{Key: online.Key{View: "drop2", Entity: Ent(i)}, Record: rec(1, 0, "d2")})
	}
	write(t, s, online.WriteOptions{}, es...)
	require.NoError(t, s.PutMeta(t.Context(), feature.ViewStateName("drop"), []byte("{}")))
	require.NoError(t, s.DeleteView(t.Context(), "drop"))
	for i := range int64(50) {
		rs, err := s.Read(t.Context(), []online.Key{{View: "drop", Entity: Ent(i)}, {View: "keep", Entity: Ent(i)}, {View: "drop2", Entity: Ent(i)}})
		require.NoError(t, err)
		require.False(t, rs[0].Found)
		require.True(t, rs[1].Found)
		require.Equal(t, "k", string(rs[1].Record.Payload))
		require.True(t, rs[2].Found, "a view whose name starts with the deleted one's stays")
	}
	// Deleting a missing view is not an error; the view can be written again.
	require.NoError(t, s.DeleteView(t.Context(), "never"))
	st := write(t, s, online.WriteOptions{}, online.Entry{Key: online.Key{View: "drop", Entity: Ent(1)}, Record: rec(0, 0, "again")})
	require.Equal(t, 1, st.Written, "an older row is written after its view was deleted")
}

func testMeta(t *testing.T, s online.Store) {
	t.Helper()
	v, err := s.GetMeta(t.Context(), "missing")
	require.NoError(t, err)
	require.Nil(t, v)
	require.NoError(t, s.PutMeta(t.Context(), "a", []byte(`{"x":1}`)))
	require.NoError(t, s.PutMeta(t.Context(), "b", []byte("bee")))
	require.NoError(t, s.PutMeta(t.Context(), "a", []byte(`{"x":2}`)))
	v, err = s.GetMeta(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, `{"x":2}`, string(v))
	v, err = s.GetMeta(t.Context(), "b")
	require.NoError(t, err)
	require.Equal(t, "bee", string(v))
	// Metadata does not show up as a view row.
	rs, err := s.Read(t.Context(), []online.Key{{View: "a", Entity: nil}})
	require.NoError(t, err)
	require.False(t, rs[0].Found)
	require.NoError(t, s.Ping(t.Context()))
}

func testConcurrent(t *testing.T, s online.Store) {
	t.Helper()
	const writers, rounds, keys = 4, 30, 8
	maxTS := make([][]int64, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1)) //nolint:gosec // G404: a seeded, reproducible workload, not a secret
			m := make([]int64, keys)
			for range rounds {
				var es []online.Entry
				for k := range keys {
					ts := rng.Int64N(1_000_000)
					m[k] = max(m[k], ts)
					es = append(es, online.Entry{Key: online.Key{View: "v", Entity: Ent(int64(k))}, Record: rec(ts, 0, fmt.Sprint(ts))})
				}
				if _, err := s.Write(context.Background(), es, online.WriteOptions{}); err != nil {
					errs <- err
					return
				}
			}
			maxTS[w] = m
		})
	}
	var rwg sync.WaitGroup
	rwg.Go(func() { // a reader never sees a key's timestamp go down
		last := make([]int64, keys)
		ks := make([]online.Key, keys)
		for k := range keys {
			ks[k] = online.Key{View: "v", Entity: Ent(int64(k))}
		}
		for range 2000 {
			select {
			case <-stop:
				return
			default:
			}
			rs, err := s.Read(context.Background(), ks)
			if err != nil {
				errs <- err
				return
			}
			for k, r := range rs {
				if !r.Found {
					continue
				}
				if r.Record.EventTS < last[k] {
					errs <- fmt.Errorf("key %d went backwards: %d after %d", k, r.Record.EventTS, last[k])
					return
				}
				if string(r.Record.Payload) != fmt.Sprint(r.Record.EventTS) {
					errs <- fmt.Errorf("key %d: payload %q does not match ts %d", k, r.Record.Payload, r.Record.EventTS)
					return
				}
				last[k] = r.Record.EventTS
			}
		}
	})
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for k := range keys {
		var want int64
		for w := range writers {
			want = max(want, maxTS[w][k])
		}
		require.Equal(t, want, read1(t, s, "v", Ent(int64(k))).Record.EventTS, "key %d holds the max", k)
	}
}

func testLargeBatch(t *testing.T, s online.Store) {
	t.Helper()
	const n = 10_000
	es := make([]online.Entry, n)
	keys := make([]online.Key, n)
	for i := range n {
		keys[i] = online.Key{View: "big", Entity: Ent(int64(i))}
		es[i] = online.Entry{Key: keys[i], Record: rec(int64(i), 0, fmt.Sprintf("row-%d", i))}
	}
	st := write(t, s, online.WriteOptions{}, es...)
	require.Equal(t, online.WriteStats{Written: n}, st)
	rs, err := s.Read(t.Context(), keys)
	require.NoError(t, err)
	require.Len(t, rs, n)
	for i, r := range rs {
		if !r.Found || r.Record.EventTS != int64(i) || !bytes.Equal(r.Record.Payload, []byte(fmt.Sprintf("row-%d", i))) {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
	st = write(t, s, online.WriteOptions{}, es...)
	require.Equal(t, online.WriteStats{Skipped: n}, st)
}

func testEmpty(t *testing.T, s online.Store) {
	t.Helper()
	rs, err := s.Read(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, rs)
	st, err := s.Write(t.Context(), nil, online.WriteOptions{})
	require.NoError(t, err)
	require.Equal(t, online.WriteStats{}, st)
}

func testCancelled(t *testing.T, s online.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	k := online.Key{View: "v", Entity: Ent(1)}
	_, err := s.Read(ctx, []online.Key{k})
	require.Error(t, err)
	_, err = s.Write(ctx, []online.Entry{{Key: k, Record: rec(1, 0, "x")}}, online.WriteOptions{})
	require.Error(t, err)
	_, err = s.GetMeta(ctx, "m")
	require.Error(t, err)
	require.Error(t, s.PutMeta(ctx, "m", []byte("x")))
	require.Error(t, s.DeleteView(ctx, "v"))
	require.False(t, read1(t, s, "v", k.Entity).Found, "a cancelled write stores nothing")
}

func testBinaryKeys(t *testing.T, s online.Store) {
	t.Helper()
	keys := [][]byte{{}, {0}, {0, 0}, {'*'}, {'?', '['}, {0xff, ':', 0}, []byte("a:b:c")}
	var es []online.Entry
	for i, k := range keys {
		es = append(es, online.Entry{Key: online.Key{View: "v", Entity: k}, Record: rec(1, 0, fmt.Sprint(i))})
	}
	st := write(t, s, online.WriteOptions{}, es...)
	require.Equal(t, len(keys), st.Written)
	for i, k := range keys {
		r := read1(t, s, "v", k)
		require.True(t, r.Found, "key %q", k)
		require.Equal(t, fmt.Sprint(i), string(r.Record.Payload), "key %q", k)
	}
}

func testSchemaRoundTrips(t *testing.T, s online.Store) {
	t.Helper()
	k := online.Key{View: "v", Entity: Ent(1)}
	r := rec(5, 6, "payload")
	r.Schema = 0xfedcba9876543210
	write(t, s, online.WriteOptions{}, online.Entry{Key: k, Record: r})
	got := read1(t, s, "v", k.Entity)
	require.True(t, got.Found)
	require.Equal(t, r, got.Record)
}

// testSchemaRewrite: after a schema change, a write with the same
// timestamps replaces the row written under the old schema (so
// re-materialization repairs it), but never an older row, and not again
// once the row has the new schema.
func testSchemaRewrite(t *testing.T, s online.Store) {
	t.Helper()
	k := online.Key{View: "v", Entity: Ent(1)}
	withSchema := func(r feature.Record, id feature.SchemaID) feature.Record {
		r.Schema = id
		return r
	}
	const a, b, c feature.SchemaID = 0xa, 0xb, 0xc
	steps := []struct {
		name    string
		r       feature.Record
		written bool
		want    string
	}{
		{"first", withSchema(rec(100, 10, "a"), a), true, "a"},
		{"same timestamps, same schema", withSchema(rec(100, 10, "a2"), a), false, "a"},
		{"same timestamps, new schema", withSchema(rec(100, 10, "b"), b), true, "b"},
		{"again under the new schema", withSchema(rec(100, 10, "b2"), b), false, "b"},
		{"older event, other schema", withSchema(rec(99, 50, "c"), c), false, "b"},
		{"same event, older created, other schema", withSchema(rec(100, 9, "c"), c), false, "b"},
		{"newer, other schema", withSchema(rec(101, 0, "c"), c), true, "c"},
	}
	for _, st := range steps {
		got := write(t, s, online.WriteOptions{}, online.Entry{Key: k, Record: st.r})
		if st.written {
			require.Equal(t, online.WriteStats{Written: 1}, got, st.name)
		} else {
			require.Equal(t, online.WriteStats{Skipped: 1}, got, st.name)
		}
		r := read1(t, s, "v", k.Entity)
		require.Equal(t, st.want, string(r.Record.Payload), st.name)
	}
	require.Equal(t, c, read1(t, s, "v", k.Entity).Record.Schema)

	// Batches of a re-materialization: every row of the old schema is
	// rewritten, none twice.
	var es []online.Entry
	for i := range int64(20) {
		es = append(es, online.Entry{Key: online.Key{View: "w", Entity: Ent(i)}, Record: withSchema(rec(7, 0, "old"), a)})
	}
	require.Equal(t, 20, write(t, s, online.WriteOptions{}, es...).Written)
	for i := range es {
		es[i].Record = withSchema(rec(7, 0, "new"), b)
	}
	require.Equal(t, online.WriteStats{Written: 20}, write(t, s, online.WriteOptions{}, es...))
	require.Equal(t, online.WriteStats{Skipped: 20}, write(t, s, online.WriteOptions{}, es...))
}

// testSchemasRecorded: the schemas rows are written with are kept in the
// store's metadata, by id, and the first one recorded for a view is its
// legacy schema.
func testSchemasRecorded(t *testing.T, s online.Store) {
	t.Helper()
	f32 := feature.Type{Kind: feature.KindFloat32}
	s1 := []feature.Field{{Name: "a", Type: f32}, {Name: "b", Type: f32}}
	s2 := []feature.Field{{Name: "b", Type: f32}, {Name: "a", Type: f32}, {Name: "c", Type: feature.Type{Kind: feature.KindString, List: true}}}
	_, found, err := online.LoadSchema(t.Context(), s, "v", feature.Fingerprint(s1))
	require.NoError(t, err)
	require.False(t, found)

	var rec online.SchemaRecorder
	id1, err := rec.Record(t.Context(), s, "v", s1)
	require.NoError(t, err)
	require.Equal(t, feature.Fingerprint(s1), id1)
	// Another process (recorder) with the later schema.
	var rec2 online.SchemaRecorder
	id2, err := rec2.Record(t.Context(), s, "v", s2)
	require.NoError(t, err)
	for _, want := range []struct {
		id     feature.SchemaID
		schema []feature.Field
	}{{id1, s1}, {id2, s2}, {0, s1}} {
		got, found, err := online.LoadSchema(t.Context(), s, "v", want.id)
		require.NoError(t, err)
		require.True(t, found, "schema %s", want.id)
		require.Equal(t, want.schema, got, "schema %s", want.id)
	}
	// Schemas are per view.
	_, found, err = online.LoadSchema(t.Context(), s, "other", id1)
	require.NoError(t, err)
	require.False(t, found)

	// A document that is not the schema its id names is never used.
	require.NoError(t, s.PutMeta(t.Context(), feature.SchemaMetaName("v", 0x1234), feature.EncodeSchema(s1)))
	_, _, err = online.LoadSchema(t.Context(), s, "v", 0x1234)
	require.ErrorIs(t, err, feature.ErrCorrupt)
	require.NoError(t, s.PutMeta(t.Context(), feature.SchemaMetaName("v", 0x1235), []byte("{")))
	_, _, err = online.LoadSchema(t.Context(), s, "v", 0x1235)
	require.ErrorIs(t, err, feature.ErrCorrupt)
}

// LegacyRecord is the storage form of rows written before rows carried
// their schema: the event and created timestamps (8 bytes little-endian
// each), then the payload.
func LegacyRecord(ev, cr int64, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(ev))
	b = binary.LittleEndian.AppendUint64(b, uint64(cr))
	return append(b, payload...)
}

// RunLegacyRows checks that a store reads rows stored in the legacy form
// (put there by putRaw, which stores raw bytes under a view's entity key
// the way the store keeps rows) as schema zero, and that a write with the
// same timestamps and a schema replaces them while an older one does not.
func RunLegacyRows(t *testing.T, s online.Store, putRaw func(t *testing.T, view string, entity, raw []byte)) {
	t.Helper()
	payloads := [][]byte{{1, 2, 0}, {0}, {}}
	for i, p := range payloads {
		putRaw(t, "legacy", Ent(int64(i)), LegacyRecord(100, 7, p))
	}
	for i, p := range payloads {
		r := read1(t, s, "legacy", Ent(int64(i)))
		require.True(t, r.Found, "row %d", i)
		require.Equal(t, [3]int64{100, 7, 0}, [3]int64{r.Record.EventTS, r.Record.CreatedTS, int64(r.Record.Schema)}, "row %d", i)
		require.True(t, bytes.Equal(p, r.Record.Payload), "row %d: payload %x, want %x", i, r.Record.Payload, p)
	}
	older := rec(99, 100, "older")
	older.Schema = 0xabc
	require.Equal(t, online.WriteStats{Skipped: 1}, write(t, s, online.WriteOptions{}, online.Entry{Key: online.Key{View: "legacy", Entity: Ent(0)}, Record: older}))
	same := rec(100, 7, "rewritten")
	same.Schema = 0xabc
	for i := range payloads {
		st := write(t, s, online.WriteOptions{}, online.Entry{Key: online.Key{View: "legacy", Entity: Ent(int64(i))}, Record: same})
		require.Equal(t, online.WriteStats{Written: 1}, st, "row %d", i)
		require.Equal(t, same, read1(t, s, "legacy", Ent(int64(i))).Record, "row %d", i)
	}
}
