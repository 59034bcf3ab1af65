package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are the gateway's own collectors. The building blocks
// (upstream, ratelimit, fallback, accesslog) register theirs.
type metrics struct {
	requests       *prometheus.CounterVec   // service, route, code, source, client_id
	predictions    *prometheus.HistogramVec // service, output
	duration       *prometheus.HistogramVec // service
	retries        *prometheus.CounterVec   // service, backend, reason
	budgetExceeded *prometheus.CounterVec   // service
	breakerOpen    *prometheus.GaugeVec     // service
	breakerEvents  *prometheus.CounterVec   // service
	ruleErrors     *prometheus.CounterVec   // service
	healthChecks   *prometheus.CounterVec   // backend, result
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		requests: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "requests_total",
			Help: "Requests answered by the gateway, by service, route, HTTP status code, source (model, fallback_rule; empty for errors) and client_id (a configured client, anonymous, or empty before authentication).",
		}, []string{"service", "route", "code", "source", "client_id"})),
		predictions: telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "prediction_value",
			Help:    "Distribution of each numeric output the gateway answers (its first element), by service and answer name: what the model predicts, for business questions and drift at a glance.",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 10000, 29),
		}, []string{"service", "output"})),
		duration: telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "request_duration_seconds",
			Help:    "Time from receiving a request to writing its answer, by service.",
			Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"service"})),
		retries: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "retries_total",
			Help: "Retried model calls, by service, backend and the retry_on condition that allowed the retry.",
		}, []string{"service", "backend", "reason"})),
		budgetExceeded: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "retry_budget_exhausted_total",
			Help: "Retries refused because the backend's retry budget (share of active requests) was used up.",
		}, []string{"service"})),
		breakerOpen: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "feature_breaker_open",
			Help: "1 while a service's feature-level breaker is open (answering 503 feature_service_unavailable).",
		}, []string{"service"})),
		breakerEvents: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "stale_feature_events_total",
			Help: "Feature reads of a service that found a stale feature view (what the feature breaker counts).",
		}, []string{"service"})),
		ruleErrors: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "fallback_rule_errors_total",
			Help: "Fallback rule evaluations that failed (missing or null variable, non-finite result); the model's answer was kept.",
		}, []string{"service"})),
		healthChecks: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "health_checks_total",
			Help: "Active health checks of backend endpoints, by result (healthy, unhealthy).",
		}, []string{"backend", "result"})),
	}
}
