package stream

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are the aggregator's collectors; the view label's values are
// bounded by the repository's stream feature views.
type metrics struct {
	events   *prometheus.CounterVec // view, outcome
	lag      *prometheus.GaugeVec   // view
	newest   *prometheus.GaugeVec   // view
	conflict *prometheus.CounterVec // view
	connect  *prometheus.CounterVec // source
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		events: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_stream_events_total",
			Help: "Stream events an aggregator handled, by stream feature view and outcome: applied to a tile; duplicate, a redelivery its tile had applied already; late, older than its arrival minus allowed_lateness, dropped; expired, its tile outside every window, dropped; malformed, an event that does not decode, dropped.",
		}, []string{"view", "outcome"})),
		lag: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_feature_stream_lag_seconds",
			Help: "Seconds between the newest event time an aggregator applied for the stream feature view and the time it stored the tiles (freshness of the view's aggregations).",
		}, []string{"view"})),
		newest: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_feature_stream_newest_event_timestamp_seconds",
			Help: "Unix time of the newest event an aggregator applied for the stream feature view; stops moving when the stream stalls.",
		}, []string{"view"})),
		conflict: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_stream_write_conflicts_total",
			Help: "Tile writes retried because another aggregator process wrote the same entity's tiles first.",
		}, []string{"view"})),
		connect: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_stream_connect_failures_total",
			Help: "Failed attempts of an aggregator started in the background (sluice serve -c) to reach its stream source's NATS server; it retries with back-off, and the source's stream feature views stay missing or stale meanwhile.",
		}, []string{"source"})),
	}
}

// RegisterMetrics registers the aggregator's collectors with reg (the
// metrics inventory lists them from here); New does the same.
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }
