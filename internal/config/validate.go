package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"

	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/release/rollout/rolloutspec"
)

// retryOnValues are the retry_on conditions the gateway knows (Envoy's HTTP
// names plus gRPC status names; refused-stream is Envoy's and Istio's).
var retryOnValues = []string{
	"5xx", "gateway-error", "reset", "connect-failure", "retriable-4xx", "refused-stream",
	"unavailable", "resource-exhausted", "cancelled", "deadline-exceeded",
}

// Validate checks everything that can be checked without the models and
// feature repository, and reports every problem at once: the error joins
// one *FieldError per problem. It does no I/O and does not change c.
func (c *Config) Validate() error {
	v := &validator{src: c.src}
	if m := c.ModelServer; m != nil {
		v.port("model_server.http_port", m.HTTPPort)
		v.port("model_server.grpc_port", m.GRPCPort)
		v.port("model_server.metrics_port", m.MetricsPort)
		v.oneOf("model_server.control_mode", m.ControlMode, "none", "poll", "explicit")
		if len(m.ModelRepository) == 0 {
			v.add("model_server.model_repository", "at least one model repository is required")
		}
		if m.RepositoryPollInterval <= 0 {
			v.add("model_server.repository_poll_interval", "must be positive")
		}
		if m.RepositoryCacheBytes < 0 {
			v.add("model_server.repository_cache_bytes", "must not be negative")
		}
		if m.HTTPPort == m.GRPCPort || m.HTTPPort == m.MetricsPort || m.GRPCPort == m.MetricsPort {
			v.add("model_server", "http_port, grpc_port and metrics_port must differ")
		}
		v.modelServerRuntime(m)
	}
	if f := c.FeatureServer; f != nil {
		v.port("feature_server.port", f.Port)
		if f.RegistryPollInterval < 0 {
			v.add("feature_server.registry_poll_interval", "must not be negative (0s disables reloading)")
		}
		if f.GRPCPort != 0 {
			v.port("feature_server.grpc_port", f.GRPCPort)
			if f.GRPCPort == f.Port {
				v.add("feature_server.grpc_port", "must differ from feature_server.port")
			}
		}
		if f.Repo == "" {
			v.add("feature_server.repo", "is required")
		}
		v.notNegative("feature_server.exit_timeout", f.ExitTimeout)
	}
	if c.Gateway != nil {
		v.gateway(c.Gateway)
	}
	v.security(c)
	if c.Cluster != nil {
		v.cluster(c.Cluster)
	}
	if t := c.Tracing; t != nil {
		if t.OTLPEndpoint != "" {
			v.hostPort("tracing.otlp_endpoint", t.OTLPEndpoint, true)
		}
		if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
			v.add("tracing.sample_ratio", "%v outside [0,1]", t.SampleRatio)
		}
		switch t.Exporter {
		case "", "otlp", "console", "none":
		default:
			v.add("tracing.exporter", "%q: want otlp, console or none", t.Exporter)
		}
		if t.File != "" && t.Exporter != "console" {
			v.add("tracing.file", "only the console exporter writes a file (exporter: console)")
		}
	}
	return errors.Join(v.problems...)
}

type validator struct {
	src      *source
	problems []error
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, v.src.problem(path, format, args...))
}

// written reports whether path was written in the file.
func (v *validator) written(path string) bool {
	if v.src == nil {
		return false
	}
	_, ok := v.src.pos[path]
	return ok
}

func (v *validator) port(path string, p int) {
	if p < 1 || p > 65535 {
		v.add(path, "port %d outside [1,65535]", p)
	}
}

func (v *validator) oneOf(path, got string, allowed ...string) {
	if !slices.Contains(allowed, got) {
		v.add(path, "%q is not one of %s", got, strings.Join(allowed, ", "))
	}
}

func (v *validator) percent(path string, p float64) {
	if !(p >= 0 && p <= 100) { // also catches NaN
		v.add(path, "%v outside [0,100]", p)
	}
}

func (v *validator) positive(path string, d Duration) {
	if d <= 0 {
		v.add(path, "must be positive")
	}
}

// notNegative checks a duration for which 0 means "none".
func (v *validator) notNegative(path string, d Duration) {
	if d < 0 {
		v.add(path, "must not be negative")
	}
}

