package drift

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Event kinds: the kind label of sluice_drift_events_total.
const (
	eventPSI = "psi"
	eventKS  = "ks"
)

// metrics are the drift collectors, labelled by the monitor's scope and
// the configured variable names only.
type metrics struct {
	psi    *prometheus.GaugeVec
	pvalue *prometheus.GaugeVec
	events *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		psi: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_drift_psi",
			Help: "Population stability index of the live window against the reference (0.1 moderate, 0.25 significant).",
		}, []string{"scope", "name"})),
		pvalue: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_drift_ks_pvalue",
			Help: "Asymptotic p-value of the two-sample Kolmogorov-Smirnov test of the live window against the reference (numeric variables).",
		}, []string{"scope", "name"})),
		events: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_drift_events_total",
			Help: "Times a drift threshold was crossed (rising edges): kind psi or ks.",
		}, []string{"scope", "name", "kind"})),
	}
}
