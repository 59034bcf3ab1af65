package prometheus_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/deploy/prometheus"
	"github.com/sluice-ml/sluice/internal/tools/metricsdoc"
)

// runbookBase is where ALERTS.md's sections end up (docs/operations.md);
// every alert's runbook_url is this plus "#" and its lower-cased name.
const runbookBase = "https://github.com/sluice-ml/sluice/blob/main/docs/operations.md"

// ruleFile is the part of a Prometheus rules file the tests read.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// unitTestFile is the part of a promtool test file the tests read.
type unitTestFile struct {
	RuleFiles          []string `yaml:"rule_files"`
	EvaluationInterval string   `yaml:"evaluation_interval"`
	Tests              []struct {
		Name          string `yaml:"name"`
		Interval      string `yaml:"interval"`
		AlertRuleTest []struct {
			EvalTime  string           `yaml:"eval_time"`
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(prometheus.Rules))
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("parse %s: %v", prometheus.RulesFile, err)
	}
	if len(rf.Groups) == 0 {
		t.Fatalf("%s has no groups", prometheus.RulesFile)
	}
	return rf
}

func alerts(rf ruleFile) []rule {
	var out []rule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

func unitTestFiles(t *testing.T) map[string]unitTestFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("tests", "*.test.yml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no promtool test files under tests/ (%v)", err)
	}
	out := map[string]unitTestFile{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var f unitTestFile
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(false)
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		out[p] = f
	}
	return out
}

// promtool returns the path of Debian's promtool (package prometheus),
// failing the test when it is missing: make deps installs it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make deps does, as root)")
	}
	return p
}

func TestPromtoolCheckRules(t *testing.T) {
	bin := promtool(t)
	out, err := exec.CommandContext(t.Context(), bin, "check", "rules", prometheus.RulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", prometheus.RulesFile, err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules %s did not report SUCCESS:\n%s", prometheus.RulesFile, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	bin := promtool(t)
	for path := range unitTestFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), bin, "test", "rules", path)
			// promtool keeps each test group's samples in a TSDB under TMPDIR.
			cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("promtool test rules %s: %v\n%s", path, err, out)
			}
		})
	}
}

// TestEveryAlertIsUnitTested requires, for every alert, a promtool case
// where it fires and one where it must not.
func TestEveryAlertIsUnitTested(t *testing.T) {
	rf := loadRules(t)
	firing, quiet := map[string]bool{}, map[string]bool{}
	for path, f := range unitTestFiles(t) {
		if !slices.Equal(f.RuleFiles, []string{"../" + prometheus.RulesFile}) {
			t.Errorf("%s: rule_files = %v, want [../%s]", path, f.RuleFiles, prometheus.RulesFile)
		}
		// promtool evaluates every group at the file's evaluation_interval,
		// so "for" durations mean what they say only when it equals the
		// groups' interval.
		for _, g := range rf.Groups {
			if f.EvaluationInterval != g.Interval {
				t.Errorf("%s: evaluation_interval %q differs from group %s's interval %q", path, f.EvaluationInterval, g.Name, g.Interval)
			}
		}
		for _, tg := range f.Tests {
			if tg.Interval == "" {
				t.Errorf("%s: test %q has no explicit interval", path, tg.Name)
			}
			for _, at := range tg.AlertRuleTest {
				if len(at.ExpAlerts) > 0 {
					firing[at.Alertname] = true
				} else {
					quiet[at.Alertname] = true
				}
			}
		}
	}
	known := map[string]bool{}
	for _, a := range alerts(rf) {
		known[a.Alert] = true
		if !firing[a.Alert] {
			t.Errorf("alert %s has no promtool test where it fires", a.Alert)
		}
		if !quiet[a.Alert] {
			t.Errorf("alert %s has no promtool test where it must not fire", a.Alert)
		}
	}
	for name := range firing {
		if !known[name] {
			t.Errorf("a promtool test expects unknown alert %s", name)
		}
	}
}

// alertDocs returns the documents that describe the alerts: the "## Alerts"
// section of docs/operations.md (where the runbook_url anchors point) once
// it is there, and ALERTS.md while it exists. Each must describe every
// alert under a "### Name" heading.
func alertDocs(t *testing.T) map[string]map[string]bool {
	t.Helper()
	docs := map[string]map[string]bool{}
	for _, path := range []string{filepath.Join("..", "..", "docs", "operations.md"), "ALERTS.md"} {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte("\n## Alerts\n")) && !bytes.HasPrefix(b, []byte("## Alerts\n")) {
			continue
		}
		headings := map[string]bool{}
		for line := range strings.SplitSeq(string(b), "\n") {
			if h, ok := strings.CutPrefix(line, "### "); ok && strings.HasPrefix(h, "Sluice") {
				headings[strings.TrimSpace(h)] = true
			}
		}
		docs[path] = headings
	}
	if len(docs) == 0 {
		t.Fatal("no \"## Alerts\" section in docs/operations.md or ALERTS.md")
	}
	return docs
}

// TestRuleConventions checks what the Alertmanager routes and the
// operators rely on: explicit group intervals, a severity of page or
// ticket, the three annotations, and a section per alert where its
// runbook_url points.
func TestRuleConventions(t *testing.T) {
	rf := loadRules(t)
	docs := alertDocs(t)
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Interval == "" {
			t.Errorf("group %s has no explicit interval", g.Name)
		}
		for _, r := range g.Rules {
			if r.Record != "" {
				if strings.Count(r.Record, ":") != 2 {
					t.Errorf("recording rule %s: want level:metric:operations", r.Record)
				}
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("alert %s: severity %q, want page or ticket", r.Alert, s)
			}
			for _, k := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, k)
				}
			}
			if got, want := r.Annotations["runbook_url"], runbookBase+"#"+strings.ToLower(r.Alert); got != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, got, want)
			}
			for path, headings := range docs {
				if !headings[r.Alert] {
					t.Errorf("%s has no \"### %s\" section", path, r.Alert)
				}
			}
		}
	}
	for path, headings := range docs {
		for h := range headings {
			if !seen[h] {
				t.Errorf("%s describes %s, which no rule defines", path, h)
			}
		}
	}
}