// modelServerRuntime checks the model_server settings that stand for the
// flags of the same names: what the model server does at start, at
// shutdown and in its answers.
func (v *validator) modelServerRuntime(m *ModelServer) {
	v.notNegative("model_server.exit_timeout", m.ExitTimeout)
	if m.CacheSize < 0 {
		v.add("model_server.cache_size", "must be a number of bytes, 0 (no cache) or more")
	}
	if m.CompressMinBytes < -1 {
		v.add("model_server.compress_min_bytes", "%d: want a number of bytes, 0 or more, or -1 (never compress)", m.CompressMinBytes)
	}
	if m.MaxOutputBytes < 0 {
		v.add("model_server.max_output_bytes", "must be a number of bytes, more than 0")
	}
	for _, name := range slices.Sorted(maps.Keys(m.ModelGitCommit)) {
		if name == "" || m.ModelGitCommit[name] == "" {
			v.add("model_server.model_git_commit", "%q: %q: want a model name and its commit", name, m.ModelGitCommit[name])
		}
	}
	for _, p := range [][2]string{
		{"model_server.http_header_forward_pattern", m.HTTPHeaderForwardPattern},
		{"model_server.grpc_header_forward_pattern", m.GRPCHeaderForwardPattern},
	} {
		if _, err := regexp.Compile(p[1]); err != nil {
			v.add(p[0], "%q is not a regular expression: %v", p[1], err)
		}
	}
}

func (v *validator) hostPort(path, addr string, needHost bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "%q is not host:port", addr)
		return
	}
	if needHost && host == "" {
		v.add(path, "%q has no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.add(path, "%q: port outside [1,65535]", addr)
	}
}

// unique reports each name already seen under the same list.
func (v *validator) unique(seen map[string]bool, path, what, name string) {
	if name == "" {
		v.add(path, "%s is required", what)
		return
	}
	if seen[name] {
		v.add(path, "duplicate %s %q", what, name)
	}
	seen[name] = true
}

// gateway checks the gateway section: its listeners, clients, rate
// limits, backends, priority headers, proxy, services, recording and log
// sampling.
func (v *validator) gateway(g *Gateway) {
	v.gatewayListeners(g)
	v.consoleLinks(g.Console)
	v.clients(g.Clients)
	v.rateLimit("gateway.anonymous.rate_limit_per_ip", g.Anonymous.RateLimitPerIP)
	v.rateLimitBackend(g.RateLimitBackend)
	backends, kinds := map[string]bool{}, map[string]string{}
	for i, b := range g.Backends {
		v.backend(fmt.Sprintf("gateway.backends[%d]", i), b, backends)
		kinds[b.Name] = b.Kind
	}
	v.positive("gateway.drain_period", g.DrainPeriod)
	v.notNegative("gateway.exit_timeout", g.ExitTimeout)
	v.priorityHeaders(g.PriorityHeaders)
	if px := g.Proxy; px != nil {
		v.proxy(px, kinds)
	}
	names, paths := map[string]bool{}, map[string]string{}
	for i, s := range g.Services {
		p := fmt.Sprintf("gateway.services[%d]", i)
		v.unique(names, p+".name", "service name", s.Name)
		if other, ok := paths[s.Path]; ok && s.Path != "" {
			v.add(p+".path", "path %q already used by service %q", s.Path, other)
		}
		paths[s.Path] = s.Name
		v.service(p, s, backends, kinds)
	}
	v.recording(g.Recording)
	if a := g.Accuracy; a != nil {
		v.fieldErrors("gateway.accuracy", a.Validate())
	}
	if sp := g.LogSampling.SuccessPercent; sp != nil {
		v.percent("gateway.log_sampling.success_percent", *sp)
	}
	if ep := g.LogSampling.ErrorsPercent; ep != nil {
		v.percent("gateway.log_sampling.errors_percent", *ep)
	}
}

// gatewayListeners checks the gateway's addresses, which must differ.
// consoleLinks checks the console's links out: absolute http(s) URLs, the
// trace URL with its {trace_id}.
func (v *validator) consoleLinks(c ConsoleLinks) {
	for _, l := range []struct{ field, url string }{
		{"gateway.console.grafana_url", c.GrafanaURL}, {"gateway.console.trace_url", c.TraceURL},
	} {
		if l.url == "" {
			continue
		}
		if u, err := url.Parse(l.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(l.field, "%q: want an absolute http or https URL", l.url)
		}
	}
	if c.TraceURL != "" && !strings.Contains(c.TraceURL, "{trace_id}") {
		v.add("gateway.console.trace_url", "%q has no {trace_id}", c.TraceURL)
	}
}

