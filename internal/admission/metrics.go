package admission

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Metrics are admission's collectors: the budget's size and use, and the
// requests refused, by listener and reason. The listener label takes the
// names the wiring passes to Handler and GRPCServerOptions (one per
// configured port), and reason the three Reason constants, so both are
// bounded.
type Metrics struct {
	inflight   prometheus.Gauge
	budget     prometheus.Gauge
	rejections *prometheus.CounterVec // listener, reason
}

// NewMetrics creates admission's metrics and registers them with reg
// through telemetry.Register, so several servers of one process can share
// a registerer. A nil reg registers nothing, which suits tests.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		inflight: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_admission_inflight_bytes",
			Help: "Request bytes held against the process's in-flight budget now (bodies being read or handled, gRPC messages being handled).",
		})),
		budget: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_admission_budget_bytes",
			Help: "Size of the process's in-flight request byte budget; 0 means unlimited.",
		})),
		rejections: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admission_rejections_total",
			Help: "Requests refused by admission control, by listener and reason (overloaded, body_too_large, too_many_headers).",
		}, []string{"listener", "reason"})),
	}
}

// rejectCounters are one listener's rejection counters, resolved once so
// that counting a rejection does not look up labels.
type rejectCounters struct {
	overloaded     prometheus.Counter
	bodyTooLarge   prometheus.Counter
	tooManyHeaders prometheus.Counter
}

// forListener resolves listener's counters; the series start at 0, so a
// rate over them is defined before the first rejection.
func (m *Metrics) forListener(listener string) *rejectCounters {
	return &rejectCounters{
		overloaded:     m.rejections.WithLabelValues(listener, ReasonOverloaded),
		bodyTooLarge:   m.rejections.WithLabelValues(listener, ReasonBodyTooLarge),
		tooManyHeaders: m.rejections.WithLabelValues(listener, ReasonTooManyHeaders),
	}
}

// orUnregistered returns m, or unregistered metrics when m is nil.
func orUnregistered(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
