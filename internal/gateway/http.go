package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/gateway/fallback"
	"github.com/sluice-ml/sluice/internal/gateway/ratelimit"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/httpapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonenc"
)

// ServeHTTP serves the service paths, the KServe v2 proxy (when
// configured) and GET /ready.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := g.state.Load()
	path := r.URL.Path
	if s, ok := st.services[r.Method+" "+path]; ok {
		g.serveService(w, r, st, s)
		return
	}
	switch {
	case path == "/ready" || path == "/healthz":
		if g.draining.Load() {
			writeError(w, "", http.StatusServiceUnavailable, ReasonDraining, "the gateway is shutting down")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ready":true}`+"\n")
	case st.proxy != nil && strings.HasPrefix(path, st.proxy.PathPrefix):
		g.serveProxy(w, r, st)
	case st.paths[path]:
		writeError(w, "", http.StatusMethodNotAllowed, ReasonMethodNotAllowed, "method "+r.Method+" is not allowed on "+path)
	default:
		writeError(w, "", http.StatusNotFound, ReasonNotFound, "no service at "+path)
	}
}

// maxRequestID bounds a client-supplied x-request-id.
const maxRequestID = 128

// requestID returns the request's x-request-id when it is sane, else a new
// random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= maxRequestID && printable(id) {
		return id
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// clientIP is the peer address of r, the key of anonymous rate limits.
// X-Forwarded-For is not trusted: a client could pick its own bucket.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// admit authenticates r and takes a rate-limit token. It writes the error
// answer itself and returns ok=false when the request must stop.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, st *state, reqID string, e *accesslog.Entry) (auth.Identity, bool) {
	id, aerr := st.auth.Authenticate(r)
	if aerr != nil {
		e.Status, e.Reason, e.Error = http.StatusUnauthorized, aerr.Reason, aerr.Msg
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		writeError(w, reqID, http.StatusUnauthorized, aerr.Reason, aerr.Msg)
		return id, false
	}
	e.ClientID = id.ClientID
	key, limit := "client:"+id.ClientID, st.anonLimit
	if id.Anonymous {
		key = "ip:" + clientIP(r)
	} else {
		limit = limitOf(st.clients[id.ClientID].RateLimit)
	}
	if limit.Rate <= 0 {
		return id, true // unlimited
	}
	d, err := st.limiter.Allow(r.Context(), key, limit)
	if err != nil {
		// Only an invalid limit or a gone client gets here; config
		// validation rules out the first.
		e.Status, e.Reason, e.Error = http.StatusServiceUnavailable, ReasonInternal, err.Error()
		writeError(w, reqID, http.StatusServiceUnavailable, ReasonInternal, "rate limiter: "+err.Error())
		return id, false
	}
	if !d.Allowed {
		w.Header().Set("Retry-After", ratelimit.RetryAfterHeader(d.RetryAfter))
		w.Header().Set("X-RateLimit-Limit", strconv.FormatFloat(limit.Rate, 'g', -1, 64))
		msg := "rate limit of " + strconv.FormatFloat(limit.Rate, 'g', -1, 64) + " requests/s exceeded for " + key +
			"; retry after " + d.RetryAfter.Round(time.Millisecond).String()
		e.Status, e.Reason, e.Error = http.StatusTooManyRequests, ReasonRateLimited, msg
		writeError(w, reqID, http.StatusTooManyRequests, ReasonRateLimited, msg)
		return id, false
	}
	return id, true
}

