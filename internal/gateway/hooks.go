package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/accuracylog"
	"github.com/sluice-ml/sluice/internal/gateway/release/driftwatch"
	"github.com/sluice-ml/sluice/internal/gateway/release/rollouthook"
	"github.com/sluice-ml/sluice/internal/gateway/release/shadowhook"
	"github.com/sluice-ml/sluice/internal/infer"
)

// The release hooks: each service gets one hook per factory that wants
// it (release.Factory), made when a configuration is applied, with the
// hook the same factory made for the service in the configuration being
// replaced, so that state carries over a reload.

// factories are the release mechanisms in the order they are made and
// called: the drift watch before the rollout (whose drift gates read it),
// then the shadow, the accuracy log and the hooks of Options.Hooks.
func (g *Gateway) factories(st *state) []release.Factory {
	drifts := driftwatch.Factory(driftwatch.Options{
		Logger: g.logger, Base: g.base, Registerer: g.reg, Now: g.opts.Now, Fleet: g.driftReferences(),
	})
	rollouts := rollouthook.Factory(rollouthook.Options{
		Base: g.base, Registerer: g.reg, Now: g.opts.Now, Fleet: g.rolloutFleet(), Accuracy: g.opts.Accuracy,
	})
	return append([]release.Factory{drifts, rollouts, shadowhook.Factory(g.mirror, st.cfg.Recording.Headers), accuracylog.Factory(g.opts.Accuracy)}, g.opts.Hooks...)
}

// attachHooks makes the release hooks of st's services. On error nothing
// it made is kept, and the running configuration's hooks are untouched;
// otherwise the hooks the new ones replace are closed.
func (g *Gateway) attachHooks(st *state, cfg *config.Gateway, old *state) []error {
	facts := g.factories(st)
	var errs []error
	var replaced []release.Hook
	for _, sc := range cfg.Services {
		s := st.byName[sc.Name]
		var prevs []release.Hook // by factory
		if old != nil {
			if os, ok := old.byName[sc.Name]; ok {
				prevs = os.made
			}
		}
		hs := &hookService{g: g, st: st, s: s}
		s.made = make([]release.Hook, len(facts))
		for i, f := range facts {
			var prev release.Hook
			if i < len(prevs) {
				prev = prevs[i]
			}
			h, err := f(hs, prev)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if prev != nil && h != prev {
				replaced = append(replaced, prev)
			}
			s.made[i] = h
			if h != nil {
				s.hooks = append(s.hooks, h)
			}
		}
		s.rollout, _ = hookOf(s.hooks, rollouthook.Kind).(*rollouthook.Rollout)
		s.drift, _ = hookOf(s.hooks, driftwatch.Kind).(*driftwatch.Watch)
	}
	if len(errs) > 0 {
		return errs
	}
	for _, h := range replaced {
		h.Close()
	}
	return nil
}

// hookOf returns the hook of kind among hooks, or nil.
func hookOf(hooks []release.Hook, kind string) release.Hook {
	for _, h := range hooks {
		if h.Kind() == kind {
			return h
		}
	}
	return nil
}

// hookService is a compiled service as the factories see it.
type hookService struct {
	g  *Gateway
	st *state // the configuration being applied
	s  *service
}

// ModelCall calls backend name of the configuration being applied as
// the service does, with no retries.
func (h *hookService) ModelCall(name string) release.ModelCall {
	b, ok := h.st.backends[name]
	if !ok {
		return nil
	}
	return func(ctx context.Context, req *infer.Request) (*infer.Response, error) {
		resp, _, err := h.g.call(ctx, h.s, b, nil, req)
		return resp, err
	}
}

func (h *hookService) Name() string                  { return h.s.name }
func (h *hookService) Config() config.Service        { return h.s.cfg }
func (h *hookService) Hook(kind string) release.Hook { return hookOf(h.s.hooks, kind) }

func (h *hookService) Features() []release.Feature {
	out := make([]release.Feature, len(h.s.features))
	for col, ref := range h.s.features {
		out[col] = release.Feature{Ref: ref, Column: col, Type: h.s.featureTypes[col]}
	}
	return out
}

func (h *hookService) Outputs() []string {
	out := make([]string, len(h.s.outputs))
	for i, o := range h.s.outputs {
		out[i] = o.from
	}
	return out
}

// An exchange is the release.Call its service's hooks see.
var _ release.Call = (*exchange)(nil)

func (x *exchange) Service() string             { return x.s.name }
func (x *exchange) RequestID() string           { return x.reqID }
func (x *exchange) Start() time.Time            { return x.start }
func (x *exchange) Header() http.Header         { return x.call.Header }
func (x *exchange) Values() map[string]string   { return x.values }
func (x *exchange) ClientID() string            { return x.id.ClientID }
func (x *exchange) Version() string             { return x.version }
func (x *exchange) SetVersion(v string)         { x.version = v }
func (x *exchange) Group() (group, arm string)  { return x.group, x.arm }
func (x *exchange) SetGroup(group, arm string)  { x.group, x.arm = group, arm }
func (x *exchange) Features() *serving.Response { return x.feats }
func (x *exchange) Response() *infer.Response   { return x.resp }
func (x *exchange) Latency() time.Duration      { return x.callLatency }
func (x *exchange) Answer() *release.Answer     { return &x.answer }
func (x *exchange) FeatureMap() map[string]any  { return x.s.featureMap(x.feats) }
func (x *exchange) RequestMap() map[string]any  { return x.s.requestMap(x.vals) }
func (x *exchange) Request() *infer.Request     { return x.req }

func (x *exchange) Field(name string) (string, bool) {
	i, ok := x.s.fieldIdx[name]
	if !ok || !x.vals[i].set {
		return "", false
	}
	return x.vals[i].text(x.s.fields[i].kind), true
}

func (x *exchange) SetBackend(name string) {
	if b, ok := x.st.backends[name]; ok {
		x.b, x.log.Backend = b, name
	}
}

func (x *exchange) Feature(col int) *feature.Value {
	v, _ := featureCell(x.feats, col)
	return v
}

func (x *exchange) Output(name string) (float64, bool) {
	if x.resp == nil {
		return 0, false
	}
	return outputScalar(x.resp, name)
}
