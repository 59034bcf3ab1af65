package serving

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

// TestStreamViewServedAndWriteRefused: a stream feature view's features
// are combined from its stored tiles at read time, and
// /write-to-online-store refuses to overwrite the tiles with a row of its
// features (the aggregator could no longer apply events to them).
func TestStreamViewServedAndWriteRefused(t *testing.T) {
	srv := streamBenchServer(t)
	resp, err := srv.GetOnlineFeatures(t.Context(), &Request{Features: []string{"live:f06", "live:f13"}, Entities: map[string][]feature.Value{"user_id": {{I64: 3}}}})
	require.NoError(t, err)
	// Events every 30 s back from now (12:00:00, a tile's start): the
	// 10 m window is the tiles 11:51 to 12:00, 19 events (f06 counts
	// them), the 1 h window 11:01 to 12:00, 119 (f13).
	require.Equal(t, int64(19), resp.Results[1].Values[0].I64)
	require.Equal(t, int64(119), resp.Results[2].Values[0].I64)
	require.Equal(t, StatusPresent, resp.Results[2].Statuses[0])

	_, err = srv.WriteToOnlineStore(t.Context(), "live", map[string][]any{"user_id": {3}, "f00": {1.0}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "stream feature view")
}
