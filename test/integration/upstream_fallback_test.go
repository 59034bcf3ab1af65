package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestFallbackWhenEveryModelServerDies is issue 26's drill with real
// processes: a gateway (sluice serve -c) fronts a pool of two standalone
// model servers (sluice model-server) over KServe v2 gRPC, with active
// health checks every second. Under load, both model servers are killed
// with SIGKILL:
//
//   - the service with fallback.on_upstream_failure answers every request
//     200 from the rule (source fallback_rule, reason upstream_unavailable,
//     no_healthy_upstream or upstream_timeout), within the route timeout,
//     and counts each in sluice_gateway_fallback_answers_total{cause};
//   - the same service without it answers 503 as before;
//   - once the model servers are back on their ports, the model answers
//     again within a few health-check intervals.
func TestFallbackWhenEveryModelServerDies(t *testing.T) {
	// Not parallel: answers are bounded by the 2 s route timeout.
	const routeTimeout = 2 * time.Second
	ports := []int{freePort(t), freePort(t)}
	startModels := func() []*server {
		var out []*server
		for _, p := range ports {
			out = append(out, startServerCmd(t, "model-server", "--model-repository", "examples/models",
				"--model-control-mode", "explicit", "--load-model", "parcel_eta", "--grpc-port", strconv.Itoa(p)))
		}
		return out
	}
	models := startModels()
	var endpoints []any
	for _, p := range ports {
		endpoints = append(endpoints, fmt.Sprintf("127.0.0.1:%d", p))
	}

	base := gwExample(t)
	fb := func(on bool) map[string]any {
		return map[string]any{
			"output": "eta_prediction", "confidence": map[string]any{"output": "confidence_score", "below": 0.7},
			"rule": "base_eta + route_delay_factor * distance_km", "on_upstream_failure": on,
		}
	}
	route := map[string]any{
		"name":    "default",
		"route":   map[string]any{"weighted": []any{map[string]any{"backend": "pool", "version": "1", "weight": 100}}},
		"timeout": routeTimeout.String(),
		"retries": map[string]any{"retry_on": []any{"unavailable", "connect-failure"}, "num_retries": 1, "per_try_timeout": "500ms"},
	}
	gateway := map[string]any{
		"drain_period": "100ms",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     []any{gwService(base, "on", fb(true), route), gwService(base, "off", fb(false), route)},
	}
	c := gwStartWith(t, "examples/models", "parcel_eta", gwFeatureRepo(t, ""), gateway, gwOptions{
		env: gwKeyEnv,
		mutate: func(cfg map[string]any) {
			cfg["gateway"].(map[string]any)["backends"] = []any{map[string]any{
				"name": "pool", "kind": "kserve_grpc", "endpoints": endpoints,
				"health_check": map[string]any{"interval": "1s", "timeout": "500ms"},
			}}
		},
	})
	ids := c.presentIDs(t)
	body := gwBody(ids.users[0], gwPrefer(ids.packages, 62), gwPrefer(ids.routes, 29), 35, 0.4)

	type answer struct {
		code    int
		source  string
		reason  string
		elapsed time.Duration
	}
	ask := func(ctx context.Context, service string) (answer, error) {
		start := time.Now()
		res, err := c.predict(ctx, service, body, gwAuth)
		if err != nil {
			return answer{}, err
		}
		var a struct {
			Source string `json:"source"`
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(res.body, &a)
		return answer{code: res.code, source: a.Source, reason: a.Reason, elapsed: time.Since(start)}, nil
	}
	for _, s := range []string{"on", "off"} {
		a, err := ask(t.Context(), s)
		if err != nil || a.code != http.StatusOK || a.source != "model" {
			t.Fatalf("%s before the kill: %+v %v", s, a, err)
		}
	}

	// Load on "on" while every model server dies.
	ctx, stop := context.WithCancel(t.Context())
	var mu sync.Mutex
	var answers []answer
	var errs []error
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				a, err := ask(ctx, "on")
				mu.Lock()
				if err != nil && ctx.Err() == nil {
					errs = append(errs, err)
				} else if err == nil {
					answers = append(answers, a)
				}
				mu.Unlock()
			}
		})
	}
	fallbackAnswers := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range answers {
			if a.source == "fallback_rule" {
				n++
			}
		}
		return n
	}
	for _, m := range models {
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	// Until the health checks mark both endpoints down the answers are
	// retried and time out or fail over; keep the load on well past that.
	harness.WaitFor(t, 2*time.Minute, 50*time.Millisecond, "50 answers from the rule", func() (bool, string) {
		n := fallbackAnswers()
		return n >= 50, fmt.Sprintf("%d answers; logs:\n%s", n, c.tail())
	})
	stop()
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d requests failed in transport, first: %v", len(errs), errs[0])
	}
	causes := map[string]int{}
	for _, a := range answers {
		if a.code != http.StatusOK {
			t.Fatalf("a request got %d while every model server was down: %+v", a.code, a)
		}
		if a.elapsed > routeTimeout+time.Second {
			t.Errorf("an answer took %v, past the route timeout %v (and a second of slack)", a.elapsed, routeTimeout)
		}
		if a.source == "fallback_rule" {
			if !slices.Contains([]string{"upstream_unavailable", "no_healthy_upstream", "upstream_timeout"}, a.reason) {
				t.Errorf("fallback answer with reason %q", a.reason)
			}
			causes[a.reason]++
		}
	}
	t.Logf("%d answers after the kill: %d from the rule by cause %v", len(answers), fallbackAnswers(), causes)
	text := c.metricsText(t)
	for cause, n := range causes {
		got, ok := gwMetric(text, fmt.Sprintf(`sluice_gateway_fallback_answers_total{cause=%q,service="on"}`, cause))
		if !ok || got < float64(n) {
			t.Errorf("sluice_gateway_fallback_answers_total{cause=%q} = %v (%v), want at least the %d answers seen", cause, got, ok, n)
		}
	}

	// Off: the 503 as before.
	a, err := ask(t.Context(), "off")
	if err != nil || a.code != http.StatusServiceUnavailable {
		t.Fatalf("off with every model server down: %+v %v", a, err)
	}

	// Recovery: the model servers back on their ports; the model answers
	// once a health check passes.
	startModels()
	took := harness.WaitFor(t, 30*time.Second, 20*time.Millisecond, "the model answering after the model servers are back", func() (bool, string) {
		a, err := ask(t.Context(), "on")
		return err == nil && a.code == http.StatusOK && a.source == "model", fmt.Sprintf("%+v %v", a, err)
	})
	t.Logf("the model answers %v after the model servers are ready (health checks every 1s)", took.Round(time.Millisecond))
}
