package authz

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluice-ml/sluice/internal/apierr"
)

type principalKey struct{}

// WithPrincipal returns ctx carrying pr, where PrincipalFrom finds it.
func WithPrincipal(ctx context.Context, pr Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, pr)
}

// PrincipalFrom returns the caller that Require, Operate, RequireKServe or
// the gRPC interceptors put in a request's context.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	pr, ok := ctx.Value(principalKey{}).(Principal)
	return pr, ok
}

// Require serves next only to callers Authorize lets in for need and group,
// with the Principal in the request's context. Others get the DeniedError
// status and a JSON body {"error": ..., "reason": ...}; a 401 also carries
// "WWW-Authenticate: Bearer".
func (p *Policy) Require(need Role, group string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, err := p.Authorize(r, need, group)
		if err != nil {
			WriteError(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), pr)))
	})
}

// Operate is OperateGroup outside any Triton API group: the admin port's
// and the feature server's state-changing endpoints.
func (p *Policy) Operate(a *Auditor, component, action string, target func(*http.Request) string, next http.Handler) http.Handler {
	return p.OperateGroup(a, component, action, "", target, next)
}

// OperateGroup guards a state-changing endpoint: it serves next only to
// callers with RoleOperate (and group's restriction, when group is not ""),
// and records one audit Event per call, denied ones included, with the
// status next wrote (200 when it wrote none). action is a constant from
// code; target, when not nil, names what the call acts on (service, model,
// view) from the request. The ResponseWriter next gets still flushes.
func (p *Policy) OperateGroup(a *Auditor, component, action, group string, target func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tgt string
		if target != nil {
			tgt = target(r)
		}
		p.serveAudited(w, r, a, component, action, tgt, RoleOperate, group, next)
	})
}

// RequireKServe guards a KServe v2 HTTP handler: each request is classified
// by KServeHTTPGroup, authorized for that group and role, and, when it
// needs RoleOperate, audited (action "repository.load", "repository.unload",
// "shared_memory.register", ..., or "unclassified" for a path the
// classifier does not know, which needs RoleOperate so nothing unknown is
// open).
func (p *Policy) RequireKServe(a *Auditor, component string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.EscapedPath()
		group, need := KServeHTTPGroup(r.Method, path)
		if need < RoleOperate {
			pr, err := p.Authorize(r, need, group)
			if err != nil {
				WriteError(w, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), pr)))
			return
		}
		action, target := KServeHTTPAction(path)
		p.serveAudited(w, r, a, component, action, target, need, group, next)
	})
}

// serveAudited authorizes r, serves it with next when allowed, and records
// the outcome with a.
func (p *Policy) serveAudited(w http.ResponseWriter, r *http.Request, a *Auditor, component, action, target string, need Role, group string, next http.Handler) {
	ev := Event{Component: component, Action: action, Target: target, RequestID: r.Header.Get("X-Request-Id")}
	pr, err := p.Authorize(r, need, group)
	ev.Who, ev.Via, ev.Addr, ev.Client, ev.ProxyAddr = pr.ID, pr.Via, pr.Addr, pr.Client, pr.ProxyAddr
	if err != nil {
		d := asDenied(err)
		ev.Status, ev.Result, ev.Reason = d.Status, ResultDenied, d.Reason
		a.Record(ev)
		WriteError(w, d)
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		// A panicking handler is still a call that happened: record it as a
		// 500, then let the server's recovery see the panic.
		if v := recover(); v != nil {
			ev.Status, ev.Result, ev.Reason = http.StatusInternalServerError, ResultError, "panic"
			a.Record(ev)
			panic(v)
		}
		ev.Status = rec.code()
		ev.Result = ResultOK
		if ev.Status >= 400 {
			ev.Result = ResultError
		}
		a.Record(ev)
	}()
	next.ServeHTTP(rec, r.WithContext(WithPrincipal(r.Context(), pr)))
}

// WriteError writes err (a *DeniedError; any other error is a 500) as the
// JSON body {"error": ..., "reason": ...} with its status, and
// "WWW-Authenticate: Bearer" on a 401.
func WriteError(w http.ResponseWriter, err error) {
	d := asDenied(err)
	h := w.Header()
	if d.Status == http.StatusUnauthorized {
		v := `Bearer realm="sluice"`
		if d.Reason == ReasonInvalidCredential {
			v += `, error="invalid_token"`
		}
		h.Set("WWW-Authenticate", v)
	}
	apierr.WriteError(w, d.Status, d.Reason, d.Message)
}

// asDenied returns err as a *DeniedError, or a 500 one for any other error.
func asDenied(err error) *DeniedError {
	if d, ok := errors.AsType[*DeniedError](err); ok {
		return d
	}
	return &DeniedError{Status: http.StatusInternalServerError, Reason: "internal", Message: "authorization failed"}
}

// statusRecorder remembers the status a handler writes. It keeps
// http.Flusher working and unwraps for http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer, when it can.
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}
