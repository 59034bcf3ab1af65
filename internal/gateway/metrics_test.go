package gateway_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
)

// The requests counter tells errors apart by their reason, keeps the
// label's values to a known set, and counts requests for no service.
func TestRequestsReasonLabel(t *testing.T) {
	e := newEtaEnv(t)
	count := func(labels map[string]string) float64 {
		return metricValue(t, e.reg, "sluice_gateway_requests_total", labels)
	}

	requireOK(t, e.post(t, okBody))
	require.Equal(t, 1.0, count(map[string]string{"service": "eta", "code": "200", "source": "model", "reason": ""}))

	res := e.post(t, `{"user_id": 8, "route_id": 3, "base_eta": 30}`)
	requireError(t, res, http.StatusNotFound, gateway.ReasonMissingFeature)
	require.Equal(t, 1.0, count(map[string]string{"service": "eta", "code": "404", "reason": "missing_feature"}))

	// A path no service serves: counted under "unknown", not under the
	// path (a client could grow the label without end).
	res = call(t, e.g, http.MethodPost, "/v1/services/nope:predict", okBody)
	requireError(t, res, http.StatusNotFound, gateway.ReasonNotFound)
	res = call(t, e.g, http.MethodGet, etaPath, "")
	requireError(t, res, http.StatusMethodNotAllowed, gateway.ReasonMethodNotAllowed)
	require.Equal(t, 1.0, count(map[string]string{"service": "unknown", "route": "unknown", "code": "404", "reason": "not_found"}))
	require.Equal(t, 1.0, count(map[string]string{"service": "unknown", "route": "unknown", "code": "405", "reason": "method_not_allowed"}))
	require.Equal(t, 1.0, count(map[string]string{"service": "eta", "code": "404"}), "a 404 of no service is not the service's")

	// A model's own reason passes when known, and folds into "other"
	// when it is not: a backend may send any string.
	for _, reason := range []string{"model_not_ready", "made_up_by_a_backend_1", "made_up_by_a_backend_2"} {
		e.model.setFn(func(context.Context, *infer.Request) (*infer.Response, error) {
			return nil, apierr.Errorf(apierr.KindUnavailable, reason, "the model says no")
		})
		res = e.post(t, okBody)
		require.Equal(t, http.StatusServiceUnavailable, res.Code, "body: %s", res.Body)
	}
	require.Equal(t, 1.0, count(map[string]string{"service": "eta", "code": "503", "reason": "model_not_ready"}))
	require.Equal(t, 2.0, count(map[string]string{"service": "eta", "code": "503", "reason": "other"}))
	require.Zero(t, count(map[string]string{"reason": "made_up_by_a_backend_1"}))
}

// The HTTP edge returns the call's trace id, answers and errors alike,
// so that an engineer can find the trace of a failed request.
func TestResponsesCarryTheTraceID(t *testing.T) {
	e := newEtaEnv(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	res := e.post(t, okBody, "traceparent", parent)
	requireOK(t, res)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", res.Header.Get("X-Trace-Id"))
	require.Contains(t, res.Header.Get("Traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736")
	res = e.post(t, `{"user_id": 8, "route_id": 3, "base_eta": 30}`, "traceparent", parent)
	requireError(t, res, http.StatusNotFound, gateway.ReasonMissingFeature)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", res.Header.Get("X-Trace-Id"))
	// No trace (tracing off, none from the caller): no header.
	res = e.post(t, okBody)
	requireOK(t, res)
	require.Empty(t, res.Header.Get("X-Trace-Id"))
}
