package serving

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestToTime(t *testing.T) {
	want := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	for _, in := range []any{
		"2026-01-02T12:00:00Z", "2026-01-02T13:00:00+01:00", "2026-01-02 12:00:00", "2026-01-02T12:00:00",
		json.Number("1767355200"), json.Number("1767355200000"), json.Number("1767355200000000"), json.Number("1767355200000000000"),
	} {
		got, err := toTime(in)
		require.NoError(t, err, "%v", in)
		require.Equal(t, want, got, "%v", in)
	}
	_, err := toTime(true)
	require.Error(t, err)
}
