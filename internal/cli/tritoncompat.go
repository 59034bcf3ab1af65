package cli

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

// tritonCompatFlags are tritonserver flags that Sluice accepts so that a
// Triton start command runs unchanged. Each either maps onto Sluice's own
// setting or does nothing and says so at start-up.
type tritonCompatFlags struct {
	allowMetrics    bool
	allowGPUMetrics bool
	allowCPUMetrics bool
	logVerbose      int
	metricsInterval int
	httpMaxInput    int64
	traceConfig     []string
	// Triton's spellings of --cache-size.
	cacheConfig   []string
	cacheByteSize int64
	// Triton's older spellings of --trace-config entries.
	traceFile, traceRate, traceCount, traceLogFrequency string
	traceLevel                                          []string
}

func (c *tritonCompatFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&c.allowMetrics, "allow-metrics", true, "serve Prometheus /metrics on --metrics-port (Triton's flag); false: no metrics listener")
	fl.BoolVar(&c.allowGPUMetrics, "allow-gpu-metrics", false, "accepted for Triton start commands; does nothing: Sluice runs models on CPU and has no GPU metrics (a line at start-up says so)")
	fl.BoolVar(&c.allowCPUMetrics, "allow-cpu-metrics", true, "accepted for Triton start commands; the process CPU and memory metrics (process_*, go_*) are always exported")
	fl.IntVar(&c.logVerbose, "log-verbose", 0, "Triton's verbose logging level: any value above 0 sets --log-level debug (Sluice has one debug level)")
	fl.Int64Var(&c.httpMaxInput, "http-max-input-size", 0, "largest HTTP request body, in bytes (Triton's flag; default: --max-request-bytes, which also bounds gRPC messages)")
	fl.StringArrayVar(&c.traceConfig, "trace-config", nil, "Triton's trace setting, repeatable: level=OFF|TIMESTAMPS|TENSORS, rate=N (one trace in N), count=N (traces to take, then stop; -1 no limit), log_frequency=N, mode=triton|opentelemetry, triton,file=PATH (spans as JSON lines in PATH). Sets what GET /v2/trace/setting reports and a cleared setting returns to; spans are OpenTelemetry's. For OTLP export use --trace-otlp-endpoint (OTLP/gRPC)")
	fl.StringVar(&c.traceFile, "trace-file", "", "Triton's older form of --trace-config triton,file=PATH")
	fl.StringArrayVar(&c.traceLevel, "trace-level", nil, "Triton's older form of --trace-config level=LEVEL, repeatable")
	fl.StringVar(&c.traceRate, "trace-rate", "", "Triton's older form of --trace-config rate=N")
	fl.StringVar(&c.traceCount, "trace-count", "", "Triton's older form of --trace-config count=N")
	fl.StringVar(&c.traceLogFrequency, "trace-log-frequency", "", "Triton's older form of --trace-config log_frequency=N")
	fl.StringArrayVar(&c.cacheConfig, "cache-config", nil, "Triton's spelling of --cache-size: local,size=<bytes> (the local cache is the one supported)")
	fl.Int64Var(&c.cacheByteSize, "response-cache-byte-size", 0, "Triton's older spelling of --cache-size")
	fl.IntVar(&c.metricsInterval, "metrics-interval-ms", 2000, "accepted for Triton start commands; Sluice's gauges are set when what they measure changes or read when /metrics is scraped, so there is no polling interval and the value changes nothing")
}

// apply maps the flags that have a Sluice meaning onto f.
func (c *tritonCompatFlags) apply(fl *pflag.FlagSet, f *serveFlags) error {
	if c.logVerbose < 0 {
		return fmt.Errorf("--log-verbose must be 0 or more, not %d", c.logVerbose)
	}
	if c.metricsInterval <= 0 {
		return fmt.Errorf("--metrics-interval-ms must be above 0, not %d", c.metricsInterval)
	}
	if c.logVerbose > 0 {
		if fl.Changed("log-level") && f.log.Level != "debug" {
			return fmt.Errorf("--log-verbose %d asks for debug logging, --log-level %s for less: give one", c.logVerbose, f.log.Level)
		}
		f.log.Level = "debug"
	}
	if fl.Changed("http-max-input-size") {
		if c.httpMaxInput <= 0 {
			// Triton's words.
			return fmt.Errorf("--http-max-input-size must be greater than 0, not %d", c.httpMaxInput)
		}
		f.httpMaxBody = c.httpMaxInput
	}
	f.noMetrics = !c.allowMetrics
	size, err := cacheSizeFlags(f.model.CacheSize, c.cacheByteSize, c.cacheConfig)
	if err != nil {
		return err
	}
	f.model.CacheSize = size
	if trace := c.traceSettings(fl); len(trace) > 0 {
		tc, err := parseTraceConfig(trace)
		if err != nil {
			return err
		}
		if tc.File != "" && !fl.Changed("trace-otlp-endpoint") && f.tracing.Exporter == "" {
			f.tracing.Exporter, f.tracing.File = telemetry.ExporterConsole, tc.File
		}
		if tc.Rate > 0 && !fl.Changed("trace-sample-ratio") {
			f.tracing.SampleRatio = 1 / float64(tc.Rate)
		}
		f.traceConfig = &tc
	}
	return nil
}

