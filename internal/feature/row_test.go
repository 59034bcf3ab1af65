package feature

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeValuesInto(t *testing.T) {
	schema := []Field{
		{Name: "a", Type: Type{Kind: KindInt64}},
		{Name: "b", Type: Type{Kind: KindString}},
		{Name: "c", Type: Type{Kind: KindFloat32, List: true}},
		{Name: "d", Type: Type{Kind: KindFloat64}},
	}
	vals := []Value{{I64: -7}, {S: "hi"}, {F32s: []float32{1, 2.5}}, {Null: true}}
	payload, err := AppendValues(nil, schema, vals)
	require.NoError(t, err)

	t.Run("matches DecodeValues", func(t *testing.T) {
		want, err := DecodeValues(payload, schema, nil)
		require.NoError(t, err)
		got := make([]Value, len(schema))
		for i := range got {
			got[i] = Value{S: "stale", I64: 99} // overwritten
		}
		require.NoError(t, DecodeValuesInto(payload, schema, []*Value{&got[0], &got[1], &got[2], &got[3]}))
		require.Equal(t, want, got)
	})
	t.Run("nil destinations are skipped", func(t *testing.T) {
		var b, d Value
		require.NoError(t, DecodeValuesInto(payload, schema, []*Value{nil, &b, nil, &d}))
		require.Equal(t, Value{S: "hi"}, b)
		require.Equal(t, Value{Null: true}, d)
	})
	t.Run("corrupt payloads fail", func(t *testing.T) {
		for _, bad := range [][]byte{payload[:len(payload)-1], append(append([]byte{}, payload...), 0)} {
			err := DecodeValuesInto(bad, schema, make([]*Value, len(schema)))
			require.True(t, errors.Is(err, ErrCorrupt), "%v", err)
		}
	})
	t.Run("destination count must match", func(t *testing.T) {
		require.Error(t, DecodeValuesInto(payload, schema, make([]*Value, 1)))
	})
}

// DecodeValuesAt decodes what DecodeValuesInto does, to cell indexes:
// every kept cell is overwritten in full (a list or string left there
// before is gone), negative indexes are checked and dropped.
func TestDecodeValuesAt(t *testing.T) {
	schema := []Field{
		{Name: "a", Type: Type{Kind: KindInt64}},
		{Name: "b", Type: Type{Kind: KindString}},
		{Name: "c", Type: Type{Kind: KindFloat32, List: true}},
		{Name: "d", Type: Type{Kind: KindFloat64}},
	}
	payload, err := AppendValues(nil, schema, []Value{{I64: -7}, {S: "hi"}, {F32s: []float32{1, 2.5}}, {Null: true}})
	require.NoError(t, err)
	want, err := DecodeValues(payload, schema, nil)
	require.NoError(t, err)

	stale := Value{S: "stale", I64: 99, B: []byte{1}, Bool: true, I64s: []int64{1}, F64s: []float64{2}, Ss: []string{"x"}, Bools: []bool{true}}
	cells := []Value{stale, stale, stale, stale, stale, stale, {F64: 3}}
	require.NoError(t, DecodeValuesAt(payload, schema, cells, []int{6, 0, -1, 3}))
	require.Equal(t, []Value{want[1], stale, stale, want[3], stale, stale, want[0]}, cells)

	for _, bad := range [][]byte{payload[:len(payload)-1], append(append([]byte{}, payload...), 0)} {
		require.ErrorIs(t, DecodeValuesAt(bad, schema, cells, []int{-1, -1, -1, -1}), ErrCorrupt)
	}
	require.Error(t, DecodeValuesAt(payload, schema, cells, []int{0}))
}

