// Package tritonsettings maps Triton's logging and trace extensions
// (docs/protocol/extension_logging.md and extension_trace.md in Triton's
// server repository: GET and POST /v2/logging, /v2/trace/setting, and the
// LogSettings and TraceSetting RPCs) onto Sluice's log level and tracing.
//
// Logging: log_info, log_warning, log_error and log_verbose_level set the
// process log level (verbose > 0 is debug; else the lowest enabled of
// info, warning, error; all off leaves only errors). log_format and
// log_file are reported; changing them is refused (the log goes to
// standard error in the format chosen at start).
//
// Trace: Sluice traces with OpenTelemetry (--trace-otlp-endpoint or the
// OTEL_* environment, --trace-sample-ratio). The settings show it in
// Triton's terms and change its root sampling at run time: trace_level
// ["TIMESTAMPS"] samples one trace in trace_rate, ["OFF"] none (a request
// that arrives with a sampled parent is still followed); trace_mode is
// "opentelemetry". Without an exporter trace_level stays OFF. trace_count,
// log_frequency, trace_file and trace_mode cannot change.
package tritonsettings

import (
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Reasons of refused updates.
const (
	ReasonInvalid     = "invalid_setting"
	ReasonUnsupported = "unsupported_setting"
)

// Settings are the process's log and trace settings. Its methods are
// safe for concurrent use.
type Settings struct {
	mu       sync.Mutex // serializes updates; protects rate
	level    *slog.LevelVar
	format   string
	sampling *telemetry.Sampling // nil: tracing is not under our control
	rate     uint64              // one trace in rate requests while on
}

// New returns settings over the logger's level and the tracer's root
// sampling (nil when tracing is configured otherwise, e.g. by
// OTEL_TRACES_SAMPLER: the trace settings are then read-only). format is
// the log format ("json" or "text").
func New(level *slog.LevelVar, format string, sampling *telemetry.Sampling) *Settings {
	s := &Settings{level: level, format: format, sampling: sampling, rate: 100}
	if sampling != nil && sampling.Ratio() > 0 {
		s.rate = max(uint64(math.Round(1/sampling.Ratio())), 1)
	}
	return s
}

// tracing reports whether spans are exported and sampled at the root.
func (s *Settings) tracing() bool {
	return s.sampling != nil && s.sampling.Exporting() && s.sampling.Ratio() > 0
}

// Log returns the logging settings as Triton names them. Values are bool,
// uint32 or string.
func (s *Settings) Log() map[string]any {
	l := s.level.Level()
	verbose := uint32(0)
	if l <= slog.LevelDebug {
		verbose = 1
	}
	return map[string]any{
		"log_file":          "",
		"log_info":          l <= slog.LevelInfo,
		"log_warning":       l <= slog.LevelWarn,
		"log_error":         true,
		"log_verbose_level": verbose,
		"log_format":        "default",
	}
}

// UpdateLog applies the settings in update (values bool, uint32 or
// string) and returns the result. Errors are *infer.Error.
func (s *Settings) UpdateLog(update map[string]any) (map[string]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.Log()
	next := map[string]any{}
	for k, v := range cur {
		next[k] = v
	}
	keys := make([]string, 0, len(update))
	for k := range update {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := update[k]
		switch k {
		case "log_info", "log_warning", "log_error":
			b, ok := v.(bool)
			if !ok {
				return nil, infer.Errorf(infer.KindInvalid, ReasonInvalid, "log setting '%s' must be a bool, got %v", k, v)
			}
			next[k] = b
		case "log_verbose_level":
			n, ok := asUint(v)
			if !ok {
				return nil, infer.Errorf(infer.KindInvalid, ReasonInvalid, "log setting '%s' must be a non-negative integer, got %v", k, v)
			}
			next[k] = n
		case "log_file", "log_format":
			if v != cur[k] {
				return nil, infer.Errorf(infer.KindUnsupported, ReasonUnsupported, "log setting '%s' cannot change at run time (Sluice logs to standard error in the --log-format chosen at start); it is %q", k, cur[k])
			}
		default:
			return nil, infer.Errorf(infer.KindInvalid, ReasonInvalid, "unknown log setting '%s'", k)
		}
	}
	level := slog.LevelError
	switch {
	case next["log_verbose_level"].(uint32) > 0:
		level = slog.LevelDebug
	case next["log_info"].(bool):
		level = slog.LevelInfo
	case next["log_warning"].(bool):
		level = slog.LevelWarn
	}
	s.level.Set(level)
	return s.Log(), nil
}

func asUint(v any) (uint32, bool) {
	switch x := v.(type) {
	case uint32:
		return x, true
	case int64:
		return uint32(x), x >= 0 && x <= math.MaxUint32
	case uint64:
		return uint32(x), x <= math.MaxUint32
	case float64:
		return uint32(x), x >= 0 && x <= math.MaxUint32 && x == math.Trunc(x)
	}
	return 0, false
}

// Trace returns the trace settings as Triton names them, each a list of
// strings. They are the same for every model.
func (s *Settings) Trace() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traceLocked()
}

