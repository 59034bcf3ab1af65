package authz

import (
	"encoding/json"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Components of audit events: which API a call came through.
const (
	ComponentAdmin      = "admin"
	ComponentModelsHTTP = "models_http"
	ComponentModelsGRPC = "models_grpc"
	ComponentFeatures   = "features"
	// ComponentGatewayProxy is the gateway's KServe v2 passthrough.
	ComponentGatewayProxy = "gateway_proxy"
)

// Results of audit events.
const (
	ResultOK     = "ok"
	ResultDenied = "denied"
	ResultError  = "error"
)

// maxFieldBytes bounds each free-text field of an audit line (target, who,
// address, request id), so a caller cannot make lines arbitrarily long.
const maxFieldBytes = 256

// Event is one state-changing call, allowed or not.
type Event struct {
	// Time is when the call ended; zero means now.
	Time time.Time
	// Component is the API: ComponentAdmin, ComponentModelsHTTP,
	// ComponentModelsGRPC or ComponentFeatures.
	Component string
	// Action is what the call does, a constant from code ("rollout.promote",
	// "repository.load", "push", "materialize", "reload", "pprof").
	Action string
	// Target is what it acts on: a service, model or feature view.
	Target string
	// Who is the Principal's ID ("" when the caller is unknown).
	Who string
	// Via is the Principal's Via.
	Via string
	// Addr is the caller's network address.
	Addr string
	// Status is the HTTP status answered (for gRPC, its HTTP equivalent).
	Status int
	// Result is ResultOK, ResultDenied or ResultError.
	Result string
	// Reason is the refusal's or error's reason code, when known.
	Reason string
	// RequestID is the request's x-request-id, when it has one.
	RequestID string
	// GRPCCode is the gRPC status code's name, for gRPC calls.
	GRPCCode string
	// Client is the gateway client a proxied call came from (its client
	// id, or "anonymous"), when the gateway vouched for it; Addr is then
	// that client's address and ProxyAddr the gateway's.
	Client    string
	ProxyAddr string
}

// line is an Event as written: keys in a fixed order, snake_case.
type line struct {
	Time       string `json:"time"`
	Audit      bool   `json:"audit"`
	Component  string `json:"component"`
	Action     string `json:"action"`
	Target     string `json:"target"`
	Who        string `json:"who"`
	Via        string `json:"via"`
	SourceAddr string `json:"source_addr"`
	Status     int    `json:"status"`
	Result     string `json:"result"`
	Reason     string `json:"reason"`
	RequestID  string `json:"request_id"`
	GRPCCode   string `json:"grpc_code,omitempty"`
	Client     string `json:"client,omitempty"`
	ProxyAddr  string `json:"proxy_addr,omitempty"`
}

// Auditor writes one JSON line per state-changing call and counts it. It is
// safe for concurrent use; lines never interleave. A nil *Auditor records
// nothing.
type Auditor struct {
	mu sync.Mutex // protects w
	w  io.Writer  // nil: lines are discarded

	events      *prometheus.CounterVec // component, action, result
	writeErrors prometheus.Counter
}

// NewAuditor returns an Auditor writing to w (nil discards the lines but
// still counts) with its metrics registered with reg (nil registers
// nothing). Several Auditors may share one reg: they share the series.
func NewAuditor(w io.Writer, reg prometheus.Registerer) *Auditor {
	return &Auditor{
		w: w,
		events: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "audit", Name: "events_total",
			Help: "State-changing calls recorded in the audit log, by component (admin, models_http, models_grpc, features), action and result (ok, denied, error).",
		}, []string{"component", "action", "result"})),
		writeErrors: telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "audit", Name: "write_errors_total",
			Help: "Audit lines that could not be written to the audit log.",
		})),
	}
}

// Record writes e as one line and counts it. The line is
//
//	{"time":"2026-01-02T15:04:05.123456789Z","audit":true,"component":"admin",
//	 "action":"rollout.promote","target":"fraud","who":"ci","via":"token",
//	 "source_addr":"10.0.0.7:51234","status":200,"result":"ok","reason":"",
//	 "request_id":"..."}
//
// on one line, plus "grpc_code" for gRPC calls.
func (a *Auditor) Record(e Event) {
	if a == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	a.events.WithLabelValues(e.Component, e.Action, e.Result).Inc()
	if a.w == nil {
		return
	}
	b, err := json.Marshal(line{
		Time:       e.Time.UTC().Format(time.RFC3339Nano),
		Audit:      true,
		Component:  e.Component,
		Action:     e.Action,
		Target:     clip(e.Target),
		Who:        clip(e.Who),
		Via:        e.Via,
		SourceAddr: clip(e.Addr),
		Status:     e.Status,
		Result:     e.Result,
		Reason:     e.Reason,
		RequestID:  clip(e.RequestID),
		GRPCCode:   e.GRPCCode,
		Client:     clip(e.Client),
		ProxyAddr:  clip(e.ProxyAddr),
	})
	if err != nil {
		a.writeErrors.Inc()
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	// One Write per line: with an O_APPEND file, lines from several
	// processes do not interleave either.
	if _, err := a.w.Write(b); err != nil {
		a.writeErrors.Inc()
	}
}

// clip cuts s to maxFieldBytes on a rune boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxFieldBytes {
		return s
	}
	cut := maxFieldBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
