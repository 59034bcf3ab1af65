package tritonsettings

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ml/sluice/internal/apierr"
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
		kind   apierr.Kind
		want   string
	}{
		{map[string]any{"log_info": "yes"}, apierr.KindInvalid, "log setting 'log_info' must be a bool"},
		{map[string]any{"log_verbose_level": int64(-1)}, apierr.KindInvalid, "must be a non-negative integer"},
		{map[string]any{"log_file": "/tmp/x"}, apierr.KindUnsupported, "log setting 'log_file' cannot change at run time"},
		{map[string]any{"nope": true}, apierr.KindInvalid, "unknown log setting 'nope'"},
	} {
		_, err := s.UpdateLog(tc.update)
		ie, ok := errors.AsType[*apierr.Error](err)
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
	require.Equal(t, []string{"OFF"}, fixed.Trace("")["trace_level"])
	_, err := fixed.UpdateTrace("", map[string][]string{"trace_rate": {"5"}})
	require.ErrorContains(t, err, "trace setting 'trace_rate' cannot change: tracing is configured by OTEL_TRACES_SAMPLER")

	idle := telemetry.NewSampling(0.5) // no exporter
	off := New(&lv, "json", idle)
	require.Equal(t, []string{"OFF"}, off.Trace("")["trace_level"])
	require.Equal(t, []string{"2"}, off.Trace("")["trace_rate"])
	_, err = off.UpdateTrace("", map[string][]string{"trace_level": {"TIMESTAMPS"}})
	require.ErrorContains(t, err, "cannot turn tracing on: no exporter is configured")

	sampling := telemetry.NewSampling(0.01)
	sampling.SetExporting(true)
	on := New(&lv, "json", sampling)
	got := on.Trace("")
	require.Equal(t, []string{"TIMESTAMPS"}, got["trace_level"])
	require.Equal(t, []string{"100"}, got["trace_rate"], "one request in 100 at ratio 0.01")

	got, err = on.UpdateTrace("", map[string][]string{"trace_rate": {"4"}, "trace_mode": {"opentelemetry"}})
	require.NoError(t, err)
	require.Equal(t, []string{"4"}, got["trace_rate"])
	require.InDelta(t, 0.25, sampling.Ratio(), 1e-12)

	got, err = on.UpdateTrace("", map[string][]string{"trace_level": {"OFF"}})
	require.NoError(t, err)
	require.Equal(t, []string{"OFF"}, got["trace_level"])
	require.Zero(t, sampling.Ratio())
	got, err = on.UpdateTrace("", map[string][]string{"trace_level": {"TIMESTAMPS"}})
	require.NoError(t, err)
	require.Equal(t, []string{"4"}, got["trace_rate"], "the rate is kept while off")
	require.InDelta(t, 0.25, sampling.Ratio(), 1e-12)

	for update, want := range map[string]map[string][]string{
		"trace setting 'trace_rate' must be one integer >= 1":             {"trace_rate": {"0"}},
		"'trace_level' must be OFF or a list of TIMESTAMPS and TENSORS":   {"trace_level": {"ALL"}},
		"trace file location can not be updated through network protocol": {"trace_file": {"/tmp/t.json"}},
		"'trace_mode' is chosen at start":                                 {"trace_mode": {"triton"}},
		"'trace_count' must be one integer >= -1":                         {"trace_count": {"-2"}},
		"unknown trace setting 'nope'":                                    {"nope": {"1"}},
		"trace setting 'trace_rate' must be one integer >= 1, ":           {"trace_rate": {"x"}},
	} {
		_, err := on.UpdateTrace("", want)
		require.ErrorContains(t, err, update)
	}
	require.InDelta(t, 0.25, sampling.Ratio(), 1e-12, "refused updates change nothing")
}

// tritonStart is qa/L0_trace's start for trace_endpoint_test.py:
// --trace-config triton,file=global_unittest.log --trace-config
// level=TIMESTAMPS --trace-config rate=1.
func tritonStart(t *testing.T) (*Settings, *telemetry.Sampling) {
	t.Helper()
	var lv slog.LevelVar
	sampling := telemetry.NewSampling(1)
	sampling.SetExporting(true)
	s := New(&lv, "json", sampling)
	require.NoError(t, s.ConfigureTrace(TraceConfig{Level: []string{"TIMESTAMPS"}, Rate: 1, File: "global_unittest.log", Mode: ModeTriton}))
	return s, sampling
}

func traceWant(level []string, rate, count, freq string) map[string][]string {
	return map[string][]string{
		"trace_file": {"global_unittest.log"}, "trace_level": level, "trace_rate": {rate},
		"trace_count": {count}, "log_frequency": {freq}, "trace_mode": {"triton"},
	}
}

// qa/L0_trace trace_endpoint_test.py test_{http,grpc}_get_settings and
// test_{http,grpc}_update_settings: a model has the global settings; the
// trace file cannot change over the network; a global update reaches the
// models that set nothing themselves.
func TestTraceSettingsTritonUpdate(t *testing.T) {
	s, _ := tritonStart(t)
	initial := traceWant([]string{"TIMESTAMPS"}, "1", "-1", "0")
	require.Equal(t, initial, s.Trace("simple"))
	require.Equal(t, initial, s.Trace(""))

	_, err := s.UpdateTrace("simple", map[string][]string{"trace_file": {"model.log"}})
	require.ErrorContains(t, err, "trace file location can not be updated through network protocol")
	ie, ok := errors.AsType[*apierr.Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.KindInvalid, ie.Kind, "400, as Triton")
	require.Equal(t, initial, s.Trace("simple"))

	both := traceWant([]string{"TIMESTAMPS", "TENSORS"}, "1", "-1", "0")
	got, err := s.UpdateTrace("", map[string][]string{"trace_level": {"TIMESTAMPS", "TENSORS"}})
	require.NoError(t, err)
	require.Equal(t, both, got)
	require.Equal(t, both, s.Trace("simple"))
}

