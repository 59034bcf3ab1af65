package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The monitoring tests put the Debian monitoring stack in the loop:
// promtool lints every component's /metrics; a real Prometheus (2.42,
// native histograms off) scrapes `sluice serve -c` and evaluates a copy of
// deploy/prometheus/sluice-rules.yml (every group every second, and a
// short "for" and window for the online-store alert); a real Alertmanager
// (0.25) routes with deploy/alertmanager/alertmanager.yml, its receivers
// replaced by a webhook the test serves. The chain's feature store is a
// private Redis the test stops and restarts.

const (
	// monAlert is the alert the test drives: the feature server's online
	// store stops answering, so its views are no longer known to be fresh.
	monAlert = "SluiceFeatureViewNotFresh"
	// monRulesPath and monAlertmanagerPath are the configurations under test.
	monRulesPath        = "deploy/prometheus/sluice-rules.yml"
	monAlertmanagerPath = "deploy/alertmanager/alertmanager.yml"
)

// monNeed returns the path of the first of names on PATH. A missing binary
// fails the test: make deps installs it.
func monNeed(t *testing.T, pkg string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found: install Debian's %s package (make deps does, as root)", strings.Join(names, " or "), pkg)
	t.Fatal(msg)
	return ""
}

// monProc is a process the test started; it is stopped by pid.
type monProc struct {
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// monStart runs bin with args and stops it (SIGTERM, then SIGKILL after
// 10 s) when the test ends.
func monStart(t *testing.T, name, bin string, args ...string) *monProc {
	t.Helper()
	p := &monProc{name: name, logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	return p
}

func (p *monProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of the process's output, for failure messages.
func (p *monProc) tail() string {
	s := p.logs.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return p.name + " logs:\n" + s
}

// waitReady polls url until it answers 200, for at most 30 s.
func (p *monProc) waitReady(t *testing.T, url string) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, p.name+" ready at "+url, func() (bool, string) {
		select {
		case <-p.done:
			t.Fatalf("%s exited during start-up; %s", p.name, p.tail())
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, fmt.Sprintf("%v; %s", err, p.tail())
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d; %s", resp.StatusCode, p.tail())
	})
}

// monGet returns the body of a GET, failing the test unless it is 200.
func monGet(t *testing.T, url string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return b
}

// monSum adds up the values of the series of metric in a text exposition
// that carry every one of labels (name="value"), whatever their other labels.
func monSum(text, metric string, labels ...string) float64 {
	sum := 0.0
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok || slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(","+set+",", ","+l+",") }) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
			sum += f
		}
	}
	return sum
}

// monCheckMetrics lints a /metrics exposition with promtool check metrics,
// which prints nothing and exits 0 when it is clean.
func monCheckMetrics(t *testing.T, promtool, url string) {
	t.Helper()
	body := monGet(t, url)
	if !bytes.Contains(body, []byte("\nsluice_")) {
		t.Fatalf("%s has no sluice_ series:\n%.2000s", url, body)
	}
	cmd := exec.CommandContext(t.Context(), promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(withoutTritonNames(body))
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on %s: %v\n%s", url, err, out)
	}
}

// withoutTritonNames drops the nv_* families from an exposition: the model
// server exports them under Triton's names (--triton-metrics, on by
// default), which break promlint's rules by construction (counters
// without _total, microseconds); their one-by-one check, allowing only
// those findings, is modelrepo's TestTritonMetrics.
func withoutTritonNames(body []byte) []byte {
	var out []byte
	for line := range bytes.Lines(body) {
		if bytes.HasPrefix(line, []byte("nv_")) || bytes.HasPrefix(line, []byte("# HELP nv_")) || bytes.HasPrefix(line, []byte("# TYPE nv_")) {
			continue
		}
		out = append(out, line...)
	}
	return out
}

