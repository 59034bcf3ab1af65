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
// Trace: Sluice traces with OpenTelemetry, configured at start
// (--trace-otlp-endpoint, --trace-sample-ratio). The settings report it
// in Triton's terms: trace_level ["TIMESTAMPS"] when exporting, else
// ["OFF"]; trace_rate the inverse of the sample ratio (one request in N);
// trace_mode "opentelemetry". Updates that change nothing are accepted;
// others are refused as not supported at run time.
package tritonsettings

import (
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Reasons of refused updates.
const (
	ReasonInvalid     = "invalid_setting"
	ReasonUnsupported = "unsupported_setting"
)

// Settings are the process's log and trace settings. Its methods are
// safe for concurrent use.
type Settings struct {
	mu      sync.Mutex // serializes updates
	level   *slog.LevelVar
	format  string
	tracing bool
	rate    uint64 // one trace in rate requests; 0 = none
}

// New returns settings over the logger's level. tracing says whether spans
// are exported; ratio is the sample ratio. format is the log format
// ("json" or "text").
func New(level *slog.LevelVar, format string, tracing bool, ratio float64) *Settings {
	s := &Settings{level: level, format: format, tracing: tracing}
	if tracing && ratio > 0 {
		s.rate = uint64(math.Round(1 / ratio))
	}
	return s
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
// strings. model is accepted for the per-model endpoint; Sluice's
// settings are the same for every model.
func (s *Settings) Trace() map[string][]string {
	level, rate := "OFF", "0"
	if s.tracing {
		level = "TIMESTAMPS"
	}
	if s.rate > 0 {
		rate = strconv.FormatUint(s.rate, 10)
	}
	return map[string][]string{
		"trace_level":   {level},
		"trace_rate":    {rate},
		"trace_count":   {"-1"},
		"log_frequency": {"0"},
		"trace_file":    {""},
		"trace_mode":    {"opentelemetry"},
	}
}

// UpdateTrace accepts updates that leave the settings as they are and
// refuses the others: tracing is configured at start.
func (s *Settings) UpdateTrace(update map[string][]string) (map[string][]string, error) {
	cur := s.Trace()
	keys := make([]string, 0, len(update))
	for k := range update {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		have, ok := cur[k]
		if !ok {
			return nil, infer.Errorf(infer.KindInvalid, ReasonInvalid, "unknown trace setting '%s'", k)
		}
		if v := update[k]; v != nil && !slices.Equal(v, have) {
			return nil, infer.Errorf(infer.KindUnsupported, ReasonUnsupported,
				"trace setting '%s' cannot change at run time: Sluice traces with OpenTelemetry as configured at start (--trace-otlp-endpoint, --trace-sample-ratio); it is %v", k, have)
		}
	}
	return cur, nil
}
