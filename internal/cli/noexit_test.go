package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freePorts returns n TCP ports that were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var ports []string
	var lns []net.Listener
	for range n {
		var lc net.ListenConfig
		ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		ports = append(ports, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	for _, ln := range lns {
		require.NoError(t, ln.Close())
	}
	return ports
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
		p := freePorts(t, 3)
		var out, errb bytes.Buffer
		code := Run(t.Context(), []string{
			"model-server", "--model-repository", missing, "--address", "127.0.0.1",
			"--http-port", p[0], "--grpc-port", p[1], "--metrics-port", p[2],
		}, &out, &errb)
		require.Equal(t, 1, code)
		require.Contains(t, errb.String(), "read model repository")
	})
	t.Run("exit-on-error=false: up, not live, not ready", func(t *testing.T) {
		p := freePorts(t, 3)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int)
		var out, errb bytes.Buffer
		go func() {
			done <- Run(ctx, []string{
				"model-server", "--model-repository", missing, "--model-repository", t.TempDir(),
				"--exit-on-error=false", "--strict-readiness=false", "--address", "127.0.0.1", "--server-name", "triton",
				"--http-port", p[0], "--grpc-port", p[1], "--metrics-port", p[2],
			}, &out, &errb)
		}()
		get := getter(t, "http://127.0.0.1:"+p[0])
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
