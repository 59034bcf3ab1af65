package modelrepo

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// states are the values of the state label of sluice_model_state. Every
// known version has one series per state, 1 for its current state.
var states = [...]State{StateReady, StateUnavailable, StateLoading, StateUnloading}

// metrics are the repository's collectors. Labels are bounded: model and
// version come from the repositories, reason and state from closed sets,
// and a version's series are deleted when it is unloaded.
type metrics struct {
	requests     *prometheus.CounterVec
	failures     *prometheus.CounterVec
	inferences   *prometheus.CounterVec
	executions   *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	loadDuration *prometheus.GaugeVec
	state        *prometheus.GaugeVec
	loadFailures *prometheus.CounterVec
	info         *prometheus.GaugeVec
	loadedAt     *prometheus.GaugeVec
	repoUp       *prometheus.GaugeVec
	repoErrors   *prometheus.CounterVec

	cacheHits      *prometheus.CounterVec
	cacheMisses    *prometheus.CounterVec
	cacheBytes     prometheus.Gauge
	cacheEvictions prometheus.Counter

	triton *tritonMetrics // nil when turned off
}

// newMetrics builds the collectors and registers them with reg; a nil reg
// registers nothing.
func newMetrics(reg prometheus.Registerer, triton bool) *metrics {
	f := promauto.With(reg)
	mv := []string{"model", "version"}
	m := &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "inference_requests_total",
			Help: "Inference requests that succeeded.",
		}, mv),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "inference_failures_total",
			Help: "Inference requests that failed after the model version was resolved, by reason.",
		}, []string{"model", "version", "reason"}),
		inferences: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "inferences_total",
			Help: "Inferences performed; a request with a batch of n counts n.",
		}, mv),
		executions: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "executions_total",
			Help: "Model executions on an instance.",
		}, mv),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "model", Name: "request_duration_seconds",
			Help:                            "Time to serve an inference request, from version lookup to response.",
			Buckets:                         prometheus.ExponentialBucketsRange(50e-6, 10, 18), // 50µs to 10s
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, mv),
		loadDuration: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "load_duration_seconds",
			Help: "Duration of the last successful load of a model version, verification and warm-up included.",
		}, mv),
		state: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "state",
			Help: "Lifecycle state of a model version: 1 for the current state, 0 for the others.",
		}, []string{"model", "version", "state"}),
		loadFailures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "load_failures_total",
			Help: "Model version loads that failed, by cause.",
		}, []string{"model", "reason"}),
		info: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "info",
			Help: "Provenance of each loaded model version (always 1).",
		}, []string{"model", "version", "version_label", "git_commit"}),
		loadedAt: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "loaded_timestamp_seconds",
			Help: "When each serving model version began to serve (Unix seconds); a reload sets it anew, a poll that finds no change leaves it.",
		}, mv),
		repoUp: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "repository_up",
			Help: "Whether the last scan could read the model repository (1) or not (0).",
		}, []string{"repository"}),
		repoErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "repository_errors_total",
			Help: "Scans of the model repository that could not read it.",
		}, []string{"repository"}),
		cacheHits: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "cache_hits_total",
			Help: "Inference requests answered from the response cache.",
		}, mv),
		cacheMisses: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "cache_misses_total",
			Help: "Inference requests to a model with response_cache enabled that the cache could not answer.",
		}, mv),
		cacheBytes: f.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "cache_bytes",
			Help: "Bytes held by the response cache (tensor data plus a small per-entry overhead).",
		}),
		cacheEvictions: f.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Name: "cache_evictions_total",
			Help: "Response cache entries evicted to make room for newer ones.",
		}),
	}
	if triton {
		m.triton = newTritonMetrics(reg)
	}
	return m
}

// versionObservers are one version's request collectors, looked up once at
// load so the request path does no label hashing.
type versionObservers struct {
	requests    prometheus.Counter
	inferences  prometheus.Counter
	executions  prometheus.Counter
	duration    prometheus.Observer
	cacheHits   prometheus.Counter
	cacheMisses prometheus.Counter
	triton      *tritonObservers // nil when Triton's names are off
}

func (m *metrics) observers(model, version string, cached bool) versionObservers {
	o := versionObservers{
		requests:   m.requests.WithLabelValues(model, version),
		inferences: m.inferences.WithLabelValues(model, version),
		executions: m.executions.WithLabelValues(model, version),
		duration:   m.duration.WithLabelValues(model, version),
		triton:     m.triton.observers(model, version),
	}
	// Only versions with a response cache export the cache series.
	if cached {
		o.cacheHits = m.cacheHits.WithLabelValues(model, version)
		o.cacheMisses = m.cacheMisses.WithLabelValues(model, version)
	}
	return o
}

// setState marks a version's current state.
func (m *metrics) setState(model, version string, s State) {
	for _, st := range states {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(model, version, string(st)).Set(v)
	}
}

// setInfo records a loaded version's provenance, replacing what an earlier
// load of the same version said.
func (m *metrics) setInfo(model, version, label, commit string, loadedAt time.Time) {
	m.info.DeletePartialMatch(prometheus.Labels{"model": model, "version": version})
	m.info.WithLabelValues(model, version, label, commit).Set(1)
	m.loadedAt.WithLabelValues(model, version).Set(float64(loadedAt.UnixNano()) / 1e9)
}

// forgetVersion deletes every series of one version.
func (m *metrics) forgetVersion(model, version string) {
	l := prometheus.Labels{"model": model, "version": version}
	m.requests.DeletePartialMatch(l)
	m.failures.DeletePartialMatch(l)
	m.inferences.DeletePartialMatch(l)
	m.executions.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.loadDuration.DeletePartialMatch(l)
	m.state.DeletePartialMatch(l)
	m.info.DeletePartialMatch(l)
	m.loadedAt.DeletePartialMatch(l)
	m.cacheHits.DeletePartialMatch(l)
	m.cacheMisses.DeletePartialMatch(l)
	m.triton.forget(l)
}

// forgetModel deletes every series of a model that left the repository.
func (m *metrics) forgetModel(model string) {
	l := prometheus.Labels{"model": model}
	m.requests.DeletePartialMatch(l)
	m.failures.DeletePartialMatch(l)
	m.inferences.DeletePartialMatch(l)
	m.executions.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.loadDuration.DeletePartialMatch(l)
	m.state.DeletePartialMatch(l)
	m.info.DeletePartialMatch(l)
	m.loadedAt.DeletePartialMatch(l)
	m.loadFailures.DeletePartialMatch(l)
	m.cacheHits.DeletePartialMatch(l)
	m.cacheMisses.DeletePartialMatch(l)
	m.triton.forget(l)
}
