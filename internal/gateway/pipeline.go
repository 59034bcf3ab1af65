package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/gateway/fallback"
	"github.com/sluice-ml/sluice/internal/gateway/ratelimit"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// This file is the prediction pipeline, top to bottom: Predict takes a
// Call that an edge (http.go, grpc.go) decoded and runs the steps of
// runSteps in order. Each step is a method of its own below; the ports it
// calls through (modelClient, FeatureReader, release.Hook) are resolved
// when the configuration is loaded, so no step looks at a kind or a name
// to decide what to call.

// Call is one prediction request as an edge received it: who calls, which
// service, and the request's values, decoded only once the caller is
// admitted.
type Call struct {
	// Service is the service's configured name.
	Service string
	// RequestID names the call in the answer, the access log and the
	// model request. Empty: X-Request-Id from Header when it is at most
	// 128 printable ASCII characters, else a random one.
	RequestID string
	// Header holds the request's headers, or its gRPC metadata, with
	// canonical keys: credentials, routing and priority headers, the
	// trace context. Predict only reads it.
	Header http.Header
	// Peer is the caller's address, host:port or host: the key of an
	// anonymous caller's rate limit.
	Peer string
	// TLS is the caller's verified TLS state; nil over plaintext.
	TLS *tls.ConnectionState
	// Body holds the request values: JSONBody, or an edge's own form.
	Body Body
	// Traced, when set, is called once with the context of the call's
	// span, before the pipeline runs, so that the edge can return the
	// trace id in its response headers. Not called when the call has no
	// trace (tracing off and no traceparent from the caller).
	Traced func(ctx context.Context)
	// Respond, when set, is called once the answer (a nil a) or the error
	// is known and before the call is logged: the edge writes its
	// response there and returns the bytes it wrote, the access log's
	// response_bytes.
	Respond func(a *Answer, err error) int64
}

// Body is the request values of a call in the form an edge received
// them. Predict decodes it once, after authentication and the rate limit,
// so an unadmitted caller's body is never read.
type Body interface {
	// decode reads the values of s's fields into vals (one per field) and
	// returns the size of the request as received, for the access log.
	decode(s *service, vals []value) (int64, error)
}

// JSONBody is a flat JSON object of entity keys and request fields, the
// body of POST /v1/services/<name>:predict.
type JSONBody []byte

func (b JSONBody) decode(s *service, vals []value) (int64, error) {
	return int64(len(b)), s.parseBody(b, vals)
}

// Answer is one prediction, whichever protocol carries it.
type Answer = release.Answer

// Output is one named output of an answer: a scalar, or an array.
type Output = release.Output

// exchange is one call on its way through the pipeline: what each step
// found, for the steps after it, the release hooks and the access log.
// It lives as long as the call, except that a shadow job keeps what it
// records.
type exchange struct {
	st    *state
	s     *service
	call  *Call
	reqID string
	start time.Time
	log   accesslog.Entry

	id      auth.Identity
	vals    []value
	values  map[string]string // vals as routing sees them, by field name
	target  route.Target
	rc      *config.Route
	b       *backend
	model   string // the route's model, else the service's
	version string

	feats       *serving.Response
	req         *infer.Request
	resp        *infer.Response
	callLatency time.Duration
	answer      Answer

	// the traffic group and arm a steering release hook put the call in
	group, arm string
}

// Predict runs one call of the service c.Service: authentication, rate
// limit, decoding, routing, features, tensors, the model with retries, the
// fallback and the release hooks. Its errors are *apierr.Error values (a
// rate-limited one also matches asRateLimited) that package apierr maps to
// HTTP and gRPC statuses.
func (g *Gateway) Predict(ctx context.Context, c Call) (Answer, error) {
	st := g.state.Load()
	s, ok := st.byName[c.Service]
	if !ok {
		return Answer{}, apierr.Errorf(apierr.KindNotFound, ReasonNotFound, "no service named %q", c.Service)
	}
	if c.RequestID == "" {
		c.RequestID = requestID(c.Header)
	}
	return g.predict(ctx, st, s, &c)
}

