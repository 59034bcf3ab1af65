package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTritonStartFlags: a tritonserver start command with Triton's
// metrics and logging flags runs: --log-verbose 1 is debug logging (what
// Triton's logging extension then reports as log_verbose_level 1),
// --allow-metrics=false leaves no metrics listener, and the flags that do
// nothing say so.
func TestTritonStartFlags(t *testing.T) {
	p := freePorts(t, 3)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	var out, errb bytes.Buffer
	go func() {
		done <- Run(ctx, []string{"model-server", "--model-repository=" + t.TempDir(), "--address", "127.0.0.1",
			"--allow-metrics=false", "--allow-gpu-metrics=true", "--allow-cpu-metrics=true", "--log-verbose=1", "--metrics-interval-ms=1000",
			"--http-port", p[0], "--grpc-port", p[1], "--metrics-port", p[2]}, &out, &errb)
	}()
	get := getter(t, "http://127.0.0.1:"+p[0])
	require.Eventually(t, func() bool { code, _ := get("/v2/health/ready"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	code, body := get("/v2/logging")
	require.Equal(t, http.StatusOK, code)
	var logging struct {
		Verbose uint32 `json:"log_verbose_level"`
	}
	require.NoError(t, json.Unmarshal(body, &logging))
	require.Equal(t, uint32(1), logging.Verbose, "--log-verbose 1 is debug logging: %s", body)
	var d net.Dialer
	if c, err := d.DialContext(t.Context(), "tcp", "127.0.0.1:"+p[2]); err == nil {
		_ = c.Close()
		t.Fatal("--allow-metrics=false still listens on the metrics port")
	}
	cancel()
	select {
	case c := <-done:
		require.Equal(t, 0, c, "stderr: %s", errb.String())
	case <-time.After(60 * time.Second):
		t.Fatal("server did not stop")
	}
	for _, want := range []string{
		"--allow-gpu-metrics does nothing",
		"--metrics-interval-ms changes nothing",
		"--allow-metrics=false: no metrics listener",
	} {
		require.Contains(t, errb.String(), want)
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