// serveService answers one call of service s.
func (g *Gateway) serveService(w http.ResponseWriter, r *http.Request, st *state, s *service) {
	start := time.Now()
	reqID := requestID(r)
	w.Header().Set("X-Request-Id", reqID)
	e := accesslog.Entry{Time: start, RequestID: reqID, Service: s.name, Model: s.cfg.Model.Name}
	source, routeName := "", ""
	defer func() {
		e.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
		g.access.Log(e)
		g.met.requests.WithLabelValues(s.name, routeName, strconv.Itoa(e.Status), source).Inc()
		g.met.duration.WithLabelValues(s.name).Observe(time.Since(start).Seconds())
	}()
	fail := func(err error) {
		code, reason := httpapi.StatusOf(err)
		e.Status, e.Reason, e.Error = code, reason, err.Error()
		if code >= 500 {
			g.logger.Warn("request failed", "request_id", reqID, "service", s.name, "status", code, "reason", reason, "err", err)
		}
		writeError(w, reqID, code, reason, err.Error())
	}

	id, ok := g.admit(w, r, st, reqID, &e)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes))
	e.RequestBytes = int64(len(body))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			fail(infer.Errorf(infer.KindResourceExhausted, ReasonBodyTooLarge, "the request body exceeds %d bytes", g.opts.MaxBodyBytes))
			return
		}
		fail(infer.Errorf(infer.KindInvalid, ReasonInvalidJSON, "reading the request body: %v", err))
		return
	}
	vals := make([]value, len(s.fields))
	if err := s.parseBody(body, vals); err != nil {
		fail(err)
		return
	}

	rv := make(map[string]string, len(vals))
	for i := range vals {
		if vals[i].set {
			rv[s.fields[i].name] = vals[i].text
		}
	}
	target, ok := s.routes.Match(route.Request{Headers: r.Header, Values: rv})
	if !ok {
		fail(infer.Errorf(infer.KindNotFound, ReasonNoRoute, "no route of service %q matches the request", s.name))
		return
	}
	routeName = target.Route
	e.Route, e.Backend = target.Route, target.Backend
	rc := s.routeCfg[target.Route]
	version := target.Version
	if version == "" {
		version = s.cfg.Model.Version
	}
	e.Version = version
	b := st.backends[target.Backend]

	ctx, cancel := context.WithTimeout(r.Context(), rc.Timeout.Std())
	defer cancel()

	var feats *serving.Response
	if len(s.features) > 0 {
		now := g.opts.Now()
		allowed, probe := s.breaker.allow(now)
		if !allowed {
			fail(infer.Errorf(infer.KindUnavailable, ReasonFeatureUnavailable,
				"service %q: its features have been stale too often (%d stale reads within %s); the breaker lets a probe through every %s",
				s.name, s.breaker.threshold, s.breaker.window, s.breaker.probe))
			return
		}
		feats, err = g.opts.Features.GetOnlineFeatures(ctx, s.featureRequest(vals))
		if err != nil {
			if ie, ok := errors.AsType[*infer.Error](err); ok && ie.Reason == reasonFeatureViewStale {
				g.met.breakerEvents.WithLabelValues(s.name).Inc()
				if s.breaker.stale(now) {
					g.met.breakerOpen.WithLabelValues(s.name).Set(1)
					g.logger.Warn("feature breaker opened", "service", s.name, "threshold", s.breaker.threshold, "window", s.breaker.window)
				}
			}
			if ctx.Err() != nil && r.Context().Err() == nil {
				err = infer.Errorf(infer.KindTimeout, ReasonUpstreamTimeout, "service %q: the feature read did not finish within the route timeout", s.name)
			}
			fail(err)
			return
		}
		if probe && s.breaker.fresh() {
			g.met.breakerOpen.WithLabelValues(s.name).Set(0)
			g.logger.Info("feature breaker closed: features are fresh again", "service", s.name)
		}
	}
	inputs, err := s.assemble(feats, vals)
	if err != nil {
		fail(err)
		return
	}
	req := &infer.Request{ID: reqID, Model: s.cfg.Model.Name, Version: version, Inputs: inputs, Outputs: s.requested}
	if p := g.priority(st, r, id); p > 0 {
		req.Parameters = infer.Parameters{"priority": int64(p)}
	}
	resp, info, err := g.call(ctx, s, b, rc.Retries, req)
	e.Endpoint, e.Retries = info.endpoint, info.retries
	if err != nil {
		fail(err)
		return
	}
	out, src, err := g.answer(s, resp, vals, feats, reqID, target.Route, version)
	if err != nil {
		fail(err)
		return
	}
	source = src
	e.Source, e.Status, e.ResponseBytes = src, http.StatusOK, int64(len(out))
	if resp.Version != "" {
		e.Version = resp.Version
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Sluice-Route", target.Route)
	h.Set("X-Sluice-Version", e.Version)
	_, _ = w.Write(out)
}

// priority is the model priority of a request: the first matching
// priority header, else the client's configured priority.
func (g *Gateway) priority(st *state, r *http.Request, id auth.Identity) int {
	for _, ph := range st.cfg.PriorityHeaders {
		if r.Header.Get(ph.Name) == ph.Value {
			return ph.Priority
		}
	}
	return id.Priority
}

