package upstream

import (
	"github.com/sluice-ml/sluice/internal/telemetry"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the collectors of the upstream sets; sets of different
// backends share them through the registerer.
type metrics struct {
	ejections *prometheus.CounterVec
	ejected   *prometheus.GaugeVec
	inFlight  *prometheus.GaugeVec
	panics    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		ejections: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_upstream_ejections_total",
			Help: "Endpoints ejected by outlier detection, by reason (error_rate, consecutive_503).",
		}, []string{"backend", "endpoint", "reason"})),
		ejected: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_upstream_ejected",
			Help: "1 while the endpoint is ejected by outlier detection, else 0.",
		}, []string{"backend", "endpoint"})),
		inFlight: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_upstream_in_flight",
			Help: "Requests picked for the endpoint and not yet reported done.",
		}, []string{"backend", "endpoint"})),
		panics: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_upstream_panic_total",
			Help: "Picks routed across all endpoints because too few were healthy (panic routing).",
		}, []string{"backend"})),
	}
}