// TestMonitoringCheckMetrics lints the /metrics of a model server and a
// feature server run on their own, after some traffic (successes and
// failures, so that labelled series exist).
func TestMonitoringCheckMetrics(t *testing.T) {
	t.Parallel()
	promtool := monNeed(t, "prometheus", "promtool")
	t.Run("ModelServer", func(t *testing.T) {
		s := startServer(t, "--model-repository", "examples/models")
		base := "http://" + s.http
		if code, _, resp := do(t, http.MethodPost, base+"/v2/models/simple/infer", readFile(t, "examples/requests/simple.json"), nil); code != http.StatusOK {
			t.Fatalf("infer simple: %d %s", code, resp)
		}
		if code, _, _ := do(t, http.MethodPost, base+"/v2/models/simple/infer", []byte(`{"inputs":[]}`), nil); code != http.StatusBadRequest {
			t.Fatalf("infer simple without inputs: %d, want 400", code)
		}
		monCheckMetrics(t, promtool, "http://"+s.metrics+"/metrics")
	})
	t.Run("FeatureServer", func(t *testing.T) {
		port := freePort(t)
		startRedis(t, port)
		base := startFeatureServer(t, featureRepo(t, port))
		if code, resp := pushRoutes(t, base, 1, 2); code != http.StatusOK {
			t.Fatalf("push: %d %s", code, resp)
		}
		if code, resp := readRoutes(t, base, 1, 3); code != http.StatusOK {
			t.Fatalf("read: %d %s", code, resp)
		}
		monCheckMetrics(t, promtool, base+"/metrics")
	})
}