func (v *validator) gatewayListeners(g *Gateway) {
	v.hostPort("gateway.listen", g.Listen, false)
	v.hostPort("gateway.admin", g.Admin, false)
	if g.GRPC != "" {
		v.hostPort("gateway.grpc", g.GRPC, false)
		if g.GRPC == g.Listen || g.GRPC == g.Admin {
			v.add("gateway.grpc", "must differ from gateway.listen and gateway.admin")
		}
	}
	if g.Listen == g.Admin {
		v.add("gateway.admin", "must differ from gateway.listen")
	}
}

// clients checks the gateway's clients: unique ids, a credential each
// (an API key's hash or a certificate identity), rate limits, priorities.
func (v *validator) clients(clients []Client) {
	ids := map[string]bool{}
	for i, cl := range clients {
		p := fmt.Sprintf("gateway.clients[%d]", i)
		v.unique(ids, p+".id", "client id", cl.ID)
		if cl.APIKey != "" {
			v.add(p+".api_key", "a plain API key must not be kept in config; Load hashes it from ${ENV}")
		}
		if cl.APIKeySHA256 == "" {
			if !v.written(p+".api_key") && cl.TLSIdentity == "" { // else Load already said why
				v.add(p, "api_key_sha256, api_key (from ${ENV}) or tls_identity is required")
			}
		} else if b, err := hex.DecodeString(cl.APIKeySHA256); err != nil || len(b) != 32 {
			v.add(p+".api_key_sha256", "want 64 hex digits (SHA-256)")
		}
		v.rateLimit(p+".rate_limit", cl.RateLimit)
		if cl.Priority < 0 {
			v.add(p+".priority", "must not be negative")
		}
	}
}

// rateLimitBackend checks where shared rate limits are kept.
func (v *validator) rateLimitBackend(rb RateLimitBackend) {
	v.oneOf("gateway.rate_limit_backend.type", rb.Type, "local", "redis")
	if rb.Type != "redis" {
		return
	}
	if len(rb.Redis.Addrs) == 0 {
		v.add("gateway.rate_limit_backend.redis.addrs", "at least one address is required for type redis")
	}
	for i, a := range rb.Redis.Addrs {
		v.hostPort(fmt.Sprintf("gateway.rate_limit_backend.redis.addrs[%d]", i), a, true)
	}
	if rb.Redis.DB < 0 {
		v.add("gateway.rate_limit_backend.redis.db", "must not be negative")
	}
	v.positive("gateway.rate_limit_backend.redis.dial_timeout", rb.Redis.DialTimeout)
}

func (v *validator) priorityHeaders(phs []PriorityHeader) {
	for i, ph := range phs {
		pp := fmt.Sprintf("gateway.priority_headers[%d]", i)
		if ph.Name == "" {
			v.add(pp+".name", "is required")
		}
		if ph.Value == "" {
			v.add(pp+".value", "is required (an empty value would match every request without the header)")
		}
		if ph.Priority < 0 {
			v.add(pp+".priority", "must not be negative")
		}
	}
}

// proxy checks the KServe v2 HTTP proxy, which needs a kserve_http backend.
func (v *validator) proxy(px *Proxy, kinds map[string]string) {
	switch k, ok := kinds[px.Backend]; {
	case !ok:
		v.add("gateway.proxy.backend", "unknown backend %q", px.Backend)
	case k != "kserve_http":
		v.add("gateway.proxy.backend", "backend %q is %s; the proxy needs kind kserve_http", px.Backend, k)
	}
	if !strings.HasPrefix(px.PathPrefix, "/") {
		v.add("gateway.proxy.path_prefix", "%s must start with /", quote(px.PathPrefix))
	}
	v.positive("gateway.proxy.timeout", px.Timeout)
	v.retries("gateway.proxy.retries", px.Retries, px.Timeout)
}

