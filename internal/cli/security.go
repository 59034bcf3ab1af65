package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/h1"
	"github.com/sluice-ml/sluice/internal/httpapi"
	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// guard is what every listener of one process shares: the operator tokens,
// the audit log, the in-flight memory budget and the TLS material. It also
// remembers each listener it secured, for the startup banner.
type guard struct {
	tokens     []authz.Token
	audit      *authz.Auditor
	budget     *admission.Budget
	admit      *admission.Metrics
	tlsMetrics *tlsconfig.Metrics
	logger     *slog.Logger
	closeAudit func()
	// forwardedKey verifies the gateway proxy's X-Sluice-Forwarded-Client
	// on this process's listeners (and signs it in its gateway): set under
	// serve -c when a proxy fronts the in-process model server; nil: the
	// header is ignored.
	forwardedKey []byte

	mu        sync.Mutex // protects tls and listeners
	tls       []*tlsconfig.Server
	listeners []listenerInfo
}

// listenerInfo is one line of the banner's listener table.
type listenerInfo struct {
	Name string `json:"name"`
	Addr string `json:"address"`
	TLS  string `json:"tls"`
	Auth string `json:"auth"`
}

// newGuard builds the process's guard from the security section (nil: the
// defaults, as for the single-component commands).
func newGuard(sec *config.Security, stderr io.Writer, logger *slog.Logger, reg prometheus.Registerer) (*guard, error) {
	if sec == nil {
		sec = &config.Security{AuditLog: "stderr", MemoryBudgetBytes: admission.DefaultBudgetBytes}
	}
	w, closeAudit, err := openAuditLog(sec.AuditLog, stderr)
	if err != nil {
		return nil, err
	}
	g := &guard{
		tokens:     sec.Tokens,
		audit:      authz.NewAuditor(w, reg),
		admit:      admission.NewMetrics(reg),
		tlsMetrics: tlsconfig.NewMetrics(reg),
		logger:     logger,
		closeAudit: closeAudit,
	}
	g.budget = admission.NewBudget(sec.MemoryBudgetBytes, g.admit)
	if _, err := authz.NewPolicy(authz.PolicyOptions{Tokens: g.tokens}); err != nil {
		closeAudit()
		return nil, fmt.Errorf("security.tokens: %w", err)
	}
	return g, nil
}

// openAuditLog opens the audit log destination: "stderr" (default),
// "stdout", "off" or a file appended to.
func openAuditLog(dest string, stderr io.Writer) (io.Writer, func(), error) {
	if dest == "" {
		dest = "stderr"
	}
	w, closeFn, err := openLogDest(dest, os.Stdout, stderr, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("security.audit_log: %w", err)
	}
	if dest == "off" {
		w = nil // the auditor still counts
	}
	return w, closeFn, nil
}

// openLogDest opens a log destination: "stdout", "stderr", "off" or a file
// appended to (created with perm).
func openLogDest(dest string, stdout, stderr io.Writer, perm os.FileMode) (io.Writer, func(), error) {
	switch dest {
	case "stdout":
		return stdout, func() {}, nil
	case "stderr":
		return stderr, func() {}, nil
	case "off":
		return io.Discard, func() {}, nil
	}
	fh, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
	if err != nil {
		return nil, nil, err
	}
	return fh, func() { _ = fh.Close() }, nil
}

func (g *guard) close() { g.closeAudit() }

// hasTokens reports whether any operator token is configured; with one,
// no write is open without a credential, even on loopback.
func (g *guard) hasTokens() bool { return len(g.tokens) > 0 }

// hasOperateToken reports whether some token may operate.
func (g *guard) hasOperateToken() bool {
	for _, t := range g.tokens {
		if t.Role == "operate" {
			return true
		}
	}
	return false
}

// tlsFor builds the TLS server of a listener; nil when o is off.
func (g *guard) tlsFor(name string, o *config.TLS) (*tlsconfig.Server, error) {
	if o == nil || !o.Enabled() {
		return nil, nil
	}
	s, err := tlsconfig.NewServer(name, *o, g.logger, g.tlsMetrics)
	if err != nil {
		return nil, fmt.Errorf("%s tls: %w", name, err)
	}
	g.mu.Lock()
	g.tls = append(g.tls, s)
	g.mu.Unlock()
	return s, nil
}

