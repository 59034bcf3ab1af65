package metricsdoc_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/tools/metricsdoc"
)

// components are the <component> of sluice_<component>_<name>_<unit>:
// the model server, the feature server, the gateway and release safety
// (recording, shadow, rollout, drift), and the parts every listener shares:
// admission (body limits, memory budget), audit (state-changing calls) and
// tls (certificates); and cluster, the fleet's shared state.
var components = []string{"model", "feature", "gateway", "release", "accuracy", "admission", "audit", "tls", "cluster"}

// knownViolations are the names that break the vocabulary today, with the
// rule each breaks. The list only shrinks: a new violation fails the test,
// and so does a listed one that was fixed (remove it).
var knownViolations = map[string]string{
	"sluice_cache_bytes":                                "component",
	"sluice_cache_evictions_total":                      "component",
	"sluice_drift_events_total":                         "component",
	"sluice_drift_ks_pvalue":                            "component",
	"sluice_drift_psi":                                  "component",
	"sluice_grpc_request_duration_seconds":              "component",
	"sluice_grpc_requests_total":                        "component",
	"sluice_http_request_duration_seconds":              "component",
	"sluice_http_requests_total":                        "component",
	"sluice_rollout_requests_total":                     "component",
	"sluice_rollout_stage":                              "component",
	"sluice_rollout_state":                              "component",
	"sluice_rollout_transitions_total":                  "component",
	"sluice_feature_view_seconds_since_materialization": "unit last",
	// Triton's metric names (docs/user_guide/metrics.md in Triton's
	// server repository), exported next to Sluice's own so that Triton
	// dashboards keep working (--triton-metrics): counters without _total,
	// microseconds, _count on counters and a gauge. Spelled as Triton does
	// or they would be useless.
	"nv_inference_request_success":            "promlint: Triton's name",
	"nv_inference_request_failure":            "promlint: Triton's name",
	"nv_inference_count":                      "promlint: Triton's name",
	"nv_inference_exec_count":                 "promlint: Triton's name",
	"nv_inference_pending_request_count":      "promlint: Triton's name",
	"nv_inference_request_duration_us":        "promlint: Triton's name",
	"nv_inference_queue_duration_us":          "promlint: Triton's name",
	"nv_inference_compute_input_duration_us":  "promlint: Triton's name",
	"nv_inference_compute_infer_duration_us":  "promlint: Triton's name",
	"nv_inference_compute_output_duration_us": "promlint: Triton's name",
}

// unboundedLabels are label names whose values grow without bound.
var unboundedLabels = []string{"request_id", "trace_id", "span_id", "user", "user_id", "ip", "client_ip", "path", "url", "uri", "query", "key", "order_id", "client"}

var (
	// nonBaseUnit matches units other than the base ones.
	nonBaseUnit = regexp.MustCompile(`_(milliseconds|ms|microseconds|us|nanoseconds|ns|minutes|hours|days|kilobytes|kb|megabytes|mb|percent)(_|$)`)
	// unitWord matches a base unit anywhere in a name.
	unitWord = regexp.MustCompile(`_(seconds|bytes|ratio)(_|$)`)
	// timeWord matches names that measure time.
	timeWord = regexp.MustCompile(`_(duration|latency|age|delay|wait|timestamp)(_|$)`)
)

// violations returns the vocabulary rules f breaks.
func violations(f metricsdoc.Family) []string {
	var out []string
	name := f.Name
	if !strings.HasPrefix(name, "sluice_") {
		return nil // runtime, process and client library metrics
	}
	rest := strings.TrimPrefix(name, "sluice_")
	if !slices.ContainsFunc(components, func(c string) bool { return strings.HasPrefix(rest, c+"_") }) {
		out = append(out, "component")
	}
	if (f.Type == metricsdoc.TypeCounter) != strings.HasSuffix(name, "_total") {
		out = append(out, "_total on counters only")
	}
	if nonBaseUnit.MatchString(name) {
		out = append(out, "base units")
	}
	base := strings.TrimSuffix(name, "_total")
	if loc := unitWord.FindStringIndex(base); loc != nil && loc[1] != len(base) {
		out = append(out, "unit last")
	}
	if timeWord.MatchString(name) && !strings.HasSuffix(base, "_seconds") {
		out = append(out, "time in seconds")
	}
	if strings.Contains(name, "timestamp") && !strings.HasSuffix(name, "_timestamp_seconds") {
		out = append(out, "timestamps as _timestamp_seconds")
	}
	for _, l := range f.Labels {
		if slices.Contains(unboundedLabels, l) {
			out = append(out, "unbounded label "+l)
		}
	}
	return out
}

