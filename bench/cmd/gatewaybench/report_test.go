package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	sluiceconfig "github.com/sluice-ml/sluice/internal/config"
)

// constRes is a result whose every latency is d.
func constRes(rate float64, n int, d time.Duration) loadResult {
	l := make([]time.Duration, n)
	for i := range l {
		l[i] = d
	}
	return loadResult{Rate: rate, Scheduled: n, Sent: n, OK: n, Latency: l, Span: time.Duration(float64(n) / rate * float64(time.Second)), Outcomes: map[string]int{"HTTP 200": n}}
}

func hopWith(direct, haproxy, gateway time.Duration) *hopResult {
	row := func(target string, d time.Duration) hopRow {
		return hopRow{Target: target, Rate: 2000, Res: constRes(2000, 100, d), Rounds: []roundStat{{d, d}, {d, d}, {d, d}}}
	}
	return &hopResult{Rows: []hopRow{row(targetDirect, direct), row(targetHAProxy, haproxy), row(targetGateway, gateway)}}
}

func TestHopTarget(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		name              string
		direct, hap, gw   time.Duration
		wantKnown, wantOK bool
		wantIn            string
	}{
		{"within", 200 * us, 300 * us, 340 * us, true, true, "1.40×"},
		{"exactly 1.5", 200 * us, 300 * us, 350 * us, true, true, "1.50×"},
		{"over", 200 * us, 300 * us, 400 * us, true, false, "2.00×"},
		{"haproxy added nothing", 200 * us, 190 * us, 300 * us, false, false, "no ratio"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, known, ok := hopTargetRow(hopWith(c.direct, c.hap, c.gw), 0.5, "p50")
			if known != c.wantKnown || ok != c.wantOK || !strings.Contains(m, c.wantIn) {
				t.Fatalf("got (%q, %v, %v); want known %v met %v containing %q", m, known, ok, c.wantKnown, c.wantOK, c.wantIn)
			}
		})
	}
	h := hopWith(time.Millisecond, time.Millisecond, time.Millisecond)
	h.Rows = h.Rows[:2] // no gateway row
	if _, known, _ := hopTargetRow(h, 0.5, "p50"); known {
		t.Fatal("a missing gateway row counts as measured")
	}
}

func TestChainTarget(t *testing.T) {
	ok := func(rate float64, p99 time.Duration) chainRow {
		return chainRow{Rate: rate, Res: constRes(rate, 1000, p99)}
	}
	slow := ok(3000, 20*time.Millisecond)
	failing := ok(2000, time.Millisecond)
	failing.Res.OK -= 10 // 1 % errors
	lagging := ok(2000, time.Millisecond)
	lagging.Res.Span *= 2 // answers did not keep pace

	for _, c := range []struct {
		name      string
		rows      []chainRow
		wantMet   bool
		wantKnown bool
		wantIn    string
	}{
		{"met at 2000", []chainRow{ok(1000, time.Millisecond), ok(2000, 5*time.Millisecond), slow}, true, true, "**2000/s**"},
		{"only 1000", []chainRow{ok(1000, time.Millisecond), slow}, false, true, "**1000/s**"},
		{"errors", []chainRow{failing}, false, true, "no rate sustained"},
		{"backlog", []chainRow{lagging}, false, true, "no rate sustained"},
		{"nothing", nil, false, false, "–"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, known, met := chainTarget(&chainResult{Rows: c.rows})
			if met != c.wantMet || known != c.wantKnown || !strings.Contains(m, c.wantIn) {
				t.Fatalf("got (%q, %v, %v); want met %v known %v containing %q", m, known, met, c.wantMet, c.wantKnown, c.wantIn)
			}
		})
	}
}

