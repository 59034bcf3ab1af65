package materialize

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are materialization's collectors. The view label's values are
// bounded by the repository's feature views. Several Materializers may
// share one registerer (one per run): the collectors are registered once
// and reused.
type metrics struct {
	rows         *prometheus.CounterVec   // view, outcome
	duration     *prometheus.HistogramVec // view
	lastMaterial *prometheus.GaugeVec     // view
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		rows: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_materialize_rows_total",
			Help: "Source rows materialized into the online store, by feature view and outcome: written; skipped because the stored row is newer, or the same under the same schema; or future, skipped because the row is dated more than future_timestamp_tolerance past the time of the run.",
		}, []string{"view", "outcome"})),
		duration: telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:                           "sluice_feature_materialize_duration_seconds",
			Help:                           "Time to materialize one feature view, scan and write included.",
			Buckets:                        []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600},
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 100,
		}, []string{"view"})),
		lastMaterial: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_feature_view_last_materialized_timestamp_seconds",
			Help: "Unix time of the feature view's last successful materialization.",
		}, []string{"view"})),
	}
}
