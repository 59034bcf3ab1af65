package integration_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/console/consoletest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestConsole runs the parcel-eta demo (examples/parcel-eta/sluice.yaml:
// every example model, the example feature repository with its synthetic
// data materialized at start, the gateway) with `sluice serve -c`, drives
// some traffic, and then loads each console page on the admin port in
// headless Chromium: no console errors, the demo's models, views and
// services shown, live charts drawn. A screenshot of each page goes to
// $SLUICE_ARTIFACTS when set, and to docs/console/ when a page has none
// there yet or SLUICE_UPDATE_SCREENSHOTS=1 (they are committed once, for
// the docs). Finally `sluice status` reads the same admin port.
func TestConsole(t *testing.T) {
	t.Parallel()
	browser := consoletest.NewBrowser(t) // first: without Chromium, fail (CI) or skip before starting anything
	c := conStart(t)
	code, body := conGet(t, c, "http://"+c.admin+"/console/")
	if code != http.StatusOK {
		t.Fatalf("GET /console/ on the admin port: %d %s\n(the console must be mounted on the admin port in internal/cli/chain.go)", code, body)
	}
	conDrive(t, c, 60)
	conWaitCharts(t, c)

	pages := []struct {
		name, path string
		want       []string
		charts     bool
	}{
		{"overview", "/console/", []string{"Overview", "Model versions ready", "No problems found", "Traffic by service", "service parcel-eta · Throughput"}, true},
		{"models", "/console/models", []string{
			"parcel_eta", "simple", "digits", "digits_preprocess", "digits_pipeline", "READY",
			"model parcel_eta · Throughput", "model parcel_eta · Latency",
		}, true},
		{"features", "/console/features", []string{
			"user_stats", "user_embedding", "package_features", "route_features", "fresh",
			"8 keys · ttl 1h", "Online feature reads · Throughput", "view route_features · Hot subset",
		}, true},
		{"services", "/console/services", []string{
			"parcel-eta", "POST /v1/services/parcel-eta:predict", "canary", `x-canary = "true"`,
			"local v1 90 %", "local v2 10 %", "1 % mirrored to version 2", "Feature breaker", "Fallback",
			"service parcel-eta · Latency", "service parcel-eta · Throughput by status", "2xx/s", "4xx/s", "5xx/s",
		}, true},
		{"errors", "/console/errors", []string{"invalid_api_key", "missing_field", "parcel-eta", "By reason", "missing_feature", "Last seen", "failed requests seen since start"}, false},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			got := browser.Visit(t, "http://"+c.admin+p.path)
			got.Check(t, p.path, p.want...)
			if p.charts {
				if got.Charts != "ready" || got.Canvases == 0 {
					t.Errorf("%s: charts %q with %d canvases, want drawn charts", p.path, got.Charts, got.Canvases)
				}
				// Readable axes: neighbouring time labels (at most
				// HH:MM:SS, about 7 px a character) never touch.
				if got.MinTickGap >= 0 && got.MinTickGap < float64(got.MaxTickLabel)*7+8 {
					t.Errorf("%s: time-axis labels of %d characters only %.0f px apart: they overlap", p.path, got.MaxTickLabel, got.MinTickGap)
				}
			}
			if p.name == "features" && !conThousands.MatchString(got.Text) {
				t.Errorf("features: no view shows thousands of stored rows (the example's hold about 2,000):\n%s", got.Text)
			}
			if p.name == "errors" {
				// The group line: service, 404, missing_feature, its count.
				if !regexp.MustCompile(`parcel-eta\s+404\s+missing_feature\s+[1-9][0-9]*\s`).MatchString(got.Text) {
					t.Errorf("errors: no group of missing_feature 404s:\n%s", got.Text)
				}
			}
			conScreenshot(t, "console-"+p.name+".png", got.Screenshot)
		})
	}

	t.Run("status", func(t *testing.T) {
		cmd := exec.Command(binPath, "status", "--admin", "http://"+c.admin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("sluice status: %v\n%s", err, out.String())
		}
		t.Logf("sluice status:\n%s", out.String())
		for _, w := range []string{"HEALTHY", "gateway   ready", "parcel_eta", "simple", "user_stats", "parcel-eta", "canary→v2 100%"} {
			if !strings.Contains(out.String(), w) {
				t.Errorf("sluice status does not show %q:\n%s", w, out.String())
			}
		}
	})
}