// qa/L0_trace trace_endpoint_test.py test_{http,grpc}_clear_settings: a
// model's own settings win over the global ones; clearing a global setting
// restores its value at start, clearing a model's makes it follow the
// global one again.
func TestTraceSettingsTritonClear(t *testing.T) {
	s, sampling := tritonStart(t)
	_, err := s.UpdateTrace("simple", map[string][]string{"trace_rate": {"12"}, "log_frequency": {"34"}})
	require.NoError(t, err)
	_, err = s.UpdateTrace("", map[string][]string{"trace_rate": {"56"}, "trace_count": {"78"}, "trace_level": {"OFF"}})
	require.NoError(t, err)
	require.Zero(t, sampling.Ratio(), "level OFF samples nothing")
	require.Equal(t, int64(78), sampling.Count())

	got, err := s.UpdateTrace("", map[string][]string{"trace_rate": nil, "trace_count": nil})
	require.NoError(t, err)
	require.Equal(t, traceWant([]string{"OFF"}, "1", "-1", "0"), got)
	require.Equal(t, int64(-1), sampling.Count())
	require.Equal(t, traceWant([]string{"OFF"}, "12", "-1", "34"), s.Trace("simple"))

	got, err = s.UpdateTrace("simple", map[string][]string{"trace_rate": nil, "trace_level": nil})
	require.NoError(t, err)
	require.Equal(t, traceWant([]string{"OFF"}, "1", "-1", "34"), got)
	require.Equal(t, traceWant([]string{"OFF"}, "1", "-1", "0"), s.Trace(""))

	got, err = s.UpdateTrace("", map[string][]string{"trace_level": nil})
	require.NoError(t, err)
	require.Equal(t, []string{"TIMESTAMPS"}, got["trace_level"], "cleared to the level at start")
	require.InDelta(t, 1.0, sampling.Ratio(), 1e-12)
}

// trace_count caps the traces sampled at the root and counts down as they
// are taken (Triton's trace_count); -1 lifts the cap.
func TestTraceCount(t *testing.T) {
	s, sampling := tritonStart(t)
	_, err := s.UpdateTrace("", map[string][]string{"trace_count": {"2"}})
	require.NoError(t, err)
	sampled := 0
	for i := range 5 {
		p := sdktrace.SamplingParameters{TraceID: trace.TraceID{byte(i + 1)}, Name: "infer"}
		if sampling.ShouldSample(p).Decision == sdktrace.RecordAndSample {
			sampled++
		}
	}
	require.Equal(t, 2, sampled)
	require.Equal(t, []string{"0"}, s.Trace("")["trace_count"], "counted down")
	_, err = s.UpdateTrace("", map[string][]string{"trace_rate": {"1"}})
	require.NoError(t, err)
	require.Equal(t, []string{"0"}, s.Trace("")["trace_count"], "other updates leave the count as it is")

	_, err = s.UpdateTrace("", map[string][]string{"trace_count": {"-1"}})
	require.NoError(t, err)
	require.Equal(t, sdktrace.RecordAndSample, sampling.ShouldSample(sdktrace.SamplingParameters{TraceID: trace.TraceID{9}}).Decision)
}

// FuzzUpdateTrace: any update (the trace extension's request body) is
// applied or refused whole; the settings always hold the six names.
func FuzzUpdateTrace(f *testing.F) {
	f.Add("trace_rate", "12", "", "simple")
	f.Add("trace_level", "TIMESTAMPS", "TENSORS", "")
	f.Add("trace_count", "-1", "", "")
	f.Fuzz(func(t *testing.T, key, v1, v2, model string) {
		s, _ := tritonStart(t)
		var v []string
		for _, x := range []string{v1, v2} {
			if x != "" {
				v = append(v, x)
			}
		}
		before := s.Trace(model)
		got, err := s.UpdateTrace(model, map[string][]string{key: v})
		if err != nil {
			require.Equal(t, before, s.Trace(model), "a refused update changes nothing")
			return
		}
		require.Len(t, got, 6)
		for _, val := range got {
			require.NotEmpty(t, val)
		}
	})
}

// A model's own trace settings decide the sampling of its requests (the
// request's context names the model); other models follow the global ones.
func TestTraceSettingsPerModelSampling(t *testing.T) {
	s, sampling := tritonStart(t)
	_, err := s.UpdateTrace("", map[string][]string{"trace_level": {"OFF"}})
	require.NoError(t, err)
	_, err = s.UpdateTrace("simple", map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_count": {"1"}})
	require.NoError(t, err)
	decide := func(model string, id byte) sdktrace.SamplingDecision {
		p := sdktrace.SamplingParameters{ParentContext: telemetry.WithModel(context.Background(), model), TraceID: trace.TraceID{id}}
		return sampling.ShouldSample(p).Decision
	}
	require.Equal(t, sdktrace.Drop, decide("other", 1), "global level OFF")
	require.Equal(t, sdktrace.RecordAndSample, decide("simple", 2), "the model's own level")
	require.Equal(t, sdktrace.Drop, decide("simple", 3), "the model's count is spent")
	require.Equal(t, []string{"0"}, s.Trace("simple")["trace_count"])
	require.Equal(t, []string{"-1"}, s.Trace("")["trace_count"])

	_, err = s.UpdateTrace("simple", map[string][]string{"trace_level": nil, "trace_count": nil})
	require.NoError(t, err)
	require.Equal(t, sdktrace.Drop, decide("simple", 4), "cleared: the global level again")
}