// listen binds addr for the named listener, with TLS when t is not nil, and
// records it for the banner with its auth mode.
func (g *guard) listen(ctx context.Context, name, addr string, t *tlsconfig.Server, tlsOpts *config.TLS, auth string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, listenError(tritonServices[name], addr, fmt.Errorf("listen %s on %s: %w", name, addr, err))
	}
	g.record(name, ln.Addr().String(), tlsOpts, auth)
	if t != nil {
		ln = t.Listener(ln)
	}
	return ln, nil
}

// tritonServices names the model server's listeners as Triton's log does.
var tritonServices = map[string]string{"models_http": "HTTP", "models_grpc": "GRPC", "metrics": "Metrics"}

// listenError puts Triton's words before a listener's error when its port
// is taken ("failed to start GRPC service: Unavailable - Socket
// '0.0.0.0:8001' already in use"), so that scripts written against
// tritonserver's log find the cause; service is the Triton name of the
// listener, "" for listeners Triton does not have.
func listenError(service, addr string, err error) error {
	if service == "" || !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	return fmt.Errorf("failed to start %s service: Unavailable - Socket '%s' already in use: %w", service, addr, err)
}

// record adds a listener to the banner's table.
func (g *guard) record(name, addr string, tlsOpts *config.TLS, auth string) {
	state := "off"
	if tlsOpts != nil {
		state = tlsOpts.Describe()
	}
	g.mu.Lock()
	g.listeners = append(g.listeners, listenerInfo{Name: name, Addr: addr, TLS: state, Auth: auth})
	g.mu.Unlock()
}

// policy builds a listener's authorization policy. Writes are open only
// when the listener is loopback-only and no operate token exists; reads are
// open when openReads says so.
func (g *guard) policy(openReads, openWrites bool, restrictions []string) (*authz.Policy, error) {
	var rs []authz.Restriction
	for _, s := range restrictions {
		r, err := authz.ParseRestriction(s)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return authz.NewPolicy(authz.PolicyOptions{
		Tokens: g.tokens, Restrictions: rs, OpenReads: openReads, OpenWrites: openWrites,
		ForwardedKey: g.forwardedKey,
	})
}

// authMode describes a policy for the banner.
func authMode(openReads, openWrites bool) string {
	switch {
	case openReads && openWrites:
		return "open (loopback only, no tokens configured)"
	case openReads:
		return "reads open; writes need an operate token"
	default:
		return "token (read / operate)"
	}
}

// handler wraps h with the listener's admission limits.
func (g *guard) handler(name string, l config.Limits, h http.Handler) http.Handler {
	return admission.Handler(name, l, g.budget, g.admit, h)
}

// guardMetrics gives a /metrics listener the header limits of l and a
// small body limit: it serves GET only, but a client may still send a
// body or a header block, and no port is exempt from the bounds.
func (g *guard) guardMetrics(name string, l config.Limits, ms *telemetry.MetricsServer) {
	ml := admission.DefaultLimits(1 << 20)
	ml.MaxHeaderBytes, ml.MaxHeaderCount = l.MaxHeaderBytes, l.MaxHeaderCount
	ms.Guard(func(h http.Handler) http.Handler { return g.handler(name, ml, h) }, ml.MaxHeaderBytes)
}

// httpServer is httpapi.NewServer with the listener's header limit and its
// admission limits around h.
func (g *guard) httpServer(name string, l config.Limits, h http.Handler) *http.Server {
	return httpapi.NewServer(g.handler(name, l, h), httpapi.ServerOptions{MaxHeaderBytes: l.MaxHeaderBytes})
}

// httpServing is an HTTP server as the chain runs it: net/http's, or
// package h1's for the gateway's plaintext listener.
type httpServing interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// h1Server is httpServer on package h1's server: the same timeouts,
// header limit and admission limits, HTTP/1.x only (no TLS).
func (g *guard) h1Server(name string, l config.Limits, h http.Handler, logger *slog.Logger) *h1.Server {
	maxHeader := l.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = httpapi.DefaultMaxHeaderBytes
	}
	return &h1.Server{
		Handler:           g.handler(name, l, h),
		ReadHeaderTimeout: httpapi.DefaultReadHeaderTimeout,
		ReadTimeout:       httpapi.DefaultReadTimeout,
		IdleTimeout:       httpapi.DefaultIdleTimeout,
		MaxHeaderBytes:    maxHeader,
		Logger:            logger,
	}
}

