package tritonsettings

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Triton's logging extension (docs/protocol/extension_logging.md;
// qa/L0_logging): the settings read back what was set, and the level of
// the process logger follows.
func TestLogSettings(t *testing.T) {
	var lv slog.LevelVar
	lv.Set(slog.LevelInfo)
	s := New(&lv, "json", false, 0)
	require.Equal(t, map[string]any{"log_file": "", "log_info": true, "log_warning": true, "log_error": true, "log_verbose_level": uint32(0), "log_format": "default"}, s.Log())

	got, err := s.UpdateLog(map[string]any{"log_verbose_level": int64(1)})
	require.NoError(t, err)
	require.Equal(t, slog.LevelDebug, lv.Level())
	require.Equal(t, uint32(1), got["log_verbose_level"])

	got, err = s.UpdateLog(map[string]any{"log_verbose_level": uint32(0), "log_info": false})
	require.NoError(t, err)
	require.Equal(t, slog.LevelWarn, lv.Level())
	require.Equal(t, false, got["log_info"])
	_, err = s.UpdateLog(map[string]any{"log_warning": false})
	require.NoError(t, err)
	require.Equal(t, slog.LevelError, lv.Level())

	for _, tc := range []struct {
		update map[string]any
		kind   infer.Kind
		want   string
	}{
		{map[string]any{"log_info": "yes"}, infer.KindInvalid, "log setting 'log_info' must be a bool"},
		{map[string]any{"log_verbose_level": int64(-1)}, infer.KindInvalid, "must be a non-negative integer"},
		{map[string]any{"log_file": "/tmp/x"}, infer.KindUnsupported, "log setting 'log_file' cannot change at run time"},
		{map[string]any{"nope": true}, infer.KindInvalid, "unknown log setting 'nope'"},
	} {
		_, err := s.UpdateLog(tc.update)
		ie, ok := err.(*infer.Error)
		require.True(t, ok, "%v", tc.update)
		require.Equal(t, tc.kind, ie.Kind)
		require.Contains(t, ie.Msg, tc.want)
	}
	require.Equal(t, slog.LevelError, lv.Level(), "a refused update changes nothing")
	_, err = s.UpdateLog(map[string]any{"log_format": "default", "log_info": true})
	require.NoError(t, err, "an unchanged log_format is accepted")
	require.Equal(t, slog.LevelInfo, lv.Level())
}

func TestTraceSettings(t *testing.T) {
	var lv slog.LevelVar
	off := New(&lv, "json", false, 0.5)
	require.Equal(t, []string{"OFF"}, off.Trace()["trace_level"])
	require.Equal(t, []string{"0"}, off.Trace()["trace_rate"])

	on := New(&lv, "json", true, 0.01)
	got := on.Trace()
	require.Equal(t, []string{"TIMESTAMPS"}, got["trace_level"])
	require.Equal(t, []string{"100"}, got["trace_rate"], "one request in 100 at ratio 0.01")
	_, err := on.UpdateTrace(map[string][]string{"trace_rate": {"100"}, "trace_level": {"TIMESTAMPS"}})
	require.NoError(t, err, "updates that change nothing are accepted")
	_, err = on.UpdateTrace(map[string][]string{"trace_rate": {"5"}})
	require.ErrorContains(t, err, "trace setting 'trace_rate' cannot change at run time")
	_, err = on.UpdateTrace(map[string][]string{"nope": {"1"}})
	require.ErrorContains(t, err, "unknown trace setting 'nope'")
}
