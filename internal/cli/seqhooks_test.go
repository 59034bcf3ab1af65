package cli

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TRITONSERVER_BACKLOG_DELAY_SCHEDULER as qa/L0_sequence_batcher/test.sh
// sets it (3 for test_backlog_fill_no_end, 2 for test_backlog_fill, else 0).
func TestBacklogDelaySchedulerHook(t *testing.T) {
	for _, tc := range []struct {
		v    string
		set  bool
		want int
		err  string
	}{
		{set: false, want: 0},
		{v: "", set: true, want: 0},
		{v: "0", set: true, want: 0},
		{v: "3", set: true, want: 3},
		{v: "-1", set: true, err: "want a number of requests"},
		{v: "x", set: true, err: "want a number of requests"},
	} {
		lookup := func(k string) (string, bool) {
			require.Equal(t, backlogDelaySchedulerEnv, k)
			return tc.v, tc.set
		}
		n, err := backlogDelaySchedulerHook(lookup, slog.New(slog.DiscardHandler))
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "value %q", tc.v)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, n, "value %q", tc.v)
	}
}
