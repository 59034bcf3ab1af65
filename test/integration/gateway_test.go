package integration_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The gateway tests run `sluice serve -c` on a generated sluice.yaml: the
// model server on examples/models (parcel_eta versions 1 and 2), the feature
// server on a copy of examples/parcel-eta/features with the example's
// synthetic data, and the gateway in front of both, and talk to them over
// real sockets. The services copy the example's service block (entities,
// fields, inputs, outputs) and change only the routes and the fallback.
//
// TestGatewayChain runs one process for most checks (embedded online store,
// API keys required); TestGatewayRedisFeatures reads features from the
// Redis at 127.0.0.1:6379; TestGatewayRedisDown kills a private Redis that
// holds both the features and the rate limiter's buckets.

const (
	gwMainKeyEnv    = "SLUICE_GW_IT_MAIN_KEY"
	gwLimitedKeyEnv = "SLUICE_GW_IT_LIMITED_KEY"
	gwMainKey       = "gw-it-main-7f3a9c"
	gwLimitedKey    = "gw-it-limited-2b81d4"
	gwSharedRedis   = "127.0.0.1:6379"
)

// gwKeyEnv passes the test API keys to the process; the yaml names only
// the variables.
var gwKeyEnv = []string{gwMainKeyEnv + "=" + gwMainKey, gwLimitedKeyEnv + "=" + gwLimitedKey}

// gwAuth is the header of the main (unlimited) client.
var gwAuth = map[string]string{"Authorization": "Bearer " + gwMainKey}

// gwData is the example's synthetic feature data, generated once per run.
var gwData onceGo

// gwFeatureData generates the feature data as scripts/demo.sh does (seed 1)
// into the run's temporary folder, next to the binary (TestMain removes it).
func gwFeatureData(t *testing.T) string {
	t.Helper()
	return gwData.run(t, "generate the parcel-eta feature data", filepath.Join(filepath.Dir(binPath), "gw-feature-data"),
		"run", "./examples/parcel-eta/features/gen", "-out", "{out}", "-users", "2000", "-packages", "2000", "-routes", "500")
}

// onceGo runs one go command once per test run, in the module root, and
// remembers the path it produced ("{out}" in the arguments) or its error.
type onceGo struct {
	once sync.Once
	path string
	err  error
}

func (o *onceGo) run(t *testing.T, what, out string, args ...string) string {
	t.Helper()
	o.once.Do(func() {
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "{out}", out)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = repoDir
		if b, err := cmd.CombinedOutput(); err != nil {
			o.err = fmt.Errorf("%s: %w\n%s", what, err, b)
			return
		}
		o.path = out
	})
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.path
}

