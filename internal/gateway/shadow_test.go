package gateway_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// The shadow tests drive mirrored traffic through ServeHTTP and read what
// the gateway hands its Recorder: which requests were mirrored, what each
// record holds, and that a dead or hanging shadow backend changes nothing
// the client sees.

var _ gateway.Recorder = (*fakeRecorder)(nil)

// fakeRecorder is a Recorder that keeps every record offered, in order.
type fakeRecorder struct {
	mu     sync.Mutex // protects recs and closes
	recs   []*record.Record
	closes int
}

func (r *fakeRecorder) Offer(rec *record.Record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return true
}

func (r *fakeRecorder) Run() {}

func (r *fakeRecorder) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closes++
	return nil
}

func (r *fakeRecorder) records() []*record.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

// newShadowEnv builds a gateway over the fakes with a recorder; service
// and gw are extra lines of the service and of the gateway section.
func newShadowEnv(t *testing.T, o yamlOpts) (*testEnv, *fakeRecorder) {
	t.Helper()
	rec := &fakeRecorder{}
	e := newEnv(t, parseConfig(t, gatewayYAML(o)), func(opts *gateway.Options) { opts.Recorder = rec })
	runGateway(t, e)
	return e, rec
}

// closeGateway closes e's gateway, which drains the mirror: every queued
// shadow call finishes and is offered to the recorder before it returns.
func closeGateway(t *testing.T, e *testEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, e.g.Close(ctx))
}

// shadowPercent is the mirrored share in TestShadowMirroredSetIsExact: not
// a round number of buckets' worth of requests, so an off-by-one in the
// bucket comparison changes the set.
const shadowPercent = 12.5

func TestShadowMirroredSetIsExact(t *testing.T) {
	// Half the requests carry the key field (tier), the others fall back to
	// their request id, which the test sets: both inputs of the hash are
	// known, so the expected set is computed independently of the gateway.
	e, rec := newShadowEnv(t, yamlOpts{
		plain:   true,
		gateway: []string{anonAllowed, "recording: {queue_size: 20000, workers: 4}"},
		service: []string{fmt.Sprintf(`shadow: {version: "2", percent: %g, key: tier}`, shadowPercent)},
	})
	const n = 10_000
	want := map[string]string{} // request id → shadow key, for the mirrored requests
	deadline := time.Now().Add(60 * time.Second)
	for i := range n {
		reqID := fmt.Sprintf("req-%05d", i)
		key, body := reqID, fmt.Sprintf(`{"user_id": %d, "base_eta": 30}`, i)
		if i%2 == 0 {
			key = fmt.Sprintf("order-%d", i)
			body = fmt.Sprintf(`{"user_id": %d, "base_eta": 30, "tier": %q}`, i, key)
		}
		requireOK(t, e.post(t, body, "X-Request-Id", reqID))
		if gateway.Mirrored(key, shadowPercent) {
			want[reqID] = key
		}
		if time.Now().After(deadline) {
			t.Fatalf("sent only %d of %d requests in 60s", i+1, n)
		}
	}
	closeGateway(t, e)

	got := map[string]string{}
	for _, r := range rec.records() {
		_, dup := got[r.RequestID]
		require.False(t, dup, "request %s recorded twice", r.RequestID)
		got[r.RequestID] = r.ShadowKey
		sh, ok := r.Arms[record.ArmShadow]
		require.True(t, ok, "record %s has no shadow arm", r.RequestID)
		require.Equal(t, http.StatusOK, sh.Status, "record %s: shadow arm %+v", r.RequestID, sh)
		require.Equal(t, "2", sh.Version)
	}
	// Sanity of the expectation itself: the share is near the configured one.
	require.InDelta(t, shadowPercent/100, float64(len(want))/n, 0.02, "the hash does not spread keys evenly")
	require.Equal(t, len(want), len(got), "mirrored %d requests, want %d", len(got), len(want))
	require.Equal(t, want, got, "the mirrored requests (and their shadow keys) must be exactly those whose key hashes under the share")
	require.Equal(t, float64(len(want)), metricValue(t, e.reg, "sluice_gateway_shadow_requests_total", map[string]string{"service": "eta", "result": "ok"}))
	require.Zero(t, metricValue(t, e.reg, "sluice_gateway_shadow_requests_total", map[string]string{"result": "dropped"}))
	require.Equal(t, float64(n)+float64(len(want)), float64(e.model.calls.Load()), "every request calls the model once, every mirrored one once more")
}

