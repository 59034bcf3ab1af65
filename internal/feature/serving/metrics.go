package serving

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the serving collectors. The view label takes only names of
// views defined in the registry, so its values are bounded.
type metrics struct {
	reads       *prometheus.HistogramVec // Go API requests, by outcome
	values      *prometheus.CounterVec   // values returned, by status
	staleReads  *prometheus.CounterVec   // reads refused because the view is stale
	staleAlerts *prometheus.CounterVec   // stale_feature_alert events
	dataAge     *prometheus.GaugeVec
	sinceMat    *prometheus.GaugeVec
	fresh       *prometheus.GaugeVec
	hotReads    *prometheus.CounterVec
	unreadable  *prometheus.CounterVec // values of existing rows answered NOT_FOUND, by view and reason
	odFailures  *prometheus.CounterVec // on-demand values not computed from inputs that were there, by view and reason
	pushedRows  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		reads: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "get_online_features_seconds",
			Help:    "Time to answer a GetOnlineFeatures request (Go API and HTTP), by outcome (ok or the error reason).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 18), // 10µs to ~1.3s
		}, []string{"outcome"}),
		values: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "values_total",
			Help: "Feature values returned, by status (PRESENT, NOT_FOUND, NULL_VALUE, OUTSIDE_MAX_AGE).",
		}, []string{"status"}),
		staleReads: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "stale_reads_total",
			Help: "Reads refused with 503 feature_view_stale because the view's last materialization or push is older than its ttl.",
		}, []string{"view"}),
		staleAlerts: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "stale_alerts_total",
			Help: "stale_feature_alert events: a view found stale (logged at most once per view per alert interval).",
		}, []string{"view"}),
		dataAge: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "view_data_age_seconds",
			Help: "Now minus the newest event timestamp written to the view online.",
		}, []string{"view"}),
		sinceMat: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "view_seconds_since_materialization",
			Help: "Now minus the view's last successful materialization or push.",
		}, []string{"view"}),
		fresh: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_feature_view_fresh",
			Help: "1 while the feature view's state could be read and its last materialization or push is within its ttl; 0 when it is stale or its state cannot be read (the online store does not answer). Refreshed every gauge interval.",
		}, []string{"view"}),
		hotReads: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "hot_reads_total",
			Help: "Reads of a view's hot subset: hit (a fresh hot row answered) or miss (fell back to the cold view).",
		}, []string{"view", "outcome"}),
		odFailures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "on_demand_failures_total",
			Help: "On-demand feature values answered NULL_VALUE because their expression failed on the inputs (evaluation_failed: e.g. integer division by zero) or gave NaN or ±Inf (not_finite), by on-demand view and reason.",
		}, []string{"view", "reason"}),
		unreadable: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "unreadable_values_total",
			Help: "Values answered NOT_FOUND although the entity's row exists, by view and reason: the row was written under another schema that lacks the feature (not_in_row) or has it with another type (retyped), the row's schema is not recorded (unknown_schema), or the row does not decode (corrupt_row). Re-materializing or pushing the view rewrites such rows.",
		}, []string{"view", "reason"}),
		pushedRows: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature", Name: "pushed_rows_total",
			Help: "Rows pushed to the online store, by view and result (written or skipped as not newer).",
		}, []string{"view", "result"}),
	}
}
