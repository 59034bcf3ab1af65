package batch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the scheduling collectors, shared by every batcher of a
// model manager. Labels are bounded: model and version come from the
// repository, reason from a closed set, and Forget deletes a version's
// series when it is unloaded.
type Metrics struct {
	queue      *prometheus.HistogramVec
	compute    *prometheus.HistogramVec
	pending    *prometheus.GaugeVec
	batchSize  *prometheus.HistogramVec
	rejections *prometheus.CounterVec
}

// NewMetrics builds the collectors and registers them with reg; a nil reg
// registers nothing.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	mv := []string{"model", "version"}
	duration := func(name, help string) *prometheus.HistogramVec {
		return f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "model", Name: name, Help: help,
			Buckets:                         prometheus.ExponentialBucketsRange(50e-6, 10, 18), // 50µs to 10s
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, mv)
	}
	return &Metrics{
		queue: duration("queue_duration_seconds",
			"Time requests waited in the scheduler queue, from submission to the start of their batch."),
		compute: duration("compute_duration_seconds",
			"Time one model execution took on an instance, per executed batch."),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "pending_requests",
			Help: "Requests queued in the scheduler and not yet executing.",
		}, mv),
		batchSize: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "model", Name: "batch_size",
			Help:    "Batch size of each model execution (the sum of its requests' batch dimensions).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 to 1024
		}, mv),
		rejections: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "queue_rejections_total",
			Help: "Requests the scheduler rejected, by reason (queue_full, queue_timeout).",
		}, []string{"model", "version", "reason"}),
	}
}

// Forget deletes every series of one model version.
func (m *Metrics) Forget(model, version string) {
	l := prometheus.Labels{"model": model, "version": version}
	m.queue.DeletePartialMatch(l)
	m.compute.DeletePartialMatch(l)
	m.pending.DeletePartialMatch(l)
	m.batchSize.DeletePartialMatch(l)
	m.rejections.DeletePartialMatch(l)
}

// observers are one batcher's collectors, resolved once so the hot path
// does no label hashing.
type observers struct {
	queue          prometheus.Observer
	compute        prometheus.Observer
	pending        prometheus.Gauge
	batchSize      prometheus.Observer
	rejectFull     prometheus.Counter
	rejectDeadline prometheus.Counter
}

func (m *Metrics) observers(model, version string) observers {
	return observers{
		queue:          m.queue.WithLabelValues(model, version),
		compute:        m.compute.WithLabelValues(model, version),
		pending:        m.pending.WithLabelValues(model, version),
		batchSize:      m.batchSize.WithLabelValues(model, version),
		rejectFull:     m.rejections.WithLabelValues(model, version, ReasonQueueFull),
		rejectDeadline: m.rejections.WithLabelValues(model, version, ReasonQueueTimeout),
	}
}