// predict is Predict once the edge found the service in st: it traces
// and records the call around runSteps.
func (g *Gateway) predict(ctx context.Context, st *state, s *service, c *Call) (Answer, error) {
	x := &exchange{st: st, s: s, call: c, reqID: c.RequestID, start: time.Now()}
	if len(c.Header["Traceparent"]) > 0 {
		ctx = telemetry.Propagator.Extract(ctx, propagation.HeaderCarrier(c.Header))
	}
	fromCaller := trace.SpanContextFromContext(ctx).IsValid()
	// The span's options are the service's, built once; attributes that
	// change per call are only set on a span that records.
	ctx, span := tracer.Start(ctx, "gateway.predict", s.spanOpts...)
	traced := span.IsRecording()
	if traced {
		span.SetAttributes(attribute.String("request_id", x.reqID))
	}
	x.log.TraceID = telemetry.TraceID(ctx)
	// The answer names the trace when there is one to find: a sampled
	// span, or the caller's own trace. An unsampled span's id leads
	// nowhere in the tracing backend.
	if c.Traced != nil && x.log.TraceID != "" && (fromCaller || span.SpanContext().IsSampled()) {
		c.Traced(ctx)
	}
	err := g.runSteps(ctx, x)
	if err == nil {
		x.log.Source = x.answer.Source
	}
	if traced {
		if err == nil {
			span.SetAttributes(attribute.String("source", x.answer.Source))
		}
		span.SetAttributes(attribute.String("route", x.log.Route), attribute.String("version", x.log.Version))
		if err != nil {
			_, reason := apierr.HTTPStatus(err)
			span.SetStatus(codes.Error, reason)
		}
	}
	span.End()
	if c.Respond != nil {
		var a *Answer
		if err == nil {
			a = &x.answer
		}
		x.log.ResponseBytes = c.Respond(a, err)
	}
	g.record(ctx, x, err)
	if err != nil {
		return Answer{}, err
	}
	return x.answer, nil
}

// runSteps runs one call through the pipeline's steps, in order.
func (g *Gateway) runSteps(ctx context.Context, x *exchange) error {
	if err := g.admitCall(ctx, x); err != nil {
		return err
	}
	if err := g.decode(x); err != nil {
		return err
	}
	if err := g.route(x); err != nil {
		return err
	}
	// The route's timeout bounds everything that leaves the process.
	ctx, cancel := context.WithTimeout(ctx, x.rc.Timeout.Std())
	defer cancel()
	if err := g.readFeatures(ctx, x); err != nil {
		return err
	}
	if err := g.buildRequest(x); err != nil {
		return err
	}
	if err := g.callModel(ctx, x); err != nil {
		return g.upstreamFallback(x, err)
	}
	if err := g.buildAnswer(x); err != nil {
		return err
	}
	for _, h := range x.s.hooks {
		h.Answered(ctx, x)
	}
	return nil
}

// admitCall authenticates the caller and takes a rate-limit token.
func (g *Gateway) admitCall(ctx context.Context, x *exchange) error {
	id, err := g.admit(ctx, x.st, x.call.Header, x.call.Peer, x.call.TLS, &x.log)
	x.id = id
	return err
}

// decode reads the request values.
func (g *Gateway) decode(x *exchange) error {
	x.vals = make([]value, len(x.s.fields))
	n, err := x.call.Body.decode(x.s, x.vals)
	x.log.RequestBytes = n
	return err
}

// route picks the route, the backend and the model version, then lets
// the release hooks steer the call.
func (g *Gateway) route(x *exchange) error {
	s := x.s
	if s.routesByValue {
		x.values = s.routeValues(x.vals)
	}
	target, ok := s.routes.Match(route.Request{Headers: x.call.Header, Values: x.values})
	if !ok {
		return apierr.Errorf(apierr.KindNotFound, ReasonNoRoute, "no route of service %q matches the request", s.name)
	}
	x.target, x.rc = target, s.routeCfg[target.Route]
	x.log.Route, x.log.Backend = target.Route, target.Backend
	x.model = cmp.Or(target.Model, s.cfg.Model.Name)
	x.version = target.Version
	if x.version == "" {
		x.version = s.cfg.Model.Version
	}
	x.b = x.st.backends[target.Backend]
	for _, h := range s.hooks {
		h.Steer(x)
	}
	x.log.Version = x.version
	x.log.Model = x.model
	return nil
}

// readFeatures reads the service's features for the call's entities,
// through the feature breaker; nothing when the service reads none.
func (g *Gateway) readFeatures(ctx context.Context, x *exchange) error {
	if len(x.s.features) == 0 {
		return nil
	}
	feats, err := g.featureRead(ctx, x.s, x.reqID, x.vals)
	if err != nil {
		return err
	}
	x.feats = feats
	for _, h := range x.s.hooks {
		h.FeaturesRead(x)
	}
	return nil
}

