package servingapi

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
)

// The answer of /get-online-features writes every event timestamp with
// 0, 3, 6 or 9 fraction digits, never trimmed to "….34Z".
func TestResponseTimestampDigits(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Put(t, "user_stats", i64(1), now.Add(-10*time.Minute+340*time.Millisecond), i64(7), f64(0.5), str("ann"), servingtest.Emb3())
	f.Put(t, "user_stats", i64(2), now.Add(-10*time.Minute+120*time.Microsecond), i64(7), f64(0.5), str("bob"), servingtest.Emb3())
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
	f := newFixture(t, serving.Options{})
	f.Repo.Views["user_live"].Schema = []feature.Field{{Name: "level", Type: feature.Type{Kind: feature.KindInt64}}, {Name: "seen", Type: feature.Type{Kind: feature.KindUnixTimestamp}}}
	seen := time.Date(2026, 1, 2, 11, 30, 15, 900_000_000, time.UTC)
	f.Put(t, "user_live", i64(1), now.Add(-time.Minute), i64(3), feature.Value{I64: seen.UnixNano()})
	f.Put(t, "user_live", i64(2), now.Add(-time.Minute), i64(4), null())
	code, body := f.post(t, "/get-online-features", `{"features":["user_live:seen"],"entities":{"user_id":[1,2]}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"values":[1767353415,null]`)

	client := feastpb.NewServingServiceClient(serveGRPC(t, f.srv, GRPCOptions{}, f.Logger, f.Reg))
	resp, err := client.GetOnlineFeatures(t.Context(), &feastpb.GetOnlineFeaturesRequest{
		Kind:     &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"user_live:seen"}}},
		Entities: map[string]*feastpb.RepeatedValue{"user_id": {Val: []*feastpb.Value{{Val: &feastpb.Value_Int64Val{Int64Val: 1}}}}},
	})
	require.NoError(t, err)
	require.Equal(t, seen.Unix(), resp.GetResults()[1].GetValues()[0].GetUnixTimestampVal())
}
