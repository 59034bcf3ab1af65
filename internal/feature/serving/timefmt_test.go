package serving

import (
	"math/rand/v2"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
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

// The answer of /get-online-features writes every event timestamp with
// 0, 3, 6 or 9 fraction digits, never trimmed to "….34Z".
func TestResponseTimestampDigits(t *testing.T) {
	f := newFixture(t, Options{})
	f.put(t, "user_stats", i64(1), now.Add(-10*time.Minute+340*time.Millisecond), i64(7), f64(0.5), str("ann"), emb3())
	f.put(t, "user_stats", i64(2), now.Add(-10*time.Minute+120*time.Microsecond), i64(7), f64(0.5), str("bob"), emb3())
	code, body := f.post(t, "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[1,2]}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"2026-01-02T11:50:00.340Z","2026-01-02T11:50:00.000120Z"`)
	for _, m := range regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*)?Z"`).FindAllStringSubmatch(string(body), -1) {
		if n := len(m[1]); n != 0 {
			require.Contains(t, []int{4, 7, 10}, n, "fraction of %s", m[0])
		}
	}
}

// A UnixTimestamp feature value is written as Feast's server writes its
// unix_timestamp_val in JSON (Feast's proto_json prints the Value's field
// as it is: an int64 of seconds), and as the same seconds over gRPC.
func TestUnixTimestampValues(t *testing.T) {
	f := newFixture(t, Options{})
	f.repo.Views["user_live"].Schema = []feature.Field{{Name: "level", Type: feature.Type{Kind: feature.KindInt64}}, {Name: "seen", Type: feature.Type{Kind: feature.KindUnixTimestamp}}}
	seen := time.Date(2026, 1, 2, 11, 30, 15, 900_000_000, time.UTC)
	f.put(t, "user_live", i64(1), now.Add(-time.Minute), i64(3), feature.Value{I64: seen.UnixNano()})
	f.put(t, "user_live", i64(2), now.Add(-time.Minute), i64(4), null())
	code, body := f.post(t, "/get-online-features", `{"features":["user_live:seen"],"entities":{"user_id":[1,2]}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"values":[1767353415,null]`)

	client := feastpb.NewServingServiceClient(serveGRPC(t, f.srv, GRPCOptions{}))
	resp, err := client.GetOnlineFeatures(t.Context(), &feastpb.GetOnlineFeaturesRequest{
		Kind:     &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"user_live:seen"}}},
		Entities: map[string]*feastpb.RepeatedValue{"user_id": {Val: []*feastpb.Value{{Val: &feastpb.Value_Int64Val{Int64Val: 1}}}}},
	})
	require.NoError(t, err)
	require.Equal(t, seen.Unix(), resp.GetResults()[1].GetValues()[0].GetUnixTimestampVal())
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