// recording checks where and how shadow and replay answers are recorded.
func (v *validator) recording(rc Recording) {
	v.oneOf("gateway.recording.sink", rc.Sink, "jsonl", "nats", "off")
	if rc.MaxBytes < 1<<10 {
		v.add("gateway.recording.max_bytes", "must be at least 1024")
	}
	v.positive("gateway.recording.max_age", rc.MaxAge)
	if rc.QueueSize < 1 {
		v.add("gateway.recording.queue_size", "must be at least 1")
	}
	if rc.Workers < 1 || rc.Workers > 256 {
		v.add("gateway.recording.workers", "%d outside [1,256]", rc.Workers)
	}
	if rc.Spool.MaxBytes < 16<<10 {
		v.add("gateway.recording.spool.max_bytes", "must be at least 16384")
	}
	v.oneOf("gateway.recording.spool.full", rc.Spool.Full, "drop_newest", "block")
	v.positive("gateway.recording.close_timeout", rc.CloseTimeout)
	if a := rc.Archive; a.Location != "" {
		if msg := accuracyspec.CheckArchiveLocation(a.Location); msg != "" {
			v.add("gateway.recording.archive.location", "%s", msg)
		}
		if rc.Sink != "jsonl" {
			v.add("gateway.recording.archive", "archives sink jsonl's files; the sink is %q", rc.Sink)
		}
		if a.Interval < Duration(time.Second) {
			v.add("gateway.recording.archive.interval", "must be at least 1s")
		}
	}
	for i, h := range rc.Headers {
		switch strings.ToLower(h) {
		case "authorization", "x-api-key", "cookie", "proxy-authorization":
			v.add(fmt.Sprintf("gateway.recording.headers[%d]", i), "%q carries credentials and is never recorded", h)
		}
	}
}

func (v *validator) rateLimit(path string, r RateLimit) {
	if !(r.RequestsPerSecond >= 0) {
		v.add(path+".requests_per_second", "must not be negative")
	}
	if r.Burst < 0 {
		v.add(path+".burst", "must not be negative")
	}
}

func (v *validator) backend(p string, b Backend, seen map[string]bool) {
	v.unique(seen, p+".name", "backend name", b.Name)
	v.oneOf(p+".kind", b.Kind, "in_process", "kserve_grpc", "kserve_http")
	switch b.Kind {
	case "kserve_grpc", "kserve_http":
		if len(b.Endpoints) == 0 {
			v.add(p+".endpoints", "at least one endpoint is required for kind %s", b.Kind)
		}
	case "in_process":
		if len(b.Endpoints) > 0 {
			v.add(p+".endpoints", "kind in_process takes no endpoints")
		}
	}
	eps := map[string]bool{}
	for i, e := range b.Endpoints {
		ep := fmt.Sprintf("%s.endpoints[%d]", p, i)
		v.hostPort(ep, e, true)
		if eps[e] {
			v.add(ep, "duplicate endpoint %q", e)
		}
		eps[e] = true
	}
	v.oneOf(p+".load_balancing", b.LoadBalancing, "least_request")
	v.positive(p+".health_check.interval", b.HealthCheck.Interval)
	v.positive(p+".health_check.timeout", b.HealthCheck.Timeout)
	if b.HealthCheck.Timeout > b.HealthCheck.Interval {
		v.add(p+".health_check.timeout", "must not exceed health_check.interval")
	}
	od := b.OutlierDetection
	op := p + ".outlier_detection"
	v.percent(op+".error_rate_percent", od.ErrorRatePercent)
	v.percent(op+".max_ejection_percent", od.MaxEjectionPercent)
	v.positive(op+".interval", od.Interval)
	v.positive(op+".window", od.Window)
	v.positive(op+".base_ejection_time", od.BaseEjectionTime)
	if od.MinRequestVolume < 1 {
		v.add(op+".min_request_volume", "must be at least 1")
	}
	if od.Consecutive503 < 1 {
		v.add(op+".consecutive_503", "must be at least 1")
	}
}

// pathPattern is "METHOD /path".
var pathPattern = regexp.MustCompile(`^(GET|POST|PUT) /[^\s{}]*$`)

