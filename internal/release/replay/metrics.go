package replay

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are a Replayer's collectors. Several replayers may share a
// registry.
type metrics struct {
	requests *prometheus.CounterVec // result
	duration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		requests: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "replay", Name: "requests_total",
			Help: "Replayed requests by result: ok (a 2xx answer) or error.",
		}, []string{"result"})),
		duration: telemetry.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "replay", Name: "request_duration_seconds",
			Help:    "Latency of replayed calls.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		})),
	}
}

func (m *metrics) observe(status int, d time.Duration) {
	result := "ok"
	if status < 200 || status > 299 {
		result = "error"
	}
	m.requests.WithLabelValues(result).Inc()
	m.duration.Observe(d.Seconds())
}
