package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/gateway/ratelimit"
	"github.com/sluice-ml/sluice/internal/gateway/release/driftwatch"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// AdminHandler serves the admin API (Envoy's admin port convention):
//
//	GET  /config_dump   the applied gateway configuration, secrets redacted
//	GET  /routes        each service's path, model and ordered routes
//	GET  /endpoints     each backend's endpoints: health, ejection, load
//	GET  /breakers      each service's feature breaker
//	GET  /ratelimit     the limiter backend and every client's limit
//	GET  /fallback      each service's drift monitor and trigger
//	GET  /rollout       each service's rollout: stage, gates, history
//	POST /rollout/{service}/{promote|rollback|pause|resume|reset}?reason=...
//	GET  /shadow        each service's shadow share and the recorder
//	GET  /drift         each service's drift watch: reference, last statistics
//	GET  /accuracy      each service's online accuracy per version and slice
//	POST /accuracy/{service}/outcomes   outcomes to join (as the gateway's
//	                    POST /v1/services/{service}/outcomes takes them)
//	GET  /ready         200 while the gateway takes traffic
//	POST /reload        re-read the configuration and apply it
//	GET  /metrics       Prometheus metrics, when metrics is not nil
func (g *Gateway) AdminHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config_dump", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.state.Load().redacted)
	})
	mux.HandleFunc("GET /routes", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.routes())
	})
	mux.HandleFunc("GET /endpoints", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.Endpoints())
	})
	mux.HandleFunc("GET /breakers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.Breakers())
	})
	mux.HandleFunc("GET /ratelimit", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.rateLimitState())
	})
	mux.HandleFunc("GET /fallback", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.fallbackState())
	})
	mux.HandleFunc("GET /rollout", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.Rollouts())
	})
	mux.HandleFunc("POST /rollout/{service}/{action}", g.rolloutAction)
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.ClusterStatus())
	})
	mux.HandleFunc("GET /drift", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.driftState())
	})
	mux.HandleFunc("GET /accuracy", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.accuracyState())
	})
	mux.HandleFunc("POST /accuracy/{service}/outcomes", func(w http.ResponseWriter, r *http.Request) {
		s, ok := g.state.Load().byName[r.PathValue("service")]
		if !ok {
			writeError(w, "", http.StatusNotFound, ReasonNotFound, "no service named "+quoteName(r.PathValue("service")))
			return
		}
		// The admin port takes writes from an operate token only: it may
		// judge any prediction.
		g.ingestOutcomes(w, r, s, outcomeSource{client: "admin", any: true})
	})
	mux.HandleFunc("GET /shadow", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.shadowState())
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		g.ServeHTTP(w, r)
	})
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		if g.opts.Reload == nil {
			writeError(w, "", http.StatusNotImplemented, ReasonReloadUnavailable, "this gateway was not started from a configuration file")
			return
		}
		cfg, err := g.opts.Reload(r.Context())
		if err == nil {
			err = g.Reload(cfg)
		}
		if err != nil {
			g.logger.Warn("reload refused; the old configuration keeps serving", "err", err)
			writeError(w, "", http.StatusBadRequest, ReasonInvalidConfig, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"reloaded": true})
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	// Go's profiler, as Envoy's admin port offers /cpuprofiler: the admin
	// port must not be exposed beyond the operators.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, "", http.StatusInternalServerError, ReasonInternal, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// routeView is the admin view of one service's routing.
type routeView struct {
	Service string `json:"service"`
	Path    string `json:"path"`
	Model   any    `json:"model"`
	Routes  any    `json:"routes"`
}

func (g *Gateway) routes() []routeView {
	st := g.state.Load()
	out := make([]routeView, 0, len(st.cfg.Services))
	for _, s := range st.cfg.Services {
		out = append(out, routeView{Service: s.Name, Path: s.Path, Model: yamlView(s.Model), Routes: yamlView(s.Routes)})
	}
	return out
}

// BackendView is the admin view of one backend.
type BackendView struct {
	Backend   string                   `json:"backend"`
	Kind      string                   `json:"kind"`
	Endpoints []upstream.EndpointState `json:"endpoints"`
}

