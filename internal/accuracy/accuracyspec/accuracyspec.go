// Package accuracyspec is how sluice.yaml writes online accuracy: a
// service's accuracy block (gateway.services[].accuracy: which share of
// predictions is logged, the business key outcomes join on, slices,
// outputs and their observed values, the offline evaluation) and the
// gateway's (gateway.accuracy: the pending store, the prediction log,
// lookback and bounds), with the checks that need nothing but the values.
// Package accuracy runs it; package config embeds it. It imports only
// leaf packages, so that config stays data.
package accuracyspec

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/config/duration"
)

// Defaults.
const (
	// DefaultPercent is the share of a service's predictions logged.
	DefaultPercent = 100.0
	// DefaultMaxSliceValues bounds the distinct values of one slice
	// dimension that get series of their own; the rest share "_other".
	DefaultMaxSliceValues = 20
	// DefaultLookback is how long a prediction waits for its outcome (and
	// an outcome for its prediction).
	DefaultLookback = 14 * 24 * time.Hour
	// DefaultMaxPending bounds the pending predictions and held outcomes.
	DefaultMaxPending = 1_000_000
	// DefaultQueueSize bounds the predictions logged but not yet stored.
	DefaultQueueSize = 10_000
	// DefaultPath is the embedded pending store's file.
	DefaultPath = "./data/accuracy/pending.db"
	// DefaultLogDir is the JSONL prediction log's folder.
	DefaultLogDir = "./data/accuracy/predictions"
	// DefaultBucket is the NATS JetStream key-value bucket of a fleet's
	// pending store.
	DefaultBucket = "sluice_accuracy"
	// DefaultWindow is the rolling window of the error gauges.
	DefaultWindow = time.Hour
	// DefaultThreshold is the probability at which a binary prediction
	// counts as positive.
	DefaultThreshold = 0.5
)

// Output kinds.
const (
	KindRegression = "regression"
	KindBinary     = "binary"
)

// Metric names, as offline evaluations, gauges and gates write them.
const (
	MetricMAE      = "mae"
	MetricRMSE     = "rmse"
	MetricBias     = "bias"
	MetricMAPE     = "mape"
	MetricCoverage = "coverage"
	MetricAccuracy = "accuracy"
	MetricLogLoss  = "log_loss"
	MetricAUC      = "auc"
	MetricBrier    = "brier"
)

// RegressionMetrics and BinaryMetrics are the metrics of each kind.
var (
	RegressionMetrics = []string{MetricMAE, MetricRMSE, MetricBias, MetricMAPE, MetricCoverage}
	BinaryMetrics     = []string{MetricAccuracy, MetricLogLoss, MetricAUC, MetricBrier}
)

// Service is a service's accuracy block.
type Service struct {
	// Percent is the share of requests, in percent, whose predictions are
	// logged, picked by hash of the key (like the shadow share) [100].
	Percent float64 `yaml:"percent"`
	// Key names the entity join key or request field that outcomes join
	// on, e.g. order_id; empty joins on the request id.
	Key string `yaml:"key"`
	// Slices are request headers whose values slice the metrics (e.g.
	// x-region); the route and the rollout group always do.
	Slices []string `yaml:"slices"`
	// MaxSliceValues bounds the values per slice dimension with series of
	// their own [20]; later ones are "_other".
	MaxSliceValues int `yaml:"max_slice_values"`
	// Outputs are the outputs judged against outcomes. Required.
	Outputs []Output `yaml:"outputs"`
	// Window is the rolling window the error gauges cover [1h].
	Window duration.Duration `yaml:"window"`
	// Features logs the assembled features with each prediction.
	Features bool `yaml:"features"`
	// Offline are the offline evaluations the versions declare.
	Offline []Offline `yaml:"offline"`
	// OutcomeClients are the gateway client ids that may post outcomes on
	// the gateway's listener; empty: every authenticated client. Anonymous
	// callers never may. The admin port takes outcomes with an operate
	// token.
	OutcomeClients []string `yaml:"outcome_clients"`
}

// Output is one output judged against its observed value.
type Output struct {
	// Name is the service output's name.
	Name string `yaml:"name"`
	// Observed is the outcome value's name, e.g. actual_minutes [Name].
	Observed string `yaml:"observed"`
	// Kind is regression or binary (a probability against a 0/1 outcome)
	// [regression].
	Kind string `yaml:"kind"`
	// Lower and Upper name outputs bounding a prediction interval (e.g.
	// the 10th and 90th percentile); with both, coverage is exported.
	Lower string `yaml:"lower"`
	Upper string `yaml:"upper"`
	// Threshold is the probability at which a binary prediction counts as
	// positive [0.5].
	Threshold float64 `yaml:"threshold"`
}

// Offline is one version's offline evaluation of one output.
type Offline struct {
	// Version is the model version evaluated.
	Version string `yaml:"version"`
	// Output is the output evaluated [the first output].
	Output string `yaml:"output"`
	// Metrics maps metric names (mae, rmse, bias, mape, coverage,
	// accuracy, log_loss, auc, brier) to the offline values.
	Metrics map[string]float64 `yaml:"metrics"`
	// Dataset says what it was measured on, e.g. "holdout 2026-11".
	Dataset string `yaml:"dataset"`
}

