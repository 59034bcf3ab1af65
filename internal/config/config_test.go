package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/yamlstrict"
)

func TestLoadTestdata(t *testing.T) {
	tests := []struct {
		file string
		want []string // substrings of the error, in order; none means Load must succeed
	}{
		{file: "empty.good.yaml"},
		{file: "minimal.good.yaml"},
		{file: "unknown_field.bad.yaml", want: []string{
			`unknown_field.bad.yaml:6:7: gateway.services[0].routs: unknown field (did you mean "routes"?)`,
		}},
		{file: "accuracy.bad.yaml", want: []string{
			`accuracy.bad.yaml:14:9: gateway.services[0].accuracy.percent: 120 outside (0,100]`,
			`accuracy.bad.yaml:15:18: gateway.services[0].accuracy.slices[0]: "x region" is not a header name`,
			`accuracy.bad.yaml:17:14: gateway.services[0].accuracy.outputs[0].name: "eta_minute" is not an output of the service`,
			`accuracy.bad.yaml:18:33: gateway.services[0].accuracy.outputs[1].kind: "poisson": want regression or binary`,
			`accuracy.bad.yaml:13:9: gateway.services[0].accuracy.key: "parcel_id" is not an entity join_key or request field of the service`,
			`accuracy.bad.yaml:22:5: gateway.accuracy.store: "redis": want embedded or nats`,
			`accuracy.bad.yaml:26:17: gateway.accuracy.log.archive.location: want s3://, gs:// or as://`,
			`accuracy.bad.yaml:26:7: gateway.accuracy.log.archive: archives the jsonl sink's files; log.sink is "off"`,
			`accuracy.bad.yaml:26:53: gateway.accuracy.log.archive.interval: must be at least 1s`,
			`accuracy.bad.yaml:23:5: gateway.accuracy.lookback: must be positive`,
		}},
		{file: "weights.bad.yaml", want: []string{
			`weights.bad.yaml:11:18: gateway.services[0].routes[0].route.weighted[1].backend: unknown backend "remote"`,
			`weights.bad.yaml:9:13: gateway.services[0].routes[0].route.weighted: weights sum to 80, want 100`,
		}},
		{file: "headers.bad.yaml", want: []string{
			`headers.bad.yaml:10:34: gateway.services[0].routes[0].match.headers[0].regex: error parsing regexp`,
			`headers.bad.yaml:11:17: gateway.services[0].routes[0].match.headers[1]: set exactly one of exact, prefix, regex, present`,
		}},
		{file: "literal_api_key.bad.yaml", want: []string{
			`literal_api_key.bad.yaml:4:7: gateway.clients[0].api_key: a literal API key: secrets must not sit in config`,
		}},
		{file: "retries.bad.yaml", want: []string{
			`retries.bad.yaml:12:29: gateway.services[0].routes[0].retries.retry_on[1]: "teapot" is not one of`,
			`retries.bad.yaml:13:13: gateway.services[0].routes[0].retries.per_try_timeout: 250ms exceeds the timeout 100ms`,
		}},
		{file: "inputs.bad.yaml", want: []string{
			`inputs.bad.yaml:10:38: gateway.services[0].inputs[0].features[1]: field "nope" is not an entity join_key or request field`,
			`inputs.bad.yaml:10:50: gateway.services[0].inputs[0].features[2]: "bad": want "view:feature" or "field:NAME"`,
			`inputs.bad.yaml:8:11: gateway.services[0].inputs[0].default: missing: default needs a default value`,
		}},
		{file: "types.bad.yaml", want: []string{
			`types.bad.yaml:3:14: model_server.http_port: "lots" is not an integer`,
			`types.bad.yaml:8:32: gateway.backends[0].health_check.interval: "soon" is not a duration`,
		}},
		{file: "ranges.bad.yaml", want: []string{
			`ranges.bad.yaml:3:3: model_server.http_port: port 70000 outside [1,65535]`,
			`ranges.bad.yaml:4:3: model_server.control_mode: "sometimes" is not one of none, poll, explicit`,
			`ranges.bad.yaml:7:3: gateway.admin: "nowhere" is not host:port`,
			`ranges.bad.yaml:8:24: gateway.rate_limit_backend.type: "memcached" is not one of local, redis`,
			`ranges.bad.yaml:12:27: gateway.backends[0].outlier_detection.error_rate_percent: 150 outside [0,100]`,
			`ranges.bad.yaml:12:52: gateway.backends[0].outlier_detection.max_ejection_percent: -1 outside [0,100]`,
			`ranges.bad.yaml:13:8: gateway.backends[1].name: duplicate backend name "local"`,
			`ranges.bad.yaml:13:7: gateway.backends[1].endpoints: at least one endpoint is required for kind kserve_grpc`,
			`ranges.bad.yaml:14:18: gateway.log_sampling.success_percent: 101 outside [0,100]`,
		}},
		{file: "rule.bad.yaml", want: []string{
			`rule.bad.yaml:11:9: gateway.services[0].fallback.rule: does not compile`,
			`rule.bad.yaml:12:22: gateway.services[0].fallback.confidence.below: 1.5 outside [0,1]`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			cfg, err := Load(filepath.Join("testdata", tt.file))
			if len(tt.want) == 0 {
				require.NoError(t, err)
				require.NotNil(t, cfg)
				return
			}
			require.Error(t, err)
			require.Nil(t, cfg)
			// Every problem is reported, one per line, in file order of checking.
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), "error:\n%v", err)
			for i, w := range tt.want {
				require.Contains(t, lines[i], w)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestProblemsAreTyped(t *testing.T) {
	_, err := Load("testdata/weights.bad.yaml")
	var p *FieldError
	require.ErrorAs(t, err, &p)
	require.Equal(t, "testdata/weights.bad.yaml", p.File)
	require.Equal(t, 11, p.Line)
	require.Equal(t, 18, p.Col)
	require.Equal(t, "gateway.services[0].routes[0].route.weighted[1].backend", p.Path)
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("testdata/minimal.good.yaml")
	require.NoError(t, err)
	g := cfg.Gateway
	require.Equal(t, ":8080", g.Listen)
	require.Equal(t, "127.0.0.1:9901", g.Admin)
	require.Equal(t, "local", g.RateLimitBackend.Type)
	require.InDelta(t, 1.0, *g.LogSampling.SuccessPercent, 0)
	require.InDelta(t, 100.0, *g.LogSampling.ErrorsPercent, 0)
	s := g.Services[0]
	require.Equal(t, "int64", s.Entities[0].Type)
	require.Equal(t, "FP32", s.Inputs[0].Datatype)
	require.Equal(t, "fail", s.Inputs[0].Missing)
	require.Equal(t, time.Second, s.Routes[0].Timeout.Std())
	b := g.Backends[0]
	require.Equal(t, "least_request", b.LoadBalancing)
	od := b.OutlierDetection
	require.InDelta(t, 5.0, od.ErrorRatePercent, 0)
	require.Equal(t, 3, od.Consecutive503)
	require.Equal(t, time.Minute, od.Window.Std())
	require.Equal(t, 30*time.Second, od.BaseEjectionTime.Std())
	require.InDelta(t, 50.0, od.MaxEjectionPercent, 0)
	require.Nil(t, cfg.ModelServer, "a section left out is not started")
}

const envDoc = `model_server:
  model_repository: ["${REPO}"]
  http_port: ${HTTP_PORT:-8100}
  control_mode: ${MODE:-poll}
gateway:
  clients:
    - id: demo
      api_key: ${DEMO_KEY}
  rate_limit_backend:
    type: redis
    redis: {addrs: ["127.0.0.1:6379"], password: "${REDIS_PASSWORD}", key_prefix: "$${literal}"}
`

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvExpansion(t *testing.T) {
	cfg, err := Parse("sluice.yaml", []byte(envDoc), env(map[string]string{
		"REPO": "/models", "MODE": "explicit", "DEMO_KEY": "s3cret", "REDIS_PASSWORD": "pw",
	}))
	require.NoError(t, err)
	require.Equal(t, []string{"/models"}, cfg.ModelServer.ModelRepository)
	require.Equal(t, 8100, cfg.ModelServer.HTTPPort, "default used when unset, and typed as a number")
	require.Equal(t, "explicit", cfg.ModelServer.ControlMode, "set variable wins over the default")
	require.Equal(t, "${literal}", cfg.Gateway.RateLimitBackend.Redis.KeyPrefix)
	sum := sha256.Sum256([]byte("s3cret"))
	cl := cfg.Gateway.Clients[0]
	require.Equal(t, hex.EncodeToString(sum[:]), cl.APIKeySHA256)
	require.Empty(t, cl.APIKey, "the plain key is never kept")
}

func TestEnvUnset(t *testing.T) {
	_, err := Parse("sluice.yaml", []byte(envDoc), env(map[string]string{"REPO": "/m", "REDIS_PASSWORD": "pw"}))
	require.ErrorContains(t, err, "sluice.yaml:8:16: gateway.clients[0].api_key: environment variable DEMO_KEY is not set")
}

func TestEnvExpandSyntax(t *testing.T) {
	lookup := env(map[string]string{"A": "1", "EMPTY": ""})
	tests := []struct {
		in, want, err string
	}{
		{in: "x${A}y${A}", want: "x1y1"},
		{in: "${EMPTY:-d}", want: ""},
		{in: "${B:-}", want: ""},
		{in: "${B:-a:-b}", want: "a:-b"},
		{in: "$A ${A}", want: "$A 1"},
		{in: "$${A}", want: "${A}"},
		{in: "${A", err: "unterminated"},
		{in: "${1A}", err: "not an environment variable name"},
		{in: "${B}", err: "B is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, _, err := expandEnv(tt.in, lookup)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestAPIKeyFromEnvAndHash(t *testing.T) {
	doc := "gateway:\n  clients:\n    - {id: a, api_key: \"${K}\", api_key_sha256: " + strings.Repeat("ab", 32) + "}\n"
	_, err := Parse("s.yaml", []byte(doc), env(map[string]string{"K": "x"}))
	require.ErrorContains(t, err, "s.yaml:3:15: gateway.clients[0].api_key: set api_key or api_key_sha256, not both")

	doc = "gateway:\n  clients:\n    - {id: a, api_key: \"${K:-}\"}\n"
	_, err = Parse("s.yaml", []byte(doc), nil)
	require.ErrorContains(t, err, "s.yaml:3:15: gateway.clients[0].api_key: expands to an empty API key")

	doc = "gateway:\n  clients:\n    - {id: a, api_key_sha256: abc}\n"
	_, err = Parse("s.yaml", []byte(doc), nil)
	require.ErrorContains(t, err, "gateway.clients[0].api_key_sha256: want 64 hex digits")
}

func TestValidateCodeBuiltConfigRejectsPlainKey(t *testing.T) {
	cfg := &Config{Gateway: &Gateway{
		Listen: ":1", Admin: ":2", RateLimitBackend: RateLimitBackend{Type: "local"},
		Clients: []Client{{ID: "a", APIKey: "plain", APIKeySHA256: strings.Repeat("00", 32)}},
	}}
	err := cfg.Validate()
	require.ErrorContains(t, err, "gateway.clients[0].api_key: a plain API key must not be kept in config")
	var p *FieldError
	require.ErrorAs(t, err, &p)
	require.Zero(t, p.Line, "no source, no position")
}

func TestExampleLoads(t *testing.T) {
	t.Setenv("SLUICE_DEMO_API_KEY", "example-secret-key")
	cfg, err := Load("../../examples/parcel-eta/sluice.yaml")
	require.NoError(t, err)
	s := cfg.Gateway.Services[0]
	require.Equal(t, "parcel-eta", s.Name)
	require.Equal(t, "parcel_eta", s.FeatureService)
	require.Equal(t, "parcel_eta", s.Model.Name)
	require.Len(t, s.Inputs, 3)
	require.Len(t, s.Inputs[0].Features, 51, "user_stats u_f00..u_f49 + user_embedding:embedding")
	require.Equal(t, "user_embedding:embedding", s.Inputs[0].Features[50])
	require.Equal(t, "canary", s.Routes[0].Name)
	require.Equal(t, "true", *s.Routes[0].Match.Headers[0].Exact)
	require.Equal(t, "2", s.Routes[0].Route.Weighted[0].Version)
	require.Equal(t, 90, s.Routes[1].Route.Weighted[0].Weight)
	require.Equal(t, "base_eta + route_delay_min + (delay_mean_10m ?? 0)", s.Fallback.Rule, "the on-demand feature route_delay_min is route_delay_factor * distance_km; the stream feature delay_mean_10m is absent without deliveries")
	require.NotContains(t, cfg.String(), "example-secret-key")

	// The reference's full example is this file, verbatim.
	example, err := os.ReadFile("../../examples/parcel-eta/sluice.yaml")
	require.NoError(t, err)
	reference, err := os.ReadFile("../../docs/gateway-config.md")
	require.NoError(t, err)
	require.Contains(t, string(reference), "```yaml\n"+string(example)+"```\n", "docs/gateway-config.md must embed examples/parcel-eta/sluice.yaml")
}

func TestRedacted(t *testing.T) {
	t.Setenv("SLUICE_TEST_KEY", "top-secret-key")
	t.Setenv("SLUICE_TEST_REDIS_PW", "redis-pass-123")
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	doc := `gateway:
  clients:
    - {id: a, api_key: "${SLUICE_TEST_KEY}"}
  rate_limit_backend:
    type: redis
    redis: {addrs: ["127.0.0.1:6379"], password: "${SLUICE_TEST_REDIS_PW}"}
`
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("top-secret-key"))
	hash := hex.EncodeToString(sum[:])
	require.Equal(t, hash, cfg.Gateway.Clients[0].APIKeySHA256)

	red := cfg.Redacted()
	dump := cfg.String()
	for _, secret := range []string{"top-secret-key", hash, "redis-pass-123"} {
		require.NotContains(t, dump, secret)
	}
	require.Contains(t, dump, redactedValue)
	require.Equal(t, redactedValue, red.Gateway.Clients[0].APIKeySHA256)
	require.Equal(t, redactedValue, red.Gateway.RateLimitBackend.Redis.Password)
	// The original keeps its values.
	require.Equal(t, hash, cfg.Gateway.Clients[0].APIKeySHA256)
	require.Equal(t, "redis-pass-123", cfg.Gateway.RateLimitBackend.Redis.Password)
	require.Nil(t, (*Config)(nil).Redacted())
}

func TestSuggest(t *testing.T) {
	fields := yamlstrict.Fields(typeOf[Route]())
	require.Equal(t, "timeout", yamlstrict.Suggest("timout", fields))
	require.Equal(t, "retries", yamlstrict.Suggest("retires", fields))
	require.Empty(t, yamlstrict.Suggest("colour", fields))
}

func TestSyntaxError(t *testing.T) {
	_, err := Parse("s.yaml", []byte("gateway: [\n"), nil)
	require.ErrorContains(t, err, "s.yaml:1:1: YAML syntax: ")
	// yaml.v3 says "line 1" here (the start of the mapping, zero-based);
	// the mistake is on line 3.
	_, err = Parse("s.yaml", []byte("gateway:\n  listen: x\n  admin: [a, b\n  grpc: c\n"), nil)
	require.ErrorContains(t, err, "s.yaml:3:3: YAML syntax: ")
	_, err = Parse("s.yaml", []byte("gateway: {listen: a, listen: b}\n"), nil)
	require.Error(t, err)
	require.True(t, errors.Is(err, err))
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

func TestExplicitZeroIsNotReplacedByDefault(t *testing.T) {
	yml := `gateway:
  backends:
    - {name: b, kind: kserve_grpc, endpoints: ["127.0.0.1:1"]}
  services:
    - name: s
      path: POST /s
      request_fields: [{name: x, type: float32, required: true}]
      inputs: [{tensor: in, features: ["field:x"]}]
      model: {name: m}
      feature_breaker: {stale_threshold: 0}
      routes:
        - name: r
          route: {weighted: [{backend: b, weight: 100}]}
          retries: {retry_on: [5xx], num_retries: 0, budget: {percent: 0, min_concurrency: 0}}
        - name: d
          route: {weighted: [{backend: b, weight: 100}]}
          retries: {retry_on: [5xx]}
`
	cfg, err := Parse("t.yaml", []byte(yml), nil)
	require.NoError(t, err)
	s := cfg.Gateway.Services[0]
	require.Equal(t, 0, s.Routes[0].Retries.NumRetries, "num_retries: 0 means no retries")
	require.Zero(t, s.Routes[0].Retries.Budget.Percent)
	require.Zero(t, s.Routes[0].Retries.Budget.MinConcurrency)
	require.Zero(t, s.FeatureBreaker.StaleThreshold)
	require.Equal(t, 1, s.Routes[1].Retries.NumRetries, "left out: the default")
	require.Equal(t, 20.0, s.Routes[1].Retries.Budget.Percent)
	require.Equal(t, 3, s.Routes[1].Retries.Budget.MinConcurrency)
}