func (s *Settings) traceLocked() map[string][]string {
	level := "OFF"
	if s.tracing() {
		level = "TIMESTAMPS"
	}
	return map[string][]string{
		"trace_level":   {level},
		"trace_rate":    {strconv.FormatUint(s.rate, 10)},
		"trace_count":   {"-1"},
		"log_frequency": {"0"},
		"trace_file":    {""},
		"trace_mode":    {"opentelemetry"},
	}
}

// UpdateTrace applies trace_level and trace_rate; the other settings may
// only be given with their current values. An empty value leaves a
// setting as it is. Errors are *infer.Error.
func (s *Settings) UpdateTrace(update map[string][]string) (map[string][]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.traceLocked()
	keys := make([]string, 0, len(update))
	for k := range update {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rate, on := s.rate, s.tracing()
	for _, k := range keys {
		v := update[k]
		have, ok := cur[k]
		switch {
		case !ok:
			return nil, infer.Errorf(infer.KindInvalid, ReasonInvalid, "unknown trace setting '%s'", k)
		case len(v) == 0 || slices.Equal(v, have):
			continue
		case s.sampling == nil:
			return nil, infer.Errorf(infer.KindUnsupported, ReasonUnsupported,
				"trace setting '%s' cannot change: tracing is configured by OTEL_TRACES_SAMPLER; it is %v", k, have)
		case k == "trace_rate":
			n, err := strconv.ParseUint(v[0], 10, 64)
			if len(v) != 1 || err != nil || n < 1 {
				return nil, infer.Errorf(infer.KindInvalid, ReasonInvalid, "trace setting 'trace_rate' must be one integer >= 1, got %v", v)
			}
			rate = n
		case k == "trace_level":
			switch {
			case slices.Equal(v, []string{"OFF"}):
				on = false
			case slices.Equal(v, []string{"TIMESTAMPS"}):
				if !s.sampling.Exporting() {
					return nil, infer.Errorf(infer.KindUnsupported, ReasonUnsupported,
						"trace setting 'trace_level' cannot turn tracing on: no exporter is configured (start with --trace-otlp-endpoint or OTEL_TRACES_EXPORTER)")
				}
				on = true
			default:
				return nil, infer.Errorf(infer.KindUnsupported, ReasonUnsupported,
					"trace setting 'trace_level' %v is not supported: Sluice traces OFF or TIMESTAMPS (spans with their times), not TENSORS", v)
			}
		default:
			return nil, infer.Errorf(infer.KindUnsupported, ReasonUnsupported,
				"trace setting '%s' cannot change: Sluice traces with OpenTelemetry; it is %v", k, have)
		}
	}
	s.rate = rate
	if s.sampling != nil {
		if on {
			s.sampling.SetRatio(1 / float64(rate))
		} else {
			s.sampling.SetRatio(0)
		}
	}
	return s.traceLocked(), nil
}
