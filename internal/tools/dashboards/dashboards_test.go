// Package dashboards_test checks the Grafana dashboards in deploy/grafana:
// Grafana cannot run here, so the test reads each dashboard as Grafana
// would, parses every PromQL query with Prometheus's own parser and
// checks that it asks only for metrics and labels the code exports (the
// metricsdoc inventory).
package dashboards_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/tools/metricsdoc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dir holds the dashboards, from this package's folder.
const dir = "../../../deploy/grafana"

// wantUIDs are the dashboards' uids. They are part of every link to a
// dashboard: never change or reuse one.
var wantUIDs = []string{"sluice-accuracy", "sluice-feature-store", "sluice-gateway", "sluice-model-server", "sluice-overview", "sluice-release-safety"}

// inventory is what the code exports, built once.
var inventory = sync.OnceValues(func() (map[string]metricsdoc.Family, error) {
	tmp, err := os.MkdirTemp("", "dashboards")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	fams, err := metricsdoc.Collect(context.Background(), tmp)
	if err != nil {
		return nil, err
	}
	inv := metricsdoc.SeriesNames(fams)
	// up is the series Prometheus writes for every scrape target: the
	// $job and $instance variables list the targets from it.
	inv["up"] = metricsdoc.Family{Name: "up", Type: "gauge"}
	return inv, nil
})

func exported(t *testing.T) map[string]metricsdoc.Family {
	t.Helper()
	inv, err := inventory()
	require.NoError(t, err)
	return inv
}

func TestDashboards(t *testing.T) {
	inv := exported(t)
	files, err := filepath.Glob(filepath.Join(dir, "dashboards", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var uids []string
	titles := map[string]string{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			d, problems := check(data, inv)
			require.Empty(t, problems, "%s:\n%s", f, strings.Join(problems, "\n"))
			uids = append(uids, d.UID)
			require.NotContains(t, titles, d.Title, "title %q is used by %s too", d.Title, titles[d.Title])
			titles[d.Title] = f
		})
	}
	slices.Sort(uids)
	require.Equal(t, wantUIDs, uids, "dashboard uids are links: keep them stable")
}

// TestBrokenDashboard feeds the check a dashboard with one defect per
// panel and requires each to be reported, and nothing else.
func TestBrokenDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "broken.json"))
	require.NoError(t, err)
	_, problems := check(data, exported(t))
	require.Equal(t, []string{
		`variable client: label_values: unknown metric "sluice_gateway_client_requests_total"`,
		`panel 2 "Unknown metric": target A: unknown metric "sluice_gateway_request_total"`,
		`panel 3 "Unknown label": target A: sluice_gateway_requests_total has no label "tenant"`,
		`panel 4 "Grouping by an unknown label": target A: sum by (tenant): no selector in it has label "tenant"`,
		`panel 5 "Syntax error": target A: parse: 1:44: parse error: unclosed left parenthesis`,
		`panel 6 "Undefined variable": target A: undefined variable $model`,
		`panel 7 "Wrong data source": datasource {"type":"prometheus","uid":"prometheus"} is not ${DS_PROMETHEUS}`,
		`panel 8 "Histogram without buckets": target A: unknown metric "sluice_gateway_request_duration_seconds_buckets"`,
		`panel 9 "No metric name": target A: selector {service="eta"} names no metric`,
		`panel 9 "No metric name": duplicate panel id 9`,
	}, problems)
}

// TestProvisioning checks the provisioning examples point Grafana at the
// dashboards and at a Prometheus data source.
func TestProvisioning(t *testing.T) {
	var dash struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name    string `yaml:"name"`
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(dir, "provisioning", "dashboards", "sluice.yaml"), &dash)
	require.Equal(t, 1, dash.APIVersion)
	require.Len(t, dash.Providers, 1)
	require.Equal(t, "file", dash.Providers[0].Type)
	require.NotEmpty(t, dash.Providers[0].Options.Path)

	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, Type, UID string
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(dir, "provisioning", "datasources", "prometheus.yaml"), &ds)
	require.Equal(t, 1, ds.APIVersion)
	require.Len(t, ds.Datasources, 1)
	require.Equal(t, "prometheus", ds.Datasources[0].Type)
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(false)
	require.NoError(t, dec.Decode(v), path)
}

func TestSubstitute(t *testing.T) {
	got, vars := substitute(`rate(x{a=~"$a", b="${b}", c="[[c]]", d="${d:regex}"}[$__rate_interval]) / $__range_s`)
	require.Equal(t, `rate(x{a=~"sluicevar", b="sluicevar", c="sluicevar", d="sluicevar"}[5m]) / 300`, got)
	require.Equal(t, []string{"a", "b", "c", "d"}, vars)
}

