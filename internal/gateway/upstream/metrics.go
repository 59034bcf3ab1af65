package upstream

import (
	"errors"

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
		ejections: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_upstream_ejections_total",
			Help: "Endpoints ejected by outlier detection, by reason (error_rate, consecutive_503).",
		}, []string{"backend", "endpoint", "reason"})),
		ejected: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_upstream_ejected",
			Help: "1 while the endpoint is ejected by outlier detection, else 0.",
		}, []string{"backend", "endpoint"})),
		inFlight: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_gateway_upstream_in_flight",
			Help: "Requests picked for the endpoint and not yet reported done.",
		}, []string{"backend", "endpoint"})),
		panics: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_upstream_panic_total",
			Help: "Picks routed across all endpoints because too few were healthy (panic routing).",
		}, []string{"backend"})),
	}
}

// register registers c, or returns the collector already registered under the
// same descriptor so that every backend's set can share one registerer.
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
		// A different collector under our name is a programming error in
		// the wiring, not a runtime condition.
		panic("upstream: register metrics: " + err.Error())
	}
	return c
}
