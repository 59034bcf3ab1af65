package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestTritonStartFlags: a tritonserver start command with Triton's
// metrics and logging flags runs: --log-verbose 1 is debug logging (what
// Triton's logging extension then reports as log_verbose_level 1),
// --allow-metrics=false leaves no metrics listener, and the flags that do
// nothing say so.
func TestTritonStartFlags(t *testing.T) {
	// A metrics port that must stay closed: one that was free a moment ago.
	metricsPort := strconv.Itoa(harness.FreePort(t))
	p, get, stop := runTritonStart(t, "--metrics-port", metricsPort, "--allow-metrics=false", "--allow-gpu-metrics=true", "--allow-cpu-metrics=true", "--log-verbose=1", "--metrics-interval-ms=1000")
	require.Empty(t, p[2], "no metrics listener in the ports file")
	code, body := get("/v2/logging")
	require.Equal(t, http.StatusOK, code)
	var logging struct {
		Verbose uint32 `json:"log_verbose_level"`
	}
	require.NoError(t, json.Unmarshal(body, &logging))
	require.Equal(t, uint32(1), logging.Verbose, "--log-verbose 1 is debug logging: %s", body)
	var d net.Dialer
	if c, err := d.DialContext(t.Context(), "tcp", "127.0.0.1:"+metricsPort); err == nil {
		_ = c.Close()
		t.Fatal("--allow-metrics=false still listens on the metrics port")
	}
	stderr := stop()
	for _, want := range []string{
		"--allow-gpu-metrics does nothing",
		"--metrics-interval-ms changes nothing",
		"--allow-metrics=false: no metrics listener",
	} {
		require.Contains(t, stderr, want)
	}
}

func TestTritonStartFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-verbose=-1"}, "--log-verbose must be 0 or more"},
		{[]string{"--metrics-interval-ms=0"}, "--metrics-interval-ms must be above 0"},
		{[]string{"--log-verbose=1", "--log-level=warn"}, "give one"},
	} {
		code, _, errOut := runCLI(t, append([]string{"model-server", "--model-repository", t.TempDir()}, c.args...)...)
		require.Equal(t, 1, code, "%v", c.args)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// TestHTTPMaxInputSize: Triton's --http-max-input-size sets the KServe
// HTTP port's body limit, and a body over it is answered 400 in Triton's
// words, naming the flag (qa/L0_http http_input_size_limit_test.py, whose
// test.sh starts the server with --http-max-input-size); a value of 0 is
// refused as Triton refuses it.
func TestHTTPMaxInputSize(t *testing.T) {
	var out, errb bytes.Buffer
	require.NotEqual(t, 0, Run(t.Context(), []string{"model-server", "--model-repository=" + t.TempDir(), "--http-max-input-size=0"}, &out, &errb))
	require.Contains(t, errb.String(), "--http-max-input-size must be greater than 0")

	ports, bound := portZero(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	errb.Reset()
	go func() {
		done <- Run(ctx, append([]string{
			"model-server", "--model-repository=" + t.TempDir(), "--address", "127.0.0.1", "--http-max-input-size=1024",
		}, ports...), &out, &errb)
	}()
	base := "http://127.0.0.1:" + bound()[0]
	get := getter(t, base)
	require.Eventually(t, func() bool { code, _ := get("/v2/health/ready"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	post := func(n int) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v2/models/m/infer", bytes.NewReader(bytes.Repeat([]byte(" "), n)))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	code, body := post(2048)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "request JSON size of 2048 bytes exceeds the maximum allowed input size of 1024 bytes. Use --http-max-input-size to increase the limit.")
	code, body = post(1000)
	require.NotContains(t, body, "body_too_large", "a body within the limit is read: %d %s", code, body)
	cancel()
	select {
	case c := <-done:
		require.Equal(t, 0, c, "stderr: %s", errb.String())
	case <-time.After(60 * time.Second):
		t.Fatal("server did not stop")
	}
}

// TestTritonTraceConfig: qa/L0_trace starts Triton with --trace-config
// triton,file=global_unittest.log --trace-config level=TIMESTAMPS
// --trace-config rate=1; the trace settings then read as Triton's
// (trace_endpoint_test.py check_server_initial_state), and the spans
// taken go to the file, one JSON object each.
func TestTritonTraceConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "global_unittest.log")
	prev := otel.GetTracerProvider() // the server installs its own, process-wide
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	_, get, stop := runTritonStart(t, "--trace-config", "triton,file="+file, "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1")
	code, body := get("/v2/trace/setting")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"trace_file":`+strconv.Quote(file)+`,"trace_level":["TIMESTAMPS"],"trace_rate":"1","trace_count":"-1","log_frequency":"0","trace_mode":"triton"}`, string(body))
	stop()
	spans, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(spans)), "\n")
	require.NotEmpty(t, lines[0], "rate 1 traces every request")
	for _, l := range lines {
		var span struct{ Name string }
		require.NoError(t, json.Unmarshal([]byte(l), &span), l)
		require.NotEmpty(t, span.Name)
	}
}

// Triton's older trace flags, with which qa/L0_http starts Triton
// (--trace-file=global_unittest.log --trace-level=TIMESTAMPS
// --trace-rate=1), are --trace-config entries; a --trace-config entry has
// the last word.
func TestTritonOlderTraceFlags(t *testing.T) {
	var c tritonCompatFlags
	fl := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.register(fl)
	require.NoError(t, fl.Parse([]string{
		"--trace-file=global_unittest.log", "--trace-level=TIMESTAMPS", "--trace-level=TENSORS",
		"--trace-rate=4", "--trace-count=6", "--trace-log-frequency=2", "--trace-config", "rate=5",
	}))
	var f serveFlags
	require.NoError(t, c.apply(fl, &f))
	require.NotNil(t, f.traceConfig)
	require.Equal(t, "global_unittest.log", f.traceConfig.File)
	require.Equal(t, []string{"TIMESTAMPS", "TENSORS"}, f.traceConfig.Level)
	require.Equal(t, uint64(5), f.traceConfig.Rate, "--trace-config rate=5 after --trace-rate=4")
	require.Equal(t, int64(6), *f.traceConfig.Count)
	require.Equal(t, uint64(2), f.traceConfig.LogFrequency)

	var c2 tritonCompatFlags
	fl2 := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c2.register(fl2)
	require.NoError(t, fl2.Parse([]string{"--trace-rate=0"}))
	require.ErrorContains(t, c2.apply(fl2, &serveFlags{}), "rate must be an integer >= 1")

	// Triton's older level names, in any case: qa/L0_batcher's
	// preserve_ordering part starts the server with --trace-level=MIN.
	for level, want := range map[string][]string{
		"MIN": {"TIMESTAMPS"}, "max": {"TIMESTAMPS"}, "on": {"TIMESTAMPS"}, "True": {"TIMESTAMPS"},
		"timestamps": {"TIMESTAMPS"}, "Tensors": {"TENSORS"}, "false": {"OFF"}, "off": {"OFF"},
	} {
		var c3 tritonCompatFlags
		fl3 := pflag.NewFlagSet("t", pflag.ContinueOnError)
		c3.register(fl3)
		require.NoError(t, fl3.Parse([]string{"--trace-file=not_preserve.log", "--trace-level=" + level, "--trace-rate=1"}))
		var f3 serveFlags
		require.NoError(t, c3.apply(fl3, &f3), level)
		require.Equal(t, want, f3.traceConfig.Level, level)
	}
}

func TestParseTraceConfig(t *testing.T) {
	tc, err := parseTraceConfig([]string{"triton,file=bls_trace.log", "level=TIMESTAMPS", "level=TENSORS", "rate=4", "count=6", "log_frequency=2", "mode=triton"})
	require.NoError(t, err)
	require.Equal(t, []string{"TIMESTAMPS", "TENSORS"}, tc.Level)
	require.Equal(t, uint64(4), tc.Rate)
	require.Equal(t, int64(6), *tc.Count)
	require.Equal(t, uint64(2), tc.LogFrequency)
	require.Equal(t, "bls_trace.log", tc.File)
	require.Equal(t, "triton", tc.Mode)
	for arg, want := range map[string]string{
		"level=ALL":   "level must be OFF, TIMESTAMPS or TENSORS",
		"rate=0":      "rate must be an integer >= 1",
		"count=-2":    "count must be an integer >= -1",
		"mode=zipkin": "mode must be triton or opentelemetry",
		"opentelemetry,url=localhost:4318/v1/traces": "use --trace-otlp-endpoint",
		"nope=1": "unknown setting",
		"level":  "want key=value",
	} {
		_, err := parseTraceConfig([]string{arg})
		require.ErrorContains(t, err, want, arg)
	}
}

// runTritonStart starts the model server with an empty repository on free
// loopback ports and the extra flags, and waits until it is ready. It
// returns the ports (HTTP, gRPC, metrics), a GET on the HTTP port, and
// stop, which stops the server, checks it exited 0 and returns its
// standard error.
func runTritonStart(t *testing.T, flags ...string) (p []string, get func(string) (int, []byte), stop func() string) {
	t.Helper()
	ports, bound := portZero(t)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	done := make(chan int, 1)
	var out, errb bytes.Buffer
	args := append(append([]string{"model-server", "--model-repository=" + t.TempDir(), "--address", "127.0.0.1"}, ports...), flags...)
	go func() { done <- Run(ctx, args, &out, &errb) }()
	p = bound()
	get = getter(t, "http://127.0.0.1:"+p[0])
	require.Eventually(t, func() bool { code, _ := get("/v2/health/ready"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	return p, get, func() string {
		cancel()
		select {
		case c := <-done:
			require.Equal(t, 0, c, "stderr: %s", errb.String())
		case <-time.After(60 * time.Second):
			t.Fatal("server did not stop")
		}
		return errb.String()
	}
}
