package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/gateway/fallback"
	"github.com/sluice-ml/sluice/internal/gateway/ratelimit"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/httpapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/release/rollout"
	"github.com/sluice-ml/sluice/internal/scrub"
	"github.com/sluice-ml/sluice/internal/telemetry"
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

// rateLimitedError is the error of a refused request; RetryAfter is when one
// would be admitted.
type rateLimitedError struct {
	err        *infer.Error
	RetryAfter time.Duration
	Limit      float64
}

func (e *rateLimitedError) Error() string { return e.err.Error() }

func (e *rateLimitedError) Unwrap() error { return e.err }

func asRateLimited(err error) (*rateLimitedError, bool) { return errors.AsType[*rateLimitedError](err) }

// admit authenticates a request and takes a rate-limit token. A refusal is
// an *infer.Error: KindUnauthenticated, or KindResourceExhausted with
// reason rate_limited wrapped in *rateLimitedError.
func (g *Gateway) admit(ctx context.Context, st *state, r *http.Request, e *accesslog.Entry) (auth.Identity, error) {
	id, aerr := st.auth.Authenticate(r)
	if aerr != nil {
		return id, aerr
	}
	e.ClientID = id.ClientID
	key, limit := "client:"+id.ClientID, st.anonLimit
	if id.Anonymous {
		key = "ip:" + clientIP(r)
	} else {
		limit = limitOf(st.clients[id.ClientID].RateLimit)
	}
	if limit.Rate <= 0 {
		return id, nil // unlimited
	}
	d, err := st.limiter.Allow(ctx, key, limit)
	if err != nil {
		// Only an invalid limit or a gone client gets here; config
		// validation rules out the first.
		return id, infer.Errorf(infer.KindUnavailable, ReasonInternal, "rate limiter: %v", err)
	}
	if !d.Allowed {
		return id, &rateLimitedError{
			err: infer.Errorf(infer.KindResourceExhausted, ReasonRateLimited,
				"rate limit of %s requests/s exceeded for %s; retry after %s",
				strconv.FormatFloat(limit.Rate, 'g', -1, 64), key, d.RetryAfter.Round(time.Millisecond)),
			RetryAfter: d.RetryAfter, Limit: limit.Rate,
		}
	}
	return id, nil
}

// answer is the result of one service call, transport-neutral.
type answer struct {
	requestID string
	service   string
	route     string
	model     string
	version   string
	source    string
	outputs   []outputValue
}

// outputValue is one named output of an answer: a scalar or an array.
type outputValue struct {
	name   string
	values []float64
	array  bool
	dt     infer.DataType
}

// serveService answers one HTTP call of service s.
func (g *Gateway) serveService(w http.ResponseWriter, r *http.Request, st *state, s *service) {
	reqID := requestID(r)
	w.Header().Set("X-Request-Id", reqID)
	// The body is read only after the caller is admitted, so
	// unauthenticated or rate-limited callers cannot make the gateway read
	// (up to MaxBodyBytes of) their bodies.
	readBody := func() ([]byte, error) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes))
		if err != nil {
			if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
				// The listener's limit (admission) may be the smaller one.
				return body, infer.Errorf(infer.KindResourceExhausted, ReasonBodyTooLarge, "the request body exceeds %d bytes", min(mbe.Limit, g.opts.MaxBodyBytes))
			}
			if errors.Is(err, admission.ErrOverloaded) {
				return body, infer.Errorf(infer.KindUnavailable, admission.ReasonOverloaded, "reading the request body: %v", err)
			}
			return body, infer.Errorf(infer.KindInvalid, ReasonInvalidJSON, "reading the request body: %v", err)
		}
		return body, nil
	}
	a, err := g.predict(r.Context(), st, s, r, reqID, readBody)
	if err != nil {
		writeHTTPError(w, reqID, err)
		return
	}
	out := a.appendJSON(make([]byte, 0, 256))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Sluice-Route", a.route)
	h.Set("X-Sluice-Version", a.version)
	_, _ = w.Write(out) //nolint:gosec // G705: a JSON body built by appendJSON (escaped strings, numbers), sent as application/json
}

