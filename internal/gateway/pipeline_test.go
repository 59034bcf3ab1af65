package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// The pipeline without an edge: Predict takes a Call and answers an
// Answer or a domain error, whatever protocol carried the request.

func TestPredictWithoutAnEdge(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{
		clientsYAML("{requests_per_second: 0.1, burst: 1}"),
	}})))
	call := func(id string, hdr http.Header) (gateway.Answer, error) {
		return e.g.Predict(t.Context(), gateway.Call{
			Service: "eta", RequestID: id, Header: hdr, Peer: "10.1.2.3:4567",
			Body: gateway.JSONBody(`{"user_id": 7, "base_eta": 30}`),
		})
	}
	alice := http.Header{"Authorization": {"Bearer alice-key"}}

	a, err := call("p-1", alice)
	require.NoError(t, err)
	require.Equal(t, "p-1", a.RequestID)
	require.Equal(t, "eta", a.Service)
	require.Equal(t, "default", a.Route)
	require.Equal(t, "eta_model", a.Model)
	require.Equal(t, "1", a.Version)
	require.Equal(t, "model", a.Source)
	require.Len(t, a.Outputs, 2)
	require.Equal(t, "eta_minutes", a.Outputs[0].Name)
	require.Equal(t, []float64{37}, a.Outputs[0].Values, "the fake model sums its inputs: user 7 + 30")
	require.False(t, a.Outputs[0].Array)
	require.Equal(t, infer.FP32, a.Outputs[0].DataType)
	require.Equal(t, "p-1", e.model.last(t).ID, "the model request carries the call's id")

	// The same answer over HTTP: the edge only encodes it.
	res := e.post(t, plainBody, "Authorization", "Bearer key-from-env")
	requireOK(t, res)
	require.InDelta(t, a.Outputs[0].Values[0], res.Outputs["eta_minutes"], 0)

	// Refusals are domain errors, mapped by package apierr at the edges.
	tests := []struct {
		name   string
		c      gateway.Call
		code   int
		reason string
	}{
		{name: "no such service", c: gateway.Call{Service: "nope", Body: gateway.JSONBody(`{}`)}, code: 404, reason: gateway.ReasonNotFound},
		{name: "no key", c: gateway.Call{Service: "eta", Body: gateway.JSONBody(plainBody)}, code: 401, reason: "missing_api_key"},
		{name: "rate limited", c: gateway.Call{Service: "eta", Header: alice, Body: gateway.JSONBody(plainBody)}, code: 429, reason: gateway.ReasonRateLimited},
		{name: "bad body", c: gateway.Call{Service: "eta", Header: http.Header{"X-Api-Key": {"key-from-env"}}, Body: gateway.JSONBody(`{"user_id": "x"}`)}, code: 400, reason: gateway.ReasonInvalidField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.g.Predict(t.Context(), tt.c)
			ie, ok := errors.AsType[*apierr.Error](err)
			require.True(t, ok, "%T %v", err, err)
			code, reason := apierr.HTTPStatus(ie)
			require.Equal(t, tt.code, code, "%v", err)
			require.Equal(t, tt.reason, reason, "%v", err)
		})
	}

	t.Run("request id from the header, else a new one", func(t *testing.T) {
		bob := http.Header{"Authorization": {"Bearer key-from-env"}}
		bob.Set("X-Request-Id", "from-header")
		a, err := call("", bob)
		require.NoError(t, err)
		require.Equal(t, "from-header", a.RequestID)
		bob.Set("X-Request-Id", "has space")
		a, err = call("", bob)
		require.NoError(t, err)
		require.Regexp(t, `^[0-9a-f]{32}$`, a.RequestID)
	})
}

func TestNewStartsNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	repo := loadRepo(t)
	g, err := gateway.New(parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, gateway: []string{anonAllowed}, service: []string{`shadow: {version: "2", percent: 100}`},
		backends: `[{name: local, kind: in_process}, {name: pool, kind: kserve_grpc, endpoints: ["10.0.0.1:8001"]}]`,
	})), gateway.Options{Models: newFakeModel(), Remote: newFakeRemote(), Features: newFakeFeatures(repo)}, nil, nil)
	require.NoError(t, err)
	goleak.VerifyNone(t, before)
	require.NoError(t, g.Close(t.Context()))
}

