package gateway

import (
	"context"
	"fmt"
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
}

func (g *Gateway) newBackend(bc config.Backend) (*backend, error) {
	eps := bc.Endpoints
	if bc.Kind == "in_process" {
		eps = []string{inProcessEndpoint}
	}
	if bc.Kind == "kserve_grpc" && g.opts.Remote == nil {
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
		return nil, fmt.Errorf("backend %q: %w", bc.Name, err)
	}
	return &backend{name: bc.Name, kind: bc.Kind, cfg: bc, set: set}, nil
}

// close releases the backend's metrics and connections.
func (b *backend) close(remote RemoteModels) {
	b.set.Close()
	if b.kind == "kserve_grpc" && remote != nil {
		for _, ep := range b.cfg.Endpoints {
			remote.Forget(ep)
		}
	}
}

// infer makes one try on endpoint addr.
func (g *Gateway) infer(ctx context.Context, b *backend, addr string, req *infer.Request) (*infer.Response, error) {
	if b.kind == "in_process" {
		return g.opts.Models.Infer(ctx, req)
	}
	return g.opts.Remote.Infer(ctx, addr, req)
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
		ok, err := g.opts.Remote.ServerReady(ctx, ep)
		if err != nil || !ok {
			return false
		}
		for m := range models {
			if ok, err := g.opts.Remote.ModelReady(ctx, ep, m.name, m.version); err != nil || !ok {
				return false
			}
		}
		return true
	default: // kserve_http
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ep+"/v2/health/ready", nil)
		if err != nil {
			return false
		}
		resp, err := g.client.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}
