package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestGatewayFallbackReadsStreamFeature runs `sluice serve -c` with the
// parcel-eta example's feature repository and fallback rule
// (base_eta + route_delay_min + (delay_mean_10m ?? 0)) and
// feature_server.aggregate on, against a private NATS JetStream that is
// down when the process starts:
//
//   - the start does not wait for NATS, and the rule answers with the
//     stream term absent (0);
//   - NATS comes up, delivery events for one route are published on the
//     example's subject, and the in-process aggregator (retrying in the
//     background) picks them up: the rule's answer becomes
//     base_eta + route_delay_min + the mean delay of those events.
//
// The rule answers because the only model server is killed and the
// service has fallback.on_upstream_failure.
func TestGatewayFallbackReadsStreamFeature(t *testing.T) {
	// Not parallel: the model server's health check times out after 500 ms.
	ns := natstest.Start(t)
	natsURL := ns.URL()
	ns.Kill() // down at start: serve -c must not wait for it

	repo := gwFeatureRepo(t, "")
	defs := filepath.Join(repo, "stream_feature_views.yaml")
	b, err := os.ReadFile(defs)
	if err != nil {
		t.Fatal(err)
	}
	withURL := strings.Replace(string(b), "    type: stream\n", "    type: stream\n    url: "+natsURL+"\n", 1)
	if withURL == string(b) {
		t.Fatal("examples/parcel-eta/features/stream_feature_views.yaml: no stream source to point at the test's NATS")
	}
	mustWrite(t, defs, []byte(withURL))

	model := startServerCmd(t, "model-server", "--model-repository", "examples/models",
		"--model-control-mode", "explicit", "--load-model", "parcel_eta")
	rule := monExampleFallback(t)["rule"]
	if !strings.Contains(fmt.Sprint(rule), "delay_mean_10m") {
		t.Fatalf("the example's fallback rule %q does not read the stream feature delay_mean_10m", rule)
	}
	gateway := map[string]any{
		"drain_period": "100ms",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services": []any{gwService(gwExample(t), "eta", map[string]any{
			"output": "eta_prediction", "confidence": map[string]any{"output": "confidence_score", "below": 0.7},
			"rule": rule, "on_upstream_failure": true,
		}, map[string]any{
			"name":    "default",
			"route":   map[string]any{"weighted": []any{map[string]any{"backend": "pool", "version": "1", "weight": 100}}},
			"timeout": "2s",
		})},
	}
	c := gwStartWith(t, "examples/models", "parcel_eta", repo, gateway, gwOptions{
		env: gwKeyEnv,
		mutate: func(cfg map[string]any) {
			cfg["feature_server"].(map[string]any)["aggregate"] = true
			cfg["gateway"].(map[string]any)["backends"] = []any{map[string]any{
				"name": "pool", "kind": "kserve_grpc", "endpoints": []any{model.grpc},
				"health_check": map[string]any{"interval": "1s", "timeout": "500ms"},
			}}
		},
	})
	if !strings.Contains(c.logs.String(), "stream source unreachable") {
		t.Errorf("serve -c started without logging that the stream source is unreachable:\n%s", c.tail())
	}
	ids := c.presentIDs(t)
	route := gwPrefer(ids.routes, 29)
	rows := c.onlineFeatures(t, map[string]any{"features": []string{"route_features:distance_km"}, "entities": map[string]any{"route_id": []int64{route}}})
	distance, ok := rows.Results[1].Values[0].(float64)
	if !ok {
		t.Fatalf("route %d distance_km: %v", route, rows.Results[1].Values[0])
	}
	const baseETA, factor = 30.0, 0.5 // exact in float32
	body := gwBody(ids.users[0], gwPrefer(ids.packages, 62), route, baseETA, factor)
	noStream := baseETA + factor*float64(float32(distance))

	_ = model.cmd.Process.Kill()
	<-model.done
	// eta asks until the rule answers (the model server is gone) and
	// returns its eta_minutes.
	eta := func() float64 {
		t.Helper()
		var v float64
		harness.WaitFor(t, time.Minute, 100*time.Millisecond, "a fallback_rule answer after the model server's death", func() (bool, string) {
			res, err := c.predict(t.Context(), "eta", body, gwAuth)
			if err != nil {
				t.Fatal(err)
			}
			var a struct {
				Source  string         `json:"source"`
				Outputs map[string]any `json:"outputs"`
			}
			_ = json.Unmarshal(res.body, &a)
			if res.code != http.StatusOK || a.Source != "fallback_rule" {
				return false, fmt.Sprintf("%d %s\n%s", res.code, res.body, c.tail())
			}
			var ok bool
			if v, ok = a.Outputs["eta_minutes"].(float64); !ok {
				t.Fatalf("fallback answer without a number eta_minutes: %s", res.body)
			}
			return true, ""
		})
		return v
	}
	if got := eta(); math.Abs(got-noStream) > 1e-4*noStream {
		t.Fatalf("with NATS down the rule answers %v, want base_eta + route_delay_min = %v (delay_mean_10m absent: ?? 0)", got, noStream)
	}

	ns.Restart()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The aggregator creates the stream when it connects; publishing
	// before that would find no stream, so create it here (the same
	// configuration) and let either side win.
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "PARCEL_DELIVERIES", Subjects: []string{"parcel.deliveries"}, Storage: jetstream.FileStorage}); err != nil {
		if _, err2 := js.Stream(t.Context(), "PARCEL_DELIVERIES"); err2 != nil {
			t.Fatalf("create stream: %v; %v", err, err2)
		}
	}
	delays := []float64{3, 5, 10} // mean 6
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, d := range delays {
		ev, _ := json.Marshal(map[string]any{"event_ts": time.Now().UTC().Format(time.RFC3339Nano), "route_id": route, "delay_min": d})
		if _, err := js.Publish(ctx, "parcel.deliveries", ev); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	want := noStream + 6
	// The aggregator retries with back-off (at most 30 s apart), so its
	// first connection may take that long.
	harness.WaitFor(t, 90*time.Second, 200*time.Millisecond, fmt.Sprintf("the rule answering base_eta + route_delay_min + delay_mean_10m = %v after 3 deliveries on route %d (delays %v)", want, route, delays), func() (bool, string) {
		got := eta()
		return math.Abs(got-want) <= 1e-4*want, fmt.Sprintf("%v\n%s", got, c.tail())
	})
	if !strings.Contains(c.logs.String(), "stream aggregator ready") {
		t.Errorf("no 'stream aggregator ready' in the logs:\n%s", c.tail())
	}
}