// writeHTTPError writes err with its status, reason and the headers its
// kind calls for (WWW-Authenticate, Retry-After).
func writeHTTPError(w http.ResponseWriter, reqID string, err error) {
	code, reason := httpapi.StatusOf(err)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	}
	if reason == admission.ReasonOverloaded {
		w.Header().Set("Retry-After", "1") // the process's byte budget frees as requests finish
	}
	if rl, ok := asRateLimited(err); ok {
		w.Header().Set("Retry-After", ratelimit.RetryAfterHeader(rl.RetryAfter))
		w.Header().Set("X-RateLimit-Limit", strconv.FormatFloat(rl.Limit, 'g', -1, 64))
	}
	msg := err.Error()
	if code >= 500 {
		msg = scrub.Message(msg) // record's log line keeps the detail
	}
	writeError(w, reqID, code, reason, msg)
}

// record logs and counts a finished call.
func (g *Gateway) record(ctx context.Context, s *service, reqID string, start time.Time, e *accesslog.Entry, err error) {
	e.Time, e.RequestID, e.Service = start, reqID, s.name
	if e.Model == "" {
		e.Model = s.cfg.Model.Name
	}
	if err != nil {
		code, reason := httpapi.StatusOf(err)
		e.Status, e.Reason, e.Error = code, reason, err.Error()
		e.Source = ""
		if code >= 500 {
			g.logger.WarnContext(ctx, "request failed", "request_id", reqID, "service", s.name, "status", code, "reason", reason, "err", err)
		}
	} else {
		e.Status = http.StatusOK
	}
	e.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
	g.access.Log(*e)
	g.met.requests.WithLabelValues(s.name, e.Route, strconv.Itoa(e.Status), e.Source, e.ClientID).Inc()
	g.met.duration.WithLabelValues(s.name).Observe(time.Since(start).Seconds())
}

// predict runs one call of service s: admission, parsing, routing,
// features, tensors, the model and the fallback. r carries the headers and
// peer address (a gRPC call builds one from its metadata).
func (g *Gateway) predict(ctx context.Context, st *state, s *service, r *http.Request, reqID string,
	readBody func() ([]byte, error),
) (a *answer, err error) {
	start := time.Now()
	var e accesslog.Entry
	if r.Header.Get("Traceparent") != "" {
		ctx = telemetry.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx, span := tracer.Start(ctx, "gateway.predict", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("service", s.name), attribute.String("request_id", reqID)))
	e.TraceID = telemetry.TraceID(ctx)
	defer func() {
		if a != nil {
			e.Source = a.source
			span.SetAttributes(attribute.String("source", a.source))
		}
		span.SetAttributes(attribute.String("route", e.Route), attribute.String("version", e.Version))
		if err != nil {
			_, reason := httpapi.StatusOf(err)
			span.SetStatus(codes.Error, reason)
		}
		span.End()
		g.record(ctx, s, reqID, start, &e, err)
	}()
	id, err := g.admit(ctx, st, r, &e)
	if err != nil {
		return nil, err
	}
	body, err := readBody()
	e.RequestBytes = int64(len(body))
	if err != nil {
		return nil, err
	}
	vals := make([]value, len(s.fields))
	if err := s.parseBody(body, vals); err != nil {
		return nil, err
	}
	rv := make(map[string]string, len(vals))
	for i := range vals {
		if vals[i].set {
			rv[s.fields[i].name] = vals[i].text
		}
	}
	target, ok := s.routes.Match(route.Request{Headers: r.Header, Values: rv})
	if !ok {
		return nil, infer.Errorf(infer.KindNotFound, ReasonNoRoute, "no route of service %q matches the request", s.name)
	}
	e.Route, e.Backend = target.Route, target.Backend
	rc := s.routeCfg[target.Route]
	version := target.Version
	if version == "" {
		version = s.cfg.Model.Version
	}
	b := st.backends[target.Backend]
	ro, roGroup, roArm := s.rollout, "", rollout.Arm("")
	if ro != nil {
		version, roGroup, roArm = ro.ctrl.Decide(rollout.Attributes{Headers: r.Header, Values: rv, RequestID: reqID})
		if t := ro.ctrl.Target(roArm); t.Backend != "" {
			b, e.Backend = st.backends[t.Backend], t.Backend
		}
	}
	e.Version = version

	ctx, cancel := context.WithTimeout(ctx, rc.Timeout.Std())
	defer cancel()
	feats, err := g.readFeatures(ctx, s, reqID, vals)
	if err != nil {
		return nil, err
	}
	if ro != nil {
		ro.observeFeatures(roGroup, feats, start)
	}
	inputs, err := s.assemble(feats, vals)
	if err != nil {
		return nil, err
	}
	req := &infer.Request{ID: reqID, Model: s.cfg.Model.Name, Version: version, Inputs: inputs, Outputs: s.requested}
	if p := g.priority(st, r, id); p > 0 {
		req.Parameters = infer.Parameters{"priority": int64(p)}
	}
	callStart := time.Now()
	cctx, cspan := tracer.Start(ctx, "model.infer", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("model", req.Model), attribute.String("version", req.Version), attribute.String("backend", b.name)))
	resp, info, err := g.call(cctx, s, b, rc.Retries, req)
	cspan.SetAttributes(attribute.String("endpoint", info.endpoint), attribute.Int("retries", info.retries))
	if err != nil {
		_, reason := httpapi.StatusOf(err)
		cspan.SetStatus(codes.Error, reason)
	}
	cspan.End()
	callLatency := time.Since(callStart)
	e.Endpoint, e.Retries = info.endpoint, info.retries
	if ro != nil {
		o := rollout.Outcome{Status: http.StatusOK, Latency: callLatency}
		if err != nil {
			o.Status, _ = httpapi.StatusOf(err)
		} else if c, ok := outputScalar(resp, ro.confidence); ok {
			o.Confidence, o.HasConfidence = c, true
		}
		ro.ctrl.Observe(roArm, roGroup, o)
	}
	if err != nil {
		return nil, err
	}
	if s.drift != nil {
		s.drift.observe(feats, resp, start)
	}
	a, err = g.answer(s, resp, vals, feats, reqID, target.Route, version)
	if err != nil {
		return nil, err
	}
	e.Version = a.version
	for i := range a.outputs {
		if o := &a.outputs[i]; len(o.values) > 0 {
			g.met.predictions.WithLabelValues(s.name, o.name).Observe(o.values[0])
		}
	}
	g.maybeMirror(st, s, r, reqID, start, vals, feats, req, resp, a, callLatency)
	return a, nil
}