// dsUID is the data source every panel, target, variable and annotation
// must use: the dashboard's DS_PROMETHEUS variable (and import input).
const dsUID = "${DS_PROMETHEUS}"

// dashboard is the part of Grafana's dashboard model the check reads.
type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []annotation `json:"list"`
	} `json:"annotations"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource json.RawMessage `json:"datasource"`
}

type annotation struct {
	Name       string          `json:"name"`
	BuiltIn    int             `json:"builtIn"`
	Datasource json.RawMessage `json:"datasource"`
	Expr       string          `json:"expr"`
}

// check reads one dashboard and returns its problems, in document order.
func check(data []byte, inv map[string]metricsdoc.Family) (*dashboard, []string) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, []string{"json: " + err.Error()}
	}
	c := &checker{inv: inv, vars: map[string]bool{}}
	if !regexp.MustCompile(`^[a-zA-Z0-9_-]{1,40}$`).MatchString(d.UID) {
		c.add("uid %q: want 1 to 40 letters, digits, - or _", d.UID)
	}
	if d.Title == "" {
		c.add("no title")
	}
	if !slices.ContainsFunc(d.Inputs, func(in struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	},
	) bool {
		return in.Name == "DS_PROMETHEUS" && in.Type == "datasource" && in.PluginID == "prometheus"
	}) {
		c.add("no __inputs entry DS_PROMETHEUS (a prometheus data source)")
	}
	for _, v := range d.Templating.List {
		c.vars[v.Name] = true
	}
	if !slices.ContainsFunc(d.Templating.List, func(v variable) bool {
		return v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && string(v.Query) == `"prometheus"`
	}) {
		c.add("no datasource variable DS_PROMETHEUS of type prometheus")
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			c.variable(v)
		}
	}
	for _, a := range d.Annotations.List {
		if a.BuiltIn == 1 {
			continue
		}
		c.where = fmt.Sprintf("annotation %q: ", a.Name)
		c.datasource(a.Datasource)
		c.expr(a.Expr)
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			c.where = fmt.Sprintf("panel %d %q: ", p.ID, p.Title)
			c.panel(p)
			if ids[p.ID] {
				c.add("duplicate panel id %d", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return &d, c.problems
}

type checker struct {
	inv      map[string]metricsdoc.Family
	vars     map[string]bool // defined variables
	where    string          // prefix of problems
	problems []string
}

func (c *checker) add(format string, args ...any) {
	c.problems = append(c.problems, c.where+fmt.Sprintf(format, args...))
}

func (c *checker) panel(p panel) {
	if p.GridPos == nil || p.GridPos.W < 1 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
		c.add("gridPos %+v outside the 24-column grid", p.GridPos)
	}
	if p.Type == "row" || p.Type == "text" {
		return
	}
	c.datasource(p.Datasource)
	if len(p.Targets) == 0 {
		c.add("no targets")
	}
	where := c.where
	for _, tg := range p.Targets {
		c.where = where + "target " + tg.RefID + ": "
		if len(tg.Datasource) > 0 {
			c.datasource(tg.Datasource)
		}
		c.expr(tg.Expr)
	}
	c.where = where
}

func (c *checker) datasource(raw json.RawMessage) {
	var ds struct{ Type, UID string }
	if err := json.Unmarshal(raw, &ds); err != nil || ds.Type != "prometheus" || ds.UID != dsUID {
		c.add("datasource %s is not %s", compact(raw), dsUID)
	}
}

func compact(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// labelValues matches label_values(label) and label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(?:(.*?)\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// variable checks a query variable: label_values of an exported metric
// and one of its labels.
func (c *checker) variable(v variable) {
	c.where = fmt.Sprintf("variable %s: ", v.Name)
	defer func() { c.where = "" }()
	c.datasource(v.Datasource)
	var q string
	if json.Unmarshal(v.Query, &q) != nil {
		var obj struct{ Query string }
		if err := json.Unmarshal(v.Query, &obj); err != nil {
			c.add("query %s is neither a string nor {query: ...}", compact(v.Query))
			return
		}
		q = obj.Query
	}
	m := labelValues.FindStringSubmatch(q)
	if m == nil {
		c.add("query %q: want label_values(metric, label)", q)
		return
	}
	if m[1] == "" {
		c.add("query %q: name the metric, label_values(metric, label)", q)
		return
	}
	s, vars := substitute(m[1])
	c.defined(vars)
	matchers, err := parser.NewParser(parser.Options{}).ParseMetricSelector(s)
	if err != nil {
		c.add("label_values: parse: %v", err)
		return
	}
	c.where = fmt.Sprintf("variable %s: label_values: ", v.Name)
	fam, name, ok := c.family(matchers)
	if !ok {
		return
	}
	c.matchers(name, fam, matchers)
	if !hasLabel(name, fam, m[2]) {
		c.add("%s has no label %q", name, m[2])
	}
}

// expr parses a PromQL query and checks its selectors and groupings.
func (c *checker) expr(q string) {
	if strings.TrimSpace(q) == "" {
		c.add("empty query")
		return
	}
	s, vars := substitute(q)
	c.defined(vars)
	e, err := parser.NewParser(parser.Options{}).ParseExpr(s)
	if err != nil {
		var pe parser.ParseErrors
		if errors.As(err, &pe) && len(pe) > 0 {
			err = &pe[0]
		}
		c.add("parse: %v", err)
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if fam, name, ok := c.family(n.LabelMatchers); ok {
				c.matchers(name, fam, n.LabelMatchers)
			}
		case *parser.AggregateExpr:
			if !n.Without {
				c.grouping(n)
			}
		}
		return nil
	})
}

// family finds the exported family a selector's metric name belongs to.
func (c *checker) family(ms []*labels.Matcher) (metricsdoc.Family, string, bool) {
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			fam, ok := c.inv[m.Value]
			if !ok {
				c.add("unknown metric %q", m.Value)
			}
			return fam, m.Value, ok
		}
	}
	sel := make([]string, len(ms))
	for i, m := range ms {
		sel[i] = m.String()
	}
	c.add("selector {%s} names no metric", strings.Join(sel, ", "))
	return metricsdoc.Family{}, "", false
}

// matchers checks that a selector matches only labels its metric has.
func (c *checker) matchers(name string, fam metricsdoc.Family, ms []*labels.Matcher) {
	for _, m := range ms {
		if m.Name != model.MetricNameLabel && !hasLabel(name, fam, m.Name) {
			c.add("%s has no label %q", name, m.Name)
		}
	}
}

// grouping checks that each label an aggregation keeps is carried by at
// least one selector inside it. An unknown metric inside is reported on
// its own.
func (c *checker) grouping(a *parser.AggregateExpr) {
	var sels []*parser.VectorSelector
	parser.Inspect(a.Expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			sels = append(sels, vs)
		}
		return nil
	})
	if slices.ContainsFunc(sels, func(vs *parser.VectorSelector) bool { _, ok := c.inv[vs.Name]; return !ok }) {
		return
	}
	for _, l := range a.Grouping {
		found := slices.ContainsFunc(sels, func(vs *parser.VectorSelector) bool { return hasLabel(vs.Name, c.inv[vs.Name], l) })
		if !found {
			c.add("%s by (%s): no selector in it has label %q", a.Op, strings.Join(a.Grouping, ", "), l)
		}
	}
}

// hasLabel reports whether series name of fam carries label l: one of the
// family's labels, le on a histogram's buckets, or a target label
// Prometheus adds to every series.
func hasLabel(name string, fam metricsdoc.Family, l string) bool {
	switch l {
	case "job", "instance":
		return true
	case "le":
		return name == fam.Name+"_bucket"
	}
	return slices.Contains(fam.Labels, l)
}

// builtins are Grafana's global variables.
var builtins = map[string]string{
	"__rate_interval": "5m", "__interval": "5m", "__range": "5m",
	"__interval_ms": "300000", "__range_ms": "300000", "__range_s": "300",
	"__from": "0", "__to": "0",
}

// variableRef matches $var, ${var}, ${var:format} and [[var]].
var variableRef = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces Grafana variables as Grafana would before sending a
// query: built-in intervals by durations, dashboard variables (which the
// dashboards use only inside label values) by a placeholder. It returns
// the dashboard variables referenced.
func substitute(q string) (string, []string) {
	var vars []string
	out := variableRef.ReplaceAllStringFunc(q, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		if v, ok := builtins[name]; ok {
			return v
		}
		vars = append(vars, name)
		return "sluicevar"
	})
	return out, vars
}

// defined reports variables that the dashboard does not define.
func (c *checker) defined(vars []string) {
	for _, v := range vars {
		if !c.vars[v] {
			c.add("undefined variable $%s", v)
		}
	}
}
