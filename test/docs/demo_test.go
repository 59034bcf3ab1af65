package docs_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestDemoTwoAtOnce runs scripts/demo.sh twice at the same time, each on
// its own set of SLUICE_* ports (every listener moved), and checks that
// both serve: 300 requests with random example ids through each gateway
// answer at least 99 % 200 with source "model" (the generated data is
// fresh for every id), the commands the script prints paste back into a
// shell and work, and the startup banner's curl carries the API key.
func TestDemoTwoAtOnce(t *testing.T) {
	a, b := startDemo(t), startDemo(t)
	for _, d := range []*demo{a, b} {
		t.Run("gateway-"+strconv.Itoa(d.ports["SLUICE_GATEWAY_PORT"]), func(t *testing.T) {
			d.checkRandomIDs(t, 300)
			d.checkPrinted(t)
		})
	}
}

// demo is one running scripts/demo.sh.
type demo struct {
	cmd   *exec.Cmd
	ports map[string]int
	out   *syncBuffer
	done  chan struct{}
}

var demoPortVars = []string{
	"SLUICE_GATEWAY_PORT", "SLUICE_GATEWAY_GRPC_PORT", "SLUICE_ADMIN_PORT",
	"SLUICE_HTTP_PORT", "SLUICE_GRPC_PORT", "SLUICE_METRICS_PORT", "SLUICE_FEATURE_PORT",
}

func startDemo(t *testing.T) *demo {
	t.Helper()
	d := &demo{ports: map[string]int{}, out: &syncBuffer{}, done: make(chan struct{})}
	env := append(os.Environ(), "SLUICE_BIN="+binPath, "SLUICE_GEN="+genPath, "SLUICE_DEMO_DIR="+t.TempDir(),
		"SLUICE_DEMO_API_KEY=demo-key", "SLUICE_ONNXRUNTIME_LIB="+ortLib)
	for _, v := range demoPortVars {
		d.ports[v] = freePort(t)
		env = append(env, fmt.Sprintf("%s=%d", v, d.ports[v]))
	}
	d.cmd = exec.Command(filepath.Join(repoDir, "scripts", "demo.sh"))
	d.cmd.Dir = repoDir
	d.cmd.Env = env
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		// demo.sh's trap stops sluice on SIGTERM; the group kill is the
		// back-stop for a script stuck elsewhere.
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	})
	harness.WaitFor(t, 4*time.Minute, 100*time.Millisecond, "demo.sh ready", func() (bool, string) {
		select {
		case <-d.done:
			t.Fatalf("demo.sh exited:\n%s", d.out.String())
		default:
		}
		return strings.Contains(d.out.String(), "Press Ctrl-C to stop."), "output:\n" + d.out.String()
	})
	return d
}

// checkRandomIDs sends n predictions with random ids from the example data
// (users and packages 1–2000, routes 1–500), paced under the demo client's
// rate limit.
func (d *demo) checkRandomIDs(t *testing.T, n int) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/services/parcel-eta:predict", d.ports["SLUICE_GATEWAY_PORT"])
	client := &http.Client{Timeout: 10 * time.Second}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 17))
	ok := 0
	var failures []string
	tick := time.NewTicker(15 * time.Millisecond) // ≤ 67/s: the demo client's limit is 100/s
	defer tick.Stop()
	for range n {
		<-tick.C
		body := fmt.Sprintf(`{"user_id": %d, "package_id": %d, "route_id": %d, "base_eta": 35, "route_delay_factor": 0.4}`,
			1+rng.IntN(2000), 1+rng.IntN(2000), 1+rng.IntN(500))
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer demo-key")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var out struct {
			Source string `json:"source"`
		}
		if res.StatusCode == http.StatusOK && json.Unmarshal(b, &out) == nil && out.Source == "model" {
			ok++
		} else if len(failures) < 5 {
			failures = append(failures, fmt.Sprintf("%s → %d %s", body, res.StatusCode, b))
		}
	}
	t.Logf("%d of %d random-id predictions answered 200 with source model", ok, n)
	if ok*100 < n*99 {
		t.Errorf("%d of %d random-id predictions answered 200 with source model, want ≥ 99 %%; first failures:\n%s",
			ok, n, strings.Join(failures, "\n"))
	}
}

// checkPrinted pastes the first command demo.sh printed ("$ curl ...")
// and the startup banner's curl into bash and checks both predict.
func (d *demo) checkPrinted(t *testing.T) {
	t.Helper()
	var script, banner string
	sc := bufio.NewScanner(strings.NewReader(d.out.String()))
	for sc.Scan() {
		line := sc.Text()
		if script == "" && strings.HasPrefix(line, "$ curl ") && strings.Contains(line, ":predict") {
			script = strings.TrimPrefix(line, "$ ")
		}
		if banner == "" && strings.HasPrefix(strings.TrimSpace(line), "curl ") && strings.Contains(line, ":predict") {
			banner = strings.TrimSpace(line)
		}
	}
	if script == "" || banner == "" {
		t.Fatalf("demo.sh printed no pasteable curl (script %q, banner %q):\n%s", script, banner, d.out.String())
	}
	if !strings.Contains(banner, "Authorization: Bearer") {
		t.Errorf("the banner's curl has no API key header: %s", banner)
	}
	var wg sync.WaitGroup
	for _, line := range []string{script, banner} {
		wg.Go(func() {
			cmd := exec.Command("bash", "-c", line)
			cmd.Env = append(os.Environ(), "SLUICE_DEMO_API_KEY=demo-key")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), `"source":"model"`) {
				t.Errorf("pasted %s: %v\n%s", line, err, out)
			}
		})
	}
	wg.Wait()
}