// conThousands matches a row count of a thousand or more as the console
// writes it (2,000).
var conThousands = regexp.MustCompile(`\b[1-9][0-9]?[ ,\x{00a0}\x{202f}][0-9]{3}\b`)

// conStart runs examples/parcel-eta/sluice.yaml on free loopback ports,
// with the example feature repository copied (with generated data) and
// every path absolute, and waits until the gateway is ready.
func conStart(t *testing.T) *gwChain {
	t.Helper()
	return conStartExample(t, "examples/parcel-eta/sluice.yaml", "examples/models")
}

// conStartExample is conStart for the example config file (relative to
// the module root) whose model repository is models.
func conStartExample(t *testing.T, file, models string) *gwChain {
	t.Helper()
	return conStartExampleWith(t, file, models, nil, nil)
}

// conStartExampleWith is conStartExample with a model repository that may
// be an object-storage location, changes to the model_server section and
// extra environment variables (NAME=value) for the process.
func conStartExampleWith(t *testing.T, file, models string, msSet map[string]any, env []string) *gwChain {
	t.Helper()
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	port := func(a string) int {
		_, p, _ := strings.Cut(a, ":")
		n, _ := strconv.Atoi(p)
		return n
	}
	c := &gwChain{listen: addr(), admin: addr(), features: addr(), models: addr()}
	var cfg map[string]any
	if err := yaml.Unmarshal(readFile(t, file), &cfg); err != nil {
		t.Fatal(err)
	}
	ms, _ := cfg["model_server"].(map[string]any)
	fs, _ := cfg["feature_server"].(map[string]any)
	gw, _ := cfg["gateway"].(map[string]any)
	if ms == nil || fs == nil || gw == nil {
		t.Fatalf("%s lacks a model_server, feature_server or gateway section", file)
	}
	if strings.Contains(models, "://") {
		ms["model_repository"] = []string{models}
	} else {
		ms["model_repository"] = []string{filepath.Join(repoDir, models)}
	}
	maps.Copy(ms, msSet)
	ms["address"] = "127.0.0.1"
	c.modelsMetrics = addr()
	ms["http_port"], ms["grpc_port"], ms["metrics_port"] = port(c.models), freePort(t), port(c.modelsMetrics)
	ms["backend_config"] = map[string]any{"onnxruntime": map[string]any{"library": ortLib}}
	fs["repo"] = gwFeatureRepo(t, "")
	fs["address"], fs["port"] = "127.0.0.1", port(c.features)
	gw["listen"], gw["admin"], gw["grpc"] = c.listen, c.admin, addr()
	if rec, ok := gw["recording"].(map[string]any); ok {
		rec["dir"] = filepath.Join(t.TempDir(), "recordings")
	}
	var err error
	if c.config, err = yaml.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mustWrite(t, path, c.config)

	c.server = &server{http: c.listen, logs: &syncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(binPath, "serve", "-c", path, "--log-format", "text")
	c.cmd.Dir = t.TempDir()
	c.cmd.Env = append(append(os.Environ(), "SLUICE_DEMO_API_KEY=demo-key"), env...)
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	c.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.waitErr = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.stop(t)
		c.client.CloseIdleConnections()
	})
	harness.WaitFor(t, 90*time.Second, 50*time.Millisecond, "gateway ready", func() (bool, string) {
		select {
		case <-c.done:
			t.Fatalf("sluice serve -c exited during start-up (%v); config:\n%s\nlogs:\n%s", c.waitErr, c.config, c.tail())
		default:
		}
		res, err := c.get(t.Context(), "http://"+c.listen+"/ready")
		if err != nil {
			return false, fmt.Sprintf("%v; logs:\n%s", err, c.tail())
		}
		return res.code == http.StatusOK, fmt.Sprintf("%d; logs:\n%s", res.code, c.tail())
	})
	return c
}

