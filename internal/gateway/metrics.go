package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// metrics are the gateway's own collectors. The building blocks
// (upstream, ratelimit, fallback, accesslog) register theirs.
type metrics struct {
	requests       *prometheus.CounterVec   // service, route, code, source, client_id, reason
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
			Help: "Requests answered by the gateway, by service, route, HTTP status code, source (model, fallback_rule; empty for errors), client_id (a configured client, anonymous, or empty before authentication) and reason (the error body's reason code, other for a reason outside the documented set; empty for answers). Requests for no service count with service and route unknown.",
		}, []string{"service", "route", "code", "source", "client_id", "reason"})),
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

// routeUnknown is the service and route label of requests for a path no
// service serves.
const routeUnknown = "unknown"

// reasonOther is the reason label of an error whose reason is outside
// knownReasons: a backend may send any string, and a label's values must
// stay few.
const reasonOther = "other"

// knownReasons are the reason codes the requests counter keeps as they
// are: the gateway's own, the ones it shares through packages wire, auth,
// admission and serving, and those the model server sends back through a
// model call (strings here: the gateway never imports the model server).
var knownReasons = func() map[string]bool {
	m := map[string]bool{}
	for _, r := range []string{
		ReasonInvalidJSON, ReasonUnknownField, ReasonMissingField, ReasonInvalidField,
		ReasonMissingFeature, ReasonFeatureUnreadable, ReasonRateLimited, ReasonFeatureUnavailable, ReasonNoRoute,
		ReasonNoHealthyUpstream, ReasonUpstreamTimeout, ReasonUpstreamUnavailable,
		ReasonInvalidModelOutput, ReasonNotFound, ReasonMethodNotAllowed, ReasonBodyTooLarge,
		ReasonDraining, ReasonInternal, ReasonGatewayNotConfigured, ReasonInvalidRequestID,
		ReasonUnsupportedMediaType, reasonFeatureViewStale, reasonOnlineStoreUnavailble,
		auth.ReasonMissingAPIKey, auth.ReasonInvalidAPIKey, auth.ReasonCredentialMismatch,
		admission.ReasonOverloaded,
		apierr.ReasonTooManyHeaders, apierr.ReasonDeadlineExceeded, apierr.ReasonCanceled,
		apierr.ReasonInvalidRequest, apierr.ReasonInvalidInput, apierr.ReasonDuplicateInput,
		apierr.ReasonDuplicateOutput, apierr.ReasonInvalidDatatype, apierr.ReasonInvalidShape,
		apierr.ReasonSizeMismatch, apierr.ReasonContentsMismatch, apierr.ReasonValueOutOfRange,
		apierr.ReasonInvalidParameter,
		serving.ReasonUnknownFeature, serving.ReasonUnknownView, serving.ReasonUnknownService,
		serving.ReasonUnknownEntityKey, serving.ReasonMissingEntityKey, serving.ReasonInvalidEntityValue,
		serving.ReasonViewNotOnline, serving.ReasonRegistryNotLoaded,
		// The model server's, passed on from a model call.
		"model_not_found", "version_not_found", "model_not_ready", "missing_input",
		"unknown_input", "batch_too_large", "invalid_size", "unknown_output",
		"backend_error", "request_canceled", "shutting_down", "ensemble_error",
		"worker_crashed", "model_error", "model_exception", "request_too_large",
		"queue_full", "queue_timeout", "model_unloading", "upstream_canceled",
	} {
		m[r] = true
	}
	return m
}()

// reasonLabel bounds an error's reason for the requests counter: "" for
// an answer, the reason when it is a known one, else "other".
func reasonLabel(status int, reason string) string {
	if status < 400 {
		return ""
	}
	if knownReasons[reason] {
		return reason
	}
	return reasonOther
}
