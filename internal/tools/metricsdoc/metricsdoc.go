// Package metricsdoc inventories the Prometheus metrics Sluice exports. It
// builds every component that owns collectors (model server, feature
// server, gateway, release safety) the way the commands wire them, over
// one registry, and reads each collector's name, type, help and label
// names back from what it collects. Its tests generate docs/metrics.md
// from the inventory and check the Grafana dashboards against it, so
// neither can drift from the code.
//
// It is test support, like a fixture: nothing in the commands imports it.
package metricsdoc

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/backend/python"
	"github.com/sluice-ml/sluice/internal/cluster"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature/materialize"
	"github.com/sluice-ml/sluice/internal/feature/online/connect"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/servingapi"
	"github.com/sluice-ml/sluice/internal/feature/stream"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/httpapi"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/release/drift"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/release/rollout"
	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// chain holds the configuration Collect builds the components from: a
// gateway section with every feature that registers collectors, and a
// small feature repository.
//
//go:embed chain
var chain embed.FS

// Components, in the order of docs/metrics.md.
const (
	ComponentModel    = "Model server"
	ComponentFeature  = "Feature server"
	ComponentGateway  = "Gateway"
	ComponentRelease  = "Release safety"
	ComponentSecurity = "Security (every listener)"
	ComponentExporter = "Exposition"
	ComponentRuntime  = "Go runtime and process"
	// ComponentPushed holds the gauges batch jobs push to a Pushgateway
	// instead of serving them; Collect does not return them.
	ComponentPushed = "Pushed to a Pushgateway"
)

// Components lists the components in document order.
var Components = []string{
	ComponentModel, ComponentFeature, ComponentGateway, ComponentRelease, ComponentSecurity, ComponentExporter, ComponentRuntime, ComponentPushed,
}

// Metric types, as Prometheus names them in # TYPE lines.
const (
	TypeCounter   = "counter"
	TypeGauge     = "gauge"
	TypeHistogram = "histogram"
	TypeSummary   = "summary"
	TypeUntyped   = "untyped"
)

// Family describes one exported metric family.
type Family struct {
	// Component is the part of Sluice that registers it (one of Components).
	Component string
	// Name is the family name; Type one of the Type constants.
	Name, Type string
	// Help is the HELP text.
	Help string
	// Labels are the label names every series of the family carries,
	// sorted.
	Labels []string
	// Buckets are a histogram's classic bucket upper bounds, +Inf left
	// out.
	Buckets []float64
	// Native reports a histogram that also exposes native buckets to
	// scrapers that negotiate them.
	Native bool
}

// Series returns the names of the series f exposes in the text format:
// the family name, plus _bucket, _sum and _count for a histogram and _sum
// and _count for a summary.
func (f Family) Series() []string {
	switch f.Type {
	case TypeHistogram:
		return []string{f.Name, f.Name + "_bucket", f.Name + "_sum", f.Name + "_count"}
	case TypeSummary:
		return []string{f.Name, f.Name + "_sum", f.Name + "_count"}
	default:
		return []string{f.Name}
	}
}

// SeriesNames maps every series name the families expose (see
// Family.Series) to its family.
func SeriesNames(fams []Family) map[string]Family {
	out := make(map[string]Family, len(fams)*2)
	for _, f := range fams {
		for _, s := range f.Series() {
			out[s] = f
		}
	}
	return out
}

