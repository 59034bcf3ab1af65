package console_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/console"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The tests run the console over real components in one process, as
// `sluice serve -c` wires them: a modelrepo.Manager over a repository of
// three models (one whose load fails), a feature registry and embedded
// online store with fresh, stale, hot and offline views, and a gateway
// with a canary route, shadow traffic and a fallback, over the manager.

// etaBackend is a backend for the tests' models. A model file holding
// "fail: <why>" fails to load with that reason; any other file is a model
// with input x (FP32 [-1,2]) and outputs eta_prediction (x0 + x1) and
// confidence_score (0.9).
type etaBackend struct{}

func (etaBackend) Name() string            { return "eta" }
func (etaBackend) DefaultFilename() string { return "model.eta" }

func (etaBackend) Signature(_ context.Context, path string) (infer.Signature, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return infer.Signature{}, err
	}
	if why, ok := strings.CutPrefix(string(b), "fail: "); ok {
		return infer.Signature{}, errors.New(strings.TrimSpace(why))
	}
	return infer.Signature{
		Inputs: []infer.TensorSpec{{Name: "x", DataType: infer.FP32, Shape: infer.Shape{-1, 2}}},
		Outputs: []infer.TensorSpec{
			{Name: "eta_prediction", DataType: infer.FP32, Shape: infer.Shape{-1, 1}},
			{Name: "confidence_score", DataType: infer.FP32, Shape: infer.Shape{-1, 1}},
		},
	}, nil
}

func (b etaBackend) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	if _, err := b.Signature(ctx, opts.Path); err != nil {
		return nil, err
	}
	return etaInstance{}, nil
}

type etaInstance struct{}

func (etaInstance) Close() error { return nil }

func (etaInstance) Execute(_ context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	x := inputs[0]
	rows := int(x.Shape[0])
	eta, conf := make([]byte, 4*rows), make([]byte, 4*rows)
	for r := range rows {
		a := math.Float32frombits(binary.LittleEndian.Uint32(x.Data[8*r:]))
		b := math.Float32frombits(binary.LittleEndian.Uint32(x.Data[8*r+4:]))
		binary.LittleEndian.PutUint32(eta[4*r:], math.Float32bits(a+b))
		binary.LittleEndian.PutUint32(conf[4*r:], math.Float32bits(0.9))
	}
	out := make([]infer.Tensor, 0, len(outputs))
	for _, name := range outputs {
		data := eta
		if name == "confidence_score" {
			data = conf
		}
		out = append(out, infer.Tensor{Name: name, DataType: infer.FP32, Shape: infer.Shape{int64(rows), 1}, Data: data})
	}
	return out, nil
}

const etaConfig = `backend: "eta"
max_batch_size: 8
version_policy: { all: {} }
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "eta_prediction" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "confidence_score" data_type: TYPE_FP32 dims: [ 1 ] } ]
`

const featureDefs = `entities:
  - {name: user, join_keys: [user_id], value_type: Int64}
  - {name: route, join_keys: [route_id], value_type: Int64}
sources:
  - {name: user_source, type: file, path: data/user.parquet, timestamp_field: event_timestamp}
  - {name: route_source, type: file, path: data/route.parquet, timestamp_field: event_timestamp}
  - {name: route_events, type: stream, stream: E, subject: route.events, timestamp_field: ts}
stream_feature_views:
  - name: route_live
    entities: [route]
    source: route_events
    aggregations: [{name: deliveries_10m, function: count, time_window: 10m}]
feature_views:
  - name: user_stats
    entities: [user]
    source: user_source
    ttl: 1h
    schema: [{name: trips, dtype: Int64}]
  - name: route_features
    entities: [route]
    source: route_source
    ttl: 1d
    schema: [{name: distance_km, dtype: Float64}]
    hot: {entities: [1, 2, 3], ttl: 1h}
  - name: old_view
    entities: [user]
    source: user_source
    ttl: 1h
    schema: [{name: score, dtype: Float64}]
  - name: signup_view
    entities: [user]
    source: user_source
    ttl: 6h
    schema: [{name: channel, dtype: String}]
  - name: archive_view
    entities: [user]
    source: user_source
    online: false
    schema: [{name: lifetime, dtype: Int64}]
`

