package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/gateway/fallback"
	"github.com/sluice-ml/sluice/internal/gateway/ratelimit"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/shadowhook"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// The ports: what the gateway calls, each a small interface satisfied by
// another component (wired in package cli) or by a test's fake.

// LocalModels is the model server running in this process.
type LocalModels interface {
	Infer(ctx context.Context, req *infer.Request) (*infer.Response, error)
	ModelReady(ctx context.Context, name, version string) error
}

// RemoteModels calls KServe v2 gRPC model servers (kserve.Client).
type RemoteModels interface {
	Infer(ctx context.Context, addr string, req *infer.Request) (*infer.Response, error)
	ServerReady(ctx context.Context, addr string) (bool, error)
	ModelReady(ctx context.Context, addr, model, version string) (bool, error)
	Forget(addr string)
}

// RemoteClient is a RemoteModels of the gateway's own: the client of one
// kserve_grpc backend with a tls block, closed when the backend goes.
type RemoteClient interface {
	RemoteModels
	Close() error
}

// FeatureReader reads online features (serving.Server).
type FeatureReader interface {
	GetOnlineFeatures(ctx context.Context, req *serving.Request) (*serving.Response, error)
}

// Options are the gateway's collaborators. Zero fields disable what needs
// them: a service that reads features needs Features and FeatureRepo, an
// in_process backend needs Models, a kserve_grpc backend needs Remote.
type Options struct {
	Models LocalModels
	// Remote calls the kserve_grpc backends without a tls block
	// (plaintext), all of them through one client.
	Remote RemoteModels
	// RemoteTLS returns a new client whose connections use TLS with cfg
	// (kserve.New with Options.TLS); the gateway makes one per
	// kserve_grpc backend with a tls block and closes it when the backend
	// is retired. Nil refuses such backends.
	RemoteTLS   func(cfg *tls.Config) RemoteClient
	Features    FeatureReader
	FeatureRepo func() *registry.Repo
	// HTTPClient carries proxied KServe v2 HTTP requests; nil builds one
	// tuned for many keep-alive connections to few hosts.
	HTTPClient *http.Client
	// AccessLog receives the access-log lines; nil discards them.
	AccessLog io.Writer
	// Recorder receives the records of shadow traffic; nil drops them
	// (shadow calls still run and are counted).
	Recorder Recorder
	// Accuracy joins the predictions of services with an accuracy block
	// to their outcomes (accuracy.Joiner); nil refuses such services.
	Accuracy Accuracy
	// Hooks are release mechanisms of your own, made for every service
	// after the built-in ones (drift, rollout, shadow, accuracy) and
	// called in this order after them.
	Hooks []release.Factory
	// Fleet shares the rollouts' state and windows and the fallback
	// baselines with the other replicas (the cluster section, OpenFleet);
	// nil keeps them in this process (and local files).
	Fleet *Fleet
	// Reload re-reads the configuration for POST /reload; nil disables it.
	Reload func(ctx context.Context) (*config.Config, error)
	// MaxBodyBytes bounds a service request body [1 MiB].
	MaxBodyBytes int64
	// Now is the clock [time.Now].
	Now func() time.Time
	// ForwardedKey signs the KServe proxy's X-Sluice-Forwarded-Client
	// header (authz.SignForwarded), by which the model server knows a
	// proxied call's client; empty: the header is not sent.
	ForwardedKey []byte
	// Audit records the proxy's state-changing calls, refused ones
	// included; nil records nothing.
	Audit *authz.Auditor
}

// Gateway is the inference gateway. It is safe for concurrent use.
//
// Its life: New builds it and starts nothing; RunBackground runs its background
// work (see lifecycle.go); SetDraining fails /ready; Close, once the
// edges stopped sending requests, finishes what they handed over and
// releases the connections.
type Gateway struct {
	opts     Options
	logger   *slog.Logger // with component=gateway
	base     *slog.Logger // for the building blocks, which name their own component
	reg      prometheus.Registerer
	met      *metrics
	rlMet    *ratelimit.Metrics
	local    *ratelimit.Local
	access   *accesslog.Logger
	state    atomic.Pointer[state]
	draining atomic.Bool
	http     *upstreamHTTP // the proxy's and HTTP health checks' shared client
	mirror   *shadowhook.Mirror

	mu       sync.Mutex    // serializes Reload
	reloaded chan struct{} // a new state is published; RunBackground's health checks follow it (capacity 1)

	life lifecycle
}

