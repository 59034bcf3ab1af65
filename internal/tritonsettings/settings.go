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
// "opentelemetry" unless --trace-config chose Triton's settings. Without an
// exporter trace_level stays OFF. Settings follow Triton's model: each
// model has the global settings unless set for it, and clearing a model's
// setting (null) makes it follow the global one again; clearing a global
// one restores its value at start. trace_count (-1: no limit) caps the
// traces sampled at the root and counts down as they are taken. A request
// for a model with settings of its own is sampled by that model's
// trace_level, trace_rate and trace_count (the HTTP path or the gRPC
// request names the model before the server span starts; a model without
// its own trace_count counts on the global one). TENSORS is accepted
// as a level; spans carry times, not tensor contents. log_frequency is
// reported only (spans go out in batches as they end). trace_file is set
// at start (--trace-config triton,file=: spans as JSON lines) and cannot
// change over the network, as in Triton.
package tritonsettings

import (
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sluice-ml/sluice/internal/apierr"
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
	// Trace settings: as at start, global now, and set per model.
	initial, global map[string][]string
	models          map[string]map[string][]string
	modelCounts     map[string]*atomic.Int64 // traces still to take, for models that set trace_count
	countSet        bool                     // an update set trace_count: apply it
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
// string) and returns the result. Errors are *apierr.Error.
func (s *Settings) UpdateLog(update map[string]any) (map[string]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.Log()
	next := map[string]any{}
	maps.Copy(next, cur)
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
				return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "log setting '%s' must be a bool, got %v", k, v)
			}
			next[k] = b
		case "log_verbose_level":
			n, ok := asUint(v)
			if !ok {
				return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "log setting '%s' must be a non-negative integer, got %v", k, v)
			}
			next[k] = n
		case "log_file", "log_format":
			if v != cur[k] {
				return nil, apierr.Errorf(apierr.KindUnsupported, ReasonUnsupported, "log setting '%s' cannot change at run time (Sluice logs to standard error in the --log-format chosen at start); it is %q", k, cur[k])
			}
		default:
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "unknown log setting '%s'", k)
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

// ReasonModelNotFound is the reason of a per-model trace settings request
// for a model the server does not have.
const ReasonModelNotFound = "model_not_found"

// UnknownModel is the error of a per-model trace settings request for a
// model the server does not have, in Triton's words (qa/L0_trace
// trace_endpoint_test.py looks for them).
func UnknownModel(name string) error {
	return apierr.Errorf(apierr.KindNotFound, ReasonModelNotFound, "Request for unknown model : %s", name)
}

// Trace setting names.
const (
	traceLevel   = "trace_level"
	traceRate    = "trace_rate"
	traceCount   = "trace_count"
	logFrequency = "log_frequency"
	traceFile    = "trace_file"
	traceMode    = "trace_mode"
)

// Trace modes (Triton's --trace-config mode=).
const (
	ModeTriton        = "triton"
	ModeOpenTelemetry = "opentelemetry"
)

// TraceConfig is the trace configuration the server starts with (Triton's
// --trace-config). Zero fields take the defaults: level from the sampler
// (TIMESTAMPS when spans are exported and sampled, else OFF), rate from
// its ratio, count -1 (no limit), log_frequency 0, mode opentelemetry.
type TraceConfig struct {
	Level        []string
	Rate         uint64
	Count        *int64
	LogFrequency uint64
	File         string
	Mode         string
}

// ConfigureTrace sets the trace settings the server starts with; clearing
// a global setting (null over HTTP, an empty list over gRPC) restores its
// value from here. It applies them to the sampler.
func (s *Settings) ConfigureTrace(c TraceConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sampling == nil {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace settings cannot be given with OTEL_TRACES_SAMPLER, which then decides the sampling")
	}
	init := s.traceDefaults()
	if len(c.Level) > 0 {
		if err := checkLevel(c.Level); err != nil {
			return err
		}
		if c.Level[0] != "OFF" && !s.sampling.Exporting() {
			return apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace level %v needs an exporter (--trace-config triton,file=, --trace-otlp-endpoint or OTEL_TRACES_EXPORTER)", c.Level)
		}
		init[traceLevel] = slices.Clone(c.Level)
	}
	if c.Rate > 0 {
		init[traceRate] = []string{strconv.FormatUint(c.Rate, 10)}
	}
	if c.Count != nil {
		if *c.Count < -1 {
			return apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace setting 'trace_count' must be an integer >= -1, got %d", *c.Count)
		}
		init[traceCount] = []string{strconv.FormatInt(*c.Count, 10)}
	}
	init[logFrequency] = []string{strconv.FormatUint(c.LogFrequency, 10)}
	init[traceFile] = []string{c.File}
	switch c.Mode {
	case "":
	case ModeTriton, ModeOpenTelemetry:
		init[traceMode] = []string{c.Mode}
	default:
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace mode must be %s or %s, got %q", ModeTriton, ModeOpenTelemetry, c.Mode)
	}
	s.initial = init
	s.global = cloneSettings(init)
	s.countSet = true
	s.applyLocked()
	return nil
}