const gatewayConfig = `gateway:
  listen: "127.0.0.1:8080"
  admin: "127.0.0.1:9901"
  anonymous: {allowed: true}
  clients: [{id: ops, api_key: "${CONSOLE_TEST_KEY}"}, {id: partner, api_key: "${CONSOLE_PARTNER_KEY}", rate_limit: {requests_per_second: 0.5, burst: 100}}]
  services:
    - name: eta
      path: POST /v1/services/eta:predict
      entities:
        - {name: user, join_key: user_id}
      request_fields:
        - {name: base_eta, type: float32, required: true}
      model: {name: eta_model, version: "1"}
      inputs: [{tensor: x, features: [field:user_id, field:base_eta]}]
      outputs:
        - {name: eta_minutes, from: eta_prediction}
        - {name: confidence, from: confidence_score}
      routes:
        - name: canary
          match: {headers: [{name: x-canary, exact: "true"}]}
          route: {weighted: [{backend: local, version: "2", weight: 100}]}
        - name: default
          route: {weighted: [{backend: local, version: "1", weight: 90}, {backend: local, version: "2", weight: 10}], sticky_key: user_id}
          timeout: 500ms
      shadow: {version: "2", percent: 50, key: user_id}
      fallback:
        output: eta_prediction
        baseline_window: 1h
        history: 24
        trigger: {percentile: 90, band: 15, duration: 10m}
        confidence: {output: confidence_score, below: 0.7}
        rule: base_eta * 1.2
  backends: [{name: local, kind: in_process}]
`

// chain is the components under test and the console over them.
type chain struct {
	reg     *prometheus.Registry
	mgr     *modelrepo.Manager
	holder  *registry.Holder
	store   *embedded.Store
	srv     *serving.Server
	gw      *gateway.Gateway
	errs    *console.ErrorLog
	console *console.Console
	http    *httptest.Server // the console under /console/
	gwHTTP  *httptest.Server // the gateway's service port
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
}

// putState writes a view's freshness state as materialization would.
func putState(t *testing.T, c *chain, view string, lastSuccess time.Time, rows int64) {
	t.Helper()
	b, err := json.Marshal(feature.ViewState{Watermark: lastSuccess, LastSuccess: lastSuccess, NewestEventTS: lastSuccess.Add(-time.Minute), Rows: rows})
	require.NoError(t, err)
	require.NoError(t, c.store.PutMeta(t.Context(), feature.ViewStateName(view), b))
}

// newChain builds the in-process chain; opts adjust the console's sources
// before it is made.
func newChain(t *testing.T, opts ...func(*console.Sources)) *chain {
	t.Helper()
	ctx := context.Background()
	c := &chain{reg: prometheus.NewRegistry(), errs: console.NewErrorLog(50)}

	models := t.TempDir()
	writeFiles(t, models, map[string]string{
		"eta_model/config.pbtxt": etaConfig, "eta_model/1/model.eta": "v1", "eta_model/2/model.eta": "v2",
		"broken/config.pbtxt": etaConfig, "broken/1/model.eta": "fail: weights file truncated at byte 1024",
	})
	var backends backend.Registry
	backends.Register(etaBackend{})
	mgr, err := modelrepo.New(modelrepo.Options{Repositories: []string{models}}, &backends, nil, c.reg)
	require.NoError(t, err)
	require.NoError(t, mgr.Start(ctx))
	c.mgr = mgr
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, mgr.Close(cctx))
	})

	features := t.TempDir()
	writeFiles(t, features, map[string]string{
		"feature_store.yaml": "project: console_test\nprovider: local\nonline_store: {type: embedded, path: data/online.db}\n",
		"definitions.yaml":   featureDefs,
	})
	c.holder, err = registry.NewHolder(ctx, features, nil, nil)
	require.NoError(t, err)
	c.store, err = embedded.Open(filepath.Join(features, "data", "online.db"), embedded.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.store.Close()) })
	now := time.Now()
	putState(t, c, "user_stats", now.Add(-10*time.Minute), 2000)
	putState(t, c, "route_features", now.Add(-2*time.Hour), 500)
	putState(t, c, "route_features__hot", now.Add(-5*time.Minute), 3)
	putState(t, c, "old_view", now.Add(-3*time.Hour), 10)
	putState(t, c, "route_live", now.Add(-2*time.Minute), 40)
	c.srv = serving.New(c.holder, c.store, serving.Options{}, nil, c.reg)

	cfg, err := config.Parse("sluice.yaml", []byte(gatewayConfig), func(k string) (string, bool) {
		v, ok := map[string]string{"CONSOLE_TEST_KEY": "ops-key", "CONSOLE_PARTNER_KEY": "partner-key"}[k]
		return v, ok
	})
	require.NoError(t, err)
	c.gw, err = gateway.New(cfg, gateway.Options{
		Models: mgr, Features: c.srv, FeatureRepo: c.holder.Current, AccessLog: c.errs,
	}, nil, c.reg)
	require.NoError(t, err)
	// The gateway's workers (the access log the console reads among them)
	// run under Run, as `sluice serve -c` runs them.
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.gw.RunBackground(runCtx) }()
	c.gwHTTP = httptest.NewServer(c.gw)
	t.Cleanup(func() {
		c.gwHTTP.Close()
		stopRun()
		require.NoError(t, <-ran)
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, c.gw.Close(cctx))
	})

	src := console.Sources{
		Models:      console.ModelsFromManager(mgr),
		Features:    console.FeaturesFromStore(c.holder, c.store, nil),
		Gateway:     console.GatewayFromAdmin(c.gw.AdminHandler(nil)),
		Errors:      c.errs,
		Metrics:     c.reg,
		SampleEvery: 20 * time.Millisecond,
	}
	for _, o := range opts {
		o(&src)
	}
	c.console = console.New(src, nil)
	admin := http.NewServeMux()
	admin.Handle(console.Prefix, c.console)
	admin.Handle("/", c.gw.AdminHandler(nil))
	c.http = httptest.NewServer(admin)
	t.Cleanup(c.http.Close)
	return c
}

