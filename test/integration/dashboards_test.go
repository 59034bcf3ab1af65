package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// dashChain starts a chain with the example's shadow, fallback and
// recording (as the demo runs it) and returns it with the model server's
// metrics address.
func dashChain(t *testing.T) (*gwChain, string) {
	t.Helper()
	base := gwExample(t)
	svc := gwService(base, "parcel-eta", monExampleFallback(t), gwRoute("default", nil, "", 100, 0))
	shadow, _ := svc["shadow"].(map[string]any)
	if shadow == nil {
		t.Fatal("examples/parcel-eta/sluice.yaml: the first service has no shadow block")
	}
	shadow = maps.Clone(shadow)
	shadow["percent"] = 100
	svc["shadow"] = shadow
	gateway := map[string]any{
		"drain_period": "100ms",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     []any{svc},
		"recording":    map[string]any{"sink": "jsonl", "dir": t.TempDir()},
	}
	c := gwStart(t, gwFeatureRepo(t, ""), gateway, gwKeyEnv...)
	return c, c.metricsAddr(t)
}

// dashFamilies returns the metric family names of a /metrics exposition.
func dashFamilies(text string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(text, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			out[strings.Fields(name)[0]] = true
		}
	}
	return out
}

// TestChainMetricsPorts: each port of `serve -c` serves its own
// component's metrics, so scraping all three counts nothing twice, and
// the banner names all three.
func TestChainMetricsPorts(t *testing.T) {
	t.Parallel()
	c, modelsMetrics := dashChain(t)
	ids := c.presentIDs(t)
	if res, err := c.predict(t.Context(), "parcel-eta", gwBody(ids.users[0], ids.packages[0], ids.routes[0], 30, 0.5), gwAuth); err != nil || res.code != http.StatusOK {
		t.Fatalf("predict: %v %d %s", err, res.code, res.body)
	}
	ports := map[string]string{
		"gateway admin":  "http://" + c.admin + "/metrics",
		"model server":   "http://" + modelsMetrics + "/metrics",
		"feature server": "http://" + c.features + "/metrics",
	}
	fams := map[string]map[string]bool{}
	for name, u := range ports {
		fams[name] = dashFamilies(string(monGet(t, u)))
	}
	want := map[string]string{
		"gateway admin":  "sluice_gateway_requests_total",
		"model server":   "sluice_model_inference_requests_total",
		"feature server": "sluice_feature_server_requests_total",
	}
	for port, fam := range want {
		if !fams[port][fam] {
			t.Errorf("the %s's /metrics lacks %s", port, fam)
		}
	}
	if !fams["gateway admin"]["process_resident_memory_bytes"] {
		t.Error("the gateway admin port lacks the process's own series (process_*)")
	}
	seen := map[string]string{}
	for _, port := range []string{"gateway admin", "model server", "feature server"} {
		for f := range fams[port] {
			if strings.HasPrefix(f, "promhttp_metric_handler_") {
				continue // each /metrics handler counts its own errors
			}
			if other, ok := seen[f]; ok {
				t.Errorf("%s is served by the %s and the %s: a Prometheus scraping both counts it twice", f, other, port)
			}
			seen[f] = port
		}
	}
	// The console's Feature views show what the online store holds (the
	// example's views hold hundreds to thousands of rows), not what the
	// last incremental run wrote (often 0).
	var views struct {
		Views []struct {
			Name         string `json:"name"`
			Online       bool   `json:"online"`
			Materialized bool   `json:"materialized"`
			StoredRows   int64  `json:"stored_rows"`
		} `json:"views"`
	}
	if err := json.Unmarshal(monGet(t, "http://"+c.admin+"/console/api/features"), &views); err != nil {
		t.Fatal(err)
	}
	most := int64(0)
	for _, v := range views.Views {
		if v.Online && v.Materialized && v.StoredRows <= 0 {
			t.Errorf("console: view %s is materialized but shows %d stored rows", v.Name, v.StoredRows)
		}
		most = max(most, v.StoredRows)
	}
	if most < 1000 {
		t.Errorf("console: the largest view shows %d stored rows; the example's hold about 2,000", most)
	}
	banner := c.logs.String()
	for _, addr := range []string{c.admin, modelsMetrics, c.features} {
		if !strings.Contains(banner, addr+"/metrics") {
			t.Errorf("the banner does not advertise %s/metrics:\n%s", addr, banner)
		}
	}
}

// dashVar matches a Grafana variable reference.
var dashVar = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\$(\w+)`)

// dashTarget is one panel query of a dashboard.
type dashTarget struct {
	where, expr string
}

// dashTargets lists every panel query of the dashboards in
// deploy/grafana/dashboards, rows' panels included.
func dashTargets(t *testing.T) []dashTarget {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoDir, "deploy/grafana/dashboards/*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	type panel struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var out []dashTarget
	var walk func(file string, raws []json.RawMessage)
	walk = func(file string, raws []json.RawMessage) {
		for _, raw := range raws {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					out = append(out, dashTarget{where: fmt.Sprintf("%s panel %d %q target %s", file, p.ID, p.Title, tg.RefID), expr: tg.Expr})
				}
			}
			walk(file, p.Panels)
		}
	}
	for _, f := range files {
		var d struct {
			Panels []json.RawMessage `json:"panels"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		walk(filepath.Base(f), d.Panels)
	}
	return out
}