// gwFeatureRepo copies the example feature repository (definitions and the
// generated Parquet files) into a temporary folder. store, when not empty,
// replaces feature_store.yaml; otherwise the example's (embedded store) is
// kept.
func gwFeatureRepo(t *testing.T, store string) string {
	t.Helper()
	data := gwFeatureData(t)
	dir := t.TempDir()
	src := filepath.Join(repoDir, "examples/parcel-eta/features")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
			mustWrite(t, filepath.Join(dir, e.Name()), readFile(t, filepath.Join("examples/parcel-eta/features", e.Name())))
		}
	}
	if store != "" {
		mustWrite(t, filepath.Join(dir, "feature_store.yaml"), []byte(store))
	}
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".parquet") {
			return err
		}
		rel, err := filepath.Rel(data, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mustWrite(t, filepath.Join(dir, "data", rel), b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// gwRedisStore is a feature_store.yaml with a Redis online store. Its
// timeouts are the store's defaults: the tests run on machines as busy as
// a CI runner, and a tighter budget than the product's would fail them
// where production would not.
func gwRedisStore(project, addr string) string {
	return fmt.Sprintf(`project: %s
registry: data/registry.json
provider: local
online_store:
  type: redis
  redis_type: standalone
  addrs: [%q]
offline_store:
  type: file
`, project, addr)
}

// gwExample is the example sluice.yaml's first service with its routes,
// fallback, example and accuracy block removed: the block every test
// service copies (the accuracy tests add their own).
func gwExample(t *testing.T) map[string]any {
	t.Helper()
	var doc struct {
		Gateway struct {
			Services []map[string]any `yaml:"services"`
		} `yaml:"gateway"`
	}
	if err := yaml.Unmarshal(readFile(t, "examples/parcel-eta/sluice.yaml"), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Gateway.Services) == 0 {
		t.Fatal("examples/parcel-eta/sluice.yaml has no service")
	}
	s := doc.Gateway.Services[0]
	for _, k := range []string{"routes", "fallback", "example", "accuracy"} {
		delete(s, k)
	}
	return s
}

// gwService copies base as service name with routes and, when not nil,
// a fallback.
func gwService(base map[string]any, name string, fallback map[string]any, routes ...map[string]any) map[string]any {
	s := maps.Clone(base)
	s["name"] = name
	s["path"] = "POST /v1/services/" + name + ":predict"
	s["routes"] = routes
	if fallback != nil {
		s["fallback"] = fallback
	}
	return s
}

// gwRoute is a route to the in-process backend: weights are version "1"
// then version "2" shares; zero shares are left out.
func gwRoute(name string, match map[string]any, sticky string, w1, w2 int) map[string]any {
	var weighted []any
	for _, s := range []struct {
		version string
		weight  int
	}{{"1", w1}, {"2", w2}} {
		if s.weight > 0 {
			weighted = append(weighted, map[string]any{"backend": "local", "version": s.version, "weight": s.weight})
		}
	}
	r := map[string]any{"name": name, "route": map[string]any{"weighted": weighted}, "timeout": "2s"}
	if sticky != "" {
		r["route"].(map[string]any)["sticky_key"] = sticky
	}
	if match != nil {
		r["match"] = match
	}
	return r
}

// gwChain is one `sluice serve -c` process: model server, feature server
// and gateway.
type gwChain struct {
	*server
	listen, admin, features, models string // host:port
	modelsGRPC, modelsMetrics       string // host:port; empty when the config was not generated
	config                          []byte // the sluice.yaml it runs
	client                          *http.Client
	scheme                          string // "http", or "https" when started with gwOptions.clientTLS
}

// gwOptions are what gwStartWith adds to the chain gwStartModel starts;
// the zero value changes nothing.
type gwOptions struct {
	// env is added to the process's environment (secrets the yaml names
	// as ${VAR}).
	env []string
	// mutate, when not nil, edits the generated sluice.yaml before it is
	// written: top-level sections (security:), per-listener tls: blocks.
	mutate func(cfg map[string]any)
	// clientTLS, when not nil, is the TLS configuration of c.client, whose
	// every URL (the readiness poll included) is then https: every
	// listener the helpers talk to must serve TLS.
	clientTLS *tls.Config
	// jsonLogs runs the process with --log-format json, so that the ready
	// line and the audit lines can be decoded.
	jsonLogs bool
	// args are extra flags of `sluice serve -c`.
	args []string
}

// gwStart writes a sluice.yaml with gateway as its gateway section (listen
// and admin are filled in), the in-process model server serving parcel_eta
// from examples/models and a feature server on repo, starts `sluice serve
// -c` with env added to the environment, and waits until the gateway's
// /ready answers 200.
func gwStart(t *testing.T, repo string, gateway map[string]any, env ...string) *gwChain {
	t.Helper()
	return gwStartModel(t, "examples/models", "parcel_eta", repo, gateway, env...)
}

// gwStartModel is gwStart with the model server loading model from the
// model repository modelRepo (relative to the module root).
func gwStartModel(t *testing.T, modelRepo, model, repo string, gateway map[string]any, env ...string) *gwChain {
	t.Helper()
	return gwStartWith(t, modelRepo, model, repo, gateway, gwOptions{env: env})
}

// gwStartWith is gwStartModel with the extras of o.
func gwStartWith(t *testing.T, modelRepo, model, repo string, gateway map[string]any, o gwOptions) *gwChain {
	t.Helper()
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	c := &gwChain{listen: addr(), admin: addr(), features: addr(), models: addr(), modelsGRPC: addr(), modelsMetrics: addr()}
	gw := maps.Clone(gateway)
	gw["listen"], gw["admin"] = c.listen, c.admin
	gw["backends"] = []any{map[string]any{"name": "local", "kind": "in_process"}}
	cfg := map[string]any{
		"model_server": map[string]any{
			"model_repository": []string{filepath.Join(repoDir, modelRepo)},
			"address":          "127.0.0.1",
			"http_port":        gwPort(c.models),
			"grpc_port":        gwPort(c.modelsGRPC),
			"metrics_port":     gwPort(c.modelsMetrics),
			"control_mode":     "explicit",
			"load_model":       []string{model},
			"backend_config":   map[string]any{"onnxruntime": map[string]any{"library": ortLib}},
		},
		"feature_server": map[string]any{"repo": repo, "address": "127.0.0.1", "port": gwPort(c.features)},
		"gateway":        gw,
	}
	if o.mutate != nil {
		o.mutate(cfg)
	}
	var err error
	if c.config, err = yaml.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mustWrite(t, path, c.config)
	c.launch(t, path, o, 60*time.Second)
	return c
}

// gwPort is the port of a host:port address.
func gwPort(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// launch starts `sluice serve -c path` for c, whose listen address is
// set, and waits up to timeout until the gateway's /ready answers 200. The
// process is stopped when the test ends.
func (c *gwChain) launch(t *testing.T, path string, o gwOptions, timeout time.Duration) {
	t.Helper()
	format := "text"
	if o.jsonLogs {
		format = "json"
	}
	c.server = &server{http: c.listen, logs: &syncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(binPath, append([]string{"serve", "-c", path, "--log-format", format}, o.args...)...)
	c.cmd.Dir = t.TempDir() // every path in the file is absolute
	c.cmd.Env = append(os.Environ(), o.env...)
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	c.scheme = "http"
	transport := &http.Transport{MaxIdleConnsPerHost: 32}
	if o.clientTLS != nil {
		c.scheme = "https"
		transport.TLSClientConfig = o.clientTLS
	}
	c.client = &http.Client{Transport: transport, Timeout: 10 * time.Second}
	begin := time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.waitErr = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.stop(t)
		c.client.CloseIdleConnections()
	})
	harness.WaitFor(t, timeout, 20*time.Millisecond, "the gateway ready", func() (bool, string) {
		select {
		case <-c.done:
			t.Fatalf("sluice serve -c exited during start-up (%v); config:\n%s\nlogs:\n%s", c.waitErr, c.config, c.logs)
		default:
		}
		res, err := c.get(t.Context(), c.url(c.listen, "/ready"))
		return err == nil && res.code == http.StatusOK, "logs:\n" + c.logs.String()
	})
	c.startup = time.Since(begin)
	t.Logf("sluice serve -c ready in %v", c.startup.Round(time.Millisecond))
}

// url is the URL of path on the chain's listener addr.
func (c *gwChain) url(addr, path string) string {
	return cmp.Or(c.scheme, "http") + "://" + addr + path
}

// gwResult is one HTTP answer.
type gwResult struct {
	code int
	hdr  http.Header
	body []byte
}

func (c *gwChain) send(ctx context.Context, method, url string, body []byte, hdr map[string]string) (gwResult, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return gwResult{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return gwResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return gwResult{code: resp.StatusCode, hdr: resp.Header, body: b}, err
}

func (c *gwChain) get(ctx context.Context, url string) (gwResult, error) {
	return c.send(ctx, http.MethodGet, url, nil, nil)
}

// predict calls service with a JSON body.
func (c *gwChain) predict(ctx context.Context, service string, body any, hdr map[string]string) (gwResult, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return gwResult{}, err
	}
	return c.send(ctx, http.MethodPost, c.url(c.listen, "/v1/services/"+service+":predict"), b, hdr)
}

// mustPredict is predict that fails the test on a transport error.
func (c *gwChain) mustPredict(t *testing.T, service string, body any, hdr map[string]string) gwResult {
	t.Helper()
	res, err := c.predict(t.Context(), service, body, hdr)
	if err != nil {
		t.Fatalf("POST %s %v: %v; logs:\n%s", service, body, err, c.tail())
	}
	return res
}

// adminJSON decodes GET admin path into v.
func (c *gwChain) adminJSON(t *testing.T, path string, v any) {
	t.Helper()
	res, err := c.get(t.Context(), c.url(c.admin, path))
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("GET admin %s: %v %d %s", path, err, res.code, res.body)
	}
	if err := json.Unmarshal(res.body, v); err != nil {
		t.Fatalf("GET admin %s: %v in %s", path, err, res.body)
	}
}

// tail is the end of the process's log, for failure messages.
func (c *gwChain) tail() string {
	s := c.logs.String()
	if len(s) > 6000 {
		s = "…" + s[len(s)-6000:]
	}
	return s
}

// gwAnswer is a service's 200 body.
type gwAnswer struct {
	RequestID string         `json:"request_id"`
	Service   string         `json:"service"`
	Route     string         `json:"route"`
	Model     string         `json:"model"`
	Version   string         `json:"version"`
	Source    string         `json:"source"`
	Outputs   map[string]any `json:"outputs"`
}

// gwError is the gateway's error body.
type gwError struct {
	Error     string `json:"error"`
	Reason    string `json:"reason"`
	RequestID string `json:"request_id"`
}

// answer decodes a 200 answer whose outputs eta_minutes and confidence are
// JSON numbers.
func (r gwResult) answer() (gwAnswer, float64, float64, error) {
	var a gwAnswer
	if r.code != http.StatusOK {
		return a, 0, 0, fmt.Errorf("status %d: %s", r.code, r.body)
	}
	if err := json.Unmarshal(r.body, &a); err != nil {
		return a, 0, 0, fmt.Errorf("decode %s: %w", r.body, err)
	}
	eta, ok1 := a.Outputs["eta_minutes"].(float64)
	conf, ok2 := a.Outputs["confidence"].(float64)
	if !ok1 || !ok2 || math.IsNaN(eta) || math.IsNaN(conf) {
		return a, 0, 0, fmt.Errorf("outputs eta_minutes and confidence are not both numbers: %s", r.body)
	}
	return a, eta, conf, nil
}

func (r gwResult) mustAnswer(t *testing.T) (gwAnswer, float64, float64) {
	t.Helper()
	a, eta, conf, err := r.answer()
	if err != nil {
		t.Fatal(err)
	}
	return a, eta, conf
}

func (r gwResult) errorBody(t *testing.T) gwError {
	t.Helper()
	var e gwError
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("decode error body %q: %v", r.body, err)
	}
	return e
}

