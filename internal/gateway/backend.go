package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
	"github.com/sluice-ml/sluice/internal/infer"
)

// inProcessEndpoint is the one endpoint of an in_process backend.
const inProcessEndpoint = "in-process"

// backend is one configured upstream (Envoy's cluster).
type backend struct {
	name   string
	kind   string
	cfg    config.Backend
	set    *upstream.Set
	budget budget

	// remote calls a kserve_grpc backend's endpoints: Options.Remote, or
	// the backend's own client (ownRemote) when it has a tls block.
	remote    RemoteModels
	ownRemote RemoteClient
	// http carries a kserve_http backend's requests and health checks
	// with scheme "http" (the gateway's client) or "https" (the backend's
	// own client, ownHTTP).
	http    *http.Client
	scheme  string
	ownHTTP bool
}

func (g *Gateway) newBackend(bc config.Backend) (*backend, error) {
	eps := bc.Endpoints
	if bc.Kind == "in_process" {
		eps = []string{inProcessEndpoint}
	}
	b := &backend{name: bc.Name, kind: bc.Kind, cfg: bc, remote: g.opts.Remote, http: g.client, scheme: "http"}
	if bc.TLS != nil && bc.Kind != "in_process" {
		// The CA bundle is read here: at start, and when a reload changes
		// the backend. The client certificate is re-read when it changes.
		tc, err := bc.TLS.Config()
		if err != nil {
			return nil, fmt.Errorf("backend %q: tls: %w", bc.Name, err)
		}
		for _, w := range bc.TLS.Warnings() {
			g.logger.Warn("backend tls is not safe", "backend", bc.Name, "warning", w)
		}
		switch bc.Kind {
		case "kserve_grpc":
			if g.opts.RemoteTLS == nil {
				return nil, fmt.Errorf("backend %q: tls needs a KServe client factory (Options.RemoteTLS)", bc.Name)
			}
			b.ownRemote = g.opts.RemoteTLS(tc)
			b.remote = b.ownRemote
		case "kserve_http":
			b.http, b.scheme, b.ownHTTP = g.tlsHTTPClient(tc), "https", true
		}
	}
	if bc.Kind == "kserve_grpc" && b.remote == nil {
		return nil, fmt.Errorf("backend %q: kind kserve_grpc needs a KServe client", bc.Name)
	}
	od := bc.OutlierDetection
	set, err := upstream.New(eps, upstream.Options{
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
		b.closeOwn()
		return nil, fmt.Errorf("backend %q: %w", bc.Name, err)
	}
	b.set = set
	return b, nil
}

// tlsHTTPClient is the gateway's HTTP client with its own transport
// speaking TLS with cfg.
func (g *Gateway) tlsHTTPClient(cfg *tls.Config) *http.Client {
	t, ok := g.client.Transport.(*http.Transport)
	if !ok {
		t = newProxyClient().Transport.(*http.Transport)
	}
	t = t.Clone()
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t.DialTLSContext = tlsDialer(dial, cfg)
	c := *g.client
	c.Transport = t
	return &c
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

// close releases the backend's metrics and connections.
func (b *backend) close() {
	b.set.Close()
	if b.kind == "kserve_grpc" && b.ownRemote == nil && b.remote != nil {
		for _, ep := range b.cfg.Endpoints {
			b.remote.Forget(ep)
		}
	}
	b.closeOwn()
}

// closeOwn closes the clients the backend owns (those of a tls block).
// Calls in flight on them fail.
func (b *backend) closeOwn() {
	if b.ownRemote != nil {
		_ = b.ownRemote.Close()
	}
	if b.ownHTTP {
		b.http.CloseIdleConnections()
	}
}

// infer makes one try on endpoint addr.
func (g *Gateway) infer(ctx context.Context, b *backend, addr string, req *infer.Request) (*infer.Response, error) {
	if b.kind == "in_process" {
		return g.opts.Models.Infer(ctx, req)
	}
	return b.remote.Infer(ctx, addr, req)
}

// modelRef is a model (and version, "" for the default) a backend serves.
type modelRef struct{ name, version string }

// startHealth starts st's active health checkers under ctx. g.mu is held.
func (g *Gateway) startHealth(ctx context.Context, st *state) {
	hctx, cancel := context.WithCancel(ctx)
	st.stop = cancel
	models := map[string]map[modelRef]bool{} // backend → models routed to it
	for _, s := range st.byName {
		for _, r := range s.cfg.Routes {
			for _, w := range r.Route.Weighted {
				if models[w.Backend] == nil {
					models[w.Backend] = map[modelRef]bool{}
				}
				v := w.Version
				if v == "" {
					v = s.cfg.Model.Version
				}
				models[w.Backend][modelRef{s.cfg.Model.Name, v}] = true
			}
		}
	}
	for _, b := range st.backends {
		go g.healthLoop(hctx, b, models[b.name])
	}
}

// healthLoop checks every endpoint of b each interval, in parallel, so a
// hanging endpoint delays nobody else's verdict.
func (g *Gateway) healthLoop(ctx context.Context, b *backend, models map[modelRef]bool) {
	interval, timeout := b.cfg.HealthCheck.Interval.Std(), b.cfg.HealthCheck.Timeout.Std()
	eps := b.cfg.Endpoints
	if b.kind == "in_process" {
		eps = []string{inProcessEndpoint}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, ep := range eps {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				ok := g.check(cctx, b, ep, models)
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

// check is one active health check: the server is ready (KServe v2
// ServerReady, or /v2/health/ready over HTTP) and so is every model routed
// to the backend.
func (g *Gateway) check(ctx context.Context, b *backend, ep string, models map[modelRef]bool) bool {
	switch b.kind {
	case "in_process":
		for m := range models {
			if g.opts.Models.ModelReady(ctx, m.name, m.version) != nil {
				return false
			}
		}
		return true
	case "kserve_grpc":
		ok, err := b.remote.ServerReady(ctx, ep)
		if err != nil || !ok {
			return false
		}
		for m := range models {
			if ok, err := b.remote.ModelReady(ctx, ep, m.name, m.version); err != nil || !ok {
				return false
			}
		}
		return true
	default: // kserve_http
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.scheme+"://"+ep+"/v2/health/ready", nil)
		if err != nil {
			return false
		}
		resp, err := b.http.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}
