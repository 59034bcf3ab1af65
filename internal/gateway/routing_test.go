package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/gateway/route"
)

// routingRoutes: "x-canary: true" gets version 2; users hashing into the
// first 10 of 100 buckets are "hot" and get version 3; everyone else is
// split 80/20 between versions 1 and 2 at random.
const routingRoutes = `[
        {name: canary, match: {headers: [{name: x-canary, exact: "true"}]}, route: {weighted: [{backend: local, version: "2", weight: 100}]}},
        {name: hot, match: {entity_hash: {key: user_id, below: 10}}, route: {weighted: [{backend: local, version: "3", weight: 100}]}},
        {name: default, route: {weighted: [{backend: local, version: "1", weight: 80}, {backend: local, version: "2", weight: 20}]}}]`

// isHot reports whether user id routes to the hot route.
func isHot(id string) bool { return route.Hash(id)%100 < 10 }

// coldUser returns a user id that is not hot.
func coldUser(t *testing.T) int {
	t.Helper()
	for id := 1; id < 1000; id++ {
		if !isHot(strconv.Itoa(id)) {
			return id
		}
	}
	t.Fatal("no cold user id below 1000")
	return 0
}

func newRoutingEnv(t *testing.T, routes string) *testEnv {
	t.Helper()
	return newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}, routes: routes})))
}

func TestRoutingHeaderCanary(t *testing.T) {
	e := newRoutingEnv(t, routingRoutes)
	body := fmt.Sprintf(`{"user_id": %d, "base_eta": 30}`, coldUser(t))
	for range 20 {
		res := e.post(t, body, "X-Canary", "true")
		requireOK(t, res)
		require.Equal(t, "canary", res.Route)
		require.Equal(t, "2", res.Version)
		require.Equal(t, "2", res.Header.Get("X-Sluice-Version"))
		require.Equal(t, "canary", res.Header.Get("X-Sluice-Route"))
		require.Equal(t, "2", e.model.last(t).Version, "the model is asked for the canary version")
	}
	// exact means exact.
	for _, v := range []string{"TRUE", "true ", "1"} {
		res := e.post(t, body, "X-Canary", v)
		requireOK(t, res)
		require.Equal(t, "default", res.Route, "x-canary: %q", v)
	}
}

func TestRoutingWeightedSplit(t *testing.T) {
	e := newRoutingEnv(t, routingRoutes)
	body := fmt.Sprintf(`{"user_id": %d, "base_eta": 30}`, coldUser(t))
	const n = 2000
	got := map[string]int{}
	for range n {
		// Lighter than e.post: the headers say where the request went.
		r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, etaPath, strings.NewReader(body))
		w := httptest.NewRecorder()
		e.g.ServeHTTP(w, r)
		if w.Code != http.StatusOK || w.Header().Get("X-Sluice-Route") != "default" {
			t.Fatalf("%d %s: %s", w.Code, w.Header().Get("X-Sluice-Route"), w.Body)
		}
		got[w.Header().Get("X-Sluice-Version")]++
	}
	require.Len(t, got, 2, "versions seen: %v", got)
	// 20 % of 2000 is 400 with σ ≈ 18; ±80 is 4.5σ.
	require.InDelta(t, 400, got["2"], 80, "versions seen: %v", got)
	require.Equal(t, n, got["1"]+got["2"])
}

func TestRoutingEntityHash(t *testing.T) {
	e := newRoutingEnv(t, routingRoutes)
	hot := 0
	for id := 1; id <= 300; id++ {
		res := e.post(t, fmt.Sprintf(`{"user_id": %d, "base_eta": 30}`, id))
		requireOK(t, res)
		if isHot(strconv.Itoa(id)) {
			hot++
			require.Equal(t, "hot", res.Route, "user %d", id)
			require.Equal(t, "3", res.Version, "user %d", id)
		} else {
			require.Equal(t, "default", res.Route, "user %d", id)
		}
	}
	require.InDelta(t, 30, hot, 20, "about 10%% of users are hot")
	// The id as a digit string hashes the same.
	for id := 1; id <= 50; id++ {
		res := e.post(t, fmt.Sprintf(`{"user_id": "%d", "base_eta": 30}`, id))
		requireOK(t, res)
		require.Equal(t, isHot(strconv.Itoa(id)), res.Route == "hot", "user %q", id)
	}
}

func TestRoutingSticky(t *testing.T) {
	e := newRoutingEnv(t, `[{name: default, route: {sticky_key: user_id, weighted: [{backend: local, version: "1", weight: 50}, {backend: local, version: "2", weight: 50}]}}]`)
	seen := map[string]int{}
	for id := 1; id <= 60; id++ {
		want := "2"
		if route.Hash(strconv.Itoa(id))%100 < 50 {
			want = "1"
		}
		for i := range 5 {
			body := fmt.Sprintf(`{"user_id": %d, "base_eta": 30}`, id)
			if i%2 == 1 {
				body = fmt.Sprintf(`{"user_id": "%d", "base_eta": %d}`, id, i)
			}
			res := e.post(t, body)
			requireOK(t, res)
			require.Equal(t, want, res.Version, "user %d, request %d", id, i)
		}
		seen[want]++
	}
	require.Len(t, seen, 2, "both versions get users: %v", seen)
}

func TestRoutingNoRoute(t *testing.T) {
	e := newRoutingEnv(t, `[{name: canary, match: {headers: [{name: x-canary, present: true}]}, route: {weighted: [{backend: local, weight: 100}]}}]`)
	requireOK(t, e.post(t, plainBody, "X-Canary", ""))
	res := e.post(t, plainBody)
	requireError(t, res, http.StatusNotFound, gateway.ReasonNoRoute)
	require.Equal(t, int64(1), e.model.calls.Load(), "an unrouted request must not reach the model")
}

// TestRoutingToAnotherModel: the seeds' hot/cold pair as two models. Hot
// users go to the model the hot route names; the others to the service's
// own; the answer names the model that answered.
func TestRoutingToAnotherModel(t *testing.T) {
	e := newRoutingEnv(t, `[
        {name: hot, match: {entity_hash: {key: user_id, below: 10}}, route: {weighted: [{backend: local, model: parcel_eta_hot, weight: 100}]}},
        {name: cold, route: {weighted: [{backend: local, model: parcel_eta_cold, weight: 100}]}}]`)
	hot, cold := 0, 0
	for id := 1; hot < 3 || cold < 3; id++ {
		require.Less(t, id, 1000, "too few hot users")
		res := e.post(t, fmt.Sprintf(`{"user_id": %d, "base_eta": 30}`, id))
		requireOK(t, res)
		want := "parcel_eta_cold"
		if isHot(strconv.Itoa(id)) {
			want = "parcel_eta_hot"
			hot++
		} else {
			cold++
		}
		require.Equal(t, want, e.model.last(t).Model, "user %d", id)
		require.Equal(t, want, res.Model, "the answer names the model that answered")
	}
}