// tracer names the gateway's spans.
var tracer = telemetry.Tracer("github.com/sluice-ml/sluice/internal/gateway")

// outputScalar returns element 0 of the named output of resp.
func outputScalar(resp *infer.Response, name string) (float64, bool) {
	for i := range resp.Outputs {
		if resp.Outputs[i].Name == name {
			return scalar(&resp.Outputs[i])
		}
	}
	return 0, false
}

// readFeatures reads the service's features for one request row, through
// the feature breaker; nil when the service reads none.
func (g *Gateway) readFeatures(ctx context.Context, s *service, reqID string, vals []value) (*serving.Response, error) {
	if len(s.features) == 0 {
		return nil, nil
	}
	now := g.opts.Now()
	allowed, probe := s.breaker.allow(now)
	if !allowed {
		return nil, infer.Errorf(infer.KindUnavailable, ReasonFeatureUnavailable,
			"service %q: its features were stale %d times within %s; the breaker lets a probe through every %s",
			s.name, s.breaker.threshold, s.breaker.window, s.breaker.probe)
	}
	fctx, fspan := tracer.Start(ctx, "feature.read", trace.WithAttributes(attribute.Int("features", len(s.features))))
	feats, err := g.opts.Features.GetOnlineFeatures(fctx, s.featureRequest(vals))
	if err != nil {
		_, reason := httpapi.StatusOf(err)
		fspan.SetStatus(codes.Error, reason)
	}
	fspan.End()
	if err != nil {
		if ie, ok := errors.AsType[*infer.Error](err); ok && ie.Reason == reasonFeatureViewStale {
			g.met.breakerEvents.WithLabelValues(s.name).Inc()
			if s.breaker.stale(now) {
				g.met.breakerOpen.WithLabelValues(s.name).Set(1)
				g.logger.Warn("feature breaker opened", "service", s.name, "threshold", s.breaker.threshold, "window", s.breaker.window)
			}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, infer.Errorf(infer.KindTimeout, ReasonUpstreamTimeout, "service %q: the feature read did not finish within the route timeout", s.name)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err() // the client went away
		}
		return nil, g.featureError(ctx, s, reqID, err)
	}
	if probe && s.breaker.fresh() {
		g.met.breakerOpen.WithLabelValues(s.name).Set(0)
		g.logger.Info("feature breaker closed: features are fresh again", "service", s.name)
	}
	return feats, nil
}

