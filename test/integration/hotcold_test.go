package integration_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/sluice-ml/sluice/internal/gateway/route"
)

// TestHotColdExampleServes runs examples/parcel-eta-hotcold/sluice.yaml,
// the seeds' hot/cold layout as two models: requests for hot routes (20 %
// of route ids by hash) are answered by parcel_eta_hot, the others by
// parcel_eta_cold, both 200 with the model's outputs.
func TestHotColdExampleServes(t *testing.T) {
	t.Parallel()
	c := conStartExample(t, "examples/parcel-eta-hotcold/sluice.yaml", "examples/parcel-eta-hotcold/models")
	ids := c.presentIDs(t)
	seen := map[string]int{}
	for _, rt := range ids.routes {
		if seen["parcel_eta_hot"] >= 3 && seen["parcel_eta_cold"] >= 3 {
			break
		}
		res := c.mustPredict(t, "parcel-eta", gwBody(ids.users[0], gwPrefer(ids.packages, 62), rt, 35, 0.4), map[string]string{"Authorization": "Bearer demo-key"})
		if res.code != http.StatusOK {
			t.Fatalf("route %d: %d %s", rt, res.code, res.body)
		}
		var a gwAnswer
		if err := json.Unmarshal(res.body, &a); err != nil {
			t.Fatal(err)
		}
		want, wantRoute := "parcel_eta_cold", "cold"
		if route.Hash(strconv.FormatInt(rt, 10))%100 < 20 {
			want, wantRoute = "parcel_eta_hot", "hot"
		}
		if a.Model != want || a.Route != wantRoute || a.Source != "model" {
			t.Fatalf("route_id %d: answered by %s on route %s (source %s), want %s on %s", rt, a.Model, a.Route, a.Source, want, wantRoute)
		}
		if _, ok := a.Outputs["eta_minutes"].(float64); !ok {
			t.Fatalf("route_id %d: no eta_minutes: %s", rt, res.body)
		}
		seen[a.Model]++
	}
	if seen["parcel_eta_hot"] == 0 || seen["parcel_eta_cold"] == 0 {
		t.Fatalf("answers by model: %v; want both", seen)
	}
}