// buildRequest assembles the model's input tensors from the features and
// the request values, and the model request.
func (g *Gateway) buildRequest(x *exchange) error {
	inputs, err := x.s.assemble(x.feats, x.vals)
	if err != nil {
		return err
	}
	x.req = &infer.Request{ID: x.reqID, Model: x.model, Version: x.version, Inputs: inputs, Outputs: x.s.requested}
	if p := g.priority(x.st, x.call.Header, x.id); p > 0 {
		x.req.Parameters = infer.Parameters{"priority": int64(p)}
	}
	return nil
}

// callModel sends the request to the backend with the route's retry
// policy, then tells the release hooks how it went.
func (g *Gateway) callModel(ctx context.Context, x *exchange) error {
	callStart := time.Now()
	ctx, span := tracer.Start(ctx, "model.infer", clientSpan...)
	traced := span.IsRecording()
	if traced {
		span.SetAttributes(attribute.String("model", x.req.Model), attribute.String("version", x.req.Version), attribute.String("backend", x.b.name))
	}
	resp, info, err := g.call(ctx, x.s, x.b, x.rc.Retries, x.req)
	if traced {
		span.SetAttributes(attribute.String("endpoint", info.endpoint), attribute.Int("retries", info.retries))
		if err != nil {
			_, reason := apierr.HTTPStatus(err)
			span.SetStatus(codes.Error, reason)
		}
	}
	span.End()
	x.callLatency = time.Since(callStart)
	x.log.Endpoint, x.log.Retries = info.endpoint, info.retries
	x.resp = resp
	for _, h := range x.s.hooks {
		h.ModelDone(x, err)
	}
	return err
}

// buildAnswer turns the model's response into the answer, with the
// fallback rule's value when the service's predictions drift.
func (g *Gateway) buildAnswer(x *exchange) error {
	a, err := g.answerOf(x.s, x.resp, x.vals, x.feats, x.reqID, x.target.Route, x.model, x.version)
	if err != nil {
		return err
	}
	x.answer = a
	x.log.Version = a.Version
	for i := range a.Outputs {
		if o := &a.Outputs[i]; len(o.Values) > 0 {
			x.s.predictions[i].Observe(o.Values[0])
		}
	}
	return nil
}

// upstreamCauses are the model-call failures fallback.on_upstream_failure
// answers: the model could not be reached, not a model that refused the
// request (a 4xx) or answered wrongly.
var upstreamCauses = []string{ReasonUpstreamUnavailable, ReasonNoHealthyUpstream, ReasonUpstreamTimeout}

// upstreamFallback answers a failed model call with the service's rule
// when fallback.on_upstream_failure is on and the model could not be
// reached; otherwise, or when the rule cannot be evaluated (a feature or
// field it needs is missing), it returns err, saying why the rule did not
// answer.
func (g *Gateway) upstreamFallback(x *exchange, err error) error {
	fb := x.s.fallback
	if fb == nil || !fb.onUpstream {
		return err
	}
	_, cause := apierr.HTTPStatus(err)
	if !slices.Contains(upstreamCauses, cause) {
		return err
	}
	v, rerr := fb.rule.Eval(x.s.ruleVars(x.vals, x.feats))
	if rerr != nil {
		g.met.ruleErrors.WithLabelValues(x.s.name).Inc()
		ie, _ := errors.AsType[*apierr.Error](err)
		kind := apierr.KindUnavailable
		if ie != nil {
			kind = ie.Kind
		}
		return apierr.Errorf(kind, cause, "%v; the fallback rule cannot answer: %v", err, rerr)
	}
	a := Answer{
		RequestID: x.reqID, Service: x.s.name, Route: x.target.Route, Model: x.model, Version: x.version,
		Source: fallback.SourceRule, Reason: cause,
	}
	for _, o := range x.s.outputs {
		if o.from == fb.output {
			a.Outputs = append(a.Outputs, Output{Name: o.name, Values: []float64{v}, DataType: infer.FP64})
		}
	}
	fb.monitor.CountAnswer(cause)
	x.answer = a
	x.log.FallbackCause = cause
	return nil
}