// gwIDs are entity ids whose rows are all PRESENT in the online store and
// not near their view's ttl.
type gwIDs struct {
	users, packages, routes []int64
}

// gwTTLs reads each view's ttl (and the hot entities with their own ttl)
// from the example's feature_views.yaml.
func gwTTLs(t *testing.T) (ttl map[string]time.Duration, hot map[string]map[int64]time.Duration) {
	t.Helper()
	var doc struct {
		FeatureViews []struct {
			Name string `yaml:"name"`
			TTL  string `yaml:"ttl"`
			Hot  *struct {
				Entities []int64 `yaml:"entities"`
				TTL      string  `yaml:"ttl"`
			} `yaml:"hot"`
		} `yaml:"feature_views"`
	}
	if err := yaml.Unmarshal(readFile(t, "examples/parcel-eta/features/feature_views.yaml"), &doc); err != nil {
		t.Fatal(err)
	}
	parse := func(s string) time.Duration {
		if d, ok := strings.CutSuffix(s, "d"); ok {
			n, err := strconv.Atoi(d)
			if err != nil {
				t.Fatalf("ttl %q: %v", s, err)
			}
			return time.Duration(n) * 24 * time.Hour
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("ttl %q: %v", s, err)
		}
		return d
	}
	ttl, hot = map[string]time.Duration{}, map[string]map[int64]time.Duration{}
	for _, v := range doc.FeatureViews {
		ttl[v.Name] = parse(v.TTL)
		if v.Hot != nil {
			hot[v.Name] = map[int64]time.Duration{}
			for _, e := range v.Hot.Entities {
				hot[v.Name][e] = parse(v.Hot.TTL)
			}
		}
	}
	return ttl, hot
}

// gwFeatureRows is the feature server's answer.
type gwFeatureRows struct {
	Metadata struct {
		FeatureNames []string `json:"feature_names"`
	} `json:"metadata"`
	Results []struct {
		Values          []any    `json:"values"`
		Statuses        []string `json:"statuses"`
		EventTimestamps []string `json:"event_timestamps"`
	} `json:"results"`
}

func (c *gwChain) onlineFeatures(t *testing.T, req map[string]any) gwFeatureRows {
	t.Helper()
	b, _ := json.Marshal(req)
	res, err := c.send(t.Context(), http.MethodPost, c.url(c.features, "/get-online-features"), b, nil)
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("get-online-features %s: %v %d %s", b, err, res.code, res.body)
	}
	var rows gwFeatureRows
	if err := json.Unmarshal(res.body, &rows); err != nil {
		t.Fatalf("decode get-online-features: %v", err)
	}
	return rows
}

// presentIDs asks the chain's feature server which entities have every
// view PRESENT with at least half their ttl, or an hour, left: their
// features cannot expire while the test runs.
func (c *gwChain) presentIDs(t *testing.T) gwIDs {
	t.Helper()
	ttl, hot := gwTTLs(t)
	find := func(key string, n int, views map[string]string) []int64 {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(i + 1)
		}
		var refs []string
		for _, v := range slices.Sorted(maps.Keys(views)) {
			refs = append(refs, v+":"+views[v])
		}
		rows := c.onlineFeatures(t, map[string]any{"features": refs, "entities": map[string]any{key: ids}})
		now := time.Now()
		var out []int64
	ids:
		for j, id := range ids {
			for col, r := range rows.Results[1:] {
				view, _, _ := strings.Cut(refs[col], ":")
				limit := ttl[view]
				if d, ok := hot[view][id]; ok {
					limit = d
				}
				if r.Statuses[j] != "PRESENT" {
					continue ids
				}
				ts, err := time.Parse(time.RFC3339Nano, r.EventTimestamps[j])
				if err != nil || now.Sub(ts) > limit-min(limit/2, time.Hour) {
					continue ids
				}
			}
			out = append(out, id)
		}
		if len(out) == 0 {
			t.Fatalf("no %s has fresh features in every view of %v", key, refs)
		}
		return out
	}
	return gwIDs{
		users:    find("user_id", 2000, map[string]string{"user_stats": "u_f00", "user_embedding": "embedding"}),
		packages: find("package_id", 2000, map[string]string{"package_features": "weight_kg"}),
		routes:   find("route_id", 500, map[string]string{"route_features": "distance_km"}),
	}
}

// gwPrefer returns want when ids holds it, else ids' first.
func gwPrefer(ids []int64, want int64) int64 {
	if slices.Contains(ids, want) {
		return want
	}
	return ids[0]
}

// gwBody is a request body for the example service.
func gwBody(user, pkg, rt int64, baseETA, delay float64) map[string]any {
	return map[string]any{"user_id": user, "package_id": pkg, "route_id": rt, "base_eta": baseETA, "route_delay_factor": delay}
}