// traceDefaults are the settings before ConfigureTrace: what the sampler
// does now.
func (s *Settings) traceDefaults() map[string][]string {
	level := "OFF"
	if s.tracing() {
		level = "TIMESTAMPS"
	}
	return map[string][]string{
		traceLevel:   {level},
		traceRate:    {strconv.FormatUint(s.rate, 10)},
		traceCount:   {"-1"},
		logFrequency: {"0"},
		traceFile:    {""},
		traceMode:    {ModeOpenTelemetry},
	}
}

func cloneSettings(m map[string][]string) map[string][]string {
	out := make(map[string][]string, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// Trace returns the trace settings of model as Triton names them, each a
// list of strings: the global settings, overridden by those set for the
// model. An empty model names the global settings.
func (s *Settings) Trace(model string) map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traceLocked(model)
}

func (s *Settings) traceLocked(model string) map[string][]string {
	s.initLocked()
	out := cloneSettings(s.global)
	if s.sampling != nil {
		// trace_count counts down as traces are taken.
		if out[traceCount][0] != "-1" {
			out[traceCount] = []string{strconv.FormatInt(s.sampling.Count(), 10)}
		}
	}
	for k, v := range s.models[model] {
		out[k] = slices.Clone(v)
	}
	if c := s.modelCounts[model]; c != nil && out[traceCount][0] != "-1" {
		out[traceCount] = []string{strconv.FormatInt(c.Load(), 10)}
	}
	return out
}

// initLocked sets the settings from the sampler when ConfigureTrace was
// not called.
func (s *Settings) initLocked() {
	if s.global == nil {
		s.initial = s.traceDefaults()
		s.global = cloneSettings(s.initial)
	}
}

func checkLevel(v []string) error {
	for _, l := range v {
		switch l {
		case "TIMESTAMPS", "TENSORS":
		case "OFF":
			if len(v) > 1 {
				return apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace setting 'trace_level' OFF cannot be combined with other levels, got %v", v)
			}
		default:
			return apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace setting 'trace_level' must be OFF or a list of TIMESTAMPS and TENSORS, got %v", v)
		}
	}
	return nil
}

// UpdateTrace applies update to the global settings (model empty) or to
// model's, and returns the result. A setting with no value is cleared: a
// model's then follows the global one again, a global one returns to its
// value at start. trace_file cannot change (as in Triton) and trace_mode
// only at start. Errors are *apierr.Error.
func (s *Settings) UpdateTrace(model string, update map[string][]string) (map[string][]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	keys := make([]string, 0, len(update))
	for k := range update {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	set := map[string][]string{}
	for _, k := range keys {
		v := update[k]
		if _, ok := s.initial[k]; !ok {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "unknown trace setting '%s'", k)
		}
		if len(v) == 0 {
			set[k] = nil
			continue
		}
		v, err := s.checkTraceLocked(k, v)
		if err != nil {
			return nil, err
		}
		set[k] = slices.Clone(v)
	}
	if model != "" {
		s.setModelTraceLocked(model, set)
	} else {
		s.setGlobalTraceLocked(set)
	}
	s.applyLocked()
	return s.traceLocked(model), nil
}

// checkTraceLocked checks the new value v of trace setting k and returns
// it as stored (numbers in canonical form).
func (s *Settings) checkTraceLocked(k string, v []string) ([]string, error) {
	if s.sampling == nil {
		return nil, apierr.Errorf(apierr.KindUnsupported, ReasonUnsupported,
			"trace setting '%s' cannot change: tracing is configured by OTEL_TRACES_SAMPLER; it is %v", k, s.global[k])
	}
	switch k {
	case traceFile:
		return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace file location can not be updated through network protocol")
	case traceMode:
		if !slices.Equal(v, s.initial[traceMode]) {
			return nil, apierr.Errorf(apierr.KindUnsupported, ReasonUnsupported, "trace setting 'trace_mode' is chosen at start (--trace-config mode=); it is %v", s.initial[traceMode])
		}
	case traceRate:
		n, err := strconv.ParseUint(v[0], 10, 64)
		if len(v) != 1 || err != nil || n < 1 {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace setting 'trace_rate' must be one integer >= 1, got %v", v)
		}
		v = []string{strconv.FormatUint(n, 10)}
	case traceCount:
		n, err := strconv.ParseInt(v[0], 10, 64)
		if len(v) != 1 || err != nil || n < -1 {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace setting 'trace_count' must be one integer >= -1, got %v", v)
		}
		v = []string{strconv.FormatInt(n, 10)}
	case logFrequency:
		n, err := strconv.ParseUint(v[0], 10, 64)
		if len(v) != 1 || err != nil {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalid, "trace setting 'log_frequency' must be one integer >= 0, got %v", v)
		}
		v = []string{strconv.FormatUint(n, 10)}
	case traceLevel:
		if err := checkLevel(v); err != nil {
			return nil, err
		}
		if v[0] != "OFF" && !s.sampling.Exporting() {
			return nil, apierr.Errorf(apierr.KindUnsupported, ReasonUnsupported,
				"trace setting 'trace_level' cannot turn tracing on: no exporter is configured (start with --trace-otlp-endpoint, --trace-config triton,file= or OTEL_TRACES_EXPORTER)")
		}
	}
	return v, nil
}

