package main

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	url := os.Getenv("EXP_URL")
	if url == "" {
		t.Skip()
	}
	body, _ := os.ReadFile("../../../examples/requests/parcel_eta.json")
	spec := loadSpec{URL: url, Header: http.Header{"Content-Type": {"application/json"}}, Body: func(int) []byte { return body }, MaxInFlight: 2048}
	rc, _ := newRawClient(url, 2048, 5*time.Second)
	for _, rate := range []float64{1000, 1000, 2000, 2000} {
		spec.Rate, spec.Duration = rate, 3*time.Second
		m := newCPUMeter(map[string]int{"self": 0, "machine": -1})
		res := runLoad(context.Background(), rc, spec)
		u, _ := m.since()
		t.Logf("rate %v ok %d late %d lag p99 %v lat p50 %v p90 %v p99 %v svc p99 %v cpu/req %.0fµs machine %.2f", rate, res.OK, res.Late, pct(res.Lag, .99), pct(res.Latency, .5), pct(res.Latency, .9), pct(res.Latency, .99), pct(res.Service, .99), float64(u["self"].Microseconds())/float64(res.Sent), u["machine"].Seconds()/3)
	}
}
