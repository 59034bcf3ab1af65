package fallback

import (
	"errors"
	"fmt"

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
		triggered: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_fallback_triggered",
			Help: "1 while business-level fallback is triggered for the service.",
		}, []string{"service"})),
		answers: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_fallback_answers_total",
			Help: "Requests answered by the fallback rule.",
		}, []string{"service"})),
		p90: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_prediction_p90",
			Help: "P90 of the watched prediction output over the recent window.",
		}, []string{"service"})),
		baselineMean: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_prediction_baseline_mean",
			Help: "Rolling baseline mean of the watched prediction output.",
		}, []string{"service"})),
	}
}

// register registers c with reg, reusing the collector already registered
// by another Monitor on the same registry (one Monitor per service shares
// the vectors). reg nil leaves c unregistered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// Same name, different shape: a programming error.
		panic(fmt.Sprintf("fallback: register metric: %v", err))
	}
	return c
}
