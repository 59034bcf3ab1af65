package console_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/console"
)

func TestSummarize(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	healthyGW := func() *console.Gateway {
		return &console.Gateway{
			Ready: true,
			Services: []console.Service{{
				Name: "eta", Breaker: &console.Breaker{}, Fallback: &console.Fallback{}, Rollout: &console.Rollout{State: "progressing"},
			}},
			Backends: []console.Backend{
				{Name: "a", Endpoints: []console.Endpoint{{Addr: "a1", Healthy: true}, {Addr: "a2", Healthy: true}}},
				{Name: "b", Endpoints: []console.Endpoint{{Addr: "b1", Healthy: true}}},
			},
		}
	}
	type problem struct {
		sev     console.Severity
		subject string
	}
	tests := []struct {
		name    string
		in      func() console.Inputs
		healthy bool
		want    []problem
	}{
		{name: "healthy", healthy: true, in: func() console.Inputs {
			return console.Inputs{HaveGateway: true, Gateway: healthyGW()}
		}},
		{name: "not ready", in: func() console.Inputs {
			g := healthyGW()
			g.Ready = false
			return console.Inputs{HaveGateway: true, Gateway: g}
		}, want: []problem{{console.SeverityCritical, "ready"}}},
		{name: "gateway unreadable", in: func() console.Inputs {
			return console.Inputs{HaveGateway: true, GatewayErr: errors.New("admin /routes: status 500")}
		}, want: []problem{{console.SeverityCritical, "admin"}}},
		{name: "breaker, fallback and rollback", in: func() console.Inputs {
			g := healthyGW()
			g.Services[0].Breaker.Open = true
			g.Services[0].Fallback.Triggered = true
			g.Services[0].Rollout.State = "rolled_back"
			return console.Inputs{HaveGateway: true, Gateway: g}
		}, want: []problem{{console.SeverityCritical, "eta"}, {console.SeverityWarning, "eta"}, {console.SeverityWarning, "eta"}}},
		{name: "one endpoint ejected is a warning; a backend with none left is critical", in: func() console.Inputs {
			g := healthyGW()
			g.Backends[0].Endpoints[0].Ejected = true
			g.Backends[1].Endpoints[0].Healthy = false
			return console.Inputs{HaveGateway: true, Gateway: g}
		}, want: []problem{{console.SeverityWarning, "a a1"}, {console.SeverityWarning, "b b1"}, {console.SeverityCritical, "b"}}},
		{name: "models: failed load critical, failed reload a warning, explicit mode's unloaded fine", healthy: false, in: func() console.Inputs {
			return console.Inputs{HaveModels: true, Models: []console.Model{
				{Name: "m", Versions: []console.ModelVersion{
					{Version: "1", State: "READY", Reason: "reload failed, the previous load keeps serving: bad file"},
					{Version: "2", State: "UNAVAILABLE", Reason: "bad file"},
				}},
				{Name: "idle", State: "UNKNOWN", Reason: "not loaded", Versions: []console.ModelVersion{}},
				{Name: "gone", State: "UNAVAILABLE", Reason: "unloaded", Versions: []console.ModelVersion{}},
				{Name: "cfg", State: "UNAVAILABLE", Reason: "config.pbtxt:3:1: unknown field", Versions: []console.ModelVersion{}},
			}}
		}, want: []problem{{console.SeverityWarning, "m v1"}, {console.SeverityCritical, "m v2"}, {console.SeverityCritical, "cfg"}}},
		{name: "views: stale critical, stale hot copy a warning, offline ignored", in: func() console.Inputs {
			return console.Inputs{HaveViews: true, Views: []console.View{
				{Name: "fresh", Online: true, Hot: &console.HotSubset{Freshness: console.Freshness{Stale: true, StaleReason: "old"}}},
				{Name: "stale", Online: true, Freshness: console.Freshness{Stale: true, StaleReason: "never materialized or pushed"}},
				{Name: "offline"},
			}}
		}, want: []problem{{console.SeverityWarning, "fresh (hot)"}, {console.SeverityCritical, "stale"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := console.Summarize(tt.in(), now)
			var got []problem
			for _, p := range s.Problems {
				got = append(got, problem{p.Severity, p.Subject})
				require.NotEmpty(t, p.Message)
			}
			require.ElementsMatch(t, tt.want, got)
			wantHealthy := tt.healthy
			if len(tt.want) > 0 && !tt.healthy {
				wantHealthy = true
				for _, p := range tt.want {
					if p.sev == console.SeverityCritical {
						wantHealthy = false
					}
				}
			}
			require.Equal(t, wantHealthy, s.Healthy())
		})
	}
}