// dashElsewhere are dashboards whose panels need a feature the demo does
// not configure, checked by their own tests.
var dashElsewhere = map[string]string{
	"accuracy.json": "online accuracy needs outcomes posted to the gateway (gateway.accuracy)",
}

// TestDashboardsReturnData runs the demo's kind of traffic through a
// chain that a real Prometheus scrapes with the example scrape
// configuration (deploy/prometheus/prometheus.yml), then asks that
// Prometheus every panel query of every dashboard with its variables on
// "All": each must return data, or the explicit zero of a panel whose
// event has not happened. Selecting one job and instance must still
// return the gateway's series.
func TestDashboardsReturnData(t *testing.T) {
	t.Parallel()
	monNeed(t, "prometheus", "promtool") // before the chain starts: a missing package fails at once
	c, modelsMetrics := dashChain(t)

	// The example scrape configuration, its targets pointed at the chain.
	var promCfg map[string]any
	if err := yaml.Unmarshal(readFile(t, "deploy/prometheus/prometheus.yml"), &promCfg); err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{"sluice-models": modelsMetrics, "sluice-features": c.features, "sluice-gateway": c.admin}
	jobs, _ := promCfg["scrape_configs"].([]any)
	if len(jobs) != len(targets) {
		t.Fatalf("deploy/prometheus/prometheus.yml has %d scrape jobs, want %d", len(jobs), len(targets))
	}
	for _, j := range jobs {
		job := j.(map[string]any)
		addr, ok := targets[job["job_name"].(string)]
		if !ok {
			t.Fatalf("deploy/prometheus/prometheus.yml: unexpected job %v", job["job_name"])
		}
		job["static_configs"] = []any{map[string]any{"targets": []string{addr}}}
	}
	delete(promCfg, "rule_files")
	promCfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	promDir := t.TempDir()
	out, err := yaml.Marshal(promCfg)
	if err != nil {
		t.Fatal(err)
	}
	prom := monStartPrometheus(t, promDir, out)

	// The demo's traffic, a few times over: answers, a canary header, a
	// wrong key, an entity without features, a path no service serves,
	// and the model and feature servers asked directly.
	ids := c.presentIDs(t)
	base := gwExample(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range 60 {
		body := gwBody(ids.users[i%len(ids.users)], ids.packages[i%len(ids.packages)], ids.routes[i%len(ids.routes)], 30, 0.5)
		body["order_id"] = strconv.Itoa(i)
		if res, err := c.predict(ctx, "parcel-eta", body, gwAuth); err != nil || res.code != http.StatusOK {
			t.Fatalf("predict: %v %d %s", err, res.code, res.body)
		}
		_, _ = c.predict(ctx, "parcel-eta", body, map[string]string{"Authorization": "Bearer " + gwMainKey, "x-canary": "true"})
		if i%10 == 0 {
			_, _ = c.predict(ctx, "parcel-eta", body, map[string]string{"Authorization": "Bearer wrong"})
			_, _ = c.predict(ctx, "parcel-eta", gwBody(1<<40, 1<<40, 1<<40, 30, 0.5), gwAuth)
			_, _ = c.send(ctx, http.MethodPost, c.url(c.listen, "/v1/services/nope:predict"), []byte(`{}`), gwAuth)
			c.modelETA(t, base, "1", ids.users[0], ids.packages[0], ids.routes[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Two scrapes after the traffic, so that every rate has its points.
	prom.waitQuery(t, `sum(sluice_gateway_requests_total{job="sluice-gateway",service="parcel-eta",code="200"}) >= 60`, 20*time.Second)
	for _, job := range []string{"sluice-models", "sluice-features", "sluice-gateway"} {
		prom.waitQuery(t, `up{job="`+job+`"} == 1`, 10*time.Second)
	}
	time.Sleep(3 * time.Second)

	var empty []string
	targetsSeen := 0
	for _, tg := range dashTargets(t) {
		if why, ok := dashElsewhere[strings.SplitN(tg.where, " ", 2)[0]]; ok {
			t.Logf("not asked: %s (%s)", tg.where, why)
			continue
		}
		targetsSeen++
		q := dashVar.ReplaceAllStringFunc(tg.expr, func(ref string) string {
			m := dashVar.FindStringSubmatch(ref)
			switch name := m[1] + m[2]; name {
			case "__rate_interval", "__interval", "__range":
				return "1m"
			case "__range_s":
				return "60"
			case "__interval_ms", "__range_ms":
				return "60000"
			default:
				return ".*" // every variable on All
			}
		})
		if len(prom.query(t, q)) == 0 {
			empty = append(empty, tg.where+": "+tg.expr)
		}
	}
	sort.Strings(empty)
	t.Logf("%d panel queries asked, %d empty", targetsSeen, len(empty))
	for _, e := range empty {
		t.Errorf("no data: %s", e)
	}

	// The job and instance variables narrow the queries to one target.
	one := prom.query(t, `sum by (job, instance) (rate(sluice_gateway_requests_total{job=~"sluice-gateway", instance=~"`+c.admin+`"}[1m]))`)
	if len(one) != 1 {
		t.Errorf("one job and instance: %d series, want 1", len(one))
	}
}
