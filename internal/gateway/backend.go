package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// The backend kinds of the configuration (backends[].kind). They are read
// once, when a backend is built: from then on a backend is known by the
// type of its modelClient.
const (
	KindInProcess  = "in_process"
	KindKServeGRPC = "kserve_grpc"
	KindKServeHTTP = "kserve_http"
)

// inProcessEndpoint is the one endpoint of an in_process backend.
const inProcessEndpoint = "in-process"

// backend is one configured upstream (Envoy's cluster): its endpoints'
// balancing and health (set), its retry budget, and the client that
// reaches its model servers.
type backend struct {
	name      string
	kind      string // as configured, for the admin API
	cfg       config.Backend
	endpoints []string // the endpoint addresses; inProcessEndpoint for in_process
	set       *upstream.Set
	budget    budget
	client    modelClient
}

// A modelClient reaches the model servers of one backend. Each kind has
// its own (inProcess, kserveGRPC, kserveHTTP), chosen when the backend is
// built.
type modelClient interface {
	// infer makes one try of req on endpoint addr.
	infer(ctx context.Context, addr string, req *infer.Request) (*infer.Response, error)
	// ready is one active health check of endpoint addr: the server is
	// ready, and so is every model in models.
	ready(ctx context.Context, addr string, models []modelRef) bool
	// own returns what closes the connections only this backend uses (a
	// tls block's client), nil when it uses shared ones. Calls in flight on
	// them fail once it runs.
	own() func()
	// shared returns the endpoints this backend reaches through the
	// process's shared KServe client (Options.Remote), whose connections
	// other backends may use too.
	shared() []string
}

// modelRef is a model (and version, "" for the default) a backend serves.
type modelRef struct{ name, version string }

// inProcess calls the model server of this process.
type inProcess struct{ models LocalModels }

func (c inProcess) infer(ctx context.Context, _ string, req *infer.Request) (*infer.Response, error) {
	return c.models.Infer(ctx, req)
}

func (c inProcess) ready(ctx context.Context, _ string, models []modelRef) bool {
	for _, m := range models {
		if c.models.ModelReady(ctx, m.name, m.version) != nil {
			return false
		}
	}
	return true
}

func (inProcess) own() func()      { return nil }
func (inProcess) shared() []string { return nil }

// kserveGRPC calls KServe v2 gRPC model servers: through the shared
// client (Options.Remote), or through a client of its own when the
// backend has a tls block.
type kserveGRPC struct {
	remote    RemoteModels
	ownClient RemoteClient // nil: remote is the shared client
	endpoints []string
}

func (c *kserveGRPC) infer(ctx context.Context, addr string, req *infer.Request) (*infer.Response, error) {
	return c.remote.Infer(ctx, addr, req)
}

func (c *kserveGRPC) ready(ctx context.Context, addr string, models []modelRef) bool {
	ok, err := c.remote.ServerReady(ctx, addr)
	if err != nil || !ok {
		return false
	}
	for _, m := range models {
		if ok, err := c.remote.ModelReady(ctx, addr, m.name, m.version); err != nil || !ok {
			return false
		}
	}
	return true
}

func (c *kserveGRPC) own() func() {
	if c.ownClient == nil {
		return nil
	}
	return func() { _ = c.ownClient.Close() }
}

func (c *kserveGRPC) shared() []string {
	if c.ownClient != nil {
		return nil
	}
	return c.endpoints
}

// kserveHTTP reaches KServe v2 HTTP model servers: the proxy's backend.
// Services cannot route to it (the configuration refuses that), so infer
// is never called in practice.
type kserveHTTP struct {
	up     *upstreamHTTP
	ownTLS bool // up is the backend's own (https)
}

func (c *kserveHTTP) infer(context.Context, string, *infer.Request) (*infer.Response, error) {
	return nil, apierr.Errorf(apierr.KindUnsupported, ReasonUpstreamUnavailable, "a kserve_http backend serves only the KServe v2 proxy")
}

// ready asks the server's /v2/health/ready.
func (c *kserveHTTP) ready(ctx context.Context, addr string, _ []modelRef) bool {
	code, err := c.up.get(ctx, addr, "/v2/health/ready")
	return err == nil && code == http.StatusOK
}

func (c *kserveHTTP) own() func() {
	if !c.ownTLS {
		return nil
	}
	return c.up.closeIdle
}

func (*kserveHTTP) shared() []string { return nil }

