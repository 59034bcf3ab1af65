package integration_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestRefusedRetypeNeverGoesLive is issue 22 item 3 against a real
// feature server: `features apply` refuses a retype of
// route_features:distance_km (Float32 → Int64), the file stays edited, the
// server gets a SIGHUP and polls the files every second. Before, the
// reload served the retype and the stored values read NOT_FOUND (fed to
// the model as zeros). Now the applied registry keeps serving: the value
// reads PRESENT and unchanged through the SIGHUP and the polls, and the
// refusal is in the log, the metric and `features plan`.
//
// The server polls every second (--registry-poll-secs 1), so the window
// below (SIGHUP plus 8 s: eight polls of unchanged files after the
// refused one) covers what the 30 s covered with its 10 s polls.
func TestRefusedRetypeNeverGoesLive(t *testing.T) {
	t.Parallel()
	rd := startRedis(t, freePort(t))
	repo := featureRepo(t, rd.port)
	sluice := func(args ...string) (int, string) {
		cmd := exec.Command(binPath, args...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	if code, out := sluice("features", "apply", "--repo", repo); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	base, logs, proc := startFeatureServerProc(t, repo, "--registry-poll-secs", "1")
	if code, body := pushRoutes(t, base, 7); code != http.StatusOK {
		t.Fatalf("push: %d %s", code, body)
	}
	read := func() (any, string) {
		t.Helper()
		code, body := readRoutes(t, base, 7)
		if code != http.StatusOK {
			t.Fatalf("read: %d %s", code, body)
		}
		var doc struct {
			Results []struct {
				Values   []any    `json:"values"`
				Statuses []string `json:"statuses"`
			} `json:"results"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Results[1].Values[0], doc.Results[1].Statuses[0]
	}
	want, st := read()
	if st != "PRESENT" || want != 70.0 {
		t.Fatalf("before: distance_km = %v %s, want 70 PRESENT", want, st)
	}

	// The retype: apply refuses it, the file keeps it.
	views := filepath.Join(repo, "feature_views.yaml")
	b, err := os.ReadFile(views)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), "{name: distance_km, dtype: Float32}", "{name: distance_km, dtype: Int64}", 1)
	if edited == string(b) {
		t.Fatal("feature_views.yaml has no distance_km Float32 to retype")
	}
	mustWrite(t, views, []byte(edited))
	code, out := sluice("features", "apply", "--repo", repo)
	if code == 0 || !strings.Contains(out, "apply refused") || !strings.Contains(out, "registry not written") {
		t.Fatalf("apply of a retype: exit %d\n%s", code, out)
	}
	if code, out := sluice("features", "plan", "--repo", repo); code != 0 || !strings.Contains(out, "Refused: apply refuses the type change of route_features:distance_km Float32 → Int64") || !strings.Contains(out, "Not served") {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}

	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Wait for the refusal to be reported (SIGHUP and the poll).
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "the refusal logged", func() (bool, string) {
		l := logs.String()
		return strings.Contains(l, "definition files differ from the applied registry"), "logs:\n" + l
	})
	end := time.Now().Add(8 * time.Second)
	reads := 0
	for time.Now().Before(end) {
		got, st := read()
		if st != "PRESENT" || got != want {
			t.Fatalf("after %d reads: distance_km = %v %s, want %v PRESENT: the refused retype went live; logs:\n%s", reads, got, st, want, logs)
		}
		reads++
		time.Sleep(100 * time.Millisecond)
	}
	_, _, metrics := do(t, http.MethodGet, base+"/metrics", nil, nil)
	for _, line := range []string{`sluice_feature_registry_reloads_total{result="refused"}`, "sluice_feature_registry_unserved_changes 1"} {
		if !strings.Contains(string(metrics), line) {
			t.Fatalf("metrics lack %s", line)
		}
	}
	if strings.Contains(string(metrics), `sluice_feature_registry_reloads_total{result="ok"}`) {
		t.Fatalf("a reload went through:\n%s", metrics)
	}
	t.Logf("%d reads over 8 s after the SIGHUP: distance_km stayed %v PRESENT", reads, want)
}