// Gateway is the gateway's accuracy block: where pending predictions wait.
type Gateway struct {
	// Store is embedded (a bbolt file) or nats (a JetStream key-value
	// bucket shared by a fleet) [embedded].
	Store string `yaml:"store"`
	// Path is the embedded store's file [./data/accuracy/pending.db].
	Path string `yaml:"path"`
	// NATS is the fleet store's bucket; its connection is the cluster's
	// (or the recording's) NATS.
	NATS NATS `yaml:"nats"`
	// Lookback is how long a prediction waits for its outcome and an
	// outcome for its prediction; older outcomes are refused [336h].
	Lookback duration.Duration `yaml:"lookback"`
	// MaxPending bounds the entries waiting; the oldest is evicted (and
	// counted) to make room [1000000].
	MaxPending int `yaml:"max_pending"`
	// QueueSize bounds the predictions logged and not yet stored; a full
	// queue drops (and counts) [10000].
	QueueSize int `yaml:"queue_size"`
	// Log is the durable prediction log.
	Log Log `yaml:"log"`
	// OutcomeSubject, when set, is a NATS subject prefix: a message on
	// <prefix>.<service> holds that service's outcomes (a JSON object or
	// array, as POST takes); a message with a reply subject gets the
	// results. On the cluster's NATS, else the recording's.
	OutcomeSubject string `yaml:"outcome_subject"`
}

// NATS is the fleet store's JetStream settings.
type NATS struct {
	// URL is the NATS server; empty takes the recording's.
	URL string `yaml:"url"`
	// Bucket is the key-value bucket [sluice_accuracy].
	Bucket string `yaml:"bucket"`
}

// Log is where predictions are logged durably.
type Log struct {
	// Sink is jsonl, nats (the recording's NATS, stream
	// SLUICE_PREDICTIONS) or off [jsonl].
	Sink string `yaml:"sink"`
	// Dir is the JSONL folder [./data/accuracy/predictions].
	Dir string `yaml:"dir"`
	// Archive moves the rotated JSONL files to object storage.
	Archive Archive `yaml:"archive"`
}

// Archive is where rotated JSONL files go: a folder on object storage,
// with credentials from the environment.
type Archive struct {
	// Location is s3://bucket/path, s3://host:port/bucket/path,
	// gs://bucket/path or as://account/container/path; empty: files stay
	// local.
	Location string `yaml:"location"`
	// Interval is how often the folder is scanned for rotated files
	// (a rotation also starts a scan) [30s].
	Interval duration.Duration `yaml:"interval"`
}

// DefaultArchiveInterval is Archive.Interval's default.
const DefaultArchiveInterval = 30 * time.Second

// CheckArchiveLocation returns what is wrong with an archive location, or
// "" when it names object storage without credentials in it.
func CheckArchiveLocation(loc string) string {
	scheme, rest, ok := strings.Cut(loc, "://")
	switch {
	case !ok || (scheme != "s3" && scheme != "gs" && scheme != "as"):
		return "want s3://, gs:// or as://"
	case strings.ContainsAny(rest, "@?#\\"):
		return "'@', '?', '#' and '\\' are not allowed (credentials go in the environment)"
	case strings.Trim(rest, "/") == "":
		return "no bucket"
	}
	return ""
}

// ApplyDefaults fills the zero fields of s.
func (s *Service) ApplyDefaults() {
	if s.Percent == 0 {
		s.Percent = DefaultPercent
	}
	if s.MaxSliceValues == 0 {
		s.MaxSliceValues = DefaultMaxSliceValues
	}
	if s.Window == 0 {
		s.Window = duration.Duration(DefaultWindow)
	}
	for i := range s.Outputs {
		o := &s.Outputs[i]
		if o.Observed == "" {
			o.Observed = o.Name
		}
		if o.Kind == "" {
			o.Kind = KindRegression
		}
		if o.Kind == KindBinary && o.Threshold == 0 {
			o.Threshold = DefaultThreshold
		}
	}
	for i := range s.Offline {
		if s.Offline[i].Output == "" && len(s.Outputs) > 0 {
			s.Offline[i].Output = s.Outputs[0].Name
		}
	}
}

// ApplyDefaults fills the zero fields of g.
func (g *Gateway) ApplyDefaults() {
	if g.Store == "" {
		g.Store = "embedded"
	}
	if g.Path == "" {
		g.Path = DefaultPath
	}
	if g.NATS.Bucket == "" {
		g.NATS.Bucket = DefaultBucket
	}
	if g.Lookback == 0 {
		g.Lookback = duration.Duration(DefaultLookback)
	}
	if g.MaxPending == 0 {
		g.MaxPending = DefaultMaxPending
	}
	if g.QueueSize == 0 {
		g.QueueSize = DefaultQueueSize
	}
	if g.Log.Sink == "" {
		g.Log.Sink = "jsonl"
	}
	if g.Log.Dir == "" {
		g.Log.Dir = DefaultLogDir
	}
	if g.Log.Archive.Location != "" && g.Log.Archive.Interval == 0 {
		g.Log.Archive.Interval = duration.Duration(DefaultArchiveInterval)
	}
}