// TestRunAndCloseOwnEveryGoroutine: what Run starts is gone once Run
// has returned and Close has.
func TestRunAndCloseOwnEveryGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	rec := &fakeRecorder{}
	cfg := parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, gateway: []string{anonAllowed, "recording: {workers: 3}"},
		service:  []string{`shadow: {version: "2", percent: 100}`},
		backends: `[{name: local, kind: in_process, health_check: {interval: 10ms, timeout: 5ms}}]`,
	}))
	g, err := gateway.New(cfg, gateway.Options{Models: newFakeModel(), Recorder: rec}, nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.RunBackground(ctx) }()
	for i := range 20 {
		requireOK(t, call(t, g, http.MethodPost, etaPath, plainBody, "X-Request-Id", fmt.Sprint("own-", i)))
	}
	// A reload restarts the health checks; the old ones must stop.
	require.NoError(t, g.Reload(cfg))

	cancel() // the listeners would drain now: the workers keep going
	require.NoError(t, <-done)
	requireOK(t, call(t, g, http.MethodPost, etaPath, plainBody, "X-Request-Id", "after-run"))
	require.NoError(t, g.Close(t.Context()))
	require.Len(t, rec.records(), 21, "every answered call mirrored, the one after Run's ctx ended too")
	goleak.VerifyNone(t, before)
}

func TestCloseWithoutRunFinishesTheWork(t *testing.T) {
	rec := &fakeRecorder{}
	var log syncBuffer
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, gateway: []string{anonAllowed, "log_sampling: {success_percent: 100}"},
		service: []string{`shadow: {version: "2", percent: 100}`},
	})), func(o *gateway.Options) { o.Recorder, o.AccessLog = rec, &log })
	for i := range 5 {
		requireOK(t, e.post(t, plainBody, "X-Request-Id", fmt.Sprint("norun-", i)))
	}
	require.Empty(t, rec.records(), "no worker runs the shadow calls before Close")
	require.NoError(t, e.g.Close(t.Context()))
	require.Len(t, rec.records(), 5, "Close ran the queued shadow calls itself")
	require.Equal(t, 5, strings.Count(log.String(), "\n"), "Close wrote the access log itself")
}

// TestShadowKeepsTheTraceNotTheCancellation: a shadow call continues its
// request's trace, and its request's end does not cancel it.
func TestShadowKeepsTheTraceNotTheCancellation(t *testing.T) {
	exp := recordSpans(t)

	e, rec := newShadowEnv(t, yamlOpts{plain: true, gateway: []string{anonAllowed}, service: []string{`shadow: {version: "2", percent: 100, timeout: 5s}`}})
	started := make(chan struct{})
	e.model.setFn(func(ctx context.Context, req *infer.Request) (*infer.Response, error) {
		if req.Version == "2" {
			close(started)
			select { // longer than the request lives
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return sumResponse(req, 0.9), nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	hdr := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	_, err := e.g.Predict(ctx, gateway.Call{Service: "eta", Header: hdr, Peer: "127.0.0.1:1", Body: gateway.JSONBody(plainBody)})
	require.NoError(t, err)
	<-started
	cancel() // the request is over
	closeGateway(t, e)

	recs := rec.records()
	require.Len(t, recs, 1)
	require.Equal(t, http.StatusOK, recs[0].Arms[record.ArmShadow].Status, "the shadow call outlived its request: %+v", recs[0].Arms[record.ArmShadow])

	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	require.Contains(t, byName, "gateway.shadow", "spans: %v", names(exp.GetSpans()))
	root, shadow := byName["gateway.predict"], byName["gateway.shadow"]
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", shadow.SpanContext.TraceID().String(), "the shadow call is in the caller's trace")
	require.Equal(t, root.SpanContext.SpanID(), shadow.Parent.SpanID(), "under the request's span")
}