// Collect builds every component over one registry, as the commands do,
// and returns the families they register, sorted by component (in
// Components order) and name. dir is an empty, writable scratch folder
// (the embedded online store and the recordings go there); it may be
// removed once Collect returns.
func Collect(ctx context.Context, dir string) (fams []Family, err error) {
	if err := os.CopyFS(dir, chain); err != nil {
		return nil, fmt.Errorf("write chain fixture: %w", err)
	}
	dir = filepath.Join(dir, "chain")
	reg := telemetry.NewRegistry()
	rec := &recorder{reg: reg}
	var closers []func(context.Context) error
	defer func() {
		// Close in reverse order of construction: the gateway before the
		// models and features it calls.
		for _, c := range slices.Backward(closers) {
			err = errors.Join(err, c(ctx))
		}
	}()

	// The model server: sluice serve (internal/cli/serve.go).
	rec.component = ComponentModel
	modelDir := filepath.Join(dir, "models")
	if err := os.Mkdir(modelDir, 0o750); err != nil {
		return nil, err
	}
	models, err := modelrepo.New(modelrepo.Options{Repositories: []string{modelDir}}, &backend.Registry{}, nil, rec)
	if err != nil {
		return nil, fmt.Errorf("model server: %w", err)
	}
	closers = append(closers, models.Close)
	// The Python backend's worker metrics (python, pytorch).
	py := python.New(python.Options{}, nil, rec)
	closers = append(closers, func(context.Context) error { return py.Close() })
	httpapi.New(models, httpapi.Options{}, nil, rec)
	grpcapi.New(models, grpcapi.Options{}, nil, rec)

	// The feature server: sluice features serve
	// (internal/cli/feature_server.go), and materialization.
	rec.component = ComponentFeature
	holder, err := registry.NewHolder(ctx, filepath.Join(dir, "features"), nil, rec)
	if err != nil {
		return nil, fmt.Errorf("feature registry: %w", err)
	}
	repo := holder.Current()
	store, err := connect.Open(ctx, repo.Config.Online, repo.Project, repo.Dir, nil, rec)
	if err != nil {
		return nil, fmt.Errorf("online store: %w", err)
	}
	closers = append(closers, func(context.Context) error { return store.Close() })
	features := serving.New(holder, store, serving.Options{}, nil, rec)
	servingapi.NewHandler(features, servingapi.HandlerOptions{}, nil, rec)
	servingapi.NewGRPCService(features, servingapi.GRPCOptions{}, nil, rec)
	// The commands still pass materialization a nil registerer
	// (internal/cli/chain.go, feature_server.go); its collectors are part
	// of the feature server's vocabulary all the same.
	materialize.New(repo, store, materialize.Options{}, nil, rec)
	// The stream aggregators: sluice features aggregate
	// (internal/cli/features_aggregate.go), or feature-server --aggregate.
	stream.RegisterMetrics(rec)

	// Release safety: the recording writer the gateway mirrors shadow
	// traffic to (internal/cli/chain.go), the NATS recording sink (its
	// metrics are registered before it connects, so a canceled context
	// is enough), and the service's rollout controller and drift monitor,
	// built here before the gateway builds its own so that they are
	// listed under this component (the gateway's reuse the collectors).
	rec.component = ComponentRelease
	cfg, err := config.Load(filepath.Join(dir, "sluice.yaml"))
	if err != nil {
		return nil, err
	}
	rc := cfg.Gateway.Recording
	sink, err := record.NewFileSink(record.FileOptions{Dir: rc.Dir}, nil)
	if err != nil {
		return nil, fmt.Errorf("recording sink: %w", err)
	}
	recorder := record.NewWriter(sink, record.WriterOptions{QueueSize: rc.QueueSize, SinkLabel: rc.Sink}, nil, rec)
	// The archiver of rotated JSONL files (gateway.recording.archive,
	// gateway.accuracy.log.archive); it opens its bucket without
	// contacting it, and is never started here.
	if _, err := record.NewArchiver(ctx, record.ArchiveOptions{Dir: rc.Dir, Location: "s3://127.0.0.1:9/metricsdoc", Label: "recordings"}, nil, rec); err != nil {
		_ = recorder.Close(ctx)
		return nil, fmt.Errorf("recording archive: %w", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if ns, err := record.NewNATSSink(canceled, record.NATSOptions{URL: "nats://127.0.0.1:4222", Stream: "SLUICE_RECORDINGS"}, nil, rec); err == nil {
		closers = append(closers, ns.Close)
	}
	// The fleet's shared state (cluster section, internal/cli/fleet.go):
	// its metrics are registered before it connects.
	cluster.New(cluster.Options{}, nil, rec)
	svc := cfg.Gateway.Services[0]
	if _, err := rollout.New(svc.Name, *svc.Rollout, rollout.Options{}, nil, rec); err != nil {
		_ = recorder.Close(ctx)
		return nil, fmt.Errorf("rollout: %w", err)
	}
	mon, err := drift.NewMonitor(svc.Name, []drift.Variable{{Name: "output__eta_prediction"}}, drift.Options{}, nil, rec)
	if err != nil {
		_ = recorder.Close(ctx)
		return nil, fmt.Errorf("drift monitor: %w", err)
	}
	mon.Close()
	// Online accuracy: the joiner of predictions and outcomes
	// (internal/cli/accuracy.go), over its embedded pending store.
	pending, err := accuracy.OpenBolt(filepath.Join(dir, "accuracy", "pending.db"), 10, nil)
	if err != nil {
		_ = recorder.Close(ctx)
		return nil, fmt.Errorf("accuracy store: %w", err)
	}
	joiner := accuracy.New(pending, accuracy.Options{}, nil, rec)
	closers = append(closers, joiner.Close)

	// The gateway: sluice serve -c (internal/cli/chain.go).
	rec.component = ComponentGateway
	gw, err := gateway.New(cfg, gateway.Options{
		Models: models, Features: features, FeatureRepo: holder.Current, Recorder: recorder,
	}, nil, rec)
	if err != nil {
		_ = recorder.Close(ctx)
		return nil, fmt.Errorf("gateway: %w", err)
	}
	closers = append(closers, gw.Close) // closes the recorder too

	// What every command's guard registers (internal/cli/security.go): the
	// audit log, the admission limits and budget, the TLS material.
	rec.component = ComponentSecurity
	authz.NewAuditor(nil, rec)
	admission.NewMetrics(rec)
	tlsconfig.NewMetrics(rec)

	// /metrics itself: the commands serve the registry with promhttp,
	// which counts its own errors.
	rec.component = ComponentExporter
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: rec})

	return rec.families()
}