var (
	// metricRef matches a metric name in an expression; recording rule
	// names (level:metric:ops) are excluded by the colons.
	metricRef = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(sluice_[a-z0-9_]+)(?:\{([^}]*)\})?`)
	// matcherLabel is the label name of one matcher inside {...}.
	matcherLabel = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"([^"]*)"\s*$`)
)

// TestRulesUseExportedMetrics checks every metric and label matcher of the
// rules against the inventory of what Sluice registers (metricsdoc), and
// that histograms are read through their classic series: a renamed metric,
// label or bucket bound would otherwise leave an alert that never fires.
func TestRulesUseExportedMetrics(t *testing.T) {
	fams, err := metricsdoc.Collect(t.Context(), t.TempDir())
	if err != nil {
		t.Fatalf("metricsdoc.Collect: %v", err)
	}
	series := metricsdoc.SeriesNames(fams)
	rf := loadRules(t)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			for _, m := range metricRef.FindAllStringSubmatch(r.Expr, -1) {
				metric, matchers := m[1], m[2]
				f, ok := series[metric]
				if !ok {
					t.Errorf("%s: %s is not a series Sluice exports", name, metric)
					continue
				}
				if f.Type == metricsdoc.TypeHistogram && metric == f.Name {
					t.Errorf("%s: %s is a histogram: use its classic _bucket/_count/_sum series", name, metric)
				}
				if matchers == "" {
					continue
				}
				for part := range strings.SplitSeq(matchers, ",") {
					lm := matcherLabel.FindStringSubmatch(part)
					if lm == nil {
						t.Errorf("%s: cannot read matcher %q of %s", name, part, metric)
						continue
					}
					label, value := lm[1], lm[2]
					if label == "le" && strings.HasSuffix(metric, "_bucket") {
						checkBound(t, name, f, value)
						continue
					}
					if !slices.Contains(f.Labels, label) {
						t.Errorf("%s: %s has no label %q (labels %v)", name, metric, label, f.Labels)
					}
				}
			}
			if strings.Contains(r.Expr, "histogram_quantile") && !strings.Contains(r.Expr, "_bucket[") {
				t.Errorf("%s: histogram_quantile over something other than classic _bucket series", name)
			}
		}
	}
}

// checkBound fails unless bound is one of f's classic bucket bounds.
func checkBound(t *testing.T, rule string, f metricsdoc.Family, bound string) {
	t.Helper()
	v, err := strconv.ParseFloat(bound, 64)
	if err != nil {
		t.Errorf("%s: le=%q of %s is not a number", rule, bound, f.Name)
		return
	}
	if !slices.Contains(f.Buckets, v) {
		t.Errorf("%s: le=%q is not a bucket bound of %s (bounds %v)", rule, bound, f.Name, f.Buckets)
	}
}

// TestPrometheusRuleManifest fails when the committed manifest is not
// the rules file wrapped by Manifest: run go generate ./deploy/prometheus.
func TestPrometheusRuleManifest(t *testing.T) {
	want, err := prometheus.Manifest(prometheus.Rules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(prometheus.ManifestFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s: run go generate ./deploy/prometheus", prometheus.ManifestFile, prometheus.RulesFile)
	}
	var m struct {
		APIVersion string         `yaml:"apiVersion"`
		Kind       string         `yaml:"kind"`
		Metadata   map[string]any `yaml:"metadata"`
		Spec       map[string]any `yaml:"spec"`
	}
	if err := yaml.Unmarshal(got, &m); err != nil {
		t.Fatalf("parse %s: %v", prometheus.ManifestFile, err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(prometheus.Rules, &rules); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "monitoring.coreos.com/v1" || m.Kind != "PrometheusRule" || m.Metadata["name"] != "sluice" {
		t.Errorf("manifest header: apiVersion %q, kind %q, metadata %v", m.APIVersion, m.Kind, m.Metadata)
	}
	if !reflect.DeepEqual(m.Spec, rules) {
		t.Errorf("the manifest's spec is not the rules file's content")
	}
}

func TestManifestRejectsOtherDocuments(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"not yaml", "groups: [\n"},
		{"no groups", "rules: []\n"},
		{"extra key", "groups: []\nextra: 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := prometheus.Manifest([]byte(tc.in)); err == nil {
				t.Fatalf("Manifest(%q) = %q, want an error", tc.in, out)
			}
		})
	}
}

func TestManifestIndentsBlockScalars(t *testing.T) {
	in := "# header\n\ngroups:\n  - name: g\n    rules:\n      - alert: A\n        expr: |\n          up\n\n          == 0\n"
	out, err := prometheus.Manifest([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("# header")) {
		t.Errorf("the rules file's leading comment was copied:\n%s", out)
	}
	var m struct {
		Spec struct {
			Groups []struct {
				Rules []rule `yaml:"rules"`
			} `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(out, &m); err != nil {
		t.Fatalf("parse:\n%s\n%v", out, err)
	}
	if got := m.Spec.Groups[0].Rules[0].Expr; got != "up\n\n== 0\n" {
		t.Errorf("expr = %q, want %q", got, "up\n\n== 0\n")
	}
}