// conGet GETs url and returns the status and body.
func conGet(t *testing.T, c *gwChain, url string) (int, string) {
	t.Helper()
	res, err := c.get(t.Context(), url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res.code, string(res.body)
}

// conHot are hot route ids of the example (route_features' hot subset)
// and a cold one, so the hot/cold chart has both.
var conHot = []int{1, 2, 3, 5, 8, 29}

// conDrive sends n good predictions with the demo key (every fifth to the
// canary), and two that fail: a wrong key and a missing field.
func conDrive(t *testing.T, c *gwChain, n int) {
	t.Helper()
	auth := map[string]string{"Authorization": "Bearer demo-key"}
	canary := map[string]string{"Authorization": "Bearer demo-key", "x-canary": "true"}
	for i := range n {
		body := map[string]any{"user_id": 1 + i%40, "package_id": 62, "route_id": conHot[i%len(conHot)], "base_eta": 35, "route_delay_factor": 0.4}
		hdr := auth
		if i%5 == 0 {
			hdr = canary
		}
		if res := c.mustPredict(t, "parcel-eta", body, hdr); res.code != http.StatusOK {
			t.Fatalf("prediction %d: %d %s", i, res.code, res.body)
		}
	}
	good := map[string]any{"user_id": 7, "package_id": 62, "route_id": 29, "base_eta": 35}
	if res := c.mustPredict(t, "parcel-eta", good, map[string]string{"Authorization": "Bearer wrong"}); res.code != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d %s", res.code, res.body)
	}
	if res := c.mustPredict(t, "parcel-eta", map[string]any{"user_id": 7, "package_id": 62, "route_id": 29}, auth); res.code != http.StatusBadRequest {
		t.Fatalf("missing base_eta: %d %s", res.code, res.body)
	}
	// An entity without features: a 404 missing_feature, which the
	// throughput chart's 4xx line and the grouped errors must show.
	for range 3 {
		if res := c.mustPredict(t, "parcel-eta", map[string]any{"user_id": 7, "package_id": 987654321, "route_id": 29, "base_eta": 35}, auth); res.code != http.StatusNotFound {
			t.Fatalf("unknown package: %d %s", res.code, res.body)
		}
	}
}

// conWaitCharts drives traffic until the console's series show the
// model's and the service's throughput, so the charts have lines.
func conWaitCharts(t *testing.T, c *gwChain) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, 500*time.Millisecond, "the console's series showing parcel_eta's throughput", func() (bool, string) {
		if conSeriesHas(t, c, "model", "model/parcel_eta") && conSeriesHas(t, c, "service", "service/parcel-eta") {
			return true, ""
		}
		conDrive(t, c, 10)
		return false, "logs:\n" + c.tail()
	})
}

// conSeriesHas reports whether series id of kind has a positive rps among
// at least three samples.
func conSeriesHas(t *testing.T, c *gwChain, kind, id string) bool {
	t.Helper()
	code, body := conGet(t, c, "http://"+c.admin+"/console/api/series?kind="+kind)
	if code != http.StatusOK {
		t.Fatalf("GET /console/api/series: %d %s", code, body)
	}
	var s struct {
		T      []int64                          `json:"t"`
		Series map[string]map[string][]*float64 `json:"series"`
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("series: %v in %s", err, body)
	}
	if len(s.T) < 3 {
		return false // a few samples, so the charts draw lines
	}
	for _, v := range s.Series[id]["rps"] {
		if v != nil && *v > 0 {
			return true
		}
	}
	return false
}

// conScreenshot saves a console page's screenshot (docScreenshot).
func conScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	docScreenshot(t, "console", name, png)
}

// docScreenshot saves a screenshot to $SLUICE_ARTIFACTS/sub, and to
// docs/sub/ when it has none of that name or SLUICE_UPDATE_SCREENSHOTS=1.
func docScreenshot(t *testing.T, sub, name string, png []byte) {
	t.Helper()
	if dir := os.Getenv("SLUICE_ARTIFACTS"); dir != "" {
		mustWrite(t, filepath.Join(dir, sub, name), png)
	}
	doc := filepath.Join(repoDir, "docs", sub, name)
	if _, err := os.Stat(doc); err == nil && os.Getenv("SLUICE_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	mustWrite(t, doc, png)
	t.Logf("wrote %s", doc)
}
