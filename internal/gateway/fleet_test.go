package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/gateway"
)

// TestBaselineFileSurvivesRestart is single-process mode: with
// fallback.baseline_file the completed baseline buckets are written as
// they complete (on Run's tick) and a gateway started again on the file
// has the baseline before its first request, so drifted traffic triggers
// the fallback after trigger.duration; a gateway without the file has no
// baseline yet and does not.
func TestBaselineFileSurvivesRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state", "eta-baseline.json")
	yaml := gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{
		strings.Replace(fallbackYAML, "window: 1s,", "window: 1s, baseline_file: "+file+",", 1),
	}})
	require.Contains(t, yaml, "baseline_file")
	var factor atomic.Value
	factor.Store(1.0)

	first := newEnv(t, parseConfig(t, yaml))
	seedFeatures(first.features)
	first.model.setFn(driftModel(&factor))
	runGateway(t, first)
	clock := first.clock
	for i := range 60 {
		clock.Advance(100 * time.Millisecond)
		requireOK(t, first.post(t, fallbackBody(i%2 == 0)))
	}
	require.Eventually(t, func() bool { _, err := os.Stat(file); return err == nil }, 5*time.Second, 20*time.Millisecond,
		"the completed buckets are written on Run's tick")

	start := func(withFile bool) *testEnv {
		y := yaml
		if !withFile {
			y = gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, service: []string{fallbackYAML}})
		}
		e := newEnv(t, parseConfig(t, y), func(o *gateway.Options) { o.Now = clock.Now })
		seedFeatures(e.features)
		e.model.setFn(driftModel(&factor))
		return e
	}
	restarted, fresh := start(true), start(false)
	views := adminJSON[[]map[string]any](t, restarted.g.AdminHandler(nil), "/fallback")
	require.Positive(t, views[0]["baseline"].(map[string]any)["buckets"], "the baseline is there before the first request")
	views = adminJSON[[]map[string]any](t, fresh.g.AdminHandler(nil), "/fallback")
	require.Zero(t, views[0]["baseline"].(map[string]any)["buckets"])

	factor.Store(2.0)
	var rule, freshRule int
	for range 40 { // 4 s of drift: trigger.duration is 2 s
		clock.Advance(100 * time.Millisecond)
		res := restarted.post(t, fallbackBody(true))
		requireOK(t, res)
		if res.Source == "fallback_rule" {
			rule++
		}
		res = fresh.post(t, fallbackBody(true))
		requireOK(t, res)
		if res.Source == "fallback_rule" {
			freshRule++
		}
	}
	require.Positive(t, rule, "the restarted gateway's fallback triggered on its baseline from the file")
	require.Zero(t, freshRule, "a gateway without the file has no baseline in its first seconds")
}

// TestClusterStatusSingleProcess: without a cluster section GET /cluster
// says so.
func TestClusterStatusSingleProcess(t *testing.T) {
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}})))
	st := adminJSON[map[string]any](t, e.g.AdminHandler(nil), "/cluster")
	require.Equal(t, map[string]any{"mode": "single_process"}, st)
}
