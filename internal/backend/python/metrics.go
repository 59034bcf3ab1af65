package python

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are the backend's per-version worker collectors. Labels are
// model and version; a version's series are deleted when its last
// instance closes.
type metrics struct {
	restarts *prometheus.CounterVec
	busy     *prometheus.CounterVec
	up       *prometheus.GaugeVec
	pending  *prometheus.GaugeVec

	mu   sync.Mutex // protects refs
	refs map[[2]string]int
}

// newMetrics builds the collectors and registers them with reg (sharing
// collectors already registered there); a nil reg registers nothing.
func newMetrics(reg prometheus.Registerer) *metrics {
	mv := []string{"model", "version"}
	return &metrics{
		restarts: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "python_worker_restarts_total",
			Help: "Python worker processes restarted after they died or stopped answering.",
		}, mv)),
		busy: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "python_worker_busy_seconds_total",
			Help: "Time Python workers spent on execute() calls, from sending the requests to reading the responses.",
		}, mv)),
		up: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "python_worker_up",
			Help: "Python worker processes of a model version that are running and have loaded the model.",
		}, mv)),
		pending: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "python_worker_pending_calls",
			Help: "execute() calls sent to a model version's Python workers and not answered yet, the running ones included.",
		}, mv)),
		refs: map[[2]string]int{},
	}
}

// workerObservers are one version's series.
type workerObservers struct {
	restarts prometheus.Counter
	busy     prometheus.Counter
	up       prometheus.Gauge
	pending  prometheus.Gauge
}

// track returns the version's series and counts one more instance using
// them.
func (m *metrics) track(model, version string) workerObservers {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refs[[2]string{model, version}]++
	return workerObservers{
		restarts: m.restarts.WithLabelValues(model, version),
		busy:     m.busy.WithLabelValues(model, version),
		up:       m.up.WithLabelValues(model, version),
		pending:  m.pending.WithLabelValues(model, version),
	}
}

// untrack counts one instance less, and deletes the version's series
// when none is left (then it reports true).
func (m *metrics) untrack(model, version string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{model, version}
	m.refs[k]--
	if m.refs[k] > 0 {
		return false
	}
	delete(m.refs, k)
	m.restarts.DeleteLabelValues(model, version)
	m.busy.DeleteLabelValues(model, version)
	m.up.DeleteLabelValues(model, version)
	m.pending.DeleteLabelValues(model, version)
	return true
}
