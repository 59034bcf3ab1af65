package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"
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
}

func (c *tritonCompatFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&c.allowMetrics, "allow-metrics", true, "serve Prometheus /metrics on --metrics-port (Triton's flag); false: no metrics listener")
	fl.BoolVar(&c.allowGPUMetrics, "allow-gpu-metrics", false, "accepted for Triton start commands; does nothing: Sluice runs models on CPU and has no GPU metrics (a line at start-up says so)")
	fl.BoolVar(&c.allowCPUMetrics, "allow-cpu-metrics", true, "accepted for Triton start commands; the process CPU and memory metrics (process_*, go_*) are always exported")
	fl.IntVar(&c.logVerbose, "log-verbose", 0, "Triton's verbose logging level: any value above 0 sets --log-level debug (Sluice has one debug level)")
	fl.Int64Var(&c.httpMaxInput, "http-max-input-size", 0, "largest HTTP request body, in bytes (Triton's flag; default: --max-request-bytes, which also bounds gRPC messages)")
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
		if fl.Changed("log-level") && f.logLevel != "debug" {
			return fmt.Errorf("--log-verbose %d asks for debug logging, --log-level %s for less: give one", c.logVerbose, f.logLevel)
		}
		f.logLevel = "debug"
	}
	if fl.Changed("http-max-input-size") {
		if c.httpMaxInput <= 0 {
			// Triton's words.
			return fmt.Errorf("--http-max-input-size must be greater than 0, not %d", c.httpMaxInput)
		}
		f.httpMaxBody = c.httpMaxInput
	}
	f.noMetrics = !c.allowMetrics
	return nil
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
