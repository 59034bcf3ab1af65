package modelrepo

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/sluice-ml/sluice/internal/batch"
)

// tritonMetrics are the inference metrics under the names, types and
// labels of Triton's metrics document (docs/user_guide/metrics.md), so
// that dashboards and alerts written for Triton keep working. They
// duplicate Sluice's own sluice_model_* series and can be turned off
// (Options.DisableTritonMetrics, --triton-metrics=false). Triton's names
// predate Prometheus' naming rules: counters without _total and
// microseconds; they are kept as Triton spells them.
type tritonMetrics struct {
	success   *prometheus.CounterVec
	failure   *prometheus.CounterVec
	count     *prometheus.CounterVec
	execCount *prometheus.CounterVec
	pending   *prometheus.GaugeVec
	requestUS *prometheus.CounterVec
	queueUS   *prometheus.CounterVec
	inputUS   *prometheus.CounterVec
	inferUS   *prometheus.CounterVec
	outputUS  *prometheus.CounterVec
}

// Triton's values of the reason label of nv_inference_request_failure.
const (
	tritonRejected = "REJECTED" // the scheduler refused the request (queue full, queue timeout)
	tritonCanceled = "CANCELED" // the client went away or its deadline passed
	tritonBackend  = "BACKEND"  // the model's execution failed
	tritonOther    = "OTHER"    // anything else (invalid input, an unavailable model, ...)
)

func newTritonMetrics(reg prometheus.Registerer) *tritonMetrics {
	f := promauto.With(reg)
	mv := []string{"model", "version"}
	counter := func(name, help string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, mv)
	}
	return &tritonMetrics{
		success: counter("nv_inference_request_success", "Triton-compatible: successful inference requests, cache hits included."),
		failure: f.NewCounterVec(prometheus.CounterOpts{ //nolint:promlinter // Triton's metric name, which Triton dashboards query
			Name: "nv_inference_request_failure",
			Help: "Triton-compatible: failed inference requests, by reason (REJECTED, CANCELED, BACKEND, OTHER).",
		}, []string{"model", "version", "reason"}),
		count:     counter("nv_inference_count", "Triton-compatible: inferences performed; a request with a batch of n counts n. Cache hits are not counted."),
		execCount: counter("nv_inference_exec_count", "Triton-compatible: model executions (batches) performed. Cache hits are not counted."),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{ //nolint:promlinter // Triton's metric name, which Triton dashboards query
			Name: "nv_inference_pending_request_count",
			Help: "Triton-compatible: requests handed to the model's scheduler and not yet answered.",
		}, mv),
		requestUS: counter("nv_inference_request_duration_us", "Triton-compatible: cumulative end-to-end duration of successful inference requests, in microseconds, cache hits included."),
		queueUS:   counter("nv_inference_queue_duration_us", "Triton-compatible: cumulative time successful requests waited in the scheduler queue, in microseconds."),
		inputUS:   counter("nv_inference_compute_input_duration_us", "Triton-compatible: cumulative time spent preparing the inputs of successful requests' batches, in microseconds."),
		inferUS:   counter("nv_inference_compute_infer_duration_us", "Triton-compatible: cumulative model execution time of successful requests, in microseconds."),
		outputUS:  counter("nv_inference_compute_output_duration_us", "Triton-compatible: cumulative time spent splitting the outputs of successful requests' batches, in microseconds."),
	}
}

// tritonObservers are one version's Triton series, resolved at load.
type tritonObservers struct {
	success, count, execCount                        prometheus.Counter
	requestUS, queueUS, inputUS, inferUS, outputUS   prometheus.Counter
	pending                                          prometheus.Gauge
	rejected, canceled, backendFailed, otherFailures prometheus.Counter
}

func (t *tritonMetrics) observers(model, version string) *tritonObservers {
	if t == nil {
		return nil
	}
	return &tritonObservers{
		success:       t.success.WithLabelValues(model, version),
		count:         t.count.WithLabelValues(model, version),
		execCount:     t.execCount.WithLabelValues(model, version),
		requestUS:     t.requestUS.WithLabelValues(model, version),
		queueUS:       t.queueUS.WithLabelValues(model, version),
		inputUS:       t.inputUS.WithLabelValues(model, version),
		inferUS:       t.inferUS.WithLabelValues(model, version),
		outputUS:      t.outputUS.WithLabelValues(model, version),
		pending:       t.pending.WithLabelValues(model, version),
		rejected:      t.failure.WithLabelValues(model, version, tritonRejected),
		canceled:      t.failure.WithLabelValues(model, version, tritonCanceled),
		backendFailed: t.failure.WithLabelValues(model, version, tritonBackend),
		otherFailures: t.failure.WithLabelValues(model, version, tritonOther),
	}
}

func asMicroseconds(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// succeeded records a request served: executed (by the model's instances
// with its times, or by an ensemble's steps with zero times) or from the
// response cache (not counted as inferences, as in Triton).
func (o *tritonObservers) succeeded(rows int64, total time.Duration, t execTimes, executed bool) {
	if o == nil {
		return
	}
	o.success.Inc()
	o.requestUS.Add(asMicroseconds(total))
	if executed {
		o.count.Add(float64(rows))
		o.queueUS.Add(asMicroseconds(t.queue))
		o.inputUS.Add(asMicroseconds(t.input))
		o.inferUS.Add(asMicroseconds(t.infer))
		o.outputUS.Add(asMicroseconds(t.output))
	}
}

// failed records a failed request under Triton's reason for ours.
func (o *tritonObservers) failed(reason string) {
	if o == nil {
		return
	}
	switch reason {
	case batch.ReasonQueueFull, batch.ReasonQueueTimeout:
		o.rejected.Inc()
	case ReasonCanceled, ReasonDeadlineExceeded:
		o.canceled.Inc()
	case ReasonBackendError:
		o.backendFailed.Inc()
	default:
		o.otherFailures.Inc()
	}
}

func (t *tritonMetrics) forget(l prometheus.Labels) {
	if t == nil {
		return
	}
	for _, v := range []*prometheus.CounterVec{t.success, t.failure, t.count, t.execCount, t.requestUS, t.queueUS, t.inputUS, t.inferUS, t.outputUS} {
		v.DeletePartialMatch(l)
	}
	t.pending.DeletePartialMatch(l)
}

// executed records one execution (a batch, or an ensemble's run).
func (o *tritonObservers) executed() {
	if o != nil {
		o.execCount.Inc()
	}
}

// enqueued and answered bracket a request's time in the scheduler.
func (o *tritonObservers) enqueued() {
	if o != nil {
		o.pending.Inc()
	}
}

func (o *tritonObservers) answered() {
	if o != nil {
		o.pending.Dec()
	}
}
