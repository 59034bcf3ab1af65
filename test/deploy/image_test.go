package deploy_test

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestImageServesPrediction builds the image with scripts/image.sh (what
// `make image` runs; a no-op when its inputs are unchanged), checks who
// runs in it, and runs the model server from it with buildah run
// --isolation chroot (podman run cannot start containers in this sandbox)
// on the example repository's "simple" ONNX model: ONNX Runtime comes from
// the image, the answer must be the model's.
func TestImageServesPrediction(t *testing.T) {
	for _, tool := range []string{"buildah", "mmdebstrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run scripts/setup.sh as root (it installs mmdebstrap, buildah, podman, uidmap)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	start := time.Now()
	build := exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts/image.sh"), "--variant", "default", "--print-tag")
	build.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	build.Stdout, build.Stderr = &stdout, &stderr
	if err := build.Run(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	tag := strings.TrimSpace(stdout.String())
	t.Logf("scripts/image.sh took %s: %s", time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(stderr.String()))

	// Reproducible: the image's time is SOURCE_DATE_EPOCH (2026-01-01 by
	// default), it has no history (no build times, no commands), and its
	// configured user is not root.
	meta := buildah(ctx, t, "inspect", "--type", "image", "--format", "{{.OCIv1.Created}}|{{len .OCIv1.History}}|{{.OCIv1.Config.User}}", tag)
	if want := "2026-01-01 00:00:00 +0000 UTC|0|65532:65532"; meta != want {
		t.Errorf("image created|history entries|user = %q, want %q", meta, want)
	}

	ctr := buildah(ctx, t, "from", "--quiet", "--pull-never", tag)
	t.Cleanup(func() { _, _ = command(context.Background(), "", nil, "buildah", "rm", ctr) })

	// The image runs as the sluice user, never root, and carries ONNX
	// Runtime. The answers go through a mounted folder: buildah run's
	// standard output has come back empty under load.
	probe := t.TempDir()
	if err := os.Chmod(probe, 0o777); err != nil {
		t.Fatal(err)
	}
	buildah(ctx, t, "run", "--isolation", "chroot", "--volume", probe+":/probe", ctr, "--", "sh", "-c",
		`{ id -u; echo "$SLUICE_ONNXRUNTIME_LIB"; test -r "$SLUICE_ONNXRUNTIME_LIB" && echo readable; } >/probe/out`)
	facts, err := os.ReadFile(filepath.Join(probe, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(facts), "65532\n/usr/local/lib/sluice/libonnxruntime.so.1\nreadable\n"; got != want {
		t.Errorf("in the image: uid, SLUICE_ONNXRUNTIME_LIB and whether it is readable = %q, want %q", got, want)
	}

	// A one-model repository the non-root user can read.
	repo := filepath.Join(t.TempDir(), "models")
	copyTree(t, filepath.Join(repoRoot, "examples/models/simple"), filepath.Join(repo, "simple"))

	httpPort, grpcPort, metricsPort := freePort(t), freePort(t), freePort(t)
	srv := exec.Command("buildah", "run", "--isolation", "chroot", "--volume", repo+":/models:ro", ctr, "--",
		"/usr/local/bin/sluice", "model-server", "--model-repository=/models", "--address=127.0.0.1",
		fmt.Sprintf("--http-port=%d", httpPort), fmt.Sprintf("--grpc-port=%d", grpcPort),
		fmt.Sprintf("--metrics-port=%d", metricsPort), "--log-format=text")
	var logs syncWriter
	srv.Stdout, srv.Stderr = &logs, &logs
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Wait(); close(done) }()
	t.Cleanup(func() {
		// The group: buildah and the server it started.
		_ = syscall.Kill(-srv.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	harness.WaitFor(t, 2*time.Minute, 200*time.Millisecond, "the server in the image ready", func() (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/health/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		select {
		case <-done:
			t.Fatalf("the server in the image exited:\n%s", logs.String())
		default:
		}
		return false, "logs:\n" + logs.String()
	})

	in0, in1 := make([]int32, 16), make([]int32, 16)
	for i := range in0 {
		in0[i], in1[i] = int32(i*3), int32(i)
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{
		{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "data": in0},
		{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "data": in1},
	}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/models/simple/infer", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("infer: %d %s\n%s", resp.StatusCode, raw, logs.String())
	}
	var out struct {
		ModelName string `json:"model_name"`
		Outputs   []struct {
			Name string  `json:"name"`
			Data []int32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	got := map[string][]int32{}
	for _, o := range out.Outputs {
		got[o.Name] = o.Data
	}
	for i := range in0 {
		if len(got["OUTPUT0"]) != 16 || len(got["OUTPUT1"]) != 16 ||
			got["OUTPUT0"][i] != in0[i]+in1[i] || got["OUTPUT1"][i] != in0[i]-in1[i] {
			t.Fatalf("outputs %v, want the sum and difference of %v and %v", got, in0, in1)
		}
	}
}

// buildah runs buildah with args and returns its trimmed standard output.
func buildah(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "buildah", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// copyTree copies a folder of regular files, readable by everyone.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir's own folder is private to root; the image's user must
	// reach the mount.
	for dir := dst; dir != filepath.Dir(filepath.Dir(dst)); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// syncWriter collects a process's output for failure messages.
type syncWriter struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
