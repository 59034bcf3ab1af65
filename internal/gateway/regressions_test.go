package gateway_test

// Regression tests of bugs found while writing the gateway's unit tests.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/gateway"
)

// Bug 1: int64 values reach INT64 (and INT32) tensors through float64, so
// ids above 2^53 are corrupted.
func TestRegressionInt64TensorPrecision(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, gateway: []string{anonAllowed},
		inputs: "[{tensor: x, datatype: INT64, features: [field:user_id]}]",
	}))
	e := newEnv(t, cfg)
	requireOK(t, e.post(t, `{"user_id": "9007199254740993", "base_eta": 1}`))
	require.Equal(t, i64s(9007199254740993), e.model.last(t).Input("x").Data)
}

// Bug 2: a body of JSON null is not an object but gets missing_field.
func TestRegressionNullBody(t *testing.T) {
	e := newEtaEnv(t)
	requireError(t, e.post(t, `null`), http.StatusBadRequest, gateway.ReasonInvalidJSON)
}

// Bug 3: routing hashes the id's text as sent, so 7 and "007" (or "+7")
// are the same user for the feature store but not for sticky / entity-hash
// routing.
func TestRegressionStickyRoutingCanonicalID(t *testing.T) {
	e := newRoutingEnv(t, `[{name: default, route: {sticky_key: user_id, weighted: [{backend: local, version: "1", weight: 50}, {backend: local, version: "2", weight: 50}]}}]`)
	for id := 1; id <= 20; id++ {
		want := e.post(t, fmt.Sprintf(`{"user_id": %d, "base_eta": 30}`, id)).Version
		for _, alt := range []string{fmt.Sprintf(`"%03d"`, id), fmt.Sprintf(`"+%d"`, id)} {
			res := e.post(t, fmt.Sprintf(`{"user_id": %s, "base_eta": 30}`, alt))
			requireOK(t, res)
			require.Equal(t, want, res.Version, "user %d sent as %s", id, alt)
		}
	}
}

// Bug 4: reloading a changed backend Forgets (closes the connections of)
// every endpoint of the old backend, including those the new backend still
// uses; calls in flight on them fail with Canceled.
func TestRegressionReloadForgetsEndpointsStillInUse(t *testing.T) {
	yaml := func(eps string) string {
		return gatewayYAML(yamlOpts{
			plain: true, gateway: []string{anonAllowed},
			routes: poolRoutes("1s", ""), backends: `[{name: pool, kind: kserve_grpc, endpoints: ` + eps + `}]`,
		})
	}
	e := newEnv(t, parseConfig(t, yaml(fmt.Sprintf("[%q, %q, %q]", epA, epB, epC))))
	require.NoError(t, e.g.Reload(parseConfig(t, yaml(fmt.Sprintf("[%q, %q, %q]", epA, epB, "10.0.0.4:8001")))))
	require.Equal(t, []string{epC}, e.remote.forgottenAddrs(), "only the removed endpoint may be forgotten")
}

// Bug 5: a reload that fails still replaces the kept breakers (and
// fallback monitors) of services whose configuration it changed: the
// breaker gauge drops to 0 while the serving breaker is open, and a later
// reload of the unchanged configuration loses the open breaker.
func TestRegressionFailedReloadResetsKeptBreaker(t *testing.T) {
	good := func() string {
		return gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{breakerYAML}})
	}
	e := newEnv(t, parseConfig(t, good()))
	e.features.setErr(staleErr())
	for range 3 {
		e.post(t, okBody)
	}
	require.True(t, breakerOpen(t, e))

	// Same service with another threshold, plus a second service whose
	// feature reference is a typo: valid YAML, refused by the gateway.
	bad := strings.Replace(good(), "stale_threshold: 3", "stale_threshold: 5", 1)
	bad = strings.Replace(bad, "  backends:", `    - {name: typo, path: POST /v1/typo, entities: [{name: user, join_key: user_id}], feature_service: eta,
        inputs: [{tensor: x, features: [user_stats:tripz]}], model: {name: m}, routes: [{name: d, route: {weighted: [{backend: local, weight: 100}]}}]}
  backends:`, 1)
	require.Error(t, e.g.Reload(parseConfig(t, bad)))
	require.True(t, breakerOpen(t, e), "the failed reload changed nothing")
	require.Equal(t, 1.0, metricValue(t, e.reg, "sluice_gateway_feature_breaker_open", map[string]string{"service": "eta"}),
		"the gauge must still say open")

	require.NoError(t, e.g.Reload(parseConfig(t, good())))
	require.True(t, breakerOpen(t, e), "an unchanged breaker keeps its state")
}

// Bug 6: a gateway entity of type string whose feature-repository entity
// is Int64 compiles, and the feature read then uses entity id 0.
func TestRegressionEntityKindMismatch(t *testing.T) {
	yaml := strings.Replace(gatewayYAML(yamlOpts{gateway: []string{anonAllowed}}), "{name: user, join_key: user_id}", "{name: user, join_key: user_id, type: string}", 1)
	cfg := parseConfig(t, yaml)
	repo := loadRepo(t)
	e := &testEnv{model: newFakeModel(), features: newFakeFeatures(repo)}
	seedFeatures(e.features)
	g, err := gateway.New(cfg, gateway.Options{Models: e.model, Features: e.features, FeatureRepo: func() *registry.Repo { return repo }}, nil, nil)
	if err != nil {
		return // refusing the configuration is a fix too
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	e.g = g
	requireOK(t, e.post(t, `{"user_id": "7", "route_id": 3, "base_eta": 30}`))
	require.Equal(t, int64(7), e.features.lastRequest().Entities["user_id"][0].I64)
}

// Bug 7 (since the http.go refactor): the body is read before
// authentication, so an unauthenticated caller gets 413 instead of 401 and
// makes the gateway read up to MaxBodyBytes.
func TestRegressionAuthBeforeBody(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{clientsYAML("{}")}}))
	e := newEnv(t, cfg, func(o *gateway.Options) { o.MaxBodyBytes = 64 })
	res := e.post(t, `{"user_id": 7, "base_eta": 30, "tier": "`+strings.Repeat("x", 100)+`"}`)
	requireError(t, res, http.StatusUnauthorized, "missing_api_key")
}

// Bug 8 (since the http.go refactor): a client that goes away during the
// feature read is counted as a 504 upstream_timeout.
func TestRegressionClientCancelIsNotATimeout(t *testing.T) {
	e := newEtaEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client is gone; the fake feature reader returns ctx.Err()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, etaPath, strings.NewReader(okBody))
	w := httptest.NewRecorder()
	e.g.ServeHTTP(w, r)
	require.NotEqual(t, http.StatusGatewayTimeout, w.Code, "body: %s", w.Body)
	require.Zero(t, metricValue(t, e.reg, "sluice_gateway_requests_total", map[string]string{"service": "eta", "code": "504"}))
}

func TestRegressionGRPCFloat32Outputs(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}})))
	c := grpcClient(t, e)
	resp, err := c.Predict(context.Background(), predictRequest(t, map[string]any{"user_id": 7, "base_eta": 30}))
	require.NoError(t, err)
	require.Equal(t, 0.9, resp.GetOutputs().AsMap()["confidence"])
	require.Equal(t, 0.9, e.post(t, plainBody).Outputs["confidence"])
}

// forgottenAddrs returns the endpoints whose connections were dropped.
func (f *fakeRemote) forgottenAddrs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.forgotten)
}