// traceSettings returns the --trace-config entries given, after those of
// Triton's older flags (--trace-file, --trace-level, --trace-rate,
// --trace-count, --trace-log-frequency; qa/L0_http starts Triton with
// them), so that a --trace-config entry has the last word.
func (c *tritonCompatFlags) traceSettings(fl *pflag.FlagSet) []string {
	var out []string
	if fl.Changed("trace-file") {
		out = append(out, "triton,file="+c.traceFile)
	}
	for _, l := range c.traceLevel {
		out = append(out, "level="+l)
	}
	for _, kv := range [][2]string{{"trace-rate", "rate"}, {"trace-count", "count"}, {"trace-log-frequency", "log_frequency"}} {
		if fl.Changed(kv[0]) {
			v, _ := fl.GetString(kv[0])
			out = append(out, kv[1]+"="+v)
		}
	}
	return append(out, c.traceConfig...)
}

// parseTraceConfig reads Triton's --trace-config values: "key=value" for
// the global settings, "triton,file=PATH" for the trace file.
func parseTraceConfig(args []string) (tritonsettings.TraceConfig, error) {
	tc := tritonsettings.TraceConfig{Mode: tritonsettings.ModeTriton} // Triton's default mode
	for _, a := range args {
		section, kv, hasSection := strings.Cut(a, ",")
		if !hasSection {
			kv, section = section, ""
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return tc, fmt.Errorf("--trace-config %q: want key=value or triton,file=PATH", a)
		}
		bad := func(want string) error { return fmt.Errorf("--trace-config %s: %s must be %s, not %q", a, k, want, v) }
		if section == "" {
			known, err := setTraceSetting(&tc, k, v, bad)
			if err != nil {
				return tc, err
			}
			if known {
				continue
			}
		}
		switch {
		case section == "triton" && k == "file":
			if v == "" {
				return tc, bad("a file path")
			}
			tc.File = v
		case section == "opentelemetry":
			return tc, fmt.Errorf("--trace-config %s: Sluice exports spans over OTLP/gRPC: use --trace-otlp-endpoint host:port and resources with OTEL_RESOURCE_ATTRIBUTES", a)
		default:
			return tc, fmt.Errorf("--trace-config %s: unknown setting (want level, rate, count, log_frequency, mode or triton,file)", a)
		}
	}
	return tc, nil
}

// addTraceLevel adds level to levels, dropping OFF and an earlier copy.
func addTraceLevel(levels []string, level string) []string {
	levels = slices.DeleteFunc(levels, func(l string) bool { return l == "OFF" || l == level })
	return append(levels, level)
}

// setTraceSetting applies one of --trace-config's global settings
// (key=value); known is false for a key that is none of them.
func setTraceSetting(tc *tritonsettings.TraceConfig, k, v string, bad func(want string) error) (known bool, err error) {
	switch k {
	case "level":
		// Triton reads the level without regard to case and takes its
		// older names: false and off for OFF; true, on, min and max for
		// TIMESTAMPS (qa/L0_batcher starts it with --trace-level=MIN).
		switch strings.ToLower(v) {
		case "off", "false":
			tc.Level = []string{"OFF"}
		case "timestamps", "true", "on", "min", "max":
			tc.Level = addTraceLevel(tc.Level, "TIMESTAMPS")
		case "tensors":
			tc.Level = addTraceLevel(tc.Level, "TENSORS")
		default:
			return true, bad("OFF, TIMESTAMPS or TENSORS")
		}
	case "rate":
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < 1 {
			return true, bad("an integer >= 1")
		}
		tc.Rate = n
	case "count":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -1 {
			return true, bad("an integer >= -1")
		}
		tc.Count = &n
	case "log_frequency":
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return true, bad("an integer >= 0")
		}
		tc.LogFrequency = n
	case "mode":
		if v != tritonsettings.ModeTriton && v != tritonsettings.ModeOpenTelemetry {
			return true, bad("triton or opentelemetry")
		}
		tc.Mode = v
	default:
		return false, nil
	}
	return true, nil
}

// explain logs, once at start-up, what the accepted no-op flags do.
func (c *tritonCompatFlags) explain(fl *pflag.FlagSet, logger *slog.Logger) {
	if c.allowGPUMetrics {
		logger.Info("--allow-gpu-metrics does nothing: Sluice runs models on CPU and exports no GPU metrics")
	}
	if fl.Changed("metrics-interval-ms") {
		logger.Info("--metrics-interval-ms changes nothing: Sluice's gauges are set on change or read at scrape time", "metrics_interval_ms", c.metricsInterval)
	}
	if !c.allowMetrics {
		logger.Info("--allow-metrics=false: no metrics listener; --metrics-port is ignored")
	}
}

// metricsAddr is the metrics listener's address, or "off".
func (ms *modelServer) metricsAddr() string {
	if ms.metrics == nil {
		return "off"
	}
	return ms.metrics.Addr().String()
}
