package gateway_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/gateway/release"
)

// countingHook is a release hook of the test's own: it counts the points
// the gateway calls, and steers every call to version "2".
type countingHook struct {
	release.Base
	cfg config.Service

	mu     sync.Mutex
	points map[string]int
	seen   []string // what the hook saw, per point
	closed bool
}

func (h *countingHook) Kind() string { return "counting" }

func (h *countingHook) count(point, seen string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.points[point]++
	h.seen = append(h.seen, seen)
}

func (h *countingHook) Steer(c release.Call) {
	c.SetVersion("2")
	c.SetGroup("g1", "candidate")
	if c.RequestID() == "" {
		h.count("steer_without_request_id", "")
	}
	h.count("steer", c.Service())
}

func (h *countingHook) ModelDone(c release.Call, err error) {
	v, ok := c.Output("eta_prediction")
	group, arm := c.Group()
	h.count("model_done", group+"/"+arm)
	if err != nil || !ok || v == 0 {
		h.count("model_done_without_output", "")
	}
}

func (h *countingHook) Answered(_ context.Context, c release.Call) {
	base, _ := c.Field("base_eta")
	h.count("answered", "base_eta="+base+" version="+c.Version())
}

func (h *countingHook) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
}

func (h *countingHook) get(point string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.points[point]
}

func (h *countingHook) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// hookFactory makes countingHooks, reusing prev while the service's
// settings are unchanged, and fails while fail is set.
type hookFactory struct {
	mu    sync.Mutex
	fail  bool
	made  []*countingHook
	prevs []release.Hook // the prev of each call
}

func (f *hookFactory) make(s release.Service, prev release.Hook) (release.Hook, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prevs = append(f.prevs, prev)
	if f.fail {
		return nil, errors.New("the counting hook refuses this configuration")
	}
	if p, ok := prev.(*countingHook); ok && reflect.DeepEqual(p.cfg, s.Config()) {
		return p, nil
	}
	h := &countingHook{cfg: s.Config(), points: map[string]int{}}
	f.made = append(f.made, h)
	return h, nil
}

// TestReleaseHookOfOptions drives a hook of Options.Hooks through Predict
// and three reloads: one that keeps the settings (the hook carries over),
// one the hook's factory refuses (nothing changes) and one that changes
// them (a new hook; the old one is closed).
func TestReleaseHookOfOptions(t *testing.T) {
	yaml := func(version string) *config.Config {
		cfg := parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}}))
		cfg.Gateway.Services[0].Model.Version = version
		return cfg
	}
	f := &hookFactory{}
	e := newEnv(t, yaml("1"), func(o *gateway.Options) { o.Hooks = []release.Factory{f.make} })
	require.Len(t, f.made, 1)
	h := f.made[0]
	require.Equal(t, []release.Hook{nil}, f.prevs, "the first configuration has no previous hook")

	requireOK(t, e.post(t, plainBody))
	require.Equal(t, 1, h.get("steer"))
	require.Equal(t, 1, h.get("model_done"))
	require.Equal(t, 0, h.get("model_done_without_output"))
	require.Equal(t, 1, h.get("answered"))
	require.Equal(t, "2", e.model.last(t).Version, "the hook steered the call to version 2")
	require.Equal(t, 0, h.get("steer_without_request_id"))
	require.Equal(t, []string{"eta", "g1/candidate", "base_eta=30 version=2"}, h.seen)

	// Same settings: the factory gets its hook back and keeps it.
	require.NoError(t, e.g.Reload(yaml("1")))
	require.Len(t, f.made, 1)
	require.Same(t, h, f.prevs[1])
	requireOK(t, e.post(t, plainBody))
	require.Equal(t, 2, h.get("answered"), "the hook carried over the reload")

	// A refused configuration leaves the running hook alone.
	f.mu.Lock()
	f.fail = true
	f.mu.Unlock()
	require.ErrorContains(t, e.g.Reload(yaml("3")), "refuses this configuration")
	require.False(t, h.isClosed())
	requireOK(t, e.post(t, plainBody))
	require.Equal(t, 3, h.get("answered"))

	// New settings: a new hook, and the old one is closed.
	f.mu.Lock()
	f.fail = false
	f.mu.Unlock()
	require.NoError(t, e.g.Reload(yaml("3")))
	require.Len(t, f.made, 2)
	require.True(t, h.isClosed())
	requireOK(t, e.post(t, plainBody))
	require.Equal(t, 3, h.get("answered"), "the replaced hook sees no more calls")
	require.Equal(t, 1, f.made[1].get("answered"))
}

// TestReleaseHookTicks shows RunBackground calling a hook's Tick.
func TestReleaseHookTicks(t *testing.T) {
	ticked := make(chan struct{}, 1)
	f := func(release.Service, release.Hook) (release.Hook, error) { return &tickHook{ticked: ticked}, nil }
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}})),
		func(o *gateway.Options) { o.Hooks = []release.Factory{f} })
	runGateway(t, e)
	select {
	case <-ticked:
	case <-time.After(30 * time.Second):
		t.Fatal("RunBackground never called the hook's Tick")
	}
}

type tickHook struct {
	release.Base
	ticked chan struct{}
}

func (h *tickHook) Kind() string { return "tick" }

func (h *tickHook) Tick(context.Context, time.Time) {
	select {
	case h.ticked <- struct{}{}:
	default:
	}
}