// predict posts body to the eta service and returns the status code and
// the answer.
// run runs the console's sampler until the test ends.
func (c *chain) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.console.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-ran)
	})
}

func (c *chain) predict(t *testing.T, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.gwHTTP.URL+"/v1/services/eta:predict", strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.gwHTTP.Client().Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode, string(b)
}

// mustPredict checks that predict answers code.
func (c *chain) mustPredict(t *testing.T, code int, body string, hdr ...string) {
	t.Helper()
	got, answer := c.predict(t, body, hdr...)
	require.Equal(t, code, got, "POST %s: %s", body, answer)
}

// traffic sends n good predictions (some to the canary), a few bad ones
// and reads hot entities' features, so that every chart and the error
// log have data.
func (c *chain) traffic(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		hdr := []string{}
		if i%5 == 0 {
			hdr = []string{"x-canary", "true"}
		}
		c.mustPredict(t, http.StatusOK, `{"user_id": `+strconv.Itoa(i)+`, "base_eta": 30}`, hdr...)
	}
	// partner uses 3 requests of its 0.5/s limit: 10 % of a minute's.
	for range 3 {
		c.mustPredict(t, http.StatusOK, `{"user_id": 1, "base_eta": 30}`, "X-Api-Key", "partner-key")
	}
	c.mustPredict(t, http.StatusBadRequest, `{"user_id": 1}`)
	c.mustPredict(t, http.StatusUnauthorized, `{"user_id": 1, "base_eta": 3}`, "Authorization", "Bearer wrong-key")
	// The access log (and so the error log) is written after the answer
	// is sent: wait until both failures are in before the pages are read.
	harness.WaitFor(t, 10*time.Second, 5*time.Millisecond, "both failed requests in the error log", func() (bool, string) {
		seen := c.errs.ErrorsSeen()
		return seen >= 2, fmt.Sprintf("%d failures seen", seen)
	})
	_, err := c.srv.GetOnlineFeatures(t.Context(), &serving.Request{
		Features: []string{"route_features:distance_km"},
		Entities: map[string][]feature.Value{"route_id": {{I64: 1}, {I64: 2}, {I64: 99}}},
	})
	require.NoError(t, err)
}

// get fetches a console path and returns the status, headers and body.
func (c *chain) get(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.http.URL+path, nil)
	require.NoError(t, err)
	resp, err := c.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// getJSON decodes a console API answer, which must be 200.
func (c *chain) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	code, hdr, body := c.get(t, path)
	require.Equal(t, http.StatusOK, code, "GET %s: %s", path, body)
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	require.NoError(t, json.Unmarshal([]byte(body), v), body)
}

// httptestServer serves h and returns its base URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// fetch GETs url and returns the status and body.
func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	code, b, err := console.Fetch(t.Context(), nil, url)
	require.NoError(t, err)
	return code, string(b)
}

// jsonField returns one top-level field of a JSON object, as JSON.
func jsonField(t *testing.T, body, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	return string(m[name])
}
