package python

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Kinds of a custom metric family (pb_utils.MetricFamily.COUNTER, GAUGE,
// HISTOGRAM).
const (
	customCounter   = 0
	customGauge     = 1
	customHistogram = 2
)

// customName is what a custom metric's and its labels' names must match
// (Prometheus's rules); reserved prefixes keep the server's own names.
var (
	customName     = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	customReserved = []string{"sluice_", "nv_", "go_", "process_", "__"}
)

// customMsg is one opMetric frame's JSON: a family declared, a metric
// (label set) declared, or a value change.
type customMsg struct {
	Op          string            `json:"op"` // "family", "metric", "add", "set", "observe"
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Kind        int               `json:"kind"`
	Labels      map[string]string `json:"labels"`
	Buckets     []float64         `json:"buckets"`
	Value       float64           `json:"value"`
}

// customMetrics are the metrics Python models define with
// pb_utils.MetricFamily, exported on /metrics with the model's "model"
// and "version" labels first. A version's series go when its last
// instance closes.
type customMetrics struct {
	mu       sync.Mutex // protects families
	families map[string]*customFamily
}

type customFamily struct {
	name   string
	help   string
	desc   *prometheus.Desc // set with the labels, by the first metric
	kind   int
	labels []string // label names (model and version included), sorted; fixed by the first metric
	series map[string]*customSeries
}

type customSeries struct {
	model, version string
	values         []string // label values in the family's labels order
	value          float64  // counter, gauge; histogram sum
	buckets        []float64
	counts         []uint64 // per bucket, not cumulative
	count          uint64
}

func newCustomMetrics(reg prometheus.Registerer) *customMetrics {
	c := &customMetrics{families: map[string]*customFamily{}}
	if reg != nil {
		_ = reg.Register(c) // an unchecked collector: nothing to conflict with
	}
	return c
}

// Describe sends nothing: the families come and go with the models (an
// unchecked collector).
func (c *customMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect sends every series.
func (c *customMetrics) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.families {
		if f.desc == nil {
			continue
		}
		for _, s := range f.series {
			lv := s.values
			switch f.kind {
			case customCounter:
				ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, s.value, lv...)
			case customGauge:
				ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, s.value, lv...)
			case customHistogram:
				cum := map[float64]uint64{}
				var n uint64
				for i, b := range s.buckets {
					n += s.counts[i]
					cum[b] = n
				}
				ch <- prometheus.MustNewConstHistogram(f.desc, s.count, s.value, cum, lv...)
			}
		}
	}
}

// apply records one opMetric frame of a worker of model version.
func (c *customMetrics) apply(model, version string, payload []byte, logger *slog.Logger) {
	var m customMsg
	if err := json.Unmarshal(payload, &m); err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	refuse := func(format string, args ...any) {
		logger.Warn("custom metric refused", "metric", m.Name, "reason", fmt.Sprintf(format, args...))
	}
	f := c.families[m.Name]
	if m.Op == "family" {
		c.declareLocked(&m, f, refuse)
		return
	}
	if f == nil {
		return
	}
	values, ok := f.labelValues(model, version, m.Labels, refuse)
	if !ok {
		return
	}
	key := model + "\x00" + version + "\x00" + strings.Join(values, "\x00")
	f.applyOp(&m, key, model, version, values)
}

// declareLocked declares family m.Name (f, nil when new) unless its name
// is invalid or reserved, its kind unknown, or another model declared it
// with another kind.
func (c *customMetrics) declareLocked(m *customMsg, f *customFamily, refuse func(format string, args ...any)) {
	switch {
	case !customName.MatchString(m.Name) || slices.ContainsFunc(customReserved, func(p string) bool { return strings.HasPrefix(m.Name, p) }):
		refuse("invalid or reserved name")
	case m.Kind < customCounter || m.Kind > customHistogram:
		refuse("unknown kind %d", m.Kind)
	case f != nil && f.kind != m.Kind:
		refuse("another model declared it with another kind")
	case f == nil:
		c.families[m.Name] = &customFamily{name: m.Name, help: m.Description, kind: m.Kind, series: map[string]*customSeries{}}
	}
}

// labelValues returns a series' label values, in the order of its sorted
// label names: model and version, unless the metric sets them itself
// (Triton's custom_metrics example labels its metric with model and
// version), and the metric's own. The first series fixes the family's
// label names; ok is false (and the series refused) when a name is
// invalid or the names differ from the family's.
func (f *customFamily) labelValues(model, version string, own map[string]string, refuse func(format string, args ...any)) ([]string, bool) {
	labels := map[string]string{"model": model, "version": version}
	maps.Copy(labels, own)
	names := slices.Sorted(maps.Keys(labels))
	for _, n := range names {
		if !customName.MatchString(n) || strings.HasPrefix(n, "__") {
			refuse("invalid label name %q", n)
			return nil, false
		}
	}
	if f.desc == nil {
		f.labels = names
		f.desc = prometheus.NewDesc(f.name, f.help, names, nil)
	}
	if !slices.Equal(f.labels, names) {
		refuse("label names %v differ from the family's %v", names, f.labels)
		return nil, false
	}
	values := make([]string, len(names))
	for i, n := range names {
		values[i] = labels[n]
	}
	return values, true
}

// applyOp applies a series operation to series key: metric creates it,
// add, set and observe change it as its family's kind allows.
func (f *customFamily) applyOp(m *customMsg, key, model, version string, values []string) {
	s := f.series[key]
	switch m.Op {
	case "metric":
		if s != nil {
			return
		}
		s = &customSeries{model: model, version: version, values: values}
		if f.kind == customHistogram {
			s.buckets = slices.Clone(m.Buckets)
			slices.Sort(s.buckets)
			s.counts = make([]uint64, len(s.buckets))
		}
		f.series[key] = s
	case "add":
		if s != nil && f.kind != customHistogram {
			s.value += m.Value
		}
	case "set":
		if s != nil && f.kind == customGauge {
			s.value = m.Value
		}
	case "observe":
		if s != nil && f.kind == customHistogram {
			s.count++
			s.value += m.Value
			if i, _ := slices.BinarySearch(s.buckets, m.Value); i < len(s.buckets) {
				s.counts[i]++
			}
		}
	}
}

// drop deletes a model version's series.
func (c *customMetrics) drop(model, version string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, f := range c.families {
		n := len(f.series)
		for k, s := range f.series {
			if s.model == model && s.version == version {
				delete(f.series, k)
			}
		}
		if n > 0 && len(f.series) == 0 {
			delete(c.families, name)
		}
	}
}
