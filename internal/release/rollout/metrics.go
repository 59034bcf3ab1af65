package rollout

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are the rollout collectors. Controllers of several services may
// share one registry: series are told apart by the service label.
type metrics struct {
	stage       *prometheus.GaugeVec
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	requests    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		stage: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_rollout_stage",
			Help: "Index of the rollout's current stage, from 0.",
		}, []string{"service"})),
		state: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_rollout_state",
			Help: "1 for the rollout's current state (progressing, paused, complete, rolled_back), 0 for the others.",
		}, []string{"service", "state"})),
		transitions: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rollout_transitions_total",
			Help: "Rollout transitions by kind (promote, rollback, pause, resume, reset).",
		}, []string{"service", "kind"})),
		requests: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rollout_requests_total",
			Help: "Requests routed by the rollout, by arm (candidate, stable, control) and traffic group.",
		}, []string{"service", "arm", "group"})),
	}
}

// forget deletes every series of service.
func (m *metrics) forget(service string) {
	l := prometheus.Labels{"service": service}
	m.stage.DeletePartialMatch(l)
	m.state.DeletePartialMatch(l)
	m.transitions.DeletePartialMatch(l)
	m.requests.DeletePartialMatch(l)
}
