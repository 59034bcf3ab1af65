package materialize

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are materialization's collectors. The view label's values are
// bounded by the repository's feature views.
type metrics struct {
	rows         *prometheus.CounterVec   // view, outcome
	duration     *prometheus.HistogramVec // view
	lastMaterial *prometheus.GaugeVec     // view
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		rows: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_materialize_rows_total",
			Help: "Rows materialized into the online store, by feature view and outcome (written, or skipped because the stored row is newer or the same).",
		}, []string{"view", "outcome"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:                           "sluice_feature_materialize_duration_seconds",
			Help:                           "Time to materialize one feature view, scan and write included.",
			Buckets:                        []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600},
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 100,
		}, []string{"view"}),
		lastMaterial: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_feature_view_last_materialized_timestamp_seconds",
			Help: "Unix time of the feature view's last successful materialization.",
		}, []string{"view"}),
	}
}