// kserveServer is httpServer for the KServe HTTP port: a body over its
// limit is answered 400 in Triton's words (httpapi.AnswerBodyTooLarge).
func (g *guard) kserveServer(name string, l config.Limits, h http.Handler) *http.Server {
	ah := admission.HandlerAnswering(name, l, g.budget, g.admit, httpapi.AnswerBodyTooLarge, h)
	return httpapi.NewServer(ah, httpapi.ServerOptions{MaxHeaderBytes: l.MaxHeaderBytes})
}

// grpcOptions are a gRPC listener's server options: TLS credentials, the
// admission bounds and, when p is not nil, authorization by classify.
func (g *guard) grpcOptions(name string, l config.Limits, t *tlsconfig.Server, p *authz.Policy, classify func(string) (string, authz.Role)) []grpc.ServerOption {
	opts := admission.GRPCServerOptions(name, l, g.budget, g.admit)
	if t != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(t.Config())))
	}
	if p != nil {
		opts = append(opts,
			grpc.ChainUnaryInterceptor(p.UnaryInterceptor(classify, g.audit)),
			grpc.ChainStreamInterceptor(p.StreamInterceptor(classify, g.audit)))
	}
	return opts
}

// run watches every listener's certificate files until ctx ends.
func (g *guard) run(ctx context.Context, eg *errgroup.Group) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.tls {
		eg.Go(func() error { return s.Run(ctx) })
	}
}

// reloadTLS re-reads every listener's certificate files now (SIGHUP).
func (g *guard) reloadTLS() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.tls {
		_ = s.Reload() // a bad file keeps the old material; Reload logs it
	}
}

// Listeners returns the listeners secured so far, in start order.
func (g *guard) Listeners() []listenerInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]listenerInfo(nil), g.listeners...)
}

// writeListeners prints the listener table of the banner.
func (g *guard) writeListeners(w io.Writer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fmt.Fprintln(w, "  listeners:")
	for _, l := range g.listeners {
		scope := "network"
		if config.IsLoopback(l.Addr) {
			scope = "loopback"
		}
		fmt.Fprintf(w, "    %-16s %-22s %-8s tls: %-28s auth: %s\n", l.Name, l.Addr, scope, l.TLS, l.Auth)
	}
}

// adminGuard authorizes the admin port: reads need the read role, every
// POST and the profiler need operate and are audited.
func adminGuard(p *authz.Policy, a *authz.Auditor, next http.Handler) http.Handler {
	read := p.Require(authz.RoleRead, "", next)
	reload := p.Operate(a, "admin", "reload", nil, next)
	pprof := p.Operate(a, "admin", "pprof", nil, next)
	rollout := map[string]http.Handler{}
	for _, action := range []string{"promote", "rollback", "pause", "resume", "reset"} {
		rollout[action] = p.Operate(a, "admin", "rollout."+action, rolloutTarget, next)
	}
	other := p.Operate(a, "admin", "other", nil, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/debug/pprof"):
			pprof.ServeHTTP(w, r)
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			read.ServeHTTP(w, r)
		case r.URL.Path == "/reload":
			reload.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, "/rollout/"):
			_, action := pathTail(r.URL.Path)
			if h, ok := rollout[action]; ok {
				h.ServeHTTP(w, r)
				return
			}
			other.ServeHTTP(w, r)
		default:
			other.ServeHTTP(w, r)
		}
	})
}