// families describes every collector registered through rec, with the
// Go runtime and process collectors every registry has, sorted; a metric
// name registered twice is an error.
func (rec *recorder) families() ([]Family, error) {
	var fams []Family
	for _, c := range rec.collectors {
		got, err := describe(c.c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.component, err)
		}
		for _, f := range got {
			f.Component = c.component
			fams = append(fams, f)
		}
	}
	// The Go runtime and process collectors come with every registry
	// (telemetry.NewRegistry); they always collect.
	mfs, err := telemetry.NewRegistry().Gather()
	if err != nil {
		return nil, fmt.Errorf("gather runtime metrics: %w", err)
	}
	for _, mf := range mfs {
		f := family(mf)
		f.Component = ComponentRuntime
		fams = append(fams, f)
	}
	sortFamilies(fams)
	for i := 1; i < len(fams); i++ {
		if fams[i].Name == fams[i-1].Name {
			return nil, fmt.Errorf("metric %s is registered by %s and %s", fams[i].Name, fams[i-1].Component, fams[i].Component)
		}
	}
	return fams, nil
}

// sortFamilies orders fams by component, in Components order, then name.
func sortFamilies(fams []Family) {
	slices.SortFunc(fams, func(a, b Family) int {
		if c := slices.Index(Components, a.Component) - slices.Index(Components, b.Component); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// recorder is a Registerer that remembers which component registered each
// collector. A collector shared through telemetry.Register (already
// registered) stays with the component that registered it first.
type recorder struct {
	reg        *prometheus.Registry
	component  string
	collectors []owned
}

type owned struct {
	component string
	c         prometheus.Collector
}

// Register implements prometheus.Registerer.
func (rec *recorder) Register(c prometheus.Collector) error {
	if err := rec.reg.Register(c); err != nil {
		return err
	}
	rec.collectors = append(rec.collectors, owned{component: rec.component, c: c})
	return nil
}

// MustRegister implements prometheus.Registerer.
func (rec *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := rec.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer.
func (rec *recorder) Unregister(c prometheus.Collector) bool {
	rec.collectors = slices.DeleteFunc(rec.collectors, func(o owned) bool { return o.c == c })
	return rec.reg.Unregister(c)
}

// maxLabels bounds the label count describe tries on a vector.
const maxLabels = 16

// describe returns the families c collects. A vector with no series
// collects nothing, so describe adds a probe series to it (label values
// "probe"), found by trying label counts, and deletes it afterwards.
func describe(c prometheus.Collector) ([]Family, error) {
	probe := prometheus.NewPedanticRegistry()
	if err := probe.Register(c); err != nil {
		return nil, err
	}
	if p := prober(c); p != nil {
		values, err := p.add()
		if err != nil {
			return nil, err
		}
		defer p.del(values...)
	}
	mfs, err := probe.Gather()
	if err != nil {
		return nil, err
	}
	descs := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(descs); close(descs) }()
	n := 0
	for range descs {
		n++
	}
	if n != len(mfs) {
		return nil, fmt.Errorf("collector %T describes %d metrics but collects %d families", c, n, len(mfs))
	}
	out := make([]Family, 0, len(mfs))
	for _, mf := range mfs {
		out = append(out, family(mf))
	}
	return out, nil
}

// family reads a gathered family's description.
func family(mf *dto.MetricFamily) Family {
	f := Family{Name: mf.GetName(), Help: mf.GetHelp(), Type: strings.ToLower(mf.GetType().String())}
	if len(mf.GetMetric()) == 0 {
		return f
	}
	m := mf.GetMetric()[0]
	for _, lp := range m.GetLabel() {
		f.Labels = append(f.Labels, lp.GetName())
	}
	slices.Sort(f.Labels)
	if h := m.GetHistogram(); h != nil {
		for _, b := range h.GetBucket() {
			f.Buckets = append(f.Buckets, b.GetUpperBound())
		}
		f.Native = h.Schema != nil
	}
	return f
}

// vector is a metric vector whose series describe can add and delete.
type vector struct {
	get func(values ...string) error
	del func(values ...string) bool
}

func prober(c prometheus.Collector) *vector {
	switch v := c.(type) {
	case *prometheus.CounterVec:
		return &vector{get: func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }, del: v.DeleteLabelValues}
	case *prometheus.GaugeVec:
		return &vector{get: func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }, del: v.DeleteLabelValues}
	case *prometheus.HistogramVec:
		return &vector{get: func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }, del: v.DeleteLabelValues}
	case *prometheus.SummaryVec:
		return &vector{get: func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }, del: v.DeleteLabelValues}
	}
	return nil
}

// add creates a probe series and returns its label values.
func (v *vector) add() ([]string, error) {
	for n := 0; n <= maxLabels; n++ {
		values := slices.Repeat([]string{"probe"}, n)
		if err := v.get(values...); err == nil {
			return values, nil
		}
	}
	return nil, fmt.Errorf("no label count up to %d fits the vector", maxLabels)
}