// featureError is what the client is told about a failed feature read.
// The feature server's own words about the request or the features (an
// invalid entity value, a stale view) pass through. A failure of the
// store or of the feature server itself becomes a generic message: its
// cause names internal addresses and socket errors ("read tcp
// 10.0.0.5:41294->10.0.0.7:6379: i/o timeout"), which go to the log line,
// with the request id, instead.
func (g *Gateway) featureError(ctx context.Context, s *service, reqID string, err error) error {
	ie, ok := errors.AsType[*infer.Error](err)
	storeDown := errors.Is(err, online.ErrUnavailable) || (ok && ie.Reason == reasonOnlineStoreUnavailble)
	internal := !ok || ie.Kind == infer.KindInternal
	if !storeDown && !internal && ie.Err == nil {
		return err
	}
	g.logger.WarnContext(ctx, "feature read failed", "request_id", reqID, "service", s.name, "err", err)
	switch {
	case storeDown:
		return infer.Errorf(infer.KindUnavailable, reasonOnlineStoreUnavailble, "service %q: online store unavailable", s.name)
	case internal:
		return infer.Errorf(infer.KindInternal, ReasonInternal, "service %q: the feature read failed", s.name)
	default:
		return &infer.Error{Kind: ie.Kind, Reason: ie.Reason, Msg: fmt.Sprintf("service %q: %s", s.name, ie.Msg)}
	}
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

// answer builds the answer from the model's response, applying the
// fallback rule when the service's predictions drift.
func (g *Gateway) answer(s *service, resp *infer.Response, vals []value, feats *serving.Response, reqID, routeName, version string) (*answer, error) {
	outs := make(map[string]*infer.Tensor, len(resp.Outputs))
	for i := range resp.Outputs {
		outs[resp.Outputs[i].Name] = &resp.Outputs[i]
	}
	a := &answer{
		requestID: reqID, service: s.name, route: routeName, model: s.cfg.Model.Name, version: version,
		source: fallback.SourceModel, outputs: make([]outputValue, 0, len(s.outputs)),
	}
	if resp.Version != "" {
		a.version = resp.Version
	}
	var ruleValue float64
	if fb := s.fallback; fb != nil {
		watched, ok1 := outs[fb.output]
		conf, ok2 := outs[fb.confidence]
		if ok1 && ok2 {
			pred, okp := scalar(watched)
			c, okc := scalar(conf)
			if okp && okc {
				fb.monitor.Observe(g.opts.Now(), pred)
				use := fb.monitor.UseRule(c, fb.below)
				if !use && s.drift != nil && s.drift.cfg.FeedFallback && s.drift.outputDrifting(fb.output) {
					// The drift watch says the output moved: low-confidence
					// answers get the rule too.
					use = fallback.Decide(c, true, fb.below)
				}
				if use {
					v, err := fb.rule.Eval(s.ruleVars(vals, feats))
					if err != nil {
						g.met.ruleErrors.WithLabelValues(s.name).Inc()
						g.logger.Debug("fallback rule failed; keeping the model's answer", "service", s.name, "request_id", reqID, "err", err)
					} else {
						a.source, ruleValue = fallback.SourceRule, v
					}
				}
			}
		}
	}
	for _, o := range s.outputs {
		if a.source == fallback.SourceRule && o.from == s.fallback.output {
			a.outputs = append(a.outputs, outputValue{name: o.name, values: []float64{ruleValue}, dt: infer.FP64})
			continue
		}
		t, ok := outs[o.from]
		if !ok {
			return nil, infer.Errorf(infer.KindInternal, ReasonInvalidModelOutput, "model %q did not return output %q", s.cfg.Model.Name, o.from)
		}
		ov, ok := tensorValues(o.name, t)
		if !ok {
			return nil, infer.Errorf(infer.KindInternal, ReasonInvalidModelOutput, "model output %q (%s) cannot be written as numbers", o.from, t.DataType)
		}
		a.outputs = append(a.outputs, ov)
	}
	return a, nil
}

// appendJSON appends the answer's JSON body.
func (a *answer) appendJSON(b []byte) []byte {
	b = append(b, `{"request_id":`...)
	b = jsonenc.AppendString(b, a.requestID)
	b = append(b, `,"service":`...)
	b = jsonenc.AppendString(b, a.service)
	b = append(b, `,"route":`...)
	b = jsonenc.AppendString(b, a.route)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, a.model)
	b = append(b, `,"version":`...)
	b = jsonenc.AppendString(b, a.version)
	b = append(b, `,"source":`...)
	b = jsonenc.AppendString(b, a.source)
	b = append(b, `,"outputs":{`...)
	for i := range a.outputs {
		o := &a.outputs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, o.name)
		b = append(b, ':')
		if o.array {
			b = append(b, '[')
		}
		for j, x := range o.values {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, x, o.dt)
		}
		if o.array {
			b = append(b, ']')
		}
	}
	return append(b, "}}\n"...)
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
	default:
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
