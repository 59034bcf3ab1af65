package serving

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Protobuf's JSON mapping writes a Timestamp with 0, 3, 6 or 9 fraction
// digits ("Uses RFC 3339, where generated output will always be
// Z-normalized and uses 0, 3, 6 or 9 fractional digits", the
// google.protobuf.Timestamp reference); Feast's feature server answers
// with that mapping (MessageToDict), and Feast's remote online store
// reads event_timestamps with datetime.fromisoformat, which before Python
// 3.11 accepts only 3 or 6 digits.
func TestAppendTimestamp(t *testing.T) {
	base := time.Date(2026, 1, 2, 11, 41, 0, 0, time.UTC)
	cases := []struct {
		t    time.Time
		want string
	}{
		{base, "2026-01-02T11:41:00Z"},
		{base.Add(340 * time.Millisecond), "2026-01-02T11:41:00.340Z"},
		{base.Add(time.Millisecond), "2026-01-02T11:41:00.001Z"},
		{base.Add(120 * time.Microsecond), "2026-01-02T11:41:00.000120Z"},
		{base.Add(123456 * time.Microsecond), "2026-01-02T11:41:00.123456Z"},
		{base.Add(5), "2026-01-02T11:41:00.000000005Z"},
		{base.Add(999_999_999), "2026-01-02T11:41:00.999999999Z"},
		{time.Unix(0, 0), "1970-01-01T00:00:00Z"},
		// Another zone is written as the same instant in UTC.
		{time.Date(2026, 1, 2, 12, 41, 0, 500_000_000, time.FixedZone("CET", 3600)), "2026-01-02T11:41:00.500Z"},
	}
	for _, tc := range cases {
		got := string(AppendTimestamp(nil, tc.t))
		require.Equal(t, tc.want, got)
		back, err := time.Parse(time.RFC3339Nano, got)
		require.NoError(t, err)
		require.True(t, back.Equal(tc.t), "%s round-trips to %s", got, back)
	}
}

// AppendTimestamp writes what time's layouts write, for every year
// (four-digit years take the fast path, others the layouts).
func TestAppendTimestampMatchesLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{
		time.Unix(0, 0),
		{},
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 5_000, time.UTC),
	}
	for range 20000 {
		ts := time.Unix(rng.Int64N(400_000_000_000)-200_000_000_000, 0)
		switch rng.IntN(4) {
		case 1:
			ts = ts.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		case 2:
			ts = ts.Add(time.Duration(rng.IntN(1_000_000)) * time.Microsecond)
		case 3:
			ts = ts.Add(time.Duration(rng.IntN(1_000_000_000)))
		}
		times = append(times, ts)
	}
	for _, ts := range times {
		require.Equal(t, string(appendTimestampLayout(nil, ts.UTC())), string(AppendTimestamp(nil, ts)), "%v", ts)
	}
}
