package feature

import (
	"errors"
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