// Endpoints returns every backend's endpoint states, sorted by backend.
func (g *Gateway) Endpoints() []BackendView {
	st := g.state.Load()
	out := make([]BackendView, 0, len(st.backends))
	for _, b := range st.backends {
		out = append(out, BackendView{Backend: b.name, Kind: b.kind, Endpoints: b.set.Snapshot()})
	}
	slices.SortFunc(out, func(a, b BackendView) int { return strings.Compare(a.Backend, b.Backend) })
	return out
}

// Breakers returns every service's feature breaker state.
func (g *Gateway) Breakers() []BreakerState {
	st := g.state.Load()
	now := g.opts.Now()
	out := make([]BreakerState, 0, len(st.byName))
	for _, s := range st.cfg.Services {
		if svc, ok := st.byName[s.Name]; ok {
			out = append(out, svc.breaker.state(s.Name, now))
		}
	}
	return out
}

type rateLimitView struct {
	Backend   string            `json:"backend"`
	RedisUp   *bool             `json:"redis_up,omitempty"`
	LocalKeys int               `json:"local_keys"`
	Clients   []clientLimitView `json:"clients"`
	Anonymous clientLimitView   `json:"anonymous"`
}

type clientLimitView struct {
	ClientID          string  `json:"client_id"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	Burst             int     `json:"burst"`
	Priority          int     `json:"priority,omitempty"`
	Allowed           *bool   `json:"allowed,omitempty"`
	// UsedRatio is the share of the limit the client used over the last
	// minute (sluice_gateway_client_rate_limit_used_ratio); nil without a
	// limit. Requests are the admitted requests in that minute.
	UsedRatio *float64 `json:"used_ratio,omitempty"`
	Requests  *float64 `json:"requests_last_minute,omitempty"`
	// Scope is shared (one limit for every gateway, in Redis) or
	// per_replica.
	Scope string `json:"scope,omitempty"`
}

func (g *Gateway) rateLimitState() rateLimitView {
	st := g.state.Load()
	v := rateLimitView{Backend: st.cfg.RateLimitBackend.Type, LocalKeys: g.local.Len()}
	if fo, ok := st.limiter.(*ratelimit.FailOpen); ok {
		up := fo.RedisUp()
		v.RedisUp = &up
	}
	now := g.opts.Now()
	for _, c := range st.cfg.Clients {
		cv := clientLimitView{
			ClientID: c.ID, RequestsPerSecond: c.RateLimit.RequestsPerSecond, Burst: c.RateLimit.Burst, Priority: c.Priority,
		}
		if cl := st.clients[c.ID]; cl.use != nil && cl.limit.Rate > 0 {
			ratio, n := cl.use.share(now, cl.limit.Rate), cl.use.requests(now)
			cv.UsedRatio, cv.Requests, cv.Scope = &ratio, &n, quotaScope(st)
		}
		v.Clients = append(v.Clients, cv)
	}
	allowed := st.cfg.Anonymous.Allowed
	v.Anonymous = clientLimitView{
		ClientID: "anonymous (per IP)", RequestsPerSecond: st.cfg.Anonymous.RateLimitPerIP.RequestsPerSecond,
		Burst: st.cfg.Anonymous.RateLimitPerIP.Burst, Allowed: &allowed,
	}
	return v
}

// FallbackView is the admin view of one service's fallback.
type FallbackView struct {
	Service    string    `json:"service"`
	Output     string    `json:"output"`
	Rule       string    `json:"rule"`
	Triggered  bool      `json:"triggered"`
	Since      time.Time `json:"since,omitzero"`
	RecentP90  *float64  `json:"recent_p90"`
	Baseline   any       `json:"baseline"`
	Confidence string    `json:"confidence_output"`
	Below      float64   `json:"confidence_below"`
	// OnUpstreamFailure is fallback.on_upstream_failure: the rule answers
	// when the model cannot be reached.
	OnUpstreamFailure bool `json:"on_upstream_failure"`
}

func (g *Gateway) fallbackState() []FallbackView {
	st := g.state.Load()
	out := []FallbackView{}
	for _, s := range st.cfg.Services {
		svc, ok := st.byName[s.Name]
		if !ok || svc.fallback == nil {
			continue
		}
		fb := svc.fallback
		ms := fb.monitor.State()
		v := FallbackView{
			Service: s.Name, Output: fb.output, Rule: fb.rule.Source(), Triggered: ms.Triggered, Since: ms.Since,
			Confidence: fb.confidence, Below: fb.below, OnUpstreamFailure: fb.onUpstream,
			Baseline: map[string]any{
				"mean": finite(ms.Baseline.Mean), "std": finite(ms.Baseline.Std), "p90": finite(ms.Baseline.P90), "buckets": ms.Baseline.Hours,
				"lower": finite(ms.Baseline.Lower()), "upper": finite(ms.Baseline.Upper()),
			},
		}
		v.RecentP90 = finite(ms.RecentP90)
		out = append(out, v)
	}
	return out
}

// Rollouts returns the status of every service's rollout.
func (g *Gateway) Rollouts() []rollout.Status {
	st := g.state.Load()
	out := []rollout.Status{}
	for _, s := range st.cfg.Services {
		if svc, ok := st.byName[s.Name]; ok && svc.rollout != nil {
			out = append(out, svc.rollout.Controller().Status())
		}
	}
	return out
}

// rolloutAction applies an operator's command to a service's rollout.
func (g *Gateway) rolloutAction(w http.ResponseWriter, r *http.Request) {
	st := g.state.Load()
	name := r.PathValue("service")
	svc, ok := st.byName[name]
	if !ok || svc.rollout == nil {
		writeError(w, "", http.StatusNotFound, ReasonNotFound, "service "+name+" has no rollout")
		return
	}
	c := svc.rollout.Controller()
	reason := r.URL.Query().Get("reason")
	var err error
	switch r.PathValue("action") {
	case "promote":
		err = c.Promote(r.Context(), reason)
	case "rollback":
		err = c.Rollback(r.Context(), reason)
	case "pause":
		err = c.Pause(r.Context(), reason)
	case "resume":
		err = c.Resume(r.Context(), reason)
	case "reset":
		err = c.Reset(r.Context(), reason)
	default:
		writeError(w, "", http.StatusNotFound, ReasonNotFound, "unknown rollout action "+r.PathValue("action")+": want promote, rollback, pause, resume or reset")
		return
	}
	if err != nil {
		writeHTTPError(w, "", err)
		return
	}
	g.logger.Info("rollout command", "service", name, "action", r.PathValue("action"), "reason", reason)
	writeJSON(w, http.StatusOK, c.Status())
}

type shadowView struct {
	Service string  `json:"service"`
	Backend string  `json:"backend"`
	Model   string  `json:"model"`
	Version string  `json:"version"`
	Percent float64 `json:"percent"`
	Key     string  `json:"key"`
}

func (g *Gateway) shadowState() map[string]any {
	st := g.state.Load()
	views := []shadowView{}
	for _, s := range st.cfg.Services {
		if sh := s.Shadow; sh != nil {
			views = append(views, shadowView{Service: s.Name, Backend: sh.Backend, Model: sh.Model, Version: sh.Version, Percent: sh.Percent, Key: sh.Key})
		}
	}
	out := map[string]any{"services": views, "recording": st.cfg.Recording.Sink}
	if st, ok := g.opts.Recorder.(interface{ Stats() record.WriterStats }); ok {
		out["recorder"] = st.Stats()
	}
	if g.mirror != nil {
		out["queued"] = g.mirror.Queued()
	}
	return out
}

// DriftView is the admin view of one service's drift watch.
type DriftView = driftwatch.View

// DriftVariable is one watched variable's last statistics.
type DriftVariable = driftwatch.Variable

func (g *Gateway) driftState() []DriftView {
	st := g.state.Load()
	out := []DriftView{}
	for _, sc := range st.cfg.Services {
		if s, ok := st.byName[sc.Name]; ok && s.drift != nil {
			out = append(out, s.drift.Status().(DriftView))
		}
	}
	return out
}

// finite returns a pointer to x, or nil for NaN and ±Inf (JSON has neither).
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}