func TestRecordStorageForm(t *testing.T) {
	schema := []Field{{Name: "a", Type: Type{Kind: KindInt64}}}
	payload, err := AppendValues(nil, schema, []Value{{I64: 5}})
	require.NoError(t, err)
	id := Fingerprint(schema)
	tests := []struct {
		name string
		b    []byte
		want Record
	}{
		{"tagged", AppendRecord(nil, Record{EventTS: -3, CreatedTS: 9, Schema: id, Payload: payload}), Record{EventTS: -3, CreatedTS: 9, Schema: id, Payload: payload}},
		{"tagged empty payload", AppendRecord(nil, Record{EventTS: 1, Schema: id}), Record{EventTS: 1, Schema: id, Payload: []byte{}}},
		{"tagged unknown schema", AppendRecord(nil, Record{EventTS: 1, Payload: []byte("x")}), Record{EventTS: 1, Payload: []byte("x")}},
		// Rows written before rows carried their schema: the payload
		// follows the timestamps and starts with a presence byte.
		{"legacy", legacyRecord(7, 8, payload), Record{EventTS: 7, CreatedTS: 8, Payload: payload}},
		{"legacy null first", legacyRecord(7, 0, []byte{0}), Record{EventTS: 7, Payload: []byte{0}}},
		{"legacy empty payload", legacyRecord(7, 0, nil), Record{EventTS: 7, Payload: []byte{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRecord(tt.b)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	for _, bad := range [][]byte{make([]byte, 15), append(legacyRecord(1, 0, nil), 2, 0, 0)} {
		_, err := ParseRecord(bad)
		require.ErrorIs(t, err, ErrCorrupt, "%x", bad)
	}
	// A storage form of a later version: ordered by its timestamps, never
	// decoded.
	got, err := ParseRecord(append(legacyRecord(4, 5, nil), 3, 9, 9))
	require.NoError(t, err)
	require.Equal(t, Record{EventTS: 4, CreatedTS: 5, Schema: SchemaUnreadable, Payload: []byte{3, 9, 9}}, got)
}

// legacyRecord is the storage form rows had before they carried their
// schema: the two timestamps, then the payload.
func legacyRecord(ev, cr int64, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(ev))
	b = binary.LittleEndian.AppendUint64(b, uint64(cr))
	return append(b, payload...)
}

func TestRecordReplaces(t *testing.T) {
	const a, b SchemaID = 1, 2
	tests := []struct {
		name     string
		new, old Record
		want     bool
	}{
		{"newer event", Record{EventTS: 2, Schema: a}, Record{EventTS: 1, Schema: a}, true},
		{"older event, other schema", Record{EventTS: 1, Schema: b}, Record{EventTS: 2, Schema: a}, false},
		{"same timestamps, same schema", Record{EventTS: 1, CreatedTS: 1, Schema: a}, Record{EventTS: 1, CreatedTS: 1, Schema: a}, false},
		{"same timestamps, other schema", Record{EventTS: 1, CreatedTS: 1, Schema: b}, Record{EventTS: 1, CreatedTS: 1, Schema: a}, true},
		{"same timestamps, legacy row", Record{EventTS: 1, Schema: a}, Record{EventTS: 1}, true},
		{"same event, older created, other schema", Record{EventTS: 1, CreatedTS: 1, Schema: b}, Record{EventTS: 1, CreatedTS: 2, Schema: a}, false},
		{"same event, newer created", Record{EventTS: 1, CreatedTS: 3, Schema: a}, Record{EventTS: 1, CreatedTS: 2, Schema: a}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.new.Replaces(tt.old))
		})
	}
}

func TestFingerprint(t *testing.T) {
	f32 := Type{Kind: KindFloat32}
	base := []Field{{Name: "a", Type: f32}, {Name: "b", Type: f32}}
	id := Fingerprint(base)
	require.NotZero(t, id)
	require.Equal(t, id, Fingerprint([]Field{{Name: "a", Type: f32}, {Name: "b", Type: f32}}), "deterministic")
	others := map[string][]Field{
		"reordered":          {{Name: "b", Type: f32}, {Name: "a", Type: f32}},
		"retyped":            {{Name: "a", Type: f32}, {Name: "b", Type: Type{Kind: KindFloat64}}},
		"renamed":            {{Name: "a", Type: f32}, {Name: "c", Type: f32}},
		"appended":           {{Name: "a", Type: f32}, {Name: "b", Type: f32}, {Name: "c", Type: f32}},
		"removed":            {{Name: "a", Type: f32}},
		"list len":           {{Name: "a", Type: f32}, {Name: "b", Type: Type{Kind: KindFloat32, List: true, Len: 2}}},
		"name/type boundary": {{Name: "aFloat32", Type: f32}, {Name: "b", Type: f32}},
	}
	for name, s := range others {
		require.NotEqual(t, id, Fingerprint(s), name)
	}
	require.Len(t, id.String(), 16)
	require.Equal(t, "legacy", SchemaID(0).String())
	require.Equal(t, "view_schema/v/legacy", SchemaMetaName("v", 0))
	require.Equal(t, "view_schema/v/"+id.String(), SchemaMetaName("v", id))
}

func TestSchemaDocument(t *testing.T) {
	schema := []Field{
		{Name: "a", Type: Type{Kind: KindInt64}},
		{Name: "emb", Type: Type{Kind: KindFloat32, List: true, Len: 4}},
		{Name: "tags", Type: Type{Kind: KindString, List: true}},
	}
	got, err := DecodeSchema(EncodeSchema(schema))
	require.NoError(t, err)
	require.Equal(t, schema, got)
	require.Equal(t, Fingerprint(schema), Fingerprint(got))
	for _, bad := range []string{
		``, `{}`, `{"fields":[]}`, `{"fields":[{"name":"a","dtype":"Nope"}]}`,
		`{"fields":[{"name":"","dtype":"Int64"}]}`, `{"fields":[{"name":"a","dtype":"Int64"},{"name":"a","dtype":"Int64"}]}`,
	} {
		_, err := DecodeSchema([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestMapSchema(t *testing.T) {
	f32, i64 := Type{Kind: KindFloat32}, Type{Kind: KindInt64}
	old := []Field{{Name: "a", Type: f32}, {Name: "b", Type: f32}, {Name: "gone", Type: i64}, {Name: "n", Type: i64}}
	cur := []Field{{Name: "b", Type: f32}, {Name: "a", Type: f32}, {Name: "n", Type: f32}, {Name: "new", Type: i64}}
	m := MapSchema(old, cur)
	require.Equal(t, []int{1, 0, -1, -1}, m.ToCur, "by name; removed and retyped features are skipped")
	require.Equal(t, []FieldState{FieldReadable, FieldReadable, FieldRetyped, FieldNotInRow}, m.State)

	// Decoding through the mapping puts each value under its own name.
	payload, err := AppendValues(nil, old, []Value{{F64: 1}, {F64: 2}, {I64: 3}, {I64: 4}})
	require.NoError(t, err)
	got := make([]Value, len(cur))
	dst := make([]*Value, len(old))
	for i, j := range m.ToCur {
		if j >= 0 {
			dst[i] = &got[j]
		}
	}
	require.NoError(t, DecodeValuesInto(payload, m.Old, dst))
	require.Equal(t, []Value{{F64: 2}, {F64: 1}, {}, {}}, got)
}

// FuzzParseRecord: stored bytes never crash the record parser or the
// payload decoder, and a parsed record stores back to the same bytes.
func FuzzParseRecord(f *testing.F) {
	schema := []Field{{Name: "a", Type: Type{Kind: KindInt64}}, {Name: "s", Type: Type{Kind: KindString, List: true}}}
	payload, err := AppendValues(nil, schema, []Value{{I64: -1}, {Ss: []string{"x", "yz"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(AppendRecord(nil, Record{EventTS: 5, CreatedTS: 6, Schema: Fingerprint(schema), Payload: payload}))
	f.Add(legacyRecord(5, 6, payload))
	f.Add(legacyRecord(5, 6, nil))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			return
		}
		_, _ = DecodeValues(r.Payload, schema, nil)
		if r.Schema != 0 && r.Schema != SchemaUnreadable {
			if got := AppendRecord(nil, r); !bytes.Equal(got, b) {
				t.Fatalf("round trip: %x, want %x", got, b)
			}
		}
	})
}

// FuzzDecodeSchema: a schema document read from the store never crashes
// the decoder, and what it accepts encodes back to an equal schema.
func FuzzDecodeSchema(f *testing.F) {
	f.Add(EncodeSchema([]Field{{Name: "a", Type: Type{Kind: KindInt64}}, {Name: "e", Type: Type{Kind: KindFloat32, List: true, Len: 3}}}))
	f.Add([]byte(`{"fields":[{"name":"a","dtype":"array(float, 2)"}]}`))
	f.Add([]byte(`{"fields":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSchema(b)
		if err != nil {
			return
		}
		again, err := DecodeSchema(EncodeSchema(s))
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip: %v, %v; want %v", again, err, s)
		}
	})
}
