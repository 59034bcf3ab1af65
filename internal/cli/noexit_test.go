package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// portZero are model-server flags that let the system pick the three
// ports; bound waits until the server has written them to its ports file
// and returns them (HTTP, gRPC, metrics; "" for a listener it does not
// have).
func portZero(t *testing.T) (flags []string, bound func() []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ports.json")
	flags = []string{"--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--ports-file", path}
	return flags, func() []string {
		t.Helper()
		var ports []string
		harness.WaitFor(t, 30*time.Second, 10*time.Millisecond, "the ports file", func() (bool, string) {
			ls, err := harness.ReadPortsFile(path)
			if err != nil {
				return false, err.Error()
			}
			ports = ports[:0]
			for _, name := range []string{"models_http", "models_grpc", "models_metrics"} {
				_, port, _ := net.SplitHostPort(ls[name])
				ports = append(ports, port)
			}
			return true, ""
		})
		return ports
	}
}

// getter returns a GET of a path under base: the status and body, or 0
// when nothing answers.
func getter(t *testing.T, base string) func(path string) (int, []byte) {
	t.Helper()
	return func(path string) (int, []byte) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
}

// TestModelServerStaysUpWhenRepositoryFails is modelled on
// qa/L0_lifecycle/lifecycle_test.py test_parse_error_noexit: with
// --exit-on-error=false and a model repository that does not exist, the
// server keeps its endpoints, is neither live nor ready, and answers the
// server metadata. Without the flag it exits, as before.
func TestModelServerStaysUpWhenRepositoryFails(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "xyzx")
	t.Run("exit-on-error not given: exits", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Run(t.Context(), []string{
			"model-server", "--model-repository", missing, "--address", "127.0.0.1",
			"--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
		}, &out, &errb)
		require.Equal(t, 1, code)
		require.Contains(t, errb.String(), "read model repository")
	})
	t.Run("exit-on-error=false: up, not live, not ready", func(t *testing.T) {
		ports, bound := portZero(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int)
		var out, errb bytes.Buffer
		go func() {
			done <- Run(ctx, append([]string{
				"model-server", "--model-repository", missing, "--model-repository", t.TempDir(),
				"--exit-on-error=false", "--strict-readiness=false", "--address", "127.0.0.1", "--server-name", "triton",
			}, ports...), &out, &errb)
		}()
		get := getter(t, "http://127.0.0.1:"+bound()[0])
		require.Eventually(t, func() bool { code, _ := get("/v2"); return code == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
		_, body := get("/v2")
		var md struct{ Name string }
		require.NoError(t, json.Unmarshal(body, &md))
		require.Equal(t, "triton", md.Name)
		code, _ := get("/v2/health/live")
		require.NotEqual(t, http.StatusOK, code, "not live")
		code, _ = get("/v2/health/ready")
		require.NotEqual(t, http.StatusOK, code, "not ready, even with --strict-readiness=false")
		cancel()
		select {
		case c := <-done:
			require.Equal(t, 0, c, "stderr: %s", errb.String())
		case <-time.After(30 * time.Second):
			t.Fatal("server did not stop")
		}
		require.Contains(t, errb.String(), "model server failed to initialize")
	})
}
