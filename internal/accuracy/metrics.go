package accuracy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are the joiner's collectors. Their labels are bounded: service,
// output and metric names come from the configuration, versions from what
// the model server serves, slices are capped per dimension.
type metrics struct {
	logged     *prometheus.CounterVec   // service, version
	dropped    *prometheus.CounterVec   // service
	outcomes   *prometheus.CounterVec   // service, result
	joined     *prometheus.CounterVec   // service, version, output, slice
	online     *prometheus.GaugeVec     // service, version, output, slice, metric
	pairs      *prometheus.GaugeVec     // service, version, output, slice
	offline    *prometheus.GaugeVec     // service, version, output, metric
	ratio      *prometheus.GaugeVec     // service, version, output, metric
	coverage   *prometheus.GaugeVec     // service, version
	delay      *prometheus.HistogramVec // service
	pending    prometheus.Gauge
	evicted    *prometheus.CounterVec // service, kind
	expired    *prometheus.CounterVec // service, kind
	storeFails prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		logged: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "predictions_logged_total",
			Help: "Predictions logged for joining with their outcomes (the service's accuracy share), by service and version.",
		}, []string{"service", "version"})),
		dropped: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "predictions_dropped_total",
			Help: "Predictions of the accuracy share not joinable: the queue to the pending store was full or closed, or the store still failed at shutdown.",
		}, []string{"service"})),
		outcomes: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "outcomes_total",
			Help: "Outcomes received, by result: joined (to a logged prediction), held (no prediction yet; waits up to the lookback), duplicate (the key already has an outcome), too_late (observed before the lookback), invalid, not_permitted (posted by a client the prediction was not served to and not in `outcome_clients`; not stored, also counted when a held outcome of another client is dropped as its prediction arrives).",
		}, []string{"service", "result"})),
		joined: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "joined_total",
			Help: "Prediction and outcome pairs joined, by service, version, output and slice (all, route=…, group=…, <header>=…).",
		}, []string{"service", "version", "output", "slice"})),
		online: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "online",
			Help: "Online accuracy over the pairs joined in the service's rolling window, by metric: mae, rmse, bias (mean predicted − observed), mape, coverage (share inside the predicted interval); accuracy, log_loss, brier, auc for binary outputs.",
		}, []string{"service", "version", "output", "slice", "metric"})),
		pairs: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "window_pairs",
			Help: "Joined pairs in the rolling window behind sluice_accuracy_online.",
		}, []string{"service", "version", "output", "slice"})),
		offline: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "offline",
			Help: "The offline evaluation a version declares in the service's accuracy block.",
		}, []string{"service", "version", "output", "metric"})),
		ratio: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "online_offline_ratio",
			Help: "Online (slice all, rolling window) divided by the declared offline value: the trust gap as a number.",
		}, []string{"service", "version", "output", "metric"})),
		coverage: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "label_coverage_ratio",
			Help: "Share of the predictions logged by this process that were joined to an outcome since it started.",
		}, []string{"service", "version"})),
		delay: telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "label_delay_seconds",
			Help:    "Time from a prediction to the arrival of its outcome, observed when the pair joins.",
			Buckets: []float64{1, 10, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 4 * 86400, 7 * 86400, 14 * 86400, 30 * 86400},
		}, []string{"service"})),
		pending: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "pending_entries",
			Help: "Entries in the pending store: predictions waiting for outcomes, outcomes waiting for predictions, joined markers.",
		})),
		evicted: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "evicted_total",
			Help: "Pending store entries evicted before their expiry to keep the store within max_pending, by kind (prediction, outcome, joined).",
		}, []string{"service", "kind"})),
		expired: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "expired_total",
			Help: "Pending store entries dropped at the end of the lookback, by kind: prediction (no outcome came), outcome (no prediction came), joined.",
		}, []string{"service", "kind"})),
		storeFails: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "accuracy", Name: "store_errors_total",
			Help: "Pending store updates that failed (each retry counts); the batch is retried until it is stored, and dropped only if the store still fails at shutdown.",
		})),
	}
}