// service checks one service: its request shape, how its inputs are
// assembled, its model and outputs, its routes, and its shadow, drift,
// rollout, feature breaker and fallback blocks.
func (v *validator) service(p string, s Service, backends map[string]bool, kinds map[string]string) {
	if !pathPattern.MatchString(s.Path) {
		v.add(p+".path", "%s: want \"METHOD /path\", e.g. \"POST /v1/services/parcel-eta:predict\"", quote(s.Path))
	}
	fields := v.requestFields(p, s)
	if usesFeatures := v.inputs(p, s.Inputs, fields); usesFeatures && s.FeatureService == "" {
		v.add(p+".feature_service", "is required when inputs read features")
	}
	if s.Model.Name == "" {
		v.add(p+".model.name", "is required")
	}
	outs := map[string]bool{}
	for i, o := range s.Outputs {
		v.unique(outs, fmt.Sprintf("%s.outputs[%d].name", p, i), "output name", o.Name)
	}
	v.routes(p, s.Routes, backends, kinds, fields)
	if sh := s.Shadow; sh != nil {
		v.shadow(p+".shadow", sh, kinds, fields)
	}
	if d := s.Drift; d != nil {
		v.drift(p+".drift", d, s.Fallback != nil)
	}
	if ro := s.Rollout; ro != nil {
		v.rollout(p+".rollout", ro, backends, fields)
	}
	if a := s.Accuracy; a != nil {
		v.accuracy(p+".accuracy", a, outs, fields)
	}
	fb := s.FeatureBreaker
	v.positive(p+".feature_breaker.window", fb.Window)
	v.positive(p+".feature_breaker.probe_interval", fb.ProbeInterval)
	if s.Fallback != nil {
		v.fallback(p+".fallback", *s.Fallback)
	}
}

// requestFields checks the entities and request fields of service s (at
// p) and returns the names an input's "field:" may use.
func (v *validator) requestFields(p string, s Service) map[string]bool {
	fields := map[string]bool{}
	for i, e := range s.Entities {
		ep := fmt.Sprintf("%s.entities[%d]", p, i)
		if e.Name == "" {
			v.add(ep+".name", "is required")
		}
		v.unique(fields, ep+".join_key", "request field", e.JoinKey)
		v.oneOf(ep+".type", e.Type, "int64", "string")
	}
	for i, f := range s.RequestFields {
		fp := fmt.Sprintf("%s.request_fields[%d]", p, i)
		v.unique(fields, fp+".name", "request field", f.Name)
		v.oneOf(fp+".type", f.Type, "float32", "float64", "int64", "bool", "string")
	}
	return fields
}

// inputs checks how each input tensor of the service at p is assembled
// and reports whether any reads a feature (not only request fields).
func (v *validator) inputs(p string, inputs []Input, fields map[string]bool) (usesFeatures bool) {
	tensors := map[string]bool{}
	for i, in := range inputs {
		ip := fmt.Sprintf("%s.inputs[%d]", p, i)
		v.unique(tensors, ip+".tensor", "input tensor", in.Tensor)
		v.oneOf(ip+".datatype", in.Datatype, "FP32", "FP64", "FP16", "INT64", "INT32", "INT16", "INT8", "UINT8", "BOOL", "BYTES")
		if len(in.Features) == 0 {
			v.add(ip+".features", "at least one feature is required")
		}
		for j, f := range in.Features {
			if v.inputFeature(fmt.Sprintf("%s.features[%d]", ip, j), f, fields) {
				usesFeatures = true
			}
		}
		v.oneOf(ip+".missing", in.Missing, "fail", "default", "zero")
		v.oneOf(ip+".unreadable", in.Unreadable, "fail", "missing")
		if in.Missing == "default" && in.Default == nil {
			v.add(ip+".default", "missing: default needs a default value")
		}
		if in.Missing != "default" && in.Default != nil {
			v.add(ip+".default", "default is used only with missing: default")
		}
	}
	return usesFeatures
}

// inputFeature checks one entry of an input's features, "view:feature" or
// "field:NAME", and reports whether it names a feature.
func (v *validator) inputFeature(path, f string, fields map[string]bool) bool {
	kind, name, ok := strings.Cut(f, ":")
	switch {
	case ok && kind == "field":
		if !fields[name] {
			v.add(path, "field %q is not an entity join_key or request field of the service", name)
		}
	case ok && kind != "" && name != "" && !strings.Contains(name, ":"):
		return true
	default:
		v.add(path, "%s: want \"view:feature\" or \"field:NAME\"", quote(f))
	}
	return false
}