// rolloutTarget is the service of /rollout/{service}/{action}.
func rolloutTarget(r *http.Request) string {
	svc, _ := pathTail(r.URL.Path)
	return svc
}

// pathTail splits "/x/{a}/{b}" into a and b.
func pathTail(p string) (string, string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) < 3 {
		return "", ""
	}
	return parts[1], parts[2]
}

// featureGuard authorizes the feature server: /push and /materialize*
// need operate and are audited; /health is open; reads follow the policy.
func featureGuard(p *authz.Policy, a *authz.Auditor, next http.Handler) http.Handler {
	push := p.Operate(a, "features", "push", nil, next)
	mat := p.Operate(a, "features", "materialize", nil, next)
	matInc := p.Operate(a, "features", "materialize_incremental", nil, next)
	read := p.Require(authz.RoleRead, "", next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			next.ServeHTTP(w, r)
		case "/push", "/write-to-online-store":
			push.ServeHTTP(w, r)
		case "/materialize":
			mat.ServeHTTP(w, r)
		case "/materialize-incremental":
			matInc.ServeHTTP(w, r)
		default:
			if r.Method != http.MethodGet && r.Method != http.MethodHead && r.URL.Path != "/get-online-features" {
				push.ServeHTTP(w, r) // an unknown write: audited and needs operate
				return
			}
			read.ServeHTTP(w, r)
		}
	})
}

// securityFlags are the single-component commands' security flags; under
// serve -c the config's security and tls sections take their place.
type securityFlags struct {
	configFile   string
	certFile     string
	keyFile      string
	clientCAFile string
	clientAuth   string
}

func (s *securityFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&s.configFile, "security-config", "", "a sluice.yaml whose security section (operator tokens, audit_log, memory_budget_bytes) applies to this command")
	fl.StringVar(&s.certFile, "tls-cert-file", "", "PEM certificate chain: serve every listener over TLS (reloaded when the file changes)")
	fl.StringVar(&s.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fl.StringVar(&s.clientCAFile, "tls-client-ca-file", "", "PEM CA bundle: verify client certificates (mTLS)")
	fl.StringVar(&s.clientAuth, "tls-client-auth", "", "with --tls-client-ca-file: require (default) or request a client certificate")
}

// load reads --security-config and builds the TLS options from the flags.
func (s *securityFlags) load() (*config.Security, *config.TLS, error) {
	var sec *config.Security
	if s.configFile != "" {
		cfg, err := config.Load(s.configFile)
		if err != nil {
			return nil, nil, err
		}
		sec = cfg.Security
	}
	t := &config.TLS{CertFile: s.certFile, KeyFile: s.keyFile, ClientCAFile: s.clientCAFile, ClientAuth: s.clientAuth}
	if !t.Enabled() && t.ClientCAFile == "" {
		return sec, nil, nil
	}
	if err := t.Validate(); err != nil {
		return nil, nil, fmt.Errorf("--tls-*: %w", err)
	}
	return sec, t, nil
}

// guard loads the flags and builds the command's guard; the caller closes it.
func (s *securityFlags) guard(stderr io.Writer, logger *slog.Logger, reg prometheus.Registerer) (*guard, *config.TLS, error) {
	sec, tlsOpts, err := s.load()
	if err != nil {
		return nil, nil, &exitError{code: 2, err: err}
	}
	gd, err := newGuard(sec, stderr, logger, reg)
	if err != nil {
		return nil, nil, &exitError{code: 2, err: err}
	}
	return gd, tlsOpts, nil
}

// notifyHangup catches SIGHUP, which would otherwise end the process at
// once, skipping the drain and the recording flush.
func notifyHangup() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// onHangup runs reload on every SIGHUP until ctx ends; a failed reload is
// logged and the running configuration keeps serving.
func onHangup(ctx context.Context, hup <-chan os.Signal, logger *slog.Logger, reload func() error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			logger.Info("SIGHUP: reloading")
			if err := reload(); err != nil {
				logger.Warn("reload refused; the running configuration keeps serving", "err", err)
				continue
			}
			logger.Info("reloaded")
		}
	}
}