// newBackend builds backend bc and resolves its kind to its client.
func (g *Gateway) newBackend(bc config.Backend) (*backend, error) {
	b := &backend{name: bc.Name, kind: bc.Kind, cfg: bc, endpoints: bc.Endpoints}
	var tc *tls.Config // the backend's own TLS client configuration; nil: plaintext
	if bc.TLS != nil && bc.Kind != KindInProcess {
		// The CA bundle is read here: at start, and when a reload changes
		// the backend. The client certificate is re-read when it changes.
		var err error
		if tc, err = tlsconfig.ClientConfig(*bc.TLS); err != nil {
			return nil, fmt.Errorf("backend %q: tls: %w", bc.Name, err)
		}
		for _, w := range bc.TLS.Warnings() {
			g.logger.Warn("backend tls is not safe", "backend", bc.Name, "warning", w)
		}
	}
	switch bc.Kind {
	case KindInProcess:
		b.endpoints = []string{inProcessEndpoint}
		b.client = inProcess{models: g.opts.Models}
	case KindKServeGRPC:
		c := &kserveGRPC{remote: g.opts.Remote, endpoints: bc.Endpoints}
		if tc != nil {
			if g.opts.RemoteTLS == nil {
				return nil, fmt.Errorf("backend %q: tls needs a KServe client factory (Options.RemoteTLS)", bc.Name)
			}
			c.ownClient = g.opts.RemoteTLS(tc)
			c.remote = c.ownClient
		}
		if c.remote == nil {
			return nil, fmt.Errorf("backend %q: kind kserve_grpc needs a KServe client", bc.Name)
		}
		b.client = c
	case KindKServeHTTP:
		c := &kserveHTTP{up: g.http}
		if tc != nil {
			c.up, c.ownTLS = g.http.withTLS(tc), true
		}
		b.client = c
	default:
		return nil, fmt.Errorf("backend %q: unknown kind %q", bc.Name, bc.Kind)
	}
	od := bc.OutlierDetection
	set, err := upstream.New(b.endpoints, upstream.Options{
		Backend:              bc.Name,
		ErrorRatePercent:     od.ErrorRatePercent,
		Interval:             od.Interval.Std(),
		MinRequestVolume:     od.MinRequestVolume,
		Consecutive503:       od.Consecutive503,
		Consecutive503Window: od.Window.Std(),
		BaseEjectionTime:     od.BaseEjectionTime.Std(),
		MaxEjectionPercent:   od.MaxEjectionPercent,
	}, g.base, g.reg)
	if err != nil {
		if closeOwn := b.client.own(); closeOwn != nil {
			closeOwn()
		}
		return nil, fmt.Errorf("backend %q: %w", bc.Name, err)
	}
	b.set = set
	return b, nil
}

// tlsDialer dials and completes the TLS handshake under the request's
// context. A failed handshake (a certificate that does not verify, a
// server that does not speak TLS) is a dial error, a *net.OpError with Op
// "dial", so that the retry policy sees a connect failure: the request
// never left. An empty cfg.ServerName verifies the host of addr.
func tlsDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName = addr
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			}
		}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Addr: conn.RemoteAddr(), Err: fmt.Errorf("tls handshake: %w", err)}
		}
		return tc, nil
	}
}

// release frees a backend no request can pick any more: its metrics, and
// the connections only it uses, at once (forget tells the shared KServe
// client which endpoints it may drop).
func (b *backend) release(forget func(ep string)) {
	b.set.Close()
	if closeOwn := b.client.own(); closeOwn != nil {
		closeOwn()
	}
	if forget != nil {
		for _, ep := range b.client.shared() {
			forget(ep)
		}
	}
}

// routedModels lists, per backend, the models st's services route to it:
// what its health checks ask for.
func (st *state) routedModels() map[string][]modelRef {
	seen := map[string]map[modelRef]bool{}
	out := map[string][]modelRef{}
	for _, s := range st.byName {
		for _, r := range s.cfg.Routes {
			for _, w := range r.Route.Weighted {
				v := w.Version
				if v == "" {
					v = s.cfg.Model.Version
				}
				m := modelRef{cmp.Or(w.Model, s.cfg.Model.Name), v}
				if seen[w.Backend] == nil {
					seen[w.Backend] = map[modelRef]bool{}
				}
				if !seen[w.Backend][m] {
					seen[w.Backend][m] = true
					out[w.Backend] = append(out[w.Backend], m)
				}
			}
		}
	}
	return out
}

// checkHealth runs the active health checks of st's backends until ctx
// ends, one loop per backend, and returns once every loop has.
func (g *Gateway) checkHealth(ctx context.Context, st *state) {
	models := st.routedModels()
	var wg sync.WaitGroup
	for _, b := range st.backends {
		wg.Go(func() { g.healthLoop(ctx, b, models[b.name]) })
	}
	wg.Wait()
}

// healthLoop checks every endpoint of b each interval, in parallel, so a
// hanging endpoint delays nobody else's verdict.
func (g *Gateway) healthLoop(ctx context.Context, b *backend, models []modelRef) {
	interval, timeout := b.cfg.HealthCheck.Interval.Std(), b.cfg.HealthCheck.Timeout.Std()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, ep := range b.endpoints {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				ok := b.client.ready(cctx, ep, models)
				if ctx.Err() != nil {
					return
				}
				result := "healthy"
				if !ok {
					result = "unhealthy"
				}
				g.met.healthChecks.WithLabelValues(b.name, result).Inc()
				if err := b.set.SetHealth(ep, ok); err != nil {
					g.logger.Debug("health result dropped", "backend", b.name, "endpoint", ep, "err", err)
				}
			})
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
