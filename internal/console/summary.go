package console

import (
	"fmt"
	"time"

	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
)

// Severity grades a problem.
type Severity string

// The severities: critical means requests fail or are about to; warning
// means something needs a look.
const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
)

// Problem is one thing an operator should look at.
type Problem struct {
	Severity Severity `json:"severity"`
	// Area is "gateway", "models", "features", "services" or "errors";
	// Subject names the model version, view, service or endpoint.
	Area    string `json:"area"`
	Subject string `json:"subject"`
	Message string `json:"message"`
}

// Summary is a deployment's health on one screen.
type Summary struct {
	Time time.Time `json:"time"`
	// Ready is the gateway's readiness; true when there is no gateway.
	Ready bool `json:"ready"`
	// Each count is nil when the process does not run that part.
	Models    *Count `json:"models,omitempty"`    // versions READY / versions
	Views     *Count `json:"views,omitempty"`     // online views fresh / online views
	Services  *Count `json:"services,omitempty"`  // services healthy / services
	Endpoints *Count `json:"endpoints,omitempty"` // endpoints routable / endpoints
	// RecentErrors is how many failed requests the console has seen;
	// LastError the latest, if any.
	RecentErrors *uint64          `json:"recent_errors,omitempty"`
	LastError    *accesslog.Entry `json:"last_error,omitempty"`
	Problems     []Problem        `json:"problems"`
}

// Count is a healthy share.
type Count struct {
	OK    int `json:"ok"`
	Total int `json:"total"`
}

// Healthy reports a summary without critical problems.
func (s *Summary) Healthy() bool {
	for _, p := range s.Problems {
		if p.Severity == SeverityCritical {
			return false
		}
	}
	return s.Ready
}

// Inputs are what Summarize judges; a nil part is not run by the process.
type Inputs struct {
	Models      []Model
	ModelsErr   error
	Views       []View
	ViewsErr    error
	Gateway     *Gateway
	GatewayErr  error
	Errors      []accesslog.Entry // newest first
	ErrorsSeen  *uint64
	HaveModels  bool
	HaveViews   bool
	HaveGateway bool
}

// Summarize finds the problems in a deployment's state at now.
func Summarize(in Inputs, now time.Time) Summary {
	s := Summary{Time: now, Ready: true, Problems: []Problem{}}
	if in.HaveGateway {
		switch {
		case in.GatewayErr != nil:
			s.Ready = false
			s.add(SeverityCritical, "gateway", "admin", "cannot read the gateway's state: %v", in.GatewayErr)
		case in.Gateway != nil:
			s.gateway(in.Gateway)
		}
	}
	if in.HaveModels {
		if in.ModelsErr != nil {
			s.add(SeverityCritical, "models", "repository", "cannot list the models: %v", in.ModelsErr)
		}
		s.models(in.Models)
	}
	if in.HaveViews {
		if in.ViewsErr != nil {
			s.add(SeverityCritical, "features", "registry", "cannot list the feature views: %v", in.ViewsErr)
		}
		s.views(in.Views)
	}
	if in.ErrorsSeen != nil {
		s.RecentErrors = in.ErrorsSeen
		if len(in.Errors) > 0 {
			e := in.Errors[0]
			s.LastError = &e
		}
	}
	return s
}

func (s *Summary) add(sev Severity, area, subject, format string, args ...any) {
	s.Problems = append(s.Problems, Problem{Severity: sev, Area: area, Subject: subject, Message: fmt.Sprintf(format, args...)})
}

// gateway adds the gateway's problems: readiness, services, endpoints.
func (s *Summary) gateway(g *Gateway) {
	s.Ready = g.Ready
	if !g.Ready {
		s.add(SeverityCritical, "gateway", "ready", "the gateway is not ready (draining or starting)")
	}
	s.Services = &Count{Total: len(g.Services)}
	for _, svc := range g.Services {
		ok := true
		if b := svc.Breaker; b != nil && b.Open {
			ok = false
			s.add(SeverityCritical, "services", svc.Name, "feature breaker open: %d stale feature events in %s (threshold %d)", b.StaleEvents, b.Window, b.Threshold)
		}
		if f := svc.Fallback; f != nil && f.Triggered {
			ok = false
			s.add(SeverityWarning, "services", svc.Name, "fallback on since %s: predictions of %s drift from their baseline; low-confidence answers come from the rule", f.Since.Format(time.RFC3339), f.Output)
		}
		if r := svc.Rollout; r != nil && r.State == "rolled_back" {
			ok = false
			s.add(SeverityWarning, "services", svc.Name, "rollout of version %s rolled back: %s", r.Candidate, r.Reason)
		}
		if ok {
			s.Services.OK++
		}
	}
	s.Endpoints = &Count{}
	for _, b := range g.Backends {
		routable := 0
		for _, e := range b.Endpoints {
			s.Endpoints.Total++
			switch {
			case e.Ejected:
				s.add(SeverityWarning, "gateway", b.Name+" "+e.Addr, "endpoint ejected until %s (error rate %.0f%%, %d recent 503s)", e.EjectedUntil.Format(time.RFC3339), e.ErrorRate*100, e.Recent503)
			case !e.Healthy:
				s.add(SeverityWarning, "gateway", b.Name+" "+e.Addr, "endpoint fails its health check")
			default:
				s.Endpoints.OK++
				routable++
			}
		}
		if len(b.Endpoints) > 0 && routable == 0 {
			s.add(SeverityCritical, "gateway", b.Name, "no endpoint of backend %s can take requests", b.Name)
		}
	}
}

// models adds the problems of the model versions.
func (s *Summary) models(models []Model) {
	s.Models = &Count{}
	for _, m := range models {
		if m.Reason != "" && len(m.Versions) == 0 && m.Reason != "unloaded" && m.State != "UNKNOWN" {
			s.add(SeverityCritical, "models", m.Name, "%s", m.Reason)
		}
		for _, v := range m.Versions {
			s.Models.Total++
			if v.State == "READY" {
				s.Models.OK++
			}
			if v.Healthy() {
				continue
			}
			sev := SeverityCritical
			if v.State == "READY" {
				sev = SeverityWarning // it still serves
			}
			s.add(sev, "models", m.Name+" v"+v.Version, "%s: %s", v.State, v.Reason)
		}
	}
}

// views adds the problems of the online feature views.
func (s *Summary) views(views []View) {
	s.Views = &Count{}
	for _, v := range views {
		if !v.Online {
			continue
		}
		s.Views.Total++
		switch {
		case v.Error != "":
			s.add(SeverityCritical, "features", v.Name, "%s", v.Error)
		case v.Stale:
			s.add(SeverityCritical, "features", v.Name, "stale, reads are refused: %s", v.StaleReason)
		default:
			s.Views.OK++
		}
		if h := v.Hot; h != nil && h.Stale && !v.Stale {
			s.add(SeverityWarning, "features", v.Name+" (hot)", "hot subset stale, reads fall back to the cold view: %s", h.StaleReason)
		}
	}
}