// modelETA assembles the service's inputs from the feature server exactly
// as the example's inputs list them and asks the model server directly:
// what the gateway's answer must equal. It also checks that every feature
// of the feature service is PRESENT for the ids.
func (c *gwChain) modelETA(t *testing.T, base map[string]any, version string, user, pkg, rt int64) float64 {
	t.Helper()
	rows := c.onlineFeatures(t, map[string]any{
		"feature_service": base["feature_service"], "full_feature_names": true,
		// route_delay_factor is request data for the service's on-demand
		// feature eta_adjustments:route_delay_min.
		"entities": map[string]any{"user_id": []int64{user}, "package_id": []int64{pkg}, "route_id": []int64{rt}, "route_delay_factor": []float64{0.5}},
	})
	// Every feature the inputs read must be PRESENT; the others (the
	// stream feature the fallback rule reads) may be NOT_FOUND.
	byName := map[string]any{}
	for i, name := range rows.Metadata.FeatureNames {
		r := rows.Results[i]
		if r.Statuses[0] != "PRESENT" {
			continue
		}
		byName[name] = r.Values[0]
	}
	var inputs []map[string]any
	for _, in := range base["inputs"].([]any) {
		in := in.(map[string]any)
		var data []float64
		for _, ref := range in["features"].([]any) {
			v, ok := byName[strings.Replace(ref.(string), ":", "__", 1)]
			if !ok {
				t.Fatalf("feature %s of user %d, package %d, route %d is not PRESENT in the feature service's answer %v", ref, user, pkg, rt, rows.Metadata.FeatureNames)
			}
			switch v := v.(type) {
			case float64:
				data = append(data, v)
			case []any:
				for _, x := range v {
					data = append(data, x.(float64))
				}
			default:
				t.Fatalf("feature %s: value %v (%T) is not a number or list", ref, v, v)
			}
		}
		inputs = append(inputs, map[string]any{"name": in["tensor"], "datatype": "FP32", "shape": []int{1, len(data)}, "data": data})
	}
	model := base["model"].(map[string]any)["name"].(string)
	b, _ := json.Marshal(map[string]any{"inputs": inputs, "outputs": []any{map[string]any{"name": "eta_prediction"}}})
	res, err := c.send(t.Context(), http.MethodPost, c.url(c.models, "/v2/models/"+model+"/versions/"+version+"/infer"), b, nil)
	if err != nil || res.code != http.StatusOK {
		t.Fatalf("direct infer: %v %d %s", err, res.code, res.body)
	}
	out := decodeV2(t, res.body)
	if len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 1 {
		t.Fatalf("direct infer: unexpected outputs %s", res.body)
	}
	return out.Outputs[0].Data[0]
}

// checkPredict sends the example request for ids through service parcel-eta
// (one route to version 1) and checks the answer users rely on.
func (c *gwChain) checkPredict(t *testing.T, base map[string]any, ids gwIDs) {
	t.Helper()
	user, pkg, rt := gwPrefer(ids.users, 7), gwPrefer(ids.packages, 62), gwPrefer(ids.routes, 29)
	want := c.modelETA(t, base, "1", user, pkg, rt)
	body := gwBody(user, pkg, rt, 35, 0.4)

	res := c.mustPredict(t, "parcel-eta", body, gwAuth)
	a, eta, conf := res.mustAnswer(t)
	if a.RequestID == "" || res.hdr.Get("X-Request-Id") != a.RequestID {
		t.Errorf("request_id %q, X-Request-Id header %q: want equal and not empty", a.RequestID, res.hdr.Get("X-Request-Id"))
	}
	if a.Service != "parcel-eta" || a.Model != "parcel_eta" || a.Version != "1" || a.Source != "model" || a.Route != "default" {
		t.Errorf("answer %s: want service parcel-eta, model parcel_eta, version 1, source model, route default", res.body)
	}
	if res.hdr.Get("X-Sluice-Version") != "1" || res.hdr.Get("X-Sluice-Route") != "default" {
		t.Errorf("headers X-Sluice-Version %q, X-Sluice-Route %q: want 1, default", res.hdr.Get("X-Sluice-Version"), res.hdr.Get("X-Sluice-Route"))
	}
	if ct := res.hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if math.Abs(eta-want) > 1e-4*math.Max(1, math.Abs(want)) {
		t.Errorf("eta_minutes %v, want %v: the model's answer on the same features read from the feature server", eta, want)
	}
	if conf < 0 || conf > 1 {
		t.Errorf("confidence %v outside [0,1]", conf)
	}

	// A client's x-request-id is echoed in the body and the header.
	res = c.mustPredict(t, "parcel-eta", body, map[string]string{"Authorization": gwAuth["Authorization"], "x-request-id": "gw-it-req-1"})
	a, _, _ = res.mustAnswer(t)
	if a.RequestID != "gw-it-req-1" || res.hdr.Get("X-Request-Id") != "gw-it-req-1" {
		t.Errorf("request_id %q, header %q: want the client's gw-it-req-1", a.RequestID, res.hdr.Get("X-Request-Id"))
	}
}