// setModelTraceLocked applies set to model's settings: a nil value
// clears that setting (the model follows the global one again); a new
// trace_count restarts the model's count.
func (s *Settings) setModelTraceLocked(model string, set map[string][]string) {
	m := s.models[model]
	for k, v := range set {
		switch {
		case v != nil:
			if m == nil {
				m = map[string][]string{}
			}
			m[k] = v
		default:
			delete(m, k)
		}
		if k == traceCount {
			delete(s.modelCounts, model)
			if v != nil {
				n, _ := strconv.ParseInt(v[0], 10, 64)
				c := new(atomic.Int64)
				c.Store(n)
				if s.modelCounts == nil {
					s.modelCounts = map[string]*atomic.Int64{}
				}
				s.modelCounts[model] = c
			}
		}
	}
	if len(m) == 0 {
		delete(s.models, model)
	} else {
		if s.models == nil {
			s.models = map[string]map[string][]string{}
		}
		s.models[model] = m
	}
}

// setGlobalTraceLocked applies set to the global settings: a nil value
// returns that setting to its value at start.
func (s *Settings) setGlobalTraceLocked(set map[string][]string) {
	for k, v := range set {
		if v == nil {
			v = slices.Clone(s.initial[k])
		}
		s.global[k] = v
		if k == traceCount {
			s.countSet = true
		}
	}
}

// applyLocked maps the global settings onto the root sampler: trace_level
// OFF samples none, else one trace in trace_rate, at most trace_count of
// them.
func (s *Settings) applyLocked() {
	if s.sampling == nil {
		return
	}
	rate, _ := strconv.ParseUint(s.global[traceRate][0], 10, 64)
	s.rate = max(rate, 1)
	if s.global[traceLevel][0] == "OFF" || !s.sampling.Exporting() {
		s.sampling.SetRatio(0)
	} else {
		s.sampling.SetRatio(1 / float64(s.rate))
	}
	if s.countSet {
		n, _ := strconv.ParseInt(s.global[traceCount][0], 10, 64)
		s.sampling.SetCount(n)
		s.countSet = false
	}
	// Models with settings of their own sample by their effective ones.
	rules := make(map[string]*telemetry.ModelRule, len(s.models))
	for m := range s.models {
		eff := s.traceLocked(m)
		ratio := 0.0
		if rate, _ := strconv.ParseUint(eff[traceRate][0], 10, 64); eff[traceLevel][0] != "OFF" && s.sampling.Exporting() {
			ratio = 1 / float64(max(rate, 1))
		}
		rules[m] = s.sampling.NewModelRule(ratio, s.modelCounts[m])
	}
	s.sampling.SetModelRules(rules)
}