// record logs and counts a finished call.
func (g *Gateway) record(ctx context.Context, x *exchange, err error) {
	e, s := &x.log, x.s
	e.Time, e.RequestID, e.Service = x.start, x.reqID, s.name
	if e.Model == "" {
		e.Model = s.cfg.Model.Name
	}
	if err != nil {
		code, reason := apierr.HTTPStatus(err)
		e.Status, e.Reason, e.Error = code, reason, err.Error()
		e.Source = ""
		if code >= 500 {
			g.logger.WarnContext(ctx, "request failed", "request_id", x.reqID, "service", s.name, "status", code, "reason", reason, "err", err)
		}
	} else {
		e.Status = http.StatusOK
	}
	elapsed := time.Since(x.start)
	e.LatencyMS = float64(elapsed.Microseconds()) / 1000
	g.access.Log(*e)
	g.met.requests.WithLabelValues(s.name, e.Route, strconv.Itoa(e.Status), e.Source, e.ClientID, reasonLabel(e.Status, e.Reason)).Inc()
	s.duration.Observe(elapsed.Seconds())
}

// tracer names the gateway's spans.
var tracer = telemetry.Tracer("github.com/sluice-ml/sluice/internal/gateway")

// clientSpan are the options of a span around an outbound call.
var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// The steps' work, in the order runSteps calls them; the retries of the model
// call are in invoke.go, the tensors in request.go.

// admit authenticates a caller and takes a rate-limit token. A refusal is
// an *apierr.Error: KindUnauthenticated, or KindResourceExhausted with
// reason rate_limited wrapped in *rateLimitedError. The proxy admits its
// requests with it too.
func (g *Gateway) admit(ctx context.Context, st *state, h http.Header, peer string, ts *tls.ConnectionState, e *accesslog.Entry) (auth.Identity, error) {
	id, aerr := st.auth.Identify(h, ts)
	if aerr != nil {
		return id, aerr
	}
	e.ClientID = id.ClientID
	var key string
	limit := st.anonLimit
	if id.Anonymous {
		key = "ip:" + clientIP(peer)
	} else {
		c := st.clients[id.ClientID]
		key, limit = c.key, c.limit
	}
	if limit.Rate <= 0 {
		return id, nil // unlimited
	}
	d, err := st.limiter.Allow(ctx, key, limit)
	if err != nil {
		// Only an invalid limit or a gone client gets here; config
		// validation rules out the first.
		return id, apierr.Errorf(apierr.KindUnavailable, ReasonInternal, "rate limiter: %v", err)
	}
	if !d.Allowed {
		return id, &rateLimitedError{
			err: apierr.Errorf(apierr.KindResourceExhausted, ReasonRateLimited,
				"rate limit of %s requests/s exceeded for %s; retry after %s",
				strconv.FormatFloat(limit.Rate, 'g', -1, 64), key, d.RetryAfter.Round(time.Millisecond)),
			RetryAfter: d.RetryAfter, Limit: limit.Rate,
		}
	}
	if !id.Anonymous {
		if use := st.clients[id.ClientID].use; use != nil {
			use.add(g.opts.Now())
		}
	}
	return id, nil
}

// clientIP is the host of peer, the key of anonymous rate limits.
// X-Forwarded-For is not trusted: a client could pick its own bucket.
func clientIP(peer string) string {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return peer
	}
	return host
}

// rateLimitedError is the error of a refused request; RetryAfter is when
// one would be admitted.
type rateLimitedError struct {
	err        *apierr.Error
	RetryAfter time.Duration
	Limit      float64
}

func (e *rateLimitedError) Error() string { return e.err.Error() }

func (e *rateLimitedError) Unwrap() error { return e.err }

func asRateLimited(err error) (*rateLimitedError, bool) { return errors.AsType[*rateLimitedError](err) }

// retryAfter is the Retry-After value of a refused request.
func retryAfter(rl *rateLimitedError) string { return ratelimit.RetryAfterHeader(rl.RetryAfter) }