func TestMirroredIsDeterministic(t *testing.T) {
	for _, tt := range []struct {
		key     string
		percent float64
		want    bool
	}{
		{key: "anything", percent: 100, want: true},
		{key: "anything", percent: 0, want: false},
	} {
		require.Equal(t, tt.want, gateway.Mirrored(tt.key, tt.percent), "Mirrored(%q, %g)", tt.key, tt.percent)
	}
	// Growing the share only adds requests: a request mirrored at 5 % is
	// mirrored at 10 %.
	for i := range 2000 {
		k := strconv.Itoa(i)
		if gateway.Mirrored(k, 5) {
			require.True(t, gateway.Mirrored(k, 10), "key %s mirrored at 5 %% but not at 10 %%", k)
		}
	}
}

// deadShadowYAML is the plain service with its shadow on backend "dead",
// a pool the fake remote makes fail or hang; mirror holds extra
// recording settings.
func deadShadowYAML(shadow bool, recording string) yamlOpts {
	o := yamlOpts{
		plain:    true,
		gateway:  []string{anonAllowed},
		backends: `[{name: local, kind: in_process}, {name: dead, kind: kserve_grpc, endpoints: ["10.255.0.1:8001"]}]`,
	}
	if recording != "" {
		o.gateway = append(o.gateway, "recording: "+recording)
	}
	if shadow {
		o.service = []string{`shadow: {backend: dead, version: "2", percent: 100, timeout: 2s}`}
	}
	return o
}

// primaryRun is what a client saw for one request.
type primaryRun struct {
	code    int
	body    string
	version string
	route   string
}

// sendPrimary sends n requests with fixed request ids and returns what
// each client saw, and the slowest request's latency.
func sendPrimary(t *testing.T, e *testEnv, n int) ([]primaryRun, time.Duration) {
	t.Helper()
	out := make([]primaryRun, n)
	var slowest time.Duration
	for i := range n {
		start := time.Now()
		res := e.post(t, fmt.Sprintf(`{"user_id": %d, "base_eta": %d.25}`, i, i%97), "X-Request-Id", fmt.Sprintf("dead-%04d", i))
		slowest = max(slowest, time.Since(start))
		out[i] = primaryRun{code: res.Code, body: string(res.Body), version: res.Header.Get("X-Sluice-Version"), route: res.Header.Get("X-Sluice-Route")}
	}
	return out, slowest
}

