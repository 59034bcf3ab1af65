// Package integration_test drives the real sluice binary, built once per
// run, against the example model repository with the real ONNX Runtime.
//
// Every test starts its own processes on free loopback ports with its own
// temporary folders, and calls t.Parallel: most of a test's time is spent
// waiting on processes, so running them side by side shortens the tier.
// A test that bounds a latency, a timeout or an exit time, measures the
// server, or needs a shared service to itself does not, and says why on
// its first line: Go runs it alone, before the parallel ones.
package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/testutil/tier"
)

var (
	binPath string // the sluice binary built by TestMain
	repoDir string // the module root
	ortLib  string // the ONNX Runtime library
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if tier.LeftOut("integration") {
		return 0
	}
	env, cleanup, err := harness.Setup("it")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer cleanup()
	repoDir, ortLib = env.RepoDir, env.ORTLib
	binPath = filepath.Join(env.Dir, "sluice")
	if err := env.Build(binPath, "./cmd/sluice", "-race"); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// The GCS emulator (objstoretest runs fake-gcs-server in-process)
		// pulls in pubsub, whose opencensus dependency starts a worker at
		// init that lives as long as the process.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// server is one running sluice process.
type server struct {
	cmd                 *exec.Cmd
	http, grpc, metrics string // host:port
	logs                *syncBuffer
	startup             time.Duration
	done                chan struct{}
	waitErr             error
}

type syncBuffer = harness.SyncBuffer

func freePort(t *testing.T) int {
	t.Helper()
	return harness.FreePort(t)
}

// startServer runs `sluice serve` with args on free loopback ports and waits
// until the HTTP endpoint answers live. The process is stopped with SIGTERM
// when the test ends.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startServerCmd(t, "serve", args...)
}

// startServerCmd is startServer with another subcommand of the same flags
// ("model-server"). A later --address in args wins; the server is still
// reached on 127.0.0.1.
func startServerCmd(t *testing.T, sub string, args ...string) *server {
	t.Helper()
	return startServerEnv(t, nil, sub, args...)
}

// startServerEnv is startServerCmd with extra environment variables
// (NAME=value) for the sluice process. Its listeners ask for port 0 and
// the addresses come from --ports-file, so no other process can take a
// port between choosing and binding it.
func startServerEnv(t *testing.T, env []string, sub string, args ...string) *server {
	t.Helper()
	portsFile := filepath.Join(t.TempDir(), "ports.json")
	all := append([]string{
		sub, "--address", "127.0.0.1",
		"--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--ports-file", portsFile,
		"--backend-config", "onnxruntime,library=" + ortLib, "--log-format", "text",
	}, args...)
	s := &server{logs: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(binPath, all...)
	s.cmd.Dir = repoDir
	if env != nil {
		s.cmd.Env = append(os.Environ(), env...)
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	begin := time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.stop(t) })
	harness.WaitFor(t, 30*time.Second, 20*time.Millisecond, "sluice live", func() (bool, string) {
		select {
		case <-s.done:
			t.Fatalf("sluice exited during start-up (%v); logs:\n%s", s.waitErr, s.logs)
		default:
		}
		if s.http == "" {
			ls, err := harness.ReadPortsFile(portsFile)
			if err != nil {
				return false, fmt.Sprintf("%v; logs:\n%s", err, s.logs)
			}
			s.http, s.grpc, s.metrics = loopback(ls["models_http"]), loopback(ls["models_grpc"]), loopback(ls["models_metrics"])
		}
		resp, err := http.Get("http://" + s.http + "/v2/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		return false, "logs:\n" + s.logs.String()
	})
	s.startup = time.Since(begin)
	return s
}

// loopback is a bound address's port on 127.0.0.1, where the test reaches
// a listener whatever --address it bound ("" stays "").
func loopback(bound string) string {
	if _, port, err := net.SplitHostPort(bound); err == nil {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return bound
}

func (s *server) stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("sluice did not exit within 20s of SIGTERM; logs:\n%s", s.logs)
	}
	if strings.Contains(s.logs.String(), "DATA RACE") {
		t.Errorf("race detected in sluice; logs:\n%s", s.logs)
	}
}

// do sends one HTTP request and returns status, headers and body.
func do(t *testing.T, method, url string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v2Response is the KServe v2 JSON response.
type v2Response struct {
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	Outputs      []struct {
		Name       string         `json:"name"`
		Datatype   string         `json:"datatype"`
		Shape      []int64        `json:"shape"`
		Data       []float64      `json:"data"`
		Parameters map[string]any `json:"parameters"`
	} `json:"outputs"`
}

func decodeV2(t *testing.T, b []byte) v2Response {
	t.Helper()
	var r v2Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decode response %q: %v", b, err)
	}
	return r
}

// errorBody is Sluice's error answer.
type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}
