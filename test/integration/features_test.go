package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// redisServer is a private redis-server on a loopback port, stopped by pid.
type redisServer struct {
	port int
	cmd  *exec.Cmd
}

func startRedis(t *testing.T, port int) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found: install Debian's redis-server (make deps does, as root)")
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisServer{port: port, cmd: cmd}
	t.Cleanup(r.kill)
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, fmt.Sprintf("redis-server on port %d to answer PING", port), func() (bool, string) {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "ping").Output()
		return err == nil && strings.TrimSpace(string(out)) == "PONG", fmt.Sprintf("%q %v", out, err)
	})
	return r
}

func (r *redisServer) kill() {
	if r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	_ = r.cmd.Wait()
}

// featureRepo copies the example definitions (not the data) and points the
// online store at a Redis on port.
func featureRepo(t *testing.T, redisPort int) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(repoDir, "examples/parcel-eta/features")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") || e.Name() == "feature_store.yaml" {
			continue
		}
		mustWrite(t, filepath.Join(dir, e.Name()), readFile(t, filepath.Join("examples/parcel-eta/features", e.Name())))
	}
	mustWrite(t, filepath.Join(dir, "feature_store.yaml"), fmt.Appendf(nil, `project: it_%d
online_store:
  type: redis
  redis_type: standalone
  addrs: ["127.0.0.1:%d"]
  read_timeout: 300ms
  write_timeout: 300ms
  dial_timeout: 300ms
offline_store:
  type: file
`, time.Now().UnixNano(), redisPort))
	return dir
}

func startFeatureServer(t *testing.T, repo string) string {
	t.Helper()
	base, _ := startFeatureServerArgs(t, repo)
	return base
}

// startFeatureServerArgs is startFeatureServer with extra flags (a later
// --address wins; the server is still reached on 127.0.0.1); it also
// returns the process's output.
func startFeatureServerArgs(t *testing.T, repo string, args ...string) (string, *syncBuffer) {
	t.Helper()
	base, logs, _ := startFeatureServerProc(t, repo, args...)
	return base, logs
}

// startFeatureServerProc is startFeatureServerArgs that also returns the
// process (to signal it).
func startFeatureServerProc(t *testing.T, repo string, args ...string) (string, *syncBuffer, *os.Process) {
	t.Helper()
	portsFile := filepath.Join(t.TempDir(), "ports.json")
	logs := &syncBuffer{}
	cmd := exec.Command(binPath, append([]string{"feature-server", "--repo", repo, "--address", "127.0.0.1", "--port", "0", "--ports-file", portsFile, "--log-format", "text"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if strings.Contains(logs.String(), "DATA RACE") {
			t.Errorf("race detected in the feature server:\n%s", logs)
		}
	})
	var base string
	harness.WaitFor(t, 30*time.Second, 20*time.Millisecond, "the feature server healthy", func() (bool, string) {
		select {
		case <-done:
			t.Fatalf("feature server exited during start-up; logs:\n%s", logs)
		default:
		}
		if base == "" {
			ls, err := harness.ReadPortsFile(portsFile)
			if err != nil {
				return false, fmt.Sprintf("%v; logs:\n%s", err, logs)
			}
			base = "http://" + loopback(ls["features"])
		}
		if resp, err := http.Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		return false, "logs:\n" + logs.String()
	})
	return base, logs, cmd.Process
}

// pushRoutes pushes one row per route id through the route_push source.
func pushRoutes(t *testing.T, base string, ids ...int) (int, []byte) {
	t.Helper()
	df := map[string][]any{"route_id": {}, "event_timestamp": {}}
	scalars := []string{"distance_km", "avg_speed_kmh", "traffic_index", "stops", "hour_sin", "hour_cos", "weekday_sin", "weekday_cos"}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, id := range ids {
		df["route_id"] = append(df["route_id"], id)
		df["event_timestamp"] = append(df["event_timestamp"], now)
		for i, s := range scalars {
			df[s] = append(df[s], float64(id*10+i))
		}
		emb := make([]float64, 24)
		emb[0] = float64(id)
		df["embedding"] = append(df["embedding"], emb)
	}
	body, _ := json.Marshal(map[string]any{"push_source_name": "route_push", "df": df, "to": "online"})
	code, _, resp := do(t, http.MethodPost, base+"/push", body, nil)
	return code, resp
}

func readRoutes(t *testing.T, base string, ids ...int) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"features": []string{"route_features:distance_km"}, "entities": map[string]any{"route_id": ids}})
	code, _, resp := do(t, http.MethodPost, base+"/get-online-features", body, nil)
	return code, resp
}

// TestFeatureServerSurvivesRedisRestart kills the feature server's Redis
// mid-test: reads answer 503 online_store_unavailable, and once Redis is
// back the same server pushes and reads again without a restart.
func TestFeatureServerSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	rs := startRedis(t, port)
	base := startFeatureServer(t, featureRepo(t, port))

	if code, resp := pushRoutes(t, base, 1, 2); code != http.StatusOK {
		t.Fatalf("push = %d %s", code, resp)
	}
	code, resp := readRoutes(t, base, 1, 2, 3)
	if code != http.StatusOK {
		t.Fatalf("read = %d %s", code, resp)
	}
	var got struct {
		Metadata struct {
			FeatureNames []string `json:"feature_names"`
		} `json:"metadata"`
		Results []struct {
			Values   []any    `json:"values"`
			Statuses []string `json:"statuses"`
		} `json:"results"`
	}
	if err := json.Unmarshal(resp, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 2 || got.Metadata.FeatureNames[1] != "distance_km" {
		t.Fatalf("response shape: %s", resp)
	}
	if st := got.Results[1].Statuses; st[0] != "PRESENT" || st[1] != "PRESENT" || st[2] != "NOT_FOUND" {
		t.Fatalf("statuses = %v, want PRESENT PRESENT NOT_FOUND (%s)", st, resp)
	}
	if v := got.Results[1].Values[0]; v != float64(10) {
		t.Fatalf("route 1 distance_km = %v, want 10", v)
	}

	rs.kill()
	code, resp = readRoutes(t, base, 1)
	var eb errorBody
	_ = json.Unmarshal(resp, &eb)
	if code != http.StatusServiceUnavailable || eb.Reason != "online_store_unavailable" {
		t.Fatalf("with Redis down: %d %s, want 503 online_store_unavailable", code, resp)
	}
	if code, _, _ := do(t, http.MethodGet, base+"/health", nil, nil); code != http.StatusServiceUnavailable {
		t.Errorf("/health with Redis down = %d, want 503", code)
	}

	startRedis(t, port) // the same port, empty: the server reconnects by itself
	harness.WaitFor(t, 15*time.Second, 100*time.Millisecond, "a push after Redis returned", func() (bool, string) {
		code, resp = pushRoutes(t, base, 1)
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, resp)
	})
	if code, resp = readRoutes(t, base, 1); code != http.StatusOK || !strings.Contains(string(resp), `"PRESENT"`) {
		t.Fatalf("read after recovery = %d %s", code, resp)
	}
}