// FieldError is one thing wrong with a block. Path is relative to it.
type FieldError struct {
	Path string
	Msg  string
}

// Error formats the problem as "path: msg".
func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

var headerName = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

// Validate checks s (with defaults applied) against the service's output
// names and reports every problem at once, one *FieldError each.
func (s *Service) Validate(outputs map[string]bool) error {
	var fe fieldErrors
	if !(s.Percent > 0 && s.Percent <= 100) {
		fe.add("percent", "%v outside (0,100]", s.Percent)
	}
	if s.MaxSliceValues < 1 || s.MaxSliceValues > 1000 {
		fe.add("max_slice_values", "%d outside [1,1000]", s.MaxSliceValues)
	}
	if s.Window < duration.Duration(time.Minute) {
		fe.add("window", "must be at least 1m")
	}
	for i, h := range s.Slices {
		if !headerName.MatchString(h) {
			fe.add(fmt.Sprintf("slices[%d]", i), "%q is not a header name", h)
		}
	}
	if len(s.Outputs) == 0 {
		fe.add("outputs", "is required: at least one output to judge")
	}
	seen := map[string]bool{}
	kinds := map[string]string{}
	for i, o := range s.Outputs {
		fe.output(fmt.Sprintf("outputs[%d]", i), o, outputs, seen)
		kinds[o.Name] = o.Kind
	}
	for i, off := range s.Offline {
		fe.offline(fmt.Sprintf("offline[%d]", i), off, kinds)
	}
	return errors.Join(fe...)
}

// fieldErrors collects the FieldErrors of one Validate.
type fieldErrors []error

func (fe *fieldErrors) add(path, format string, args ...any) {
	*fe = append(*fe, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// output checks one judged output at path p; seen holds the names
// checked before it.
func (fe *fieldErrors) output(p string, o Output, outputs, seen map[string]bool) {
	if !outputs[o.Name] {
		fe.add(p+".name", "%q is not an output of the service", o.Name)
	}
	if seen[o.Name] {
		fe.add(p+".name", "output %q listed twice", o.Name)
	}
	seen[o.Name] = true
	switch o.Kind {
	case KindRegression, KindBinary:
	default:
		fe.add(p+".kind", "%q: want regression or binary", o.Kind)
	}
	if (o.Lower == "") != (o.Upper == "") {
		fe.add(p, "lower and upper go together")
	}
	for _, b := range []struct{ path, name string }{{"lower", o.Lower}, {"upper", o.Upper}} {
		if b.name != "" && !outputs[b.name] {
			fe.add(p+"."+b.path, "%q is not an output of the service", b.name)
		}
	}
	if o.Kind == KindBinary && !(o.Threshold > 0 && o.Threshold < 1) {
		fe.add(p+".threshold", "%v outside (0,1)", o.Threshold)
	}
}

// offline checks one offline baseline at path p; kinds maps each judged
// output to its kind.
func (fe *fieldErrors) offline(p string, off Offline, kinds map[string]string) {
	if off.Version == "" {
		fe.add(p+".version", "is required")
	}
	kind, ok := kinds[off.Output]
	if !ok {
		fe.add(p+".output", "%q is not one of the accuracy outputs", off.Output)
	}
	if len(off.Metrics) == 0 {
		fe.add(p+".metrics", "is required: at least one metric")
	}
	for name, v := range off.Metrics {
		allowed := RegressionMetrics
		if kind == KindBinary {
			allowed = BinaryMetrics
		}
		if ok && (kind == KindRegression || kind == KindBinary) && !slices.Contains(allowed, name) {
			fe.add(p+".metrics."+name, "unknown metric for a %s output (want one of %v)", kind, allowed)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			fe.add(p+".metrics."+name, "must be a finite number")
		}
	}
}

// Validate checks g (with defaults applied) and reports every problem at
// once, one *FieldError each.
func (g *Gateway) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	switch g.Store {
	case "embedded", "nats":
	default:
		add("store", "%q: want embedded or nats", g.Store)
	}
	switch g.Log.Sink {
	case "jsonl", "nats", "off":
	default:
		add("log.sink", "%q: want jsonl, nats or off", g.Log.Sink)
	}
	if a := g.Log.Archive; a.Location != "" {
		if msg := CheckArchiveLocation(a.Location); msg != "" {
			add("log.archive.location", "%s", msg)
		}
		if g.Log.Sink != "jsonl" {
			add("log.archive", "archives the jsonl sink's files; log.sink is %q", g.Log.Sink)
		}
		if a.Interval < duration.Duration(time.Second) {
			add("log.archive.interval", "must be at least 1s")
		}
	}
	if g.Lookback <= 0 {
		add("lookback", "must be positive")
	}
	if g.MaxPending < 1 {
		add("max_pending", "must be positive")
	}
	if g.QueueSize < 1 {
		add("queue_size", "must be positive")
	}
	return errors.Join(errs...)
}