// state is one applied configuration. It is immutable once published,
// except for the stateful parts it points to (upstream sets, monitors,
// breakers), which are safe for concurrent use.
type state struct {
	cfg       *config.Gateway
	redacted  any
	auth      *auth.Authenticator
	limiter   limiter
	redis     *redis.Client // nil unless the limiter uses Redis
	clients   map[string]clientLimit
	anonLimit ratelimit.Limit
	services  map[serviceKey]*service
	byName    map[string]*service
	paths     map[string]bool // service paths, for 405 answers
	backends  map[string]*backend
	proxy     *proxyRoute // nil without a proxy section
}

// serviceKey is how the HTTP edge finds a service: method and path.
type serviceKey struct{ method, path string }

// clientLimit is a configured client's rate limit and bucket key.
type clientLimit struct {
	key   string // "client:<id>"
	limit ratelimit.Limit
	// use counts the client's admitted requests (quota.go); kept across
	// reloads while the client stays.
	use *quotaUse
}

// proxyRoute is the KServe v2 proxy, resolved: its backend and that
// backend's HTTP client.
type proxyRoute struct {
	cfg      *config.Proxy
	b        *backend
	up       *upstreamHTTP
	duration prometheus.Observer // request_duration_seconds{service="proxy"}
	allowed  map[string]bool     // Triton API groups forwarded
}

// limiter is what a request's rate limit is asked of (ratelimit.Local or
// ratelimit.FailOpen).
type limiter interface {
	Allow(ctx context.Context, key string, limit ratelimit.Limit) (ratelimit.Decision, error)
}