// featureRead reads the service's features for one request row, through
// the feature breaker.
func (g *Gateway) featureRead(ctx context.Context, s *service, reqID string, vals []value) (*serving.Response, error) {
	now := g.opts.Now()
	allowed, probe := s.breaker.allow(now)
	if !allowed {
		return nil, apierr.Errorf(apierr.KindUnavailable, ReasonFeatureUnavailable,
			"service %q: its features were stale %d times within %s; the breaker lets a probe through every %s",
			s.name, s.breaker.threshold, s.breaker.window, s.breaker.probe)
	}
	fctx, fspan := tracer.Start(ctx, "feature.read", trace.WithAttributes(attribute.Int("features", len(s.features))))
	feats, err := g.opts.Features.GetOnlineFeatures(fctx, s.featureRequest(vals))
	if err != nil {
		_, reason := apierr.HTTPStatus(err)
		fspan.SetStatus(codes.Error, reason)
	}
	fspan.End()
	if err != nil {
		if ie, ok := errors.AsType[*apierr.Error](err); ok && ie.Reason == reasonFeatureViewStale {
			g.met.breakerEvents.WithLabelValues(s.name).Inc()
			if s.breaker.stale(now) {
				g.met.breakerOpen.WithLabelValues(s.name).Set(1)
				g.logger.Warn("feature breaker opened", "service", s.name, "threshold", s.breaker.threshold, "window", s.breaker.window)
			}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, apierr.Errorf(apierr.KindTimeout, ReasonUpstreamTimeout, "service %q: the feature read did not finish within the route timeout", s.name)
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
	ie, ok := errors.AsType[*apierr.Error](err)
	storeDown := errors.Is(err, online.ErrUnavailable) || (ok && ie.Reason == reasonOnlineStoreUnavailble)
	internal := !ok || ie.Kind == apierr.KindInternal
	if !storeDown && !internal && ie.Err == nil {
		return err
	}
	g.logger.WarnContext(ctx, "feature read failed", "request_id", reqID, "service", s.name, "err", err)
	switch {
	case storeDown:
		return apierr.Errorf(apierr.KindUnavailable, reasonOnlineStoreUnavailble, "service %q: online store unavailable", s.name)
	case internal:
		return apierr.Errorf(apierr.KindInternal, ReasonInternal, "service %q: the feature read failed", s.name)
	default:
		return &apierr.Error{Kind: ie.Kind, Reason: ie.Reason, Msg: fmt.Sprintf("service %q: %s", s.name, ie.Msg)}
	}
}

// priority is the model priority of a request: the first matching
// priority header, else the client's configured priority.
func (g *Gateway) priority(st *state, h http.Header, id auth.Identity) int {
	for _, ph := range st.cfg.PriorityHeaders {
		if h.Get(ph.Name) == ph.Value {
			return ph.Priority
		}
	}
	return id.Priority
}

// answerOf builds the answer from the model's response, applying the
// fallback rule when the service's predictions drift.
func (g *Gateway) answerOf(s *service, resp *infer.Response, vals []value, feats *serving.Response, reqID, routeName, model, version string) (Answer, error) {
	a := Answer{
		RequestID: reqID, Service: s.name, Route: routeName, Model: model, Version: version,
		Source: fallback.SourceModel, Outputs: make([]Output, 0, len(s.outputs)),
	}
	if resp.Version != "" {
		a.Version = resp.Version
	}
	var ruleValue float64
	if fb := s.fallback; fb != nil {
		watched, ok1 := outputTensor(resp, fb.output)
		conf, ok2 := outputTensor(resp, fb.confidence)
		if ok1 && ok2 {
			pred, okp := scalar(watched)
			c, okc := scalar(conf)
			if okp && okc {
				fb.monitor.Observe(g.opts.Now(), pred)
				use := fb.monitor.UseRule(c, fb.below)
				if !use && s.drift != nil && s.drift.FeedsFallback(fb.output) {
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
						a.Source, ruleValue = fallback.SourceRule, v
					}
				}
			}
		}
	}
	for _, o := range s.outputs {
		if a.Source == fallback.SourceRule && o.from == s.fallback.output {
			a.Outputs = append(a.Outputs, Output{Name: o.name, Values: []float64{ruleValue}, DataType: infer.FP64})
			continue
		}
		t, ok := outputTensor(resp, o.from)
		if !ok {
			return Answer{}, apierr.Errorf(apierr.KindInternal, ReasonInvalidModelOutput, "model %q did not return output %q", model, o.from)
		}
		ov, ok := tensorValues(o.name, t)
		if !ok {
			return Answer{}, apierr.Errorf(apierr.KindInternal, ReasonInvalidModelOutput, "model output %q (%s) cannot be written as numbers", o.from, t.DataType)
		}
		a.Outputs = append(a.Outputs, ov)
	}
	return a, nil
}

// outputTensor returns the named output of resp, the last one when a
// name repeats. A model answers a few outputs: a scan beats a map.
func outputTensor(resp *infer.Response, name string) (*infer.Tensor, bool) {
	for i := len(resp.Outputs) - 1; i >= 0; i-- {
		if resp.Outputs[i].Name == name {
			return &resp.Outputs[i], true
		}
	}
	return nil, false
}

// outputScalar returns element 0 of the first output of resp named name.
func outputScalar(resp *infer.Response, name string) (float64, bool) {
	for i := range resp.Outputs {
		if resp.Outputs[i].Name == name {
			return scalar(&resp.Outputs[i])
		}
	}
	return 0, false
}

// ruleVars binds the fallback rule's variables for one request.
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