// TestVocabulary holds every exported name to the naming rules of the
// metrics vocabulary (and to promlint, what promtool check metrics runs),
// allowing only knownViolations.
func TestVocabulary(t *testing.T) {
	fams := collect(t)
	found := map[string]bool{}
	for _, f := range fams {
		v := violations(f)
		for _, p := range lint(t, f) {
			v = append(v, "promlint: "+p)
		}
		if len(v) == 0 {
			continue
		}
		found[f.Name] = true
		if _, ok := knownViolations[f.Name]; !ok {
			t.Errorf("%s breaks the metrics vocabulary: %s", f.Name, strings.Join(v, "; "))
		}
	}
	for name := range knownViolations {
		if !found[name] {
			t.Errorf("%s is listed in knownViolations but no longer breaks a rule (or is gone): remove it", name)
		}
	}
}

// lint runs promlint on one family.
func lint(t *testing.T, f metricsdoc.Family) []string {
	t.Helper()
	typ := dto.MetricType(dto.MetricType_value[strings.ToUpper(f.Type)])
	m := &dto.Metric{}
	for _, l := range f.Labels {
		m.Label = append(m.Label, &dto.LabelPair{Name: new(l), Value: new("x")})
	}
	switch typ {
	case dto.MetricType_COUNTER:
		m.Counter = &dto.Counter{Value: proto.Float64(0)}
	case dto.MetricType_GAUGE:
		m.Gauge = &dto.Gauge{Value: proto.Float64(0)}
	case dto.MetricType_HISTOGRAM:
		m.Histogram = &dto.Histogram{SampleCount: proto.Uint64(0), SampleSum: proto.Float64(0)}
	case dto.MetricType_SUMMARY:
		m.Summary = &dto.Summary{SampleCount: proto.Uint64(0), SampleSum: proto.Float64(0)}
	default:
		m.Untyped = &dto.Untyped{Value: proto.Float64(0)}
	}
	mf := &dto.MetricFamily{Name: new(f.Name), Help: new(f.Help), Type: typ.Enum(), Metric: []*dto.Metric{m}}
	problems, err := promlint.NewWithMetricFamilies([]*dto.MetricFamily{mf}).Lint()
	if err != nil {
		t.Fatalf("promlint %s: %v", f.Name, err)
	}
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = p.Text
	}
	return out
}

func TestViolations(t *testing.T) {
	tests := []struct {
		f    metricsdoc.Family
		want []string
	}{
		{f: metricsdoc.Family{Name: "sluice_model_request_duration_seconds", Type: "histogram", Labels: []string{"model"}}},
		{f: metricsdoc.Family{Name: "sluice_gateway_requests_total", Type: "counter"}},
		{f: metricsdoc.Family{Name: "go_goroutines", Type: "gauge"}},
		{f: metricsdoc.Family{Name: "sluice_http_requests_total", Type: "counter"}, want: []string{"component"}},
		{f: metricsdoc.Family{Name: "sluice_gateway_requests", Type: "counter"}, want: []string{"_total on counters only"}},
		{f: metricsdoc.Family{Name: "sluice_gateway_open_total", Type: "gauge"}, want: []string{"_total on counters only"}},
		{f: metricsdoc.Family{Name: "sluice_model_latency_ms", Type: "histogram"}, want: []string{"base units", "time in seconds"}},
		{f: metricsdoc.Family{Name: "sluice_feature_view_seconds_since_load", Type: "gauge"}, want: []string{"unit last"}},
		{f: metricsdoc.Family{Name: "sluice_feature_load_timestamp", Type: "gauge"}, want: []string{"time in seconds", "timestamps as _timestamp_seconds"}},
		{f: metricsdoc.Family{Name: "sluice_gateway_requests_total", Type: "counter", Labels: []string{"request_id"}}, want: []string{"unbounded label request_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.f.Name, func(t *testing.T) {
			if got := violations(tt.f); !slices.Equal(got, tt.want) {
				t.Fatalf("violations = %q, want %q", got, tt.want)
			}
		})
	}
}