// answer builds the JSON answer from the model's response, applying the
// fallback rule when the service's predictions drift.
func (g *Gateway) answer(s *service, resp *infer.Response, vals []value, feats *serving.Response, reqID, routeName, version string) ([]byte, string, error) {
	outs := make(map[string]*infer.Tensor, len(resp.Outputs))
	for i := range resp.Outputs {
		outs[resp.Outputs[i].Name] = &resp.Outputs[i]
	}
	source := fallback.SourceModel
	var ruleValue float64
	if fb := s.fallback; fb != nil {
		watched, ok1 := outs[fb.output]
		conf, ok2 := outs[fb.confidence]
		if ok1 && ok2 {
			pred, okp := scalar(watched)
			c, okc := scalar(conf)
			if okp && okc {
				fb.monitor.Observe(g.opts.Now(), pred)
				if fb.monitor.UseRule(c, fb.below) {
					v, err := fb.rule.Eval(s.ruleVars(vals, feats))
					if err != nil {
						g.met.ruleErrors.WithLabelValues(s.name).Inc()
						g.logger.Debug("fallback rule failed; keeping the model's answer", "service", s.name, "request_id", reqID, "err", err)
					} else {
						source, ruleValue = fallback.SourceRule, v
					}
				}
			}
		}
	}
	if resp.Version != "" {
		version = resp.Version
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"request_id":`...)
	b = jsonenc.AppendString(b, reqID)
	b = append(b, `,"service":`...)
	b = jsonenc.AppendString(b, s.name)
	b = append(b, `,"route":`...)
	b = jsonenc.AppendString(b, routeName)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, s.cfg.Model.Name)
	b = append(b, `,"version":`...)
	b = jsonenc.AppendString(b, version)
	b = append(b, `,"source":`...)
	b = jsonenc.AppendString(b, source)
	b = append(b, `,"outputs":{`...)
	for i, o := range s.outputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, o.name)
		b = append(b, ':')
		if source == fallback.SourceRule && o.from == s.fallback.output {
			b = strconv.AppendFloat(b, ruleValue, 'g', -1, 64)
			continue
		}
		t, ok := outs[o.from]
		if !ok {
			return nil, "", infer.Errorf(infer.KindInternal, ReasonInvalidModelOutput, "model %q did not return output %q", s.cfg.Model.Name, o.from)
		}
		var good bool
		if b, good = appendTensorJSON(b, t); !good {
			return nil, "", infer.Errorf(infer.KindInternal, ReasonInvalidModelOutput, "model output %q (%s) cannot be written as JSON numbers", o.from, t.DataType)
		}
	}
	b = append(b, "}}\n"...)
	return b, source, nil
}

// ruleVars binds the rule's variables for one request.
func (s *service) ruleVars(vals []value, feats *serving.Response) map[string]any {
	out := make(map[string]any, len(s.fallback.vars))
	for _, v := range s.fallback.vars {
		if v.field >= 0 {
			x := &vals[v.field]
			if !x.set {
				continue // Eval reports the missing variable
			}
			out[v.name] = typed(v.typ, x.num(s.fields[v.field].kind), x.s, x.b)
			continue
		}
		fv, _ := featureCell(feats, v.col)
		if fv == nil {
			continue
		}
		t := s.featureTypes[v.col]
		var x float64
		switch t.Kind {
		case feature.KindInt32, feature.KindInt64:
			x = float64(fv.I64)
		default:
			x = fv.F64
		}
		out[v.name] = typed(v.typ, x, fv.S, fv.Bool)
	}
	return out
}

// typed converts a value to the Go type the rule declared.
func typed(t fallback.VarType, x float64, s string, b bool) any {
	switch t {
	case fallback.Int:
		return int(x)
	case fallback.String:
		return s
	case fallback.Bool:
		return b
	}
	return x
}

// writeError writes the JSON error body every gateway error uses.
func writeError(w http.ResponseWriter, reqID string, code int, reason, msg string) {
	b := make([]byte, 0, len(msg)+len(reason)+len(reqID)+48)
	b = append(b, `{"error":`...)
	b = jsonenc.AppendString(b, msg)
	b = append(b, `,"reason":`...)
	b = jsonenc.AppendString(b, reason)
	if reqID != "" {
		b = append(b, `,"request_id":`...)
		b = jsonenc.AppendString(b, reqID)
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(b) //nolint:gosec // JSON body with nosniff
}
