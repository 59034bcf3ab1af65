package metricsdoc_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/tools/metricsdoc"
)

var update = flag.Bool("update", false, "rewrite docs/metrics.md from the registries")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// root is the repository root, from this package's folder.
const root = "../../.."

// pushed are the metrics batch jobs push to a Pushgateway rather than
// serve, with the labels the push adds (job and the grouping key). They
// are documented from their definitions in the source.
var pushed = map[string][]string{
	"sluice_feature_view_newest_event_timestamp_seconds": {"job", "view"},
	"sluice_feature_view_last_materialized_rows":         {"job", "view"},
}

// unexported are metrics the source defines but no command registers, so
// no /metrics serves them, with the reason. The doc leaves them out.
var unexported = map[string]string{
	"sluice_replay_requests_total":           "sluice shadow replay passes a nil registerer (internal/cli/shadow.go)",
	"sluice_replay_request_duration_seconds": "sluice shadow replay passes a nil registerer (internal/cli/shadow.go)",
}

// collect runs Collect in a scratch folder.
func collect(t *testing.T) []metricsdoc.Family {
	t.Helper()
	fams, err := metricsdoc.Collect(t.Context(), t.TempDir())
	require.NoError(t, err)
	return fams
}

// definitions scans the source for metric definitions.
func definitions(t *testing.T) []metricsdoc.Definition {
	t.Helper()
	defs, err := metricsdoc.Definitions(root, "internal", "cmd")
	require.NoError(t, err)
	require.Greater(t, len(defs), 20, "the scan finds too few definitions to be looking at the right tree")
	return defs
}

// TestDocMatchesRegistries fails when docs/metrics.md is not what the
// registries generate; -update rewrites it.
func TestDocMatchesRegistries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("docs/metrics.md lists the Linux process collector's metrics; other systems export others")
	}
	fams := collect(t)
	seen := map[string]bool{}
	for _, d := range definitions(t) {
		if labels, ok := pushed[d.Name]; ok && !seen[d.Name] {
			seen[d.Name] = true
			fams = append(fams, metricsdoc.Family{Component: metricsdoc.ComponentPushed, Name: d.Name, Type: d.Type, Help: d.Help, Labels: labels})
		}
	}
	got := metricsdoc.Markdown(fams)
	path := filepath.Join(root, filepath.FromSlash(metricsdoc.DocPath))
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run: go test ./internal/tools/metricsdoc -update")
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date; run: go test ./internal/tools/metricsdoc -update\n%s",
			metricsdoc.DocPath, firstDiff(string(want), string(got)))
	}
}

// firstDiff shows the first line where the file and the generated text
// differ.
func firstDiff(file, gen string) string {
	a, b := strings.Split(file, "\n"), strings.Split(gen, "\n")
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return "first difference, line " + strconv.Itoa(i+1) + ":\n  file:      " + x + "\n  generated: " + y
		}
	}
	return ""
}

// TestEveryDefinitionIsCollected keeps the inventory complete: a metric
// defined in the source (with a literal name) must be registered by a
// component Collect builds, or be listed in pushed or unexported.
func TestEveryDefinitionIsCollected(t *testing.T) {
	fams := collect(t)
	collected := map[string]bool{}
	for _, f := range fams {
		collected[f.Name] = true
	}
	defined := map[string]bool{}
	for _, d := range definitions(t) {
		defined[d.Name] = true
		_, isPushed := pushed[d.Name]
		_, isUnexported := unexported[d.Name]
		if !collected[d.Name] && !isPushed && !isUnexported {
			t.Errorf("%s (defined at %s) is not in the inventory: build its component in metricsdoc.Collect, or list it in pushed or unexported", d.Name, d.Pos)
		}
	}
	for _, list := range []map[string]string{keys(pushed), unexported} {
		for name := range list {
			require.True(t, defined[name], "%s is listed as pushed or unexported, but the source no longer defines it", name)
			require.False(t, collected[name], "%s is listed as pushed or unexported, but a registry exports it: remove it from the list", name)
		}
	}
}

func keys(m map[string][]string) map[string]string {
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = ""
	}
	return out
}