// routes checks the routes of the service at p; services call models
// through in_process or kserve_grpc backends only.
func (v *validator) routes(p string, routes []Route, backends map[string]bool, kinds map[string]string, fields map[string]bool) {
	if len(routes) == 0 {
		v.add(p+".routes", "at least one route is required")
	}
	seen := map[string]bool{}
	for i, r := range routes {
		v.route(fmt.Sprintf("%s.routes[%d]", p, i), r, seen, backends, fields)
		for j, w := range r.Route.Weighted {
			if kinds[w.Backend] == "kserve_http" {
				v.add(fmt.Sprintf("%s.routes[%d].route.weighted[%d].backend", p, i, j),
					"backend %q is kserve_http, which only the proxy uses; services need in_process or kserve_grpc", w.Backend)
			}
		}
	}
}

// shadow checks a service's shadow block at sp.
func (v *validator) shadow(sp string, sh *Shadow, kinds map[string]string, fields map[string]bool) {
	switch k, ok := kinds[sh.Backend]; {
	case !ok:
		v.add(sp+".backend", "unknown backend %q", sh.Backend)
	case k == "kserve_http":
		v.add(sp+".backend", "backend %q is kserve_http; a shadow needs in_process or kserve_grpc", sh.Backend)
	}
	if sh.Version == "" {
		v.add(sp+".version", "is required: the shadow model version")
	}
	if !(sh.Percent > 0 && sh.Percent <= 100) {
		v.add(sp+".percent", "%v outside (0,100]", sh.Percent)
	}
	if sh.Key != "" && !fields[sh.Key] {
		v.add(sp+".key", "%q is not an entity join_key or request field of the service", sh.Key)
	}
	v.positive(sp+".timeout", sh.Timeout)
}

// accuracy checks a service's accuracy block at ap.
func (v *validator) accuracy(ap string, a *accuracyspec.Service, outputs, fields map[string]bool) {
	v.fieldErrors(ap, a.Validate(outputs))
	if a.Key != "" && !fields[a.Key] {
		v.add(ap+".key", "%q is not an entity join_key or request field of the service", a.Key)
	}
}

// fieldErrors adds the *accuracyspec.FieldError values joined in err
// under prefix p.
func (v *validator) fieldErrors(p string, err error) {
	if err == nil {
		return
	}
	for _, e := range flattenJoined(err) {
		if fe, ok := errors.AsType[*accuracyspec.FieldError](e); ok {
			v.add(p+"."+fe.Path, "%s", fe.Msg)
		} else {
			v.add(p, "%v", e)
		}
	}
}

// drift checks a service's drift block at dp.
func (v *validator) drift(dp string, d *Drift, hasFallback bool) {
	v.positive(dp+".record_for", d.RecordFor)
	v.positive(dp+".window", d.Window)
	v.positive(dp+".interval", d.Interval)
	if !(d.PSIThreshold > 0) {
		v.add(dp+".psi_threshold", "must be positive")
	}
	if !(d.KSAlpha > 0 && d.KSAlpha < 1) {
		v.add(dp+".ks_alpha", "%v outside (0,1)", d.KSAlpha)
	}
	if d.FeedFallback && !hasFallback {
		v.add(dp+".feed_fallback", "the service has no fallback to feed")
	}
}

// rollout checks a service's rollout block at rp: the block on its own,
// then its backends and hash key against the service.
func (v *validator) rollout(rp string, ro *rolloutspec.Config, backends, fields map[string]bool) {
	if err := ro.Validate(); err != nil {
		for _, e := range flattenJoined(err) {
			if fe, ok := errors.AsType[*rolloutspec.FieldError](e); ok {
				v.add(rp+"."+fe.Path, "%s", fe.Msg)
			} else {
				v.add(rp, "%v", e)
			}
		}
	}
	for _, t := range []rolloutspec.Target{ro.Stable, ro.Candidate} {
		if t.Backend != "" && !backends[t.Backend] {
			v.add(rp, "unknown backend %q", t.Backend)
		}
	}
	if ro.HashKey != "" && !fields[ro.HashKey] {
		v.add(rp+".hash_key", "%q is not an entity join_key or request field of the service", ro.HashKey)
	}
}

