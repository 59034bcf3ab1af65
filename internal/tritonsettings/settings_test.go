package tritonsettings

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Triton's logging extension (docs/protocol/extension_logging.md;
// qa/L0_logging): the settings read back what was set, and the level of
// the process logger follows.
func TestLogSettings(t *testing.T) {
	var lv slog.LevelVar
	lv.Set(slog.LevelInfo)
	s := New(&lv, "json", nil)
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

// Triton's trace extension (docs/protocol/extension_trace.md; qa/L0_trace)
// mapped onto the OpenTelemetry root sampling.
func TestTraceSettings(t *testing.T) {
	var lv slog.LevelVar
	fixed := New(&lv, "json", nil)
	require.Equal(t, []string{"OFF"}, fixed.Trace()["trace_level"])
	_, err := fixed.UpdateTrace(map[string][]string{"trace_rate": {"5"}})
	require.ErrorContains(t, err, "trace setting 'trace_rate' cannot change: tracing is configured by OTEL_TRACES_SAMPLER")

	idle := telemetry.NewSampling(0.5) // no exporter
	off := New(&lv, "json", idle)
	require.Equal(t, []string{"OFF"}, off.Trace()["trace_level"])
	require.Equal(t, []string{"2"}, off.Trace()["trace_rate"])
	_, err = off.UpdateTrace(map[string][]string{"trace_level": {"TIMESTAMPS"}})
	require.ErrorContains(t, err, "cannot turn tracing on: no exporter is configured")

	sampling := telemetry.NewSampling(0.01)
	sampling.SetExporting(true)
	on := New(&lv, "json", sampling)
	got := on.Trace()
	require.Equal(t, []string{"TIMESTAMPS"}, got["trace_level"])
	require.Equal(t, []string{"100"}, got["trace_rate"], "one request in 100 at ratio 0.01")

	got, err = on.UpdateTrace(map[string][]string{"trace_rate": {"4"}, "trace_mode": {"opentelemetry"}})
	require.NoError(t, err)
	require.Equal(t, []string{"4"}, got["trace_rate"])
	require.InDelta(t, 0.25, sampling.Ratio(), 1e-12)

	got, err = on.UpdateTrace(map[string][]string{"trace_level": {"OFF"}})
	require.NoError(t, err)
	require.Equal(t, []string{"OFF"}, got["trace_level"])
	require.Zero(t, sampling.Ratio())
	got, err = on.UpdateTrace(map[string][]string{"trace_level": {"TIMESTAMPS"}})
	require.NoError(t, err)
	require.Equal(t, []string{"4"}, got["trace_rate"], "the rate is kept while off")
	require.InDelta(t, 0.25, sampling.Ratio(), 1e-12)

	for update, want := range map[string]map[string][]string{
		"trace setting 'trace_rate' must be one integer >= 1":   {"trace_rate": {"0"}},
		"'trace_level' [TENSORS] is not supported":              {"trace_level": {"TENSORS"}},
		"trace setting 'trace_file' cannot change":              {"trace_file": {"/tmp/t.json"}},
		"unknown trace setting 'nope'":                          {"nope": {"1"}},
		"trace setting 'trace_rate' must be one integer >= 1, ": {"trace_rate": {"x"}},
	} {
		_, err := on.UpdateTrace(want)
		require.ErrorContains(t, err, update)
	}
	require.InDelta(t, 0.25, sampling.Ratio(), 1e-12, "refused updates change nothing")
}