func TestShadowDeadBackendChangesNothing(t *testing.T) {
	const n = 200
	base, _ := newShadowEnv(t, deadShadowYAML(false, ""))
	want, _ := sendPrimary(t, base, n)
	for _, r := range want {
		require.Equal(t, http.StatusOK, r.code, r.body)
	}

	t.Run("connect_failure", func(t *testing.T) {
		e, rec := newShadowEnv(t, deadShadowYAML(true, ""))
		e.remote.set("10.255.0.1:8001", behaveConnectFail)
		got, _ := sendPrimary(t, e, n)
		require.Equal(t, want, got, "answers with a dead shadow must be byte-identical to answers without one")
		closeGateway(t, e)
		recs := rec.records()
		require.Len(t, recs, n, "every mirrored request is recorded, with its failed shadow arm")
		for _, r := range recs {
			sh := r.Arms[record.ArmShadow]
			require.Equal(t, http.StatusServiceUnavailable, sh.Status, "record %s: shadow arm %+v", r.RequestID, sh)
			require.NotEmpty(t, sh.Reason)
			require.Empty(t, sh.Outputs)
			require.Equal(t, http.StatusOK, r.Arms[record.ArmPrimary].Status)
		}
		require.Equal(t, float64(n), metricValue(t, e.reg, "sluice_gateway_shadow_requests_total", map[string]string{"result": "error"}))
		require.Equal(t, n, e.remote.callsTo("10.255.0.1:8001"), "a shadow call is tried once, never retried")
	})

	t.Run("hanging_tiny_queue", func(t *testing.T) {
		// One worker, a queue of one and a shadow that answers only when
		// its 2s timeout ends: all but two shadow calls must be dropped,
		// and no client may wait for any of them.
		e, rec := newShadowEnv(t, deadShadowYAML(true, "{queue_size: 1, workers: 1}"))
		e.remote.set("10.255.0.1:8001", behaveHang)
		start := time.Now()
		got, slowest := sendPrimary(t, e, n)
		elapsed := time.Since(start)
		require.Equal(t, want, got, "answers with a hanging shadow must be byte-identical to answers without one")
		require.Less(t, elapsed, 2*time.Second, "%d requests took %v: the request path waited for the hanging shadow (timeout 2s)", n, elapsed)
		require.Less(t, slowest, 2*time.Second)

		dropped := metricValue(t, e.reg, "sluice_gateway_shadow_requests_total", map[string]string{"service": "eta", "result": "dropped"})
		// The worker holds one job and the queue one more; whether the
		// worker took the first job before the second arrived decides
		// between n-2 and n-1.
		require.GreaterOrEqual(t, dropped, float64(n-2), "shadow calls dropped")
		require.LessOrEqual(t, dropped, float64(n-1), "shadow calls dropped")

		closeGateway(t, e) // waits for the (at most two) hanging calls to time out
		recs := rec.records()
		require.Equal(t, float64(n), dropped+float64(len(recs)), "every mirrored request is either dropped or recorded")
		for _, r := range recs {
			require.Equal(t, http.StatusGatewayTimeout, r.Arms[record.ArmShadow].Status, "record %s: %+v", r.RequestID, r.Arms[record.ArmShadow])
		}
	})
}