// gwFanOut runs fn(0..n-1) on workers goroutines and returns the first
// error.
func gwFanOut(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// checkRateLimited sends 4 requests at once with hdr to a bucket of burst 3
// and 2 requests/s: three pass, one gets 429 with a Retry-After that, once
// waited, lets the next request through.
func (c *gwChain) checkRateLimited(t *testing.T, body any, hdr map[string]string) {
	t.Helper()
	results := make([]gwResult, 4)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var errs [4]error
	for i := range results {
		wg.Go(func() {
			<-start
			results[i], errs[i] = c.predict(t.Context(), "parcel-eta", body, hdr)
		})
	}
	close(start)
	wg.Wait()
	var limited []gwResult
	for i, r := range results {
		switch {
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case r.code == http.StatusTooManyRequests:
			limited = append(limited, r)
		case r.code != http.StatusOK:
			t.Fatalf("request %d: %d %s, want 200 or 429", i, r.code, r.body)
		}
	}
	if len(limited) != 1 {
		t.Fatalf("%d of 4 simultaneous requests were limited, want exactly 1 (burst 3)", len(limited))
	}
	r := limited[0]
	e := r.errorBody(t)
	if e.Reason != "rate_limited" || e.RequestID == "" {
		t.Errorf("429 body %s: want reason rate_limited and a request_id", r.body)
	}
	retry, err := strconv.Atoi(r.hdr.Get("Retry-After"))
	if err != nil || retry < 1 {
		t.Fatalf("Retry-After %q: want whole seconds >= 1", r.hdr.Get("Retry-After"))
	}
	if retry > 2 {
		t.Errorf("Retry-After %d: at 2 requests/s a token is back within 1s", retry)
	}
	time.Sleep(time.Duration(retry) * time.Second)
	if res := c.mustPredict(t, "parcel-eta", body, hdr); res.code != http.StatusOK {
		t.Errorf("after waiting Retry-After (%ds): %d %s, want 200", retry, res.code, res.body)
	}
}

// TestGatewayChain runs one chain with API keys required and the services
// below, and checks predictions, authentication, rate limits, routing, the
// business fallback and graceful shutdown.
func TestGatewayChain(t *testing.T) {
	// Not parallel: its rate-limit burst and drain period are timed.
	base := gwExample(t)
	canaryMatch := map[string]any{"headers": []any{map[string]any{"name": "x-canary", "exact": "true"}}}
	hotMatch := map[string]any{"entity_hash": map[string]any{"key": "user_id", "modulo": 100, "below": 10}}
	// The confidence threshold is 1, the largest the configuration takes:
	// it should catch every answer, but this model returns confidence
	// exactly 1.0 for many inputs, so the fallback entities are picked
	// among those with confidence < 1 (a threshold of 1.01 is refused as
	// outside [0,1]). Version 2 gives confidence < 1 across the whole ETA
	// range; version 1 only for low ETAs. Baseline buckets of 1s keep the
	// test short; history 60 keeps the low phase in the baseline while the
	// high one runs.
	fallback := map[string]any{
		"output": "eta_prediction", "baseline_window": "1s", "history": 60, "window": "1s",
		"trigger":    map[string]any{"band": 15, "duration": "2s", "clear_duration": "1s"},
		"confidence": map[string]any{"output": "confidence_score", "below": 1},
		// The example's rule: route_delay_min is its on-demand feature
		// (distance_km × route_delay_factor, computed by the feature
		// server); delay_mean_10m its stream feature, NOT_FOUND here (no
		// aggregator runs, no event is published), so it adds 0.
		"rule": monExampleFallback(t)["rule"],
	}
	gateway := map[string]any{
		"drain_period": "1s",
		"clients": []any{
			map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"},
			map[string]any{
				"id": "it-limited", "api_key": "${" + gwLimitedKeyEnv + "}",
				"rate_limit": map[string]any{"requests_per_second": 2, "burst": 3},
			},
		},
		"anonymous": map[string]any{"allowed": false},
		"services": []any{
			gwService(base, "parcel-eta", nil, gwRoute("default", nil, "", 100, 0)),
			gwService(base, "canary", nil, gwRoute("canary", canaryMatch, "", 0, 100), gwRoute("default", nil, "", 70, 30)),
			gwService(base, "sticky", nil, gwRoute("default", nil, "user_id", 70, 30)),
			gwService(base, "hotcold", nil, gwRoute("hot", hotMatch, "", 0, 100), gwRoute("default", nil, "", 100, 0)),
			gwService(base, "fallback", fallback, gwRoute("default", nil, "", 0, 100)),
		},
	}
	c := gwStart(t, gwFeatureRepo(t, ""), gateway, gwKeyEnv...)
	ids := c.presentIDs(t)
	pkg, rt := gwPrefer(ids.packages, 62), gwPrefer(ids.routes, 29)

	t.Run("Predict", func(t *testing.T) {
		c.checkPredict(t, base, ids)
	})

	t.Run("Auth", func(t *testing.T) {
		body := gwBody(ids.users[0], pkg, rt, 30, 0.5)
		for _, tc := range []struct {
			name   string
			hdr    map[string]string
			code   int
			reason string
		}{
			{"no key", nil, http.StatusUnauthorized, "missing_api_key"},
			{"wrong bearer", map[string]string{"Authorization": "Bearer not-" + gwMainKey}, http.StatusUnauthorized, "invalid_api_key"},
			{"wrong x-api-key", map[string]string{"x-api-key": "not-" + gwMainKey}, http.StatusUnauthorized, "invalid_api_key"},
			{"bearer", map[string]string{"Authorization": "Bearer " + gwMainKey}, http.StatusOK, ""},
			{"x-api-key", map[string]string{"x-api-key": gwMainKey}, http.StatusOK, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := c.mustPredict(t, "parcel-eta", body, tc.hdr)
				if res.code != tc.code {
					t.Fatalf("%d %s, want %d", res.code, res.body, tc.code)
				}
				if tc.code == http.StatusOK {
					res.mustAnswer(t)
					return
				}
				if e := res.errorBody(t); e.Reason != tc.reason {
					t.Errorf("reason %q, want %q (%s)", e.Reason, tc.reason, res.body)
				}
				if !strings.Contains(res.hdr.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate %q, want a Bearer challenge", res.hdr.Get("WWW-Authenticate"))
				}
			})
		}
		// The key came from the environment and never shows in the dump.
		res, err := c.get(t.Context(), "http://"+c.admin+"/config_dump")
		if err != nil || res.code != http.StatusOK {
			t.Fatalf("config_dump: %v %d", err, res.code)
		}
		if bytes.Contains(res.body, []byte(gwMainKey)) || bytes.Contains(res.body, []byte(gwLimitedKey)) {
			t.Errorf("config_dump shows an API key:\n%s", res.body)
		}
	})

	t.Run("ClientRateLimit", func(t *testing.T) {
		body := gwBody(ids.users[0], pkg, rt, 30, 0.5)
		c.checkRateLimited(t, body, map[string]string{"x-api-key": gwLimitedKey})
		// The limit is the client's: the main client is not affected.
		if res := c.mustPredict(t, "parcel-eta", body, gwAuth); res.code != http.StatusOK {
			t.Errorf("main client: %d %s", res.code, res.body)
		}
	})

	t.Run("HeaderCanary", func(t *testing.T) {
		hdr := map[string]string{"Authorization": gwAuth["Authorization"], "x-canary": "true"}
		err := gwFanOut(50, 8, func(i int) error {
			res, err := c.predict(t.Context(), "canary", gwBody(ids.users[i%len(ids.users)], pkg, rt, 30, 0.5), hdr)
			if err != nil {
				return err
			}
			a, _, _, err := res.answer()
			if err != nil {
				return err
			}
			if a.Version != "2" || a.Route != "canary" || res.hdr.Get("X-Sluice-Version") != "2" {
				return fmt.Errorf("request %d with x-canary: true: %s (X-Sluice-Version %q), want version 2 by route canary", i, res.body, res.hdr.Get("X-Sluice-Version"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("WeightedSplit", func(t *testing.T) {
		const n = 400
		var v2 atomic.Int64
		err := gwFanOut(n, 8, func(i int) error {
			res, err := c.predict(t.Context(), "canary", gwBody(ids.users[i%len(ids.users)], pkg, rt, 30, 0.5), gwAuth)
			if err != nil {
				return err
			}
			a, _, _, err := res.answer()
			if err != nil {
				return err
			}
			switch {
			case a.Route != "default":
				return fmt.Errorf("request %d without x-canary: route %q, want default", i, a.Route)
			case a.Version == "2":
				v2.Add(1)
			case a.Version != "1":
				return fmt.Errorf("request %d: version %q, want 1 or 2", i, a.Version)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Binomial(400, 0.3): sd 2.3 %; ±10 % is over four sd, so a
		// correct split fails this by chance less than once in 10^5 runs,
		// while a broken one (0 %, 50 %, 90 %) cannot pass.
		share := float64(v2.Load()) / n
		if math.Abs(share-0.30) > 0.10 {
			t.Errorf("version 2 got %.1f%% of %d requests, want 30%% ± 10%%", 100*share, n)
		}
	})

	t.Run("StickyByUser", func(t *testing.T) {
		users := ids.users[:min(40, len(ids.users))]
		want := map[int64]string{}
		seen := map[string]bool{}
		for _, u := range users {
			// The route's split buckets by hash of the user id's text.
			want[u] = "1"
			if route.Hash(strconv.FormatInt(u, 10))%route.Buckets >= 70 {
				want[u] = "2"
			}
			seen[want[u]] = true
		}
		if !seen["1"] || !seen["2"] {
			t.Fatalf("users %v all hash to one version: pick others", users)
		}
		err := gwFanOut(3*len(users), 8, func(i int) error {
			u := users[i%len(users)]
			res, err := c.predict(t.Context(), "sticky", gwBody(u, pkg, rt, 30, 0.5), gwAuth)
			if err != nil {
				return err
			}
			a, _, _, err := res.answer()
			if err != nil {
				return err
			}
			if a.Version != want[u] {
				return fmt.Errorf("user %d got version %q, want %q every time", u, a.Version, want[u])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("HotColdByEntityHash", func(t *testing.T) {
		var hot atomic.Int64
		err := gwFanOut(100, 8, func(i int) error {
			u := int64(i + 1) // users without features get zeros (missing: zero)
			wantRoute, wantVersion := "default", "1"
			if route.Hash(strconv.FormatInt(u, 10))%100 < 10 {
				wantRoute, wantVersion = "hot", "2"
				hot.Add(1)
			}
			res, err := c.predict(t.Context(), "hotcold", gwBody(u, pkg, rt, 30, 0.5), gwAuth)
			if err != nil {
				return err
			}
			a, _, _, err := res.answer()
			if err != nil {
				return err
			}
			if a.Route != wantRoute || a.Version != wantVersion {
				return fmt.Errorf("user %d: route %q version %q, want %q %q", u, a.Route, a.Version, wantRoute, wantVersion)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if hot.Load() == 0 {
			t.Fatal("no user of 1..100 hashes into the hot buckets: the test checks nothing")
		}
	})

	t.Run("Fallback", func(t *testing.T) {
		c.checkFallback(t, ids)
	})

	t.Run("GracefulShutdown", func(t *testing.T) {
		c.checkGracefulShutdown(t, gwBody(ids.users[0], pkg, rt, 30, 0.5), time.Second)
	})
}

// gwCombo is one entity combination with version 2's prediction.
type gwCombo struct {
	user, pkg, route int64
	eta, conf        float64
}

// checkFallback drives service "fallback" (version 2, fallback on
// eta_prediction) through the trigger: steady low ETAs, then ETAs about
// 1.5× higher until answers come from the rule, then the low ones until
// the model answers again.
func (c *gwChain) checkFallback(t *testing.T, ids gwIDs) {
	t.Helper()
	// Probe version 2 through the canary route: the fallback service's
	// monitor must see only the phases.
	rng := rand.New(rand.NewPCG(1, 2))
	cands := make([]gwCombo, 400)
	for i := range cands {
		cands[i] = gwCombo{
			user:  ids.users[rng.IntN(len(ids.users))],
			pkg:   ids.packages[rng.IntN(len(ids.packages))],
			route: ids.routes[rng.IntN(len(ids.routes))],
		}
	}
	canary := map[string]string{"Authorization": gwAuth["Authorization"], "x-canary": "true"}
	err := gwFanOut(len(cands), 8, func(i int) error {
		b := &cands[i]
		res, err := c.predict(t.Context(), "canary", gwBody(b.user, b.pkg, b.route, 30, 0.5), canary)
		if err != nil {
			return err
		}
		_, b.eta, b.conf, err = res.answer()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var usable []gwCombo
	for _, b := range cands {
		if b.conf < 1 {
			usable = append(usable, b)
		}
	}
	slices.SortFunc(usable, func(a, b gwCombo) int { return cmp.Compare(a.eta, b.eta) })
	if len(usable) < 12 {
		t.Fatalf("only %d of %d probes have confidence < 1", len(usable), len(cands))
	}
	// The low set is 6 neighbours in ETA order and the high set the
	// combinations about 1.5× above them: far enough out of the ±15 % band
	// to trigger within 2s, close enough that the baseline (which keeps the
	// high phase for 60s) lets the trigger clear within seconds once the low
	// ETAs are back. The ETAs cluster by route class, so which 6 neighbours
	// have partners at 1.4-1.55× depends on which ids are fresh today: take
	// the lowest window that has at least 3.
	var low, high []gwCombo
	var lowP90 float64
	for start := 0; start+6 <= len(usable) && len(high) < 3; start++ {
		low = usable[start : start+6]
		lowP90 = low[len(low)-1].eta
		high = high[:0]
		for _, b := range usable[start+6:] {
			if b.eta >= 1.4*lowP90 && b.eta <= 1.55*lowP90 {
				high = append(high, b)
			}
		}
	}
	// The 6 closest to 1.47×.
	slices.SortFunc(high, func(a, b gwCombo) int {
		return cmp.Compare(math.Abs(a.eta-1.47*lowP90), math.Abs(b.eta-1.47*lowP90))
	})
	high = high[:min(6, len(high))]
	slices.SortFunc(high, func(a, b gwCombo) int { return cmp.Compare(a.eta, b.eta) })
	if len(high) < 3 {
		t.Fatalf("found %d combinations with an ETA 1.4-1.55× the low set's %v and confidence < 1; probes: %v", len(high), lowP90, usable)
	}
	t.Logf("fallback: low ETAs %.1f-%.1f, high %.1f-%.1f", low[0].eta, lowP90, high[0].eta, high[len(high)-1].eta)

	// distance_km of every route used, as the rule reads it.
	var routes []int64
	for _, b := range slices.Concat(low, high) {
		if !slices.Contains(routes, b.route) {
			routes = append(routes, b.route)
		}
	}
	rows := c.onlineFeatures(t, map[string]any{"features": []string{"route_features:distance_km"}, "entities": map[string]any{"route_id": routes}})
	distance := map[int64]float64{}
	for j, r := range routes {
		d, ok := rows.Results[1].Values[j].(float64)
		if !ok || rows.Results[1].Statuses[j] != "PRESENT" {
			t.Fatalf("route %d distance_km: %v %s", r, rows.Results[1].Values[j], rows.Results[1].Statuses[j])
		}
		distance[r] = d
	}

	n := 0
	// send sends the next request of set; want is what the rule answers.
	send := func(set []gwCombo) (gwAnswer, float64, float64) {
		t.Helper()
		b := set[n%len(set)]
		baseETA := 20 + float64(n%7)*1.5   // exact in float32
		delay := []float64{0.25, 0.5}[n%2] // exact in float32
		n++
		res := c.mustPredict(t, "fallback", gwBody(b.user, b.pkg, b.route, baseETA, delay), gwAuth)
		a, eta, _, err := res.answer()
		if err != nil {
			t.Fatalf("%v; logs:\n%s", err, c.tail())
		}
		return a, eta, baseETA + delay*float64(float32(distance[b.route]))
	}
	checkRule := func(a gwAnswer, eta, want float64) {
		t.Helper()
		if math.Abs(eta-want) > 1e-4*math.Max(1, want) {
			t.Fatalf("fallback answer eta_minutes %v, want base_eta + route_delay_min (route_delay_factor*distance_km) + (delay_mean_10m ?? 0) (no delivery events: 0) = %v (%+v)", eta, want, a)
		}
		if _, ok := a.Outputs["confidence"].(float64); !ok {
			t.Errorf("fallback answer lost the model's confidence: %+v", a.Outputs)
		}
	}
	state := func() (triggered bool) {
		t.Helper()
		var views []struct {
			Service   string `json:"service"`
			Triggered bool   `json:"triggered"`
		}
		c.adminJSON(t, "/fallback", &views)
		for _, v := range views {
			if v.Service == "fallback" {
				return v.Triggered
			}
		}
		t.Fatalf("admin /fallback does not list service fallback: %+v", views)
		return false
	}
	tick := time.NewTicker(20 * time.Millisecond) // 50 requests/s at most
	defer tick.Stop()

	// Phase 1: steady low ETAs build the baseline; the model answers.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		<-tick.C
		if a, _, _ := send(low); a.Source != "model" {
			t.Fatalf("phase 1 (steady traffic): source %q, want model", a.Source)
		}
	}
	if state() {
		t.Fatal("admin /fallback: triggered after steady traffic")
	}

	// Phase 2: higher ETAs until the rule answers.
	phase2 := time.Now()
	deadline := phase2.Add(15 * time.Second)
	for {
		<-tick.C
		a, eta, want := send(high)
		if a.Source == "fallback_rule" {
			checkRule(a, eta, want)
			break
		}
		if a.Source != "model" {
			t.Fatalf("phase 2: source %q", a.Source)
		}
		if time.Now().After(deadline) {
			t.Fatalf("phase 2: no fallback_rule answer within 15s of ETAs ~1.5× the baseline; logs:\n%s", c.tail())
		}
	}
	if !state() {
		t.Error("admin /fallback: triggered false while the rule answers")
	}

	// Phase 3: back to the low ETAs until the model answers again; until
	// then every answer is the rule's.
	phase3 := time.Now()
	deadline = phase3.Add(20 * time.Second)
	for {
		<-tick.C
		a, eta, want := send(low)
		if a.Source == "model" {
			break
		}
		if a.Source != "fallback_rule" {
			t.Fatalf("phase 3: source %q", a.Source)
		}
		checkRule(a, eta, want)
		if time.Now().After(deadline) {
			t.Fatalf("phase 3: still answered by the rule 20s after the ETAs returned to the baseline; logs:\n%s", c.tail())
		}
	}
	t.Logf("fallback: the rule answered %v into the high phase; the model again %v after the ETAs returned",
		phase3.Sub(phase2).Round(time.Millisecond), time.Since(phase3).Round(time.Millisecond))
	if state() {
		t.Error("admin /fallback: triggered true after the model answers again")
	}
	for range 10 {
		<-tick.C
		if a, _, _ := send(low); a.Source != "model" {
			t.Fatalf("after the trigger cleared: source %q, want model", a.Source)
		}
	}
}

// checkGracefulShutdown sends SIGTERM while 4 workers send requests:
// /ready turns 503 within the drain period, the gateway keeps answering
// during it, every request sent before the signal succeeds, and the
// process exits 0.
func (c *gwChain) checkGracefulShutdown(t *testing.T, body any, drain time.Duration) {
	t.Helper()
	type record struct {
		sent time.Time
		code int
		err  error
	}
	var (
		mu      sync.Mutex // protects records
		records []record
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	deadline := time.Now().Add(15 * time.Second)
	for range 4 {
		wg.Go(func() {
			for i := 0; i < 1000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				sent := time.Now()
				res, err := c.predict(t.Context(), "parcel-eta", body, gwAuth)
				mu.Lock()
				records = append(records, record{sent: sent, code: res.code, err: err})
				mu.Unlock()
				if err != nil {
					return // the listener is closed
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	signalled := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var notReady time.Duration
	for time.Since(signalled) < drain {
		res, err := c.get(t.Context(), "http://"+c.listen+"/ready")
		if err == nil && res.code == http.StatusServiceUnavailable {
			notReady = time.Since(signalled)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("sluice did not exit within 20s of SIGTERM; logs:\n%s", c.tail())
	}
	close(stop)
	wg.Wait()

	if notReady == 0 {
		t.Errorf("/ready did not answer 503 within the drain period (%v) after SIGTERM", drain)
	}
	if c.waitErr != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0; logs:\n%s", c.waitErr, c.tail())
	}
	if strings.Contains(c.logs.String(), "DATA RACE") {
		t.Errorf("race detected in sluice; logs:\n%s", c.logs)
	}
	var before, during int
	for _, r := range records {
		switch {
		case r.sent.Before(signalled) && (r.err != nil || r.code != http.StatusOK):
			t.Errorf("request sent %v before SIGTERM: %v (status %d), want 200", signalled.Sub(r.sent), r.err, r.code)
		case r.sent.Before(signalled):
			before++
		case r.err == nil && r.code != http.StatusOK:
			t.Errorf("request sent %v after SIGTERM answered %d, want 200 while draining", r.sent.Sub(signalled), r.code)
		case r.err == nil:
			during++
		case r.sent.Sub(signalled) < drain/2:
			t.Errorf("request sent %v after SIGTERM, within the drain period: %v", r.sent.Sub(signalled), r.err)
		}
	}
	if before == 0 || during == 0 {
		t.Errorf("%d requests before SIGTERM and %d answered after it, want both > 0", before, during)
	}
	t.Logf("graceful shutdown: /ready 503 after %v; %d requests before SIGTERM, %d answered while draining", notReady.Round(time.Millisecond), before, during)
}

// gwNeedRedis fails the test when no Redis answers at addr.
func gwNeedRedis(t *testing.T, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("no Redis at %s: %v", addr, err)
	}
}

// gwScan returns the number of keys matching pattern at addr, UNLINKing
// them when unlink is set.
func gwScan(ctx context.Context, addr, pattern string, unlink bool) (int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var cursor uint64
	n := 0
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return n, err
		}
		n += len(keys)
		if unlink && len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return n, err
			}
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}

// TestGatewayRedisFeatures reads the features from the shared Redis under
// a project of its own, and checks the anonymous per-IP limit.
func TestGatewayRedisFeatures(t *testing.T) {
	// Not parallel: its rate-limit burst is timed.
	gwNeedRedis(t, gwSharedRedis)
	project := fmt.Sprintf("gwit_%d", time.Now().UnixNano())
	pattern := "sluice:" + project + ":*" // internal/feature/online/redis's layout
	// Registered first, so it runs after the process has stopped.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := gwScan(ctx, gwSharedRedis, pattern, true); err != nil {
			t.Errorf("clean up %s: %v", pattern, err)
		}
	})
	base := gwExample(t)
	gateway := map[string]any{
		"drain_period": "100ms",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous": map[string]any{
			"allowed":           true,
			"rate_limit_per_ip": map[string]any{"requests_per_second": 2, "burst": 3},
		},
		"services": []any{gwService(base, "parcel-eta", nil, gwRoute("default", nil, "", 100, 0))},
	}
	c := gwStart(t, gwFeatureRepo(t, gwRedisStore(project, gwSharedRedis)), gateway, gwKeyEnv...)
	keys, err := gwScan(t.Context(), gwSharedRedis, pattern, false)
	if err != nil || keys == 0 {
		t.Fatalf("Redis holds %d keys under %s after start-up (%v): the features were not materialized there", keys, pattern, err)
	}
	ids := c.presentIDs(t)

	t.Run("Predict", func(t *testing.T) {
		c.checkPredict(t, base, ids)
	})
	t.Run("AnonymousRateLimit", func(t *testing.T) {
		body := gwBody(ids.users[0], ids.packages[0], ids.routes[0], 30, 0.5)
		c.checkRateLimited(t, body, nil)
		if res := c.mustPredict(t, "parcel-eta", body, gwAuth); res.code != http.StatusOK {
			t.Errorf("a client with a key is not limited by the anonymous bucket: %d %s", res.code, res.body)
		}
	})
}

// gwStartRedis runs a private redis-server on port with its dump in dir,
// so a restart on the same dir gets the data back.
func gwStartRedis(t *testing.T, port int, dir string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found")
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisServer{port: port, cmd: cmd}
	t.Cleanup(r.kill)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, fmt.Sprintf("redis-server on port %d to answer PING", port), func() (bool, string) {
		err := rdb.Ping(t.Context()).Err()
		return err == nil, fmt.Sprint(err)
	})
	return r
}

// gwMetric returns the value of series (name with its labels, as exposed)
// in a Prometheus text exposition.
func gwMetric(text, series string) (float64, bool) {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestGatewayRedisDown keeps the features and the rate limiter's buckets in
// a private Redis and kills it: requests are still admitted (the limiter
// fails open to local buckets) but predictions answer 503
// online_store_unavailable; once Redis is back with its data, they work
// again.
func TestGatewayRedisDown(t *testing.T) {
	// Not parallel: it materializes the example's features into Redis at
	// start, each write bounded by the store's 500 ms timeout.
	port, dir := freePort(t), t.TempDir()
	rs := gwStartRedis(t, port, dir)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	base := gwExample(t)
	gateway := map[string]any{
		"drain_period": "100ms",
		// A limit, so that every request asks the limiter.
		"clients": []any{map[string]any{
			"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}",
			"rate_limit": map[string]any{"requests_per_second": 1000, "burst": 1000},
		}},
		"anonymous":          map[string]any{"allowed": false},
		"rate_limit_backend": map[string]any{"type": "redis", "redis": map[string]any{"addrs": []string{addr}}},
		"services":           []any{gwService(base, "parcel-eta", nil, gwRoute("default", nil, "", 100, 0))},
	}
	c := gwStart(t, gwFeatureRepo(t, gwRedisStore(fmt.Sprintf("gwdown_%d", port), addr)), gateway, gwKeyEnv...)
	ids := c.presentIDs(t)
	body := gwBody(ids.users[0], ids.packages[0], ids.routes[0], 30, 0.5)

	_, before, _ := c.mustPredict(t, "parcel-eta", body, gwAuth).mustAnswer(t)
	type rlView struct {
		Backend string `json:"backend"`
		RedisUp *bool  `json:"redis_up"`
	}
	var rl rlView
	c.adminJSON(t, "/ratelimit", &rl)
	if rl.Backend != "redis" || rl.RedisUp == nil || !*rl.RedisUp {
		t.Fatalf("admin /ratelimit %+v with Redis up: want backend redis, redis_up true", rl)
	}
	metrics := func() string {
		t.Helper()
		res, err := c.get(t.Context(), "http://"+c.admin+"/metrics")
		if err != nil || res.code != http.StatusOK {
			t.Fatalf("admin /metrics: %v %d", err, res.code)
		}
		return string(res.body)
	}
	if v, _ := gwMetric(metrics(), `sluice_gateway_ratelimit_decisions_total{backend="redis",result="allowed"}`); v < 1 {
		t.Errorf("redis allowed decisions = %v with Redis up, want >= 1", v)
	}

	// Persist the materialized features, then kill Redis.
	if out, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "SAVE").CombinedOutput(); err != nil {
		t.Fatalf("redis-cli SAVE: %v %s", err, out)
	}
	rs.kill()
	for i := range 5 {
		res := c.mustPredict(t, "parcel-eta", body, gwAuth)
		if e := res.errorBody(t); res.code != http.StatusServiceUnavailable || e.Reason != "online_store_unavailable" {
			t.Fatalf("request %d with Redis down: %d %s, want 503 online_store_unavailable (admitted, then the feature read fails)", i, res.code, res.body)
		}
	}
	c.adminJSON(t, "/ratelimit", &rl)
	if rl.RedisUp == nil || *rl.RedisUp {
		t.Errorf("admin /ratelimit %+v with Redis down: want redis_up false", rl)
	}
	m := metrics()
	if v, ok := gwMetric(m, "sluice_gateway_ratelimit_redis_up"); !ok || v != 0 {
		t.Errorf("sluice_gateway_ratelimit_redis_up = %v (found %v) with Redis down, want 0", v, ok)
	}
	if v, _ := gwMetric(m, "sluice_gateway_ratelimit_fallbacks_total"); v < 5 {
		t.Errorf("sluice_gateway_ratelimit_fallbacks_total = %v after 5 requests with Redis down, want >= 5", v)
	}
	if v, _ := gwMetric(m, `sluice_gateway_ratelimit_decisions_total{backend="local",result="allowed"}`); v < 5 {
		t.Errorf("local allowed decisions = %v after 5 requests with Redis down, want >= 5", v)
	}

	// Redis comes back on the same port with its dump.
	gwStartRedis(t, port, dir)
	harness.WaitFor(t, 15*time.Second, 100*time.Millisecond, "a prediction after Redis came back", func() (bool, string) {
		res := c.mustPredict(t, "parcel-eta", body, gwAuth)
		if res.code != http.StatusOK {
			return false, fmt.Sprintf("%d %s; logs:\n%s", res.code, res.body, c.tail())
		}
		if _, eta, _ := res.mustAnswer(t); math.Abs(eta-before) > 1e-4*math.Max(1, before) {
			t.Errorf("eta_minutes after Redis came back %v, before %v: want the same features", eta, before)
		}
		return true, ""
	})
	// The limiter probes Redis again within a second of traffic.
	harness.WaitFor(t, 10*time.Second, 100*time.Millisecond, "admin /ratelimit redis_up true after Redis came back", func() (bool, string) {
		c.mustPredict(t, "parcel-eta", body, gwAuth)
		c.adminJSON(t, "/ratelimit", &rl)
		return rl.RedisUp != nil && *rl.RedisUp, fmt.Sprintf("%+v", rl)
	})
	if v, _ := gwMetric(metrics(), "sluice_gateway_ratelimit_redis_up"); v != 1 {
		t.Errorf("sluice_gateway_ratelimit_redis_up = %v after Redis came back, want 1", v)
	}
}
