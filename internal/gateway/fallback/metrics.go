package fallback

import (
	"github.com/sluice-ml/sluice/internal/telemetry"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the fallback collectors, labelled by service only.
type metrics struct {
	triggered    *prometheus.GaugeVec
	answers      *prometheus.CounterVec
	p90          *prometheus.GaugeVec
	baselineMean *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		triggered: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_fallback_triggered",
			Help: "1 while business-level fallback is triggered for the service.",
		}, []string{"service"})),
		answers: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_fallback_answers_total",
			Help: "Requests answered by the fallback rule, by cause: drift (the predictions left their baseline and the confidence was low), or the model call's failure with fallback.on_upstream_failure (upstream_unavailable, no_healthy_upstream, upstream_timeout).",
		}, []string{"service", "cause"})),
		p90: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_prediction_p90",
			Help: "P90 of the watched prediction output over the recent window.",
		}, []string{"service"})),
		baselineMean: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_prediction_baseline_mean",
			Help: "Rolling baseline mean of the watched prediction output.",
		}, []string{"service"})),
	}
}