// TestCollect checks what every family must carry, whatever its name.
func TestCollect(t *testing.T) {
	fams := collect(t)
	names := map[string]bool{}
	comps := map[string]bool{}
	for _, f := range fams {
		require.False(t, names[f.Name], "%s listed twice", f.Name)
		names[f.Name] = true
		comps[f.Component] = true
		require.NotEmpty(t, f.Help, "%s has no help", f.Name)
		require.Contains(t, []string{metricsdoc.TypeCounter, metricsdoc.TypeGauge, metricsdoc.TypeHistogram, metricsdoc.TypeSummary, metricsdoc.TypeUntyped}, f.Type, f.Name)
		require.True(t, slices.IsSorted(f.Labels), "%s labels %v", f.Name, f.Labels)
		if f.Type == metricsdoc.TypeHistogram {
			require.NotEmpty(t, f.Buckets, "%s has no classic buckets", f.Name)
		}
	}
	// Every component that serves metrics contributes some.
	for _, c := range metricsdoc.Components {
		if c != metricsdoc.ComponentPushed {
			require.True(t, comps[c], "no metric from %s", c)
		}
	}
	require.True(t, names["go_goroutines"] && names["promhttp_metric_handler_errors_total"], "runtime and exposition metrics missing")
}

// TestDescribe checks that describe reads a vector with no series (by
// adding and then deleting a probe series), keeps existing series, and
// reads histograms' buckets and native flag.
func TestDescribe(t *testing.T) {
	t.Run("empty vector", func(t *testing.T) {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"service", "code"})
		fams, err := metricsdoc.Describe(v)
		require.NoError(t, err)
		require.Equal(t, []metricsdoc.Family{{Name: "x_total", Type: "counter", Help: "X.", Labels: []string{"code", "service"}}}, fams)
		require.Zero(t, testutil.CollectAndCount(v), "the probe series was left behind")
	})
	t.Run("existing series kept", func(t *testing.T) {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "y", Help: "Y."}, []string{"view"})
		v.WithLabelValues("users").Set(3)
		fams, err := metricsdoc.Describe(v)
		require.NoError(t, err)
		require.Equal(t, []string{"view"}, fams[0].Labels)
		require.Equal(t, 1, testutil.CollectAndCount(v))
		require.InDelta(t, 3, testutil.ToFloat64(v.WithLabelValues("users")), 0)
	})
	t.Run("histogram", func(t *testing.T) {
		classic := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "c_seconds", Help: "C.", Buckets: []float64{0.1, 1}}, []string{"model"})
		native := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "n_seconds", Help: "N.", Buckets: []float64{1}, NativeHistogramBucketFactor: 1.1})
		c, err := metricsdoc.Describe(classic)
		require.NoError(t, err)
		require.Equal(t, []float64{0.1, 1}, c[0].Buckets)
		require.False(t, c[0].Native)
		n, err := metricsdoc.Describe(native)
		require.NoError(t, err)
		require.True(t, n[0].Native)
		require.Empty(t, n[0].Labels)
	})
	t.Run("silent collector", func(t *testing.T) {
		_, err := metricsdoc.Describe(silent{})
		require.ErrorContains(t, err, "describes 1 metrics but collects 0")
	})
}

// silent describes a metric it never collects.
type silent struct{}

func (silent) Describe(ch chan<- *prometheus.Desc) {
	ch <- prometheus.NewDesc("silent_total", "Never collected.", nil, nil)
}
func (silent) Collect(chan<- prometheus.Metric) {}

func TestSeriesNames(t *testing.T) {
	got := metricsdoc.SeriesNames([]metricsdoc.Family{
		{Name: "h_seconds", Type: metricsdoc.TypeHistogram},
		{Name: "s_seconds", Type: metricsdoc.TypeSummary},
		{Name: "c_total", Type: metricsdoc.TypeCounter},
	})
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	require.Equal(t, []string{"c_total", "h_seconds", "h_seconds_bucket", "h_seconds_count", "h_seconds_sum", "s_seconds", "s_seconds_count", "s_seconds_sum"}, names)
	require.Equal(t, "h_seconds", got["h_seconds_bucket"].Name)
}