func TestRenderMarksTargets(t *testing.T) {
	rep := &report{
		Cfg: config{Rounds: 1, Seconds: 1, ChainSeconds: 1, MaxInFlight: 8, Timeout: time.Second, Model: "parcel_eta"},
		Hop: hopWith(200*time.Microsecond, 300*time.Microsecond, 400*time.Microsecond),
		Chain: &chainResult{Rows: []chainRow{
			{Rate: 2000, Res: constRes(2000, 1000, 3*time.Millisecond)},
		}},
	}
	md := render(rep)
	for _, want := range []string{
		"| Gateway proxy hop (auth + rate limit + route) adds ≤ 1.5× the latency HAProxy adds, p50, at 2000 req/s | p50, median of rounds: gateway +200 µs vs HAProxy +100 µs over direct → **2.00×** (all rounds merged: 2.00× (gateway +200, HAProxy +100 µs)) | **not met** |",
		"≥ 2000 predictions/s with p99 ≤ 15ms | highest rate sustained with p99 ≤ 15 ms: **2000/s**",
		"| **met** |",
		"| 2000 | Sluice gateway | 100 | 0 | 0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestClassifyPredict(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		ok     bool
		label  string
	}{
		{200, `{"source":"model","outputs":{}}`, true, "HTTP 200 source=model"},
		{200, `{"source":"fallback_rule"}`, true, "HTTP 200 source=fallback_rule"},
		{429, `{"error":"slow down","reason":"rate_limited"}`, false, "HTTP 429 rate_limited"},
		{502, `<html>bad gateway</html>`, false, "HTTP 502"},
	} {
		ok, label := classifyPredict(c.status, []byte(c.body))
		if ok != c.ok || label != c.label {
			t.Errorf("classifyPredict(%d, %s) = %v, %q; want %v, %q", c.status, c.body, ok, label, c.ok, c.label)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	// utime 250 and stime 50 ticks (fields 14, 15); the name holds spaces and ')'.
	stat := "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 1000 10 18446744073709551615"
	d, err := parseStatCPU(stat)
	if err != nil || d != 3*time.Second {
		t.Fatalf("parseStatCPU = %s, %v; want 3s", d, err)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Fatal("no error for garbage")
	}
	m, err := parseMachineCPU("cpu  100 10 40 5000 7 3 2 5 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	if err != nil || m != 1600*time.Millisecond { // 100+10+40+3+2+5 ticks
		t.Fatalf("parseMachineCPU = %s, %v; want 1.6s", m, err)
	}
	if d, err := procCPU(os.Getpid()); err != nil || d < 0 {
		t.Fatalf("procCPU(self) = %s, %v", d, err)
	}
}

func TestOtherCores(t *testing.T) {
	cpu := map[string]time.Duration{cpuMachine: 3 * time.Second, cpuModel: time.Second, cpuLoadgen: time.Second}
	if got := otherCores(cpu, 2*time.Second); got != 0.5 {
		t.Fatalf("otherCores = %v; want 0.5", got)
	}
	if got := otherCores(map[string]time.Duration{cpuModel: time.Second}, time.Second); got != -1 {
		t.Fatalf("otherCores without the machine = %v; want -1", got)
	}
}

// The full chain's configuration carries the example's parcel-eta service
// unchanged, with our ports, client and repositories.
func TestChainYAML(t *testing.T) {
	t.Chdir("../../..")
	b, err := chainYAML("/m", "/f", []int{1, 2, 3, 4, 5, 6}, "abc")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ModelServer struct {
			Repo     []string `yaml:"model_repository"`
			HTTPPort int      `yaml:"http_port"`
		} `yaml:"model_server"`
		FeatureServer struct {
			Repo string `yaml:"repo"`
			Port int    `yaml:"port"`
		} `yaml:"feature_server"`
		Gateway struct {
			Listen  string `yaml:"listen"`
			Clients []struct {
				Sum string `yaml:"api_key_sha256"`
			} `yaml:"clients"`
			Services []struct {
				Name   string `yaml:"name"`
				Path   string `yaml:"path"`
				Inputs []any  `yaml:"inputs"`
			} `yaml:"services"`
			Backends []any `yaml:"backends"`
		} `yaml:"gateway"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	g := cfg.Gateway
	if cfg.ModelServer.Repo[0] != "/m" || cfg.ModelServer.HTTPPort != 1 || cfg.FeatureServer.Repo != "/f" || cfg.FeatureServer.Port != 4 ||
		g.Listen != "127.0.0.1:5" || len(g.Clients) != 1 || g.Clients[0].Sum != "abc" ||
		len(g.Services) != 1 || g.Services[0].Name != "parcel-eta" || g.Services[0].Path != "POST /v1/services/parcel-eta:predict" ||
		len(g.Services[0].Inputs) != 3 || len(g.Backends) == 0 {
		t.Fatalf("unexpected configuration:\n%s", b)
	}
}

func TestScrubPaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got := scrubPaths("`sluice serve -c /tmp/gwb123/chain.yaml` -sluice-bin "+wd+"/bin/sluice", "/tmp/gwb123")
	if want := "`sluice serve -c $TMP/chain.yaml` -sluice-bin bin/sluice"; got != want {
		t.Fatalf("scrubPaths = %q; want %q", got, want)
	}
}

func TestQuietGate(t *testing.T) {
	var none *quietGate
	none.wait(t.Context()) // a nil gate does not wait
	g := &quietGate{limit: 1000, maxWait: 5 * time.Second, budget: time.Minute}
	t0 := time.Now()
	g.wait(t.Context())
	if took := time.Since(t0); took > 2*time.Second || g.noisy != 0 || g.waited <= 0 {
		t.Fatalf("a machine under 1000 busy CPUs is quiet: took %s, noisy %d, waited %s", took, g.noisy, g.waited)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g = &quietGate{limit: 1e-9, maxWait: time.Minute, budget: time.Minute}
	g.wait(ctx) // returns at once when cancelled
	g = &quietGate{limit: 1e-9, maxWait: time.Minute, budget: time.Minute, waited: time.Minute}
	t0 = time.Now()
	g.wait(t.Context()) // budget spent: no wait
	if time.Since(t0) > 100*time.Millisecond || g.noisy != 1 {
		t.Fatalf("a spent budget still waited %s (noisy %d)", time.Since(t0), g.noisy)
	}
}

// Both generated files pass Sluice's own strict decoding and validation.
func TestGeneratedConfigsAreValid(t *testing.T) {
	t.Chdir("../../..")
	hop := gatewayOnlyYAML("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", strings.Repeat("ab", 32), 5*time.Second)
	cfg, err := sluiceconfig.Parse("hop.yaml", []byte(hop), nil)
	if err != nil {
		t.Fatalf("hop configuration: %v\n%s", err, hop)
	}
	if cfg.Gateway == nil || cfg.Gateway.Proxy == nil || cfg.Gateway.Proxy.Backend != "models-http" || cfg.ModelServer != nil || cfg.FeatureServer != nil {
		t.Fatalf("hop configuration decoded as %+v", cfg)
	}
	chain, err := chainYAML("examples/models", "examples/parcel-eta/features", []int{1, 2, 3, 4, 5, 6}, strings.Repeat("cd", 32))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sluiceconfig.Parse("chain.yaml", chain, nil); err != nil {
		t.Fatalf("chain configuration: %v\n%s", err, chain)
	}
}

// The targets read the median over rounds: one round spoiled by outside
// load does not decide them.
func TestHopTargetUsesMedianOfRounds(t *testing.T) {
	us := time.Microsecond
	h := hopWith(200*us, 300*us, 340*us)
	g := &h.Rows[2]
	g.Rounds[1] = roundStat{P50: 50 * time.Millisecond, P99: 90 * time.Millisecond} // one bad round
	g.Res = merge([]loadResult{constRes(2000, 100, 340*us), constRes(2000, 100, 50*time.Millisecond), constRes(2000, 100, 340*us)})
	m, known, met := hopTargetRow(h, 0.99, "p99")
	if !known || !met || !strings.Contains(m, "**1.40×**") {
		t.Fatalf("got (%q, %v, %v); want met at 1.40×", m, known, met)
	}
	if got := median([]time.Duration{4, 1, 3, 2}); got != 2 {
		t.Fatalf("median of 1..4 = %d; want 2 (mean of 2 and 3, truncated)", got)
	}
}

func TestSelfNice(t *testing.T) {
	n, err := selfNice()
	if err != nil || n < -20 || n > 19 {
		t.Fatalf("selfNice = %d, %v", n, err)
	}
}