// New builds a gateway from cfg's gateway section. It starts no
// goroutine: RunBackground does.
func New(cfg *config.Config, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Gateway, error) {
	if cfg == nil || cfg.Gateway == nil {
		return nil, errors.New("the configuration has no gateway section")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.AccessLog == nil {
		opts.AccessLog = io.Discard
	}
	g := &Gateway{
		opts:     opts,
		logger:   logger.With("component", "gateway"),
		base:     logger,
		reg:      reg,
		met:      newMetrics(reg),
		reloaded: make(chan struct{}, 1),
		life:     newLifecycle(),
	}
	g.http = newUpstreamHTTP(opts.HTTPClient)
	g.rlMet = ratelimit.NewMetrics(reg)
	if reg != nil {
		reg.MustRegister(newQuotaCollector(g))
	}
	g.local = ratelimit.NewLocal(ratelimit.LocalOptions{Metrics: g.rlMet})
	al, err := accesslog.New(opts.AccessLog, accesslog.Options{Sampling: cfg.Gateway.LogSampling}, logger, reg)
	if err != nil {
		return nil, err
	}
	g.access = al
	g.mirror = shadowhook.NewMirror(shadowhook.Options{
		Recording: cfg.Gateway.Recording, Recorder: opts.Recorder, Registerer: reg, Logger: g.logger, Encode: recordEncoder{},
	})
	st, err := g.build(cfg.Gateway, nil)
	if err != nil {
		_ = g.mirror.CloseRecorder(context.Background())
		_ = al.Close(context.Background())
		return nil, err
	}
	g.state.Store(st)
	g.watchFleet()
	return g, nil
}

// Reload applies a new configuration. Requests in flight finish on the old
// one; backends whose configuration did not change keep their endpoints'
// state. On error nothing changes.
func (g *Gateway) Reload(cfg *config.Config) error {
	if cfg == nil || cfg.Gateway == nil {
		return errors.New("the configuration has no gateway section")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.state.Load()
	st, err := g.build(cfg.Gateway, old)
	if err != nil {
		return err
	}
	g.state.Store(st)
	select {
	case g.reloaded <- struct{}{}:
	default: // RunBackground has yet to see the previous one; it will see this state too
	}
	g.retire(old, st)
	g.logger.Info("gateway configuration reloaded", "services", len(st.byName), "backends", len(st.backends))
	return nil
}

// retire releases what old has and st does not share. Requests that
// picked old may still be running on it: the clients only old's backends
// use close after a grace period, the Redis limiter's client too.
func (g *Gateway) retire(old, st *state) {
	inUse := map[string]bool{} // endpoints st reaches through the shared KServe client
	for _, b := range st.backends {
		for _, ep := range b.client.shared() {
			inUse[ep] = true
		}
	}
	for name, b := range old.backends {
		if nb, ok := st.backends[name]; ok && nb == b {
			continue
		}
		b.set.Close()
		if closeOwn := b.client.own(); closeOwn != nil {
			// Its own clients: requests in flight on them finish first.
			g.life.retireAfter(retireGrace, closeOwn)
			continue
		}
		// Connections an endpoint of the new configuration still uses
		// stay open: requests in flight on them must not fail.
		for _, ep := range b.client.shared() {
			if !inUse[ep] && g.opts.Remote != nil {
				g.opts.Remote.Forget(ep)
			}
		}
	}
	if old.redis != nil && old.redis != st.redis {
		r := old.redis
		// Let requests that picked the old limiter finish first.
		g.life.retireAfter(redisGrace, func() { _ = r.Close() })
	}
}

// Grace periods of retired clients: how long requests that picked the old
// configuration before a reload may still use them.
const (
	retireGrace = 30 * time.Second
	redisGrace  = 5 * time.Second
)

// build compiles cfg into a state, reusing old's stateful parts where
// their configuration is unchanged. It reports every problem it finds.
func (g *Gateway) build(cfg *config.Gateway, old *state) (*state, error) {
	st := &state{
		cfg: cfg, redacted: redactedGateway(cfg), clients: map[string]clientLimit{},
		services: map[serviceKey]*service{}, byName: map[string]*service{}, paths: map[string]bool{},
		backends: map[string]*backend{},
	}
	var errs []error
	errs = append(errs, g.buildClients(st, cfg)...)
	errs = append(errs, g.buildBackends(st, cfg, old)...)
	errs = append(errs, g.buildServices(st, cfg)...)
	errs = append(errs, g.buildProxy(st, cfg)...)
	if err := g.buildLimiter(cfg, old, st); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		// Only a configuration that compiled gets to create or replace the
		// stateful parts (drift watches, rollouts, breakers, fallback
		// monitors): a refused reload must leave the running ones and
		// their gauges alone.
		errs = g.attachStateful(st, cfg, old)
	}
	if len(errs) > 0 {
		g.discard(st, old)
		return nil, errors.Join(errs...)
	}
	return st, nil
}

// buildClients builds the authenticator and the clients' rate limits.
func (g *Gateway) buildClients(st *state, cfg *config.Gateway) []error {
	var errs []error
	a, err := auth.New(cfg.Clients, cfg.Anonymous.Allowed)
	if err != nil {
		errs = append(errs, err)
	}
	st.auth = a
	var old map[string]clientLimit
	if prev := g.state.Load(); prev != nil {
		old = prev.clients
	}
	for _, c := range cfg.Clients {
		use := old[c.ID].use
		if use == nil {
			use = &quotaUse{}
		}
		st.clients[c.ID] = clientLimit{key: "client:" + c.ID, limit: limitOf(c.RateLimit), use: use}
	}
	st.anonLimit = limitOf(cfg.Anonymous.RateLimitPerIP)
	return errs
}

// buildBackends builds the backends, keeping old's where their
// configuration did not change (and with it their endpoints' state).
func (g *Gateway) buildBackends(st *state, cfg *config.Gateway, old *state) []error {
	var errs []error
	for _, bc := range cfg.Backends {
		if old != nil {
			if ob, ok := old.backends[bc.Name]; ok && reflect.DeepEqual(ob.cfg, bc) {
				st.backends[bc.Name] = ob
				continue
			}
		}
		b, err := g.newBackend(bc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.backends[bc.Name] = b
	}
	return errs
}

// buildServices compiles the services and checks what they refer to:
// backends, and the model and feature servers of this process.
func (g *Gateway) buildServices(st *state, cfg *config.Gateway) []error {
	var errs []error
	var repo *registry.Repo
	if g.opts.FeatureRepo != nil {
		repo = g.opts.FeatureRepo()
	}
	for _, sc := range cfg.Services {
		s, err := compileService(sc, repo)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range sc.Routes {
			for _, w := range r.Route.Weighted {
				b, ok := st.backends[w.Backend]
				switch {
				case !ok:
					errs = append(errs, fmt.Errorf("service %q route %q: unknown backend %q", sc.Name, r.Name, w.Backend))
				case !b.servesHere():
					errs = append(errs, fmt.Errorf("service %q route %q: backend %q is in_process, but this process runs no model server (add a model_server section)", sc.Name, r.Name, w.Backend))
				}
			}
		}
		if sc.Accuracy != nil && g.opts.Accuracy == nil {
			errs = append(errs, fmt.Errorf("service %q %w", sc.Name, errNoJoiner))
		}
		if len(s.features) > 0 && g.opts.Features == nil {
			errs = append(errs, fmt.Errorf("service %q reads features, but this process runs no feature server (add a feature_server section)", sc.Name))
		}
		if sc.Rollout != nil {
			for _, t := range []string{sc.Rollout.Stable.Backend, sc.Rollout.Candidate.Backend} {
				if t != "" && st.backends[t] == nil {
					errs = append(errs, fmt.Errorf("service %q rollout: unknown backend %q", sc.Name, t))
				}
			}
		}
		s.duration = g.met.duration.WithLabelValues(s.name)
		for _, o := range s.outputs {
			s.predictions = append(s.predictions, g.met.predictions.WithLabelValues(s.name, o.name))
		}
		st.services[serviceKey{s.method, s.path}] = s
		st.byName[s.name] = s
		st.paths[s.path] = true
	}
	return errs
}

// servesHere reports whether this process can call b: an in_process
// backend needs the process's model server.
func (b *backend) servesHere() bool {
	c, ok := b.client.(inProcess)
	return !ok || c.models != nil
}

// buildProxy resolves the KServe v2 proxy's backend.
func (g *Gateway) buildProxy(st *state, cfg *config.Gateway) []error {
	px := cfg.Proxy
	if px == nil {
		return nil
	}
	b, ok := st.backends[px.Backend]
	if !ok {
		return []error{fmt.Errorf("proxy: unknown backend %q", px.Backend)}
	}
	c, ok := b.client.(*kserveHTTP)
	if !ok {
		return []error{fmt.Errorf("proxy: backend %q is %s; the proxy needs kind kserve_http", px.Backend, b.kind)}
	}
	allowed := map[string]bool{}
	for _, api := range config.ProxyDefaultAPIs {
		allowed[api] = true
	}
	for _, api := range px.AllowAPIs {
		allowed[api] = true
	}
	st.proxy = &proxyRoute{cfg: px, b: b, up: c.up, duration: g.met.duration.WithLabelValues("proxy"), allowed: allowed}
	return nil
}

// attachStateful gives the compiled services their stateful parts, kept
// across reloads where their configuration did not change, and their
// release hooks. The hooks go first: they are the parts that can still
// fail (a drift reference file, a rollout's state file).
func (g *Gateway) attachStateful(st *state, cfg *config.Gateway, old *state) []error {
	if errs := g.attachHooks(st, cfg, old); len(errs) > 0 {
		return errs
	}
	for _, sc := range cfg.Services {
		s := st.byName[sc.Name]
		var prev *service // the service in the configuration being replaced
		if old != nil {
			prev = old.byName[sc.Name]
		}
		s.breaker = g.breakerFor(sc, prev)
		if s.fallback != nil {
			s.fallback.monitor, s.fallback.baseline = g.monitorFor(sc, prev)
		}
		s.routesByValue = s.routes.UsesValues() || s.rollout != nil
	}
	if g.opts.Accuracy != nil {
		g.opts.Accuracy.SetServices(accuracyServices(st))
	}
	return nil
}

// discard releases what a refused build created and old does not share.
// The shared KServe client's connections stay: old's endpoints may use
// the same addresses.
func (g *Gateway) discard(st, old *state) {
	for name, b := range st.backends {
		if old == nil || old.backends[name] != b {
			b.release(nil) // no request has used it
		}
	}
	if st.redis != nil && (old == nil || old.redis != st.redis) {
		_ = st.redis.Close()
	}
}

// buildLimiter picks the rate limiter: the shared local buckets, or Redis
// failing open to them.
func (g *Gateway) buildLimiter(cfg *config.Gateway, old *state, st *state) error {
	rb := cfg.RateLimitBackend
	if rb.Type != "redis" {
		st.limiter = g.local
		return nil
	}
	if old != nil && old.redis != nil && reflect.DeepEqual(old.cfg.RateLimitBackend, rb) {
		st.redis, st.limiter = old.redis, old.limiter
		return nil
	}
	if len(rb.Redis.Addrs) == 0 {
		return errors.New("rate_limit_backend: redis needs an address")
	}
	var tlsCfg *tls.Config // nil: plaintext
	if t := rb.Redis.TLS; t != nil {
		var err error
		if tlsCfg, err = tlsconfig.ClientConfig(*t); err != nil {
			return fmt.Errorf("rate_limit_backend.redis.tls: %w", err)
		}
		for _, w := range t.Warnings() {
			g.logger.Warn("rate limit redis tls is not safe", "warning", w)
		}
	}
	st.redis = redis.NewClient(&redis.Options{
		Addr: rb.Redis.Addrs[0], Username: rb.Redis.Username, Password: rb.Redis.Password, DB: rb.Redis.DB,
		DialTimeout: rb.Redis.DialTimeout.Std(), ContextTimeoutEnabled: true, MaxRetries: -1,
		PoolSize: 64, TLSConfig: tlsCfg,
	})
	// A cold limiter may dial and load the script: give it the dial
	// timeout on top of the steady-state budget (at least the default).
	r := ratelimit.NewRedis(st.redis, ratelimit.RedisOptions{
		Prefix: rb.Redis.KeyPrefix, Metrics: g.rlMet,
		ConnectTimeout: max(rb.Redis.DialTimeout.Std()+ratelimit.DefaultRedisTimeout, ratelimit.DefaultRedisConnectTimeout),
	})
	st.limiter = ratelimit.NewFailOpen(r, g.local, ratelimit.FailOpenOptions{Logger: g.base, Metrics: g.rlMet})
	return nil
}

// breakerFor is the feature breaker of sc: prev's (the service in the
// configuration being replaced) when its settings did not change.
func (g *Gateway) breakerFor(sc config.Service, prev *service) *breaker {
	if prev != nil && prev.breaker.sameConfig(sc.FeatureBreaker) {
		return prev.breaker
	}
	b := newBreaker(sc.FeatureBreaker)
	g.met.breakerOpen.WithLabelValues(sc.Name).Set(0)
	return b
}

// monitorFor is the fallback monitor of sc and what persists its
// baseline: prev's (the service in the configuration being replaced) when
// the fallback block did not change, else a new monitor seeded with the
// persisted baseline.
func (g *Gateway) monitorFor(sc config.Service, prev *service) (*fallback.Monitor, *baselineSync) {
	fb := *sc.Fallback
	if prev != nil && prev.fallback != nil && reflect.DeepEqual(*prev.cfg.Fallback, fb) {
		return prev.fallback.monitor, prev.fallback.baseline
	}
	m := fallback.NewMonitor(sc.Name, fallback.MonitorOptions{
		Output:        fb.Output,
		History:       time.Duration(fb.History) * fb.BaselineWindow.Std(),
		Bucket:        fb.BaselineWindow.Std(),
		Band:          fb.Trigger.Band / 100,
		Duration:      fb.Trigger.Duration.Std(),
		ClearDuration: fb.Trigger.ClearDuration.Std(),
		Window:        fb.Window.Std(),
		Now:           g.opts.Now,
	}, g.base, g.reg)
	return m, g.seedBaseline(sc, m)
}

func limitOf(r config.RateLimit) ratelimit.Limit {
	return ratelimit.Limit{Rate: r.RequestsPerSecond, Burst: r.Burst}
}

// SetDraining makes /ready fail (and new requests still served), the first
// step of a graceful shutdown.
func (g *Gateway) SetDraining() { g.draining.Store(true) }

// redactedGateway is the gateway section with secrets removed, for the
// admin config dump.
func redactedGateway(cfg *config.Gateway) any {
	c := &config.Config{Gateway: cfg}
	return yamlView(c.Redacted())
}

// yamlView turns a configuration value into plain maps and lists keyed by
// its YAML names (durations as "250ms"), so the admin API shows the names
// the file uses.
func yamlView(v any) any {
	b, err := yaml.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := yaml.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

// hopHeader reports whether the proxy must not forward a request header:
// hop-by-hop headers, and the caller's credentials.
func hopHeader(name string) bool {
	switch name { // the canonical forms, which net/http's keys have
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Authorization", "X-Api-Key", "X-Sluice-Token":
		return true
	}
	for _, h := range hopHeaders {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

var hopHeaders = [...]string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Authorization", "X-Api-Key", "X-Sluice-Token",
}