func TestShadowRecordContents(t *testing.T) {
	e, rec := newShadowEnv(t, yamlOpts{
		gateway: []string{
			"clients: [{id: app, api_key: \"${TEST_API_KEY}\"}]",
			"recording: {headers: [x-request-id, x-user-type, x-region]}",
		},
		service: []string{`shadow: {version: "2", percent: 100}`},
	})
	seedFeatures(e.features)
	// Version 2 answers with another confidence, so the arms differ.
	e.model.setFn(func(_ context.Context, req *infer.Request) (*infer.Response, error) {
		conf := 0.9
		if req.Version == "2" {
			conf = 0.25
		}
		return sumResponse(req, conf), nil
	})
	before := time.Now()
	res := e.post(t, okBody,
		"Authorization", "Bearer key-from-env",
		"X-Api-Key", "key-from-env",
		"Cookie", "session=key-from-env",
		"X-Request-Id", "rec-1",
		"X-User-Type", "premium",
		"X-Region", "eu",
		"X-Other", "not-allow-listed",
	)
	requireOK(t, res)
	after := time.Now()
	closeGateway(t, e)

	recs := rec.records()
	require.Len(t, recs, 1)
	r := recs[0]
	wire, err := record.Encode(r)
	require.NoError(t, err)
	require.NotContains(t, string(wire), "key-from-env", "a credential reached the record: %s", wire)
	require.NotContains(t, string(wire), "not-allow-listed")
	require.Equal(t, map[string]string{"x-request-id": "rec-1", "x-user-type": "premium", "x-region": "eu"}, r.Headers,
		"only the allow-listed headers, lower-case")

	// Round trip through the wire form: what replay and diff read.
	d, err := record.Decode(wire)
	require.NoError(t, err)
	require.Equal(t, record.SchemaVersion, d.Schema)
	require.Equal(t, "rec-1", d.RequestID)
	require.Equal(t, "eta", d.Service)
	require.Equal(t, "rec-1", d.ShadowKey, "no key configured: the request id is hashed")
	require.False(t, d.Time.Before(before.Truncate(time.Microsecond)) || d.Time.After(after), "record time %v outside the request's [%v, %v]", d.Time, before, after)
	require.Equal(t, map[string]string{"x-request-id": "rec-1", "x-user-type": "premium", "x-region": "eu"}, d.Headers)
	req := map[string]string{}
	for k, v := range d.Request {
		req[k] = fmt.Sprint(v)
	}
	require.Equal(t, map[string]string{"user_id": "7", "route_id": "3", "base_eta": "30"}, req)

	require.Equal(t, []string{
		"route_features__distance_km", "user_embedding__embedding", "user_stats__premium", "user_stats__rating", "user_stats__trips",
	}, slices.Sorted(maps.Keys(d.Features)))
	require.InDelta(t, 12.5, d.Features["route_features__distance_km"], 1e-9)
	require.InDelta(t, 12.0, d.Features["user_stats__trips"], 1e-9)
	require.InDelta(t, 4.5, d.Features["user_stats__rating"], 1e-9)
	require.Equal(t, true, d.Features["user_stats__premium"]) //nolint:testifylint // the JSON value is a bool, not a number
	emb, ok := d.Features["user_embedding__embedding"].([]any)
	require.True(t, ok, "a list feature is an array: %T", d.Features["user_embedding__embedding"])
	require.Len(t, emb, 4)
	require.InDelta(t, -0.2, emb[1], 1e-6)

	// The inputs as sent to the model (etaInputs: user, route, flags).
	require.Len(t, d.Inputs, 3)
	byName := map[string]record.Tensor{}
	for _, in := range d.Inputs {
		byName[in.Name] = in
	}
	require.Equal(t, "FP32", byName["user"].DataType)
	require.Equal(t, []int64{1, 7}, byName["user"].Shape)
	require.Equal(t, "FP64", byName["route"].DataType)
	require.JSONEq(t, `[12.5, 30, -1]`, string(byName["route"].Data), "route: distance, base_eta, the missing delay factor defaulted to -1")
	require.Equal(t, "INT32", byName["flags"].DataType)
	require.JSONEq(t, `[0, 3]`, string(byName["flags"].Data))

	primary, shadow := d.Arms[record.ArmPrimary], d.Arms[record.ArmShadow]
	require.Equal(t, "eta_model", primary.Model)
	require.Equal(t, "1", primary.Version)
	require.Equal(t, http.StatusOK, primary.Status)
	require.Equal(t, "model", primary.Source)
	require.Equal(t, "eta_model", shadow.Model)
	require.Equal(t, "2", shadow.Version)
	require.Equal(t, http.StatusOK, shadow.Status)
	require.InDelta(t, 0.9, primary.Outputs["confidence_score"][0], 1e-6)
	require.InDelta(t, 0.25, shadow.Outputs["confidence_score"][0], 1e-6)
	// FP32 values are written with 32-bit precision: 0.9, not
	// 0.8999999761581421 (the float32 widened to float64).
	require.Contains(t, string(wire), `"confidence_score":[0.9]`)
	require.NotContains(t, string(wire), "0.8999999")
	require.Equal(t, -0.2, emb[1], "a float32 feature element is recorded as its shortest decimal") //nolint:testifylint // exact on purpose
	require.InDelta(t, res.Outputs["eta_minutes"], primary.Outputs["eta_prediction"][0], 1e-4, "the primary arm is the answer the client got")
	require.InDelta(t, primary.Outputs["eta_prediction"][0], shadow.Outputs["eta_prediction"][0], 1e-6, "same inputs, same sum")
	require.GreaterOrEqual(t, primary.LatencyMS, 0.0)
	require.GreaterOrEqual(t, shadow.LatencyMS, 0.0)
	require.False(t, strings.Contains(string(wire), `"authorization"`))
}