// monTestRules is the test's copy of the rules: every group evaluated
// every second, and monAlert with a 2 s "for" (three consecutive
// evaluations, as in production) over a 10 s window instead of 2 m.
func monTestRules(t *testing.T) []byte {
	t.Helper()
	var doc struct {
		Groups []map[string]any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readFile(t, monRulesPath), &doc); err != nil {
		t.Fatalf("parse %s: %v", monRulesPath, err)
	}
	found := false
	for _, g := range doc.Groups {
		g["interval"] = "1s"
		rules, _ := g["rules"].([]any)
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			if rule["alert"] != monAlert {
				continue
			}
			expr, _ := rule["expr"].(string)
			short := strings.ReplaceAll(expr, "[2m]", "[10s]")
			if rule["for"] != "2m" {
				t.Fatalf("%s in %s: expected for: 2m to shorten, got for %v and\n%s", monAlert, monRulesPath, rule["for"], expr)
			}
			rule["expr"], rule["for"] = short, "2s"
			found = true
		}
	}
	if !found {
		t.Fatalf("%s defines no alert %s", monRulesPath, monAlert)
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// monAlertmanagerConfig is deploy/alertmanager/alertmanager.yml with its
// routing tree kept (timings shortened to a second) and every receiver
// replaced by a webhook to hook/<receiver name>.
func monAlertmanagerConfig(t *testing.T, hook string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(readFile(t, monAlertmanagerPath), &cfg); err != nil {
		t.Fatalf("parse %s: %v", monAlertmanagerPath, err)
	}
	delete(cfg, "templates") // the webhook does not use them
	var shorten func(r map[string]any)
	shorten = func(r map[string]any) {
		r["group_wait"], r["group_interval"], r["repeat_interval"] = "1s", "1s", "1h"
		children, _ := r["routes"].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				shorten(m)
			}
		}
	}
	route, ok := cfg["route"].(map[string]any)
	if !ok {
		t.Fatalf("%s has no route", monAlertmanagerPath)
	}
	shorten(route)
	receivers, _ := cfg["receivers"].([]any)
	if len(receivers) == 0 {
		t.Fatalf("%s has no receivers", monAlertmanagerPath)
	}
	for i, r := range receivers {
		name, _ := r.(map[string]any)["name"].(string)
		receivers[i] = map[string]any{
			"name":            name,
			"webhook_configs": []any{map[string]any{"url": hook + "/" + name, "send_resolved": true}},
		}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// monNotification is one webhook call from Alertmanager (version 4).
type monNotification struct {
	path     string
	Version  string `json:"version"`
	Receiver string `json:"receiver"`
	Status   string `json:"status"`
	Alerts   []struct {
		Status      string            `json:"status"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"alerts"`
}

// monWebhook records every notification it receives.
type monWebhook struct {
	mu  sync.Mutex // protects got
	got []monNotification
}

func (h *monWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var n monNotification
	if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n.path = r.URL.Path
	h.mu.Lock()
	h.got = append(h.got, n)
	h.mu.Unlock()
}

// wait returns the first notification with status and an alert named
// alertname, waiting at most d.
func (h *monWebhook) wait(t *testing.T, alertname, status string, d time.Duration, logs func() string) monNotification {
	t.Helper()
	var found monNotification
	harness.WaitFor(t, d, 100*time.Millisecond, fmt.Sprintf("a %s notification of %s at the webhook", status, alertname), func() (bool, string) {
		h.mu.Lock()
		got := slices.Clone(h.got)
		h.mu.Unlock()
		for _, n := range got {
			if n.Status != status {
				continue
			}
			for _, a := range n.Alerts {
				if a.Labels["alertname"] == alertname {
					found = n
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("got %+v\n%s", got, logs())
	})
	return found
}

// monProm is the test's Prometheus.
type monProm struct {
	*monProc
	base string // http://host:port
}

// api decodes GET /api/v1/<path>'s data into v.
func (p *monProm) api(t *testing.T, path string, v any) {
	t.Helper()
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(monGet(t, p.base+"/api/v1/"+path), &env); err != nil || env.Status != "success" {
		t.Fatalf("prometheus %s: %v %s %s", path, err, env.Status, env.Error)
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("prometheus %s: %v in %s", path, err, env.Data)
	}
}

// monSample is one element of an instant vector.
type monSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (p *monProm) query(t *testing.T, expr string) []monSample {
	t.Helper()
	var data struct {
		ResultType string      `json:"resultType"`
		Result     []monSample `json:"result"`
	}
	p.api(t, "query?query="+url.QueryEscape(expr), &data)
	return data.Result
}

// waitQuery polls expr until it returns a sample, for at most d.
func (p *monProm) waitQuery(t *testing.T, expr string, d time.Duration) []monSample {
	t.Helper()
	var r []monSample
	harness.WaitFor(t, d, 250*time.Millisecond, "prometheus: a sample of "+expr, func() (bool, string) {
		r = p.query(t, expr)
		return len(r) > 0, p.tail()
	})
	return r
}

// alertState returns monAlert's state in Prometheus (pending, firing) or
// "" when it is not active.
func (p *monProm) alertState(t *testing.T, name string) (string, map[string]string) {
	t.Helper()
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	p.api(t, "alerts", &data)
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name {
			return a.State, a.Labels
		}
	}
	return "", nil
}

// monRuleMetric matches a metric name in a rule expression (not a
// recording rule's level:metric:operations name).
var monRuleMetric = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(sluice_[a-z0-9_]+)`)

// monRuleMetrics lists the metrics the rules' expressions use.
func monRuleMetrics(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readFile(t, monRulesPath), &doc); err != nil {
		t.Fatalf("parse %s: %v", monRulesPath, err)
	}
	var out []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			for _, m := range monRuleMetric.FindAllStringSubmatch(r.Expr, -1) {
				if !slices.Contains(out, m[1]) {
					out = append(out, m[1])
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no metric found in %s", monRulesPath)
	}
	return out
}

// monConditional are metrics the rules use that a healthy chain does not
// export: their series appear with the event an alert is about.
var monConditional = map[string]string{
	"sluice_model_load_failures_total":                     "only after a model load fails",
	"sluice_feature_stale_alerts_total":                    "only after a feature view goes stale",
	"sluice_feature_stream_newest_event_timestamp_seconds": "only where stream aggregators run (sluice features aggregate; TestStreamAggregationsOnlineEqualOffline runs them)",
	"sluice_drift_psi":                                     "drift monitors of serve -c are not registered (internal/gateway/rollout.go)",
	"sluice_tls_certificate_expiry_timestamp_seconds":      "only for listeners served over TLS",
	"sluice_tls_reloads_total":                             "only for listeners served over TLS",
	"sluice_audit_events_total":                            "only after a state-changing call (reload, rollout, load, push)",
	"sluice_cluster_connected":                             "only with a cluster section (TestFleetDrill runs one)",
	"sluice_gateway_fallback_answers_total":                "only after the fallback rule answers a request (drift, or a model that cannot be reached with on_upstream_failure)",
}

// monExampleFallback is the example service's fallback block.
func monExampleFallback(t *testing.T) map[string]any {
	t.Helper()
	var doc struct {
		Gateway struct {
			Services []struct {
				Fallback map[string]any `yaml:"fallback"`
			} `yaml:"services"`
		} `yaml:"gateway"`
	}
	if err := yaml.Unmarshal(readFile(t, "examples/parcel-eta/sluice.yaml"), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Gateway.Services) == 0 || doc.Gateway.Services[0].Fallback == nil {
		t.Fatal("examples/parcel-eta/sluice.yaml: the first service has no fallback")
	}
	return doc.Gateway.Services[0].Fallback
}

// TestMonitoringPrometheusAlerts runs the whole loop: Prometheus scrapes
// the chain and sees its series; the online store (a private Redis) is
// stopped and the online-store alert goes pending, then firing, and
// reaches the webhook through Alertmanager's page route; Redis comes back
// and the alert resolves, in Prometheus and at the webhook.
func TestMonitoringPrometheusAlerts(t *testing.T) {
	// Not parallel: it materializes the example's features into Redis at
	// start, each write bounded by the store's 500 ms timeout.
	promtool := monNeed(t, "prometheus", "promtool")
	monNeed(t, "prometheus", "prometheus") // before the chain starts: a missing package fails at once
	amBin := monNeed(t, "prometheus-alertmanager", "prometheus-alertmanager", "alertmanager")
	begin := time.Now()

	// The webhook behind every Alertmanager receiver.
	hook := &monWebhook{}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)

	// Alertmanager, with the example's routes.
	amDir := t.TempDir()
	amAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	mustWrite(t, filepath.Join(amDir, "alertmanager.yml"), monAlertmanagerConfig(t, hookSrv.URL))
	am := monStart(t, "alertmanager", amBin,
		"--config.file="+filepath.Join(amDir, "alertmanager.yml"),
		"--storage.path="+filepath.Join(amDir, "data"),
		"--web.listen-address="+amAddr,
		"--cluster.listen-address=", // no gossip port
	)
	am.waitReady(t, "http://"+amAddr+"/-/ready")

	// The chain, its features in a private Redis; the example's shadow
	// (all requests), fallback and recording, and a rollout, so that the
	// release-safety series exist.
	redisPort, redisDir := freePort(t), t.TempDir()
	rs := gwStartRedis(t, redisPort, redisDir)
	redisAddr := fmt.Sprintf("127.0.0.1:%d", redisPort)
	base := gwExample(t)
	svc := gwService(base, "parcel-eta", monExampleFallback(t), gwRoute("default", nil, "", 100, 0))
	shadow, _ := svc["shadow"].(map[string]any)
	if shadow == nil {
		t.Fatal("examples/parcel-eta/sluice.yaml: the first service has no shadow block")
	}
	shadow = maps.Clone(shadow)
	shadow["percent"] = 100
	svc["shadow"] = shadow
	svc["rollout"] = map[string]any{
		"stable":    map[string]any{"version": "1"},
		"candidate": map[string]any{"version": "2"},
		"stages":    []any{map[string]any{"name": "all", "min_duration": "1h"}},
		// Never judged here: the outage must not roll it back mid-test.
		"min_requests": 1000000,
	}
	// Online accuracy, so that its series exist: the traffic's order ids
	// are logged, and Series posts outcomes for the first ones.
	// The rollout sends a share to version 2: both declare an offline MAE.
	svc["accuracy"] = accService(map[string]any{"offline": []any{
		map[string]any{"version": "1", "metrics": map[string]any{"mae": 4.2}, "dataset": "test holdout"},
		map[string]any{"version": "2", "metrics": map[string]any{"mae": 4.0}, "dataset": "test holdout"},
	}})
	accDir := t.TempDir()
	gateway := map[string]any{
		"accuracy":     map[string]any{"path": filepath.Join(accDir, "pending.db"), "log": map[string]any{"dir": filepath.Join(accDir, "log")}},
		"drain_period": "100ms",
		"clients": []any{map[string]any{
			"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}",
			// A limit far above the test's traffic, so the quota gauge the
			// alert rules use has a series.
			"rate_limit": map[string]any{"requests_per_second": 100000, "burst": 100000},
		}},
		"anonymous": map[string]any{"allowed": false},
		"services":  []any{svc},
		"recording": map[string]any{"sink": "jsonl", "dir": t.TempDir()},
	}
	c := gwStart(t, gwFeatureRepo(t, gwRedisStore(fmt.Sprintf("mon_%d", redisPort), redisAddr)), gateway, gwKeyEnv...)
	var chainCfg struct {
		ModelServer struct {
			MetricsPort int `yaml:"metrics_port"`
		} `yaml:"model_server"`
	}
	if err := yaml.Unmarshal(c.config, &chainCfg); err != nil || chainCfg.ModelServer.MetricsPort == 0 {
		t.Fatalf("read the chain's metrics port: %v", err)
	}
	ids := c.presentIDs(t)

	// Prometheus: the chain's three metrics ports (each serves its own
	// component's metrics, as deploy/prometheus/prometheus.yml scrapes
	// them), the rules' test copy, the Alertmanager.
	promDir := t.TempDir()
	mustWrite(t, filepath.Join(promDir, "rules.yml"), monTestRules(t))
	promCfg, err := yaml.Marshal(map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files": []string{filepath.Join(promDir, "rules.yml")},
		"alerting": map[string]any{"alertmanagers": []any{
			map[string]any{"static_configs": []any{map[string]any{"targets": []string{amAddr}}}},
		}},
		"scrape_configs": []any{
			map[string]any{"job_name": "sluice-gateway", "static_configs": []any{map[string]any{"targets": []string{c.admin}}}},
			map[string]any{"job_name": "sluice-models", "static_configs": []any{map[string]any{"targets": []string{fmt.Sprintf("127.0.0.1:%d", chainCfg.ModelServer.MetricsPort)}}}},
			map[string]any{"job_name": "sluice-features", "static_configs": []any{map[string]any{"targets": []string{c.features}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	prom := monStartPrometheus(t, promDir, promCfg, "--rules.alert.resend-delay=1s")
	logs := func() string { return prom.tail() + "\n" + am.tail() + "\n" + c.tail() }

	// Traffic for the whole test: one prediction every 50 ms, bounded.
	trafficCtx, stopTraffic := context.WithCancel(t.Context())
	var traffic sync.WaitGroup
	traffic.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := range 4000 {
			body := gwBody(ids.users[i%len(ids.users)], ids.packages[i%len(ids.packages)], ids.routes[i%len(ids.routes)], 30, 0.5)
			body["order_id"] = strconv.Itoa(i)
			_, _ = c.predict(trafficCtx, "parcel-eta", body, gwAuth)
			select {
			case <-trafficCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() {
		stopTraffic()
		traffic.Wait()
	}()

	t.Run("CheckMetrics", func(t *testing.T) {
		// Wait for answers from the model and for a shadow call.
		harness.WaitFor(t, 20*time.Second, 100*time.Millisecond, "an answered and a shadowed request", func() (bool, string) {
			m := string(monGet(t, "http://"+c.admin+"/metrics"))
			ok := monSum(m, "sluice_gateway_requests_total", `code="200"`, `service="parcel-eta"`, `source="model"`)
			shadowed := monSum(m, "sluice_gateway_shadow_requests_total", `result="ok"`, `service="parcel-eta"`)
			return ok > 0 && shadowed > 0, fmt.Sprintf("answered %v, shadowed %v; %s", ok, shadowed, c.tail())
		})
		for _, u := range []string{
			"http://" + c.admin + "/metrics",
			fmt.Sprintf("http://127.0.0.1:%d/metrics", chainCfg.ModelServer.MetricsPort),
			"http://" + c.features + "/metrics",
		} {
			monCheckMetrics(t, promtool, u)
		}
	})

	t.Run("Series", func(t *testing.T) {
		prom.waitQuery(t, `sluice_gateway_requests_total{job="sluice-gateway",service="parcel-eta",code="200"} > 0`, 20*time.Second)
		// Outcomes for the first predictions (order ids 0..19, answered by
		// now): the accuracy series appear once a pair is joined.
		var outs []map[string]any
		for i := range 20 {
			outs = append(outs, map[string]any{"key": strconv.Itoa(i), "values": map[string]float64{"actual_minutes": 40}})
		}
		b, _ := json.Marshal(outs)
		res, err := c.send(t.Context(), http.MethodPost, c.url(c.listen, "/v1/services/parcel-eta/outcomes"), b, gwAuth)
		if err != nil || res.code != http.StatusOK {
			t.Fatalf("POST outcomes: %v %d %s", err, res.code, res.body)
		}
		prom.waitQuery(t, `sluice_accuracy_joined_total{job="sluice-gateway",service="parcel-eta"} > 0`, 20*time.Second)
		// The gap gauge is set as the joined pairs are published: wait for
		// it too rather than race the scrape.
		prom.waitQuery(t, `sluice_accuracy_online_offline_ratio{job="sluice-gateway",service="parcel-eta",metric="mae"}`, 10*time.Second)
		var names []string
		prom.api(t, "label/__name__/values", &names)
		for _, m := range monRuleMetrics(t) {
			if _, ok := monConditional[m]; ok || slices.Contains(names, m) {
				continue
			}
			t.Errorf("Prometheus has no series %s, which %s uses", m, monRulesPath)
		}
		for name, why := range monConditional {
			if slices.Contains(names, name) {
				t.Logf("%s exists although it appears %s", name, why)
			}
		}
		// The latency SLO's threshold is a real bucket bound.
		prom.waitQuery(t, `sluice_gateway_request_duration_seconds_bucket{service="parcel-eta",le="0.25"}`, 5*time.Second)
		// The recording rules turn the real series into SLO ratios.
		prom.waitQuery(t, `service:sluice_gateway_requests:rate5m{service="parcel-eta"} > 0`, 20*time.Second)
		prom.waitQuery(t, `service:sluice_gateway_errors:ratio_rate5m{service="parcel-eta"} >= 0`, 10*time.Second)
		prom.waitQuery(t, `service:sluice_gateway_slow_requests:ratio_rate5m{service="parcel-eta"} >= 0`, 10*time.Second)

		// Every rule of the real file evaluates without error.
		var rules struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		harness.WaitFor(t, 10*time.Second, 250*time.Millisecond, "every rule healthy", func() (bool, string) {
			prom.api(t, "rules", &rules)
			var bad []string
			n := 0
			for _, g := range rules.Groups {
				for _, r := range g.Rules {
					n++
					if r.Health != "ok" {
						bad = append(bad, fmt.Sprintf("%s/%s: %s %s", g.Name, r.Name, r.Health, r.LastError))
					}
				}
			}
			return n > 0 && len(bad) == 0, fmt.Sprintf("%d rules:\n%s", n, strings.Join(bad, "\n"))
		})
	})
	if t.Failed() {
		t.FailNow()
	}

	// Healthy: the online store answers, so the alert is not active.
	if state, _ := prom.alertState(t, monAlert); state != "" {
		t.Fatalf("%s is %s while Redis answers; %s", monAlert, state, logs())
	}

	// Stop the online store (its data saved for the restart).
	if out, err := exec.CommandContext(t.Context(), "redis-cli", "-p", strconv.Itoa(redisPort), "SAVE").CombinedOutput(); err != nil {
		t.Fatalf("redis-cli SAVE: %v %s", err, out)
	}
	rs.kill()
	stopped := time.Now()
	seen := map[string]time.Duration{}
	var labels map[string]string
	harness.WaitFor(t, 40*time.Second, 100*time.Millisecond, monAlert+" firing after Redis stopped", func() (bool, string) {
		state, l := prom.alertState(t, monAlert)
		if _, ok := seen[state]; state != "" && !ok {
			seen[state] = time.Since(stopped)
			labels = l
		}
		return seen["firing"] != 0, fmt.Sprintf("seen %v; %s", seen, logs())
	})
	if _, ok := seen["pending"]; !ok || seen["pending"] > seen["firing"] {
		t.Errorf("%s went %v: want pending before firing", monAlert, seen)
	}
	if labels["severity"] != "page" || labels["view"] == "" {
		t.Errorf("%s labels %v: want severity page and the view", monAlert, labels)
	}
	t.Logf("Redis stopped: %s pending after %v, firing after %v", monAlert, seen["pending"].Round(time.Millisecond), seen["firing"].Round(time.Millisecond))

	// Alertmanager routes the page to the page receiver's webhook.
	n := hook.wait(t, monAlert, "firing", 20*time.Second, logs)
	if n.path != "/sluice-page" || n.Receiver != "sluice-page" || n.Version != "4" {
		t.Errorf("firing notification at %s for receiver %q (version %q), want /sluice-page, sluice-page, 4", n.path, n.Receiver, n.Version)
	}
	for _, a := range n.Alerts {
		if a.Labels["alertname"] == monAlert && (a.Status != "firing" || a.Labels["severity"] != "page" || a.Annotations["runbook_url"] == "") {
			t.Errorf("notified alert %+v: want status firing, severity page and a runbook_url", a)
		}
	}

	// Redis comes back with its data: the alert resolves.
	gwStartRedis(t, redisPort, redisDir)
	took := harness.WaitFor(t, 40*time.Second, 100*time.Millisecond, monAlert+" resolved after Redis came back", func() (bool, string) {
		state, _ := prom.alertState(t, monAlert)
		return state == "", state + "; " + logs()
	})
	t.Logf("Redis back: %s resolved after %v", monAlert, took.Round(time.Millisecond))
	n = hook.wait(t, monAlert, "resolved", 20*time.Second, logs)
	if n.path != "/sluice-page" {
		t.Errorf("resolved notification at %s, want /sluice-page", n.path)
	}
	t.Logf("monitoring loop done in %v", time.Since(begin).Round(time.Millisecond))
}

// monStartPrometheus writes cfg as dir/prometheus.yml, checks it with
// promtool, starts Prometheus on a free loopback port with its store in
// dir and waits until it is ready.
func monStartPrometheus(t *testing.T, dir string, cfg []byte, args ...string) *monProm {
	t.Helper()
	promBin, promtool := monNeed(t, "prometheus", "prometheus"), monNeed(t, "prometheus", "promtool")
	path := filepath.Join(dir, "prometheus.yml")
	mustWrite(t, path, cfg)
	if out, err := exec.CommandContext(t.Context(), promtool, "check", "config", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	prom := &monProm{base: "http://" + addr, monProc: monStart(t, "prometheus", promBin, append([]string{
		"--config.file=" + path,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
	}, args...)...)}
	prom.waitReady(t, prom.base+"/-/ready")
	return prom
}
