package sequence

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the sequence schedulers' collectors, shared by every
// scheduler of a model manager. Labels are bounded (model and version
// from the repository); Forget deletes a version's series.
type Metrics struct {
	active       *prometheus.GaugeVec
	backlog      *prometheus.GaugeVec
	started      *prometheus.CounterVec
	idleReleased *prometheus.CounterVec
	// contendedReleased and clientRefused are the per-client bounds at
	// work.
	contendedReleased *prometheus.CounterVec
	clientRefused     *prometheus.CounterVec
}

// NewMetrics builds the collectors and registers them with reg; a nil reg
// registers nothing.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	mv := []string{"model", "version"}
	return &Metrics{
		active: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "sequences_active",
			Help: "Sequences holding a slot of a sequence-batching model.",
		}, mv),
		backlog: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "model", Name: "sequences_waiting",
			Help: "Started sequences waiting for a free slot of a sequence-batching model.",
		}, mv),
		started: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "sequences_started_total",
			Help: "Sequences started (requests with sequence_start) on a sequence-batching model.",
		}, mv),
		idleReleased: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "sequences_idle_released_total",
			Help: "Sequences whose slot was freed because they received no request for max_sequence_idle_microseconds.",
		}, mv),
		contendedReleased: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "sequences_contended_released_total",
			Help: "Sequences whose slot was freed because they were idle while another client, holding fewer slots than its fair share, waited for one.",
		}, mv),
		clientRefused: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "model", Name: "sequences_client_refused_total",
			Help: "Sequence STARTs refused because the client already held the most sequences one client may hold (sluice.max_sequences_per_client).",
		}, mv),
	}
}

// Forget deletes every series of one model version.
func (m *Metrics) Forget(model, version string) {
	l := prometheus.Labels{"model": model, "version": version}
	m.active.DeletePartialMatch(l)
	m.backlog.DeletePartialMatch(l)
	m.started.DeletePartialMatch(l)
	m.idleReleased.DeletePartialMatch(l)
	m.contendedReleased.DeletePartialMatch(l)
	m.clientRefused.DeletePartialMatch(l)
}

// observers are one scheduler's collectors.
type observers struct {
	active, backlog                                         prometheus.Gauge
	started, idleReleased, contendedReleased, clientRefused prometheus.Counter
}

func (m *Metrics) observers(model, version string) observers {
	return observers{
		active:            m.active.WithLabelValues(model, version),
		backlog:           m.backlog.WithLabelValues(model, version),
		started:           m.started.WithLabelValues(model, version),
		idleReleased:      m.idleReleased.WithLabelValues(model, version),
		contendedReleased: m.contendedReleased.WithLabelValues(model, version),
		clientRefused:     m.clientRefused.WithLabelValues(model, version),
	}
}