func (v *validator) route(p string, r Route, seen, backends, fields map[string]bool) {
	v.unique(seen, p+".name", "route name", r.Name)
	for i, h := range r.Match.Headers {
		hp := fmt.Sprintf("%s.match.headers[%d]", p, i)
		if h.Name == "" {
			v.add(hp+".name", "is required")
		}
		set := 0
		for _, b := range []bool{h.Exact != nil, h.Prefix != nil, h.Regex != nil, h.Present != nil} {
			if b {
				set++
			}
		}
		if set != 1 {
			v.add(hp, "set exactly one of exact, prefix, regex, present")
		}
		if h.Regex != nil {
			if _, err := regexp.Compile(*h.Regex); err != nil {
				v.add(hp+".regex", "%v", err)
			}
		}
	}
	if eh := r.Match.EntityHash; eh != nil {
		ep := p + ".match.entity_hash"
		if !fields[eh.Key] {
			v.add(ep+".key", "%q is not an entity join_key or request field of the service", eh.Key)
		}
		if eh.Modulo < 1 {
			v.add(ep+".modulo", "must be at least 1")
		}
		if eh.Below < 0 || eh.Below > eh.Modulo {
			v.add(ep+".below", "%d outside [0,modulo=%d]", eh.Below, eh.Modulo)
		}
	}
	if len(r.Route.Weighted) == 0 {
		v.add(p+".route.weighted", "at least one backend is required")
	}
	sum := 0
	for i, w := range r.Route.Weighted {
		wp := fmt.Sprintf("%s.route.weighted[%d]", p, i)
		if !backends[w.Backend] {
			v.add(wp+".backend", "unknown backend %q", w.Backend)
		}
		if w.Weight < 0 || w.Weight > 100 {
			v.add(wp+".weight", "weight %d outside [0,100]", w.Weight)
		}
		sum += w.Weight
	}
	if len(r.Route.Weighted) > 0 && sum != 100 {
		v.add(p+".route.weighted", "weights sum to %d, want 100", sum)
	}
	if r.Route.StickyKey != "" && !fields[r.Route.StickyKey] {
		v.add(p+".route.sticky_key", "%q is not an entity join_key or request field of the service", r.Route.StickyKey)
	}
	v.positive(p+".timeout", r.Timeout)
	v.retries(p+".retries", r.Retries, r.Timeout)
}

// flattenJoined splits an errors.Join tree into its leaves.
func flattenJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenJoined(e)...)
		}
		return out
	}
	return []error{err}
}

// retries checks a retry policy under a request timeout.
func (v *validator) retries(p string, rp *RetryPolicy, timeout Duration) {
	if rp == nil {
		return
	}
	for i, on := range rp.RetryOn {
		if !slices.Contains(retryOnValues, on) {
			v.add(fmt.Sprintf("%s.retry_on[%d]", p, i), "%q is not one of %s", on, strings.Join(retryOnValues, ", "))
		}
	}
	if rp.NumRetries < 0 || rp.NumRetries > 10 {
		v.add(p+".num_retries", "%d outside [0,10]", rp.NumRetries)
	}
	v.positive(p+".per_try_timeout", rp.PerTryTimeout)
	if rp.PerTryTimeout > timeout {
		v.add(p+".per_try_timeout", "%s exceeds the timeout %s", rp.PerTryTimeout.Std(), timeout.Std())
	}
	v.percent(p+".budget.percent", rp.Budget.Percent)
	if rp.Budget.MinConcurrency < 0 {
		v.add(p+".budget.min_concurrency", "must not be negative")
	}
}

func (v *validator) fallback(p string, f Fallback) {
	if f.Rule == "" {
		v.add(p+".rule", "is required")
	} else if _, err := expr.Compile(f.Rule, expr.AllowUndefinedVariables()); err != nil {
		v.add(p+".rule", "does not compile: %s", firstLine(err.Error()))
	}
	v.positive(p+".baseline_window", f.BaselineWindow)
	if f.History < 1 || f.History > MaxFallbackHistory {
		v.add(p+".history", "%d outside [1,%d]", f.History, MaxFallbackHistory)
	}
	if !(f.Trigger.Percentile > 0 && f.Trigger.Percentile <= 100) {
		v.add(p+".trigger.percentile", "%v outside (0,100]", f.Trigger.Percentile)
	}
	v.percent(p+".trigger.band", f.Trigger.Band)
	v.positive(p+".trigger.duration", f.Trigger.Duration)
	v.positive(p+".trigger.clear_duration", f.Trigger.ClearDuration)
	v.positive(p+".window", f.Window)
	if !(f.Confidence.Below >= 0 && f.Confidence.Below <= 1) {
		v.add(p+".confidence.below", "%v outside [0,1]", f.Confidence.Below)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
