package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
	"github.com/sluice-ml/sluice/internal/infer"
)

// callInfo is what the retry loop tells the access log.
type callInfo struct {
	endpoint string
	retries  int
}

// tryFailure classifies a failed try for retry_on and outlier detection.
type tryFailure struct {
	status  int        // HTTP status equivalent (5xx, 429, 4xx)
	code    codes.Code // gRPC code; OK when the try was not gRPC
	connect bool       // no connection was established
	reset   bool       // the connection failed after the request left
	refused bool       // an HTTP/2 upstream refused the stream (RST_STREAM REFUSED_STREAM)
	timeout bool       // the per-try timeout fired
}

// conditions are the retry_on names that match f.
func (f tryFailure) matches(on string) bool {
	switch on {
	case "5xx":
		return f.status >= 500 || f.connect || f.reset || f.timeout
	case "gateway-error":
		return f.status == 502 || f.status == 503 || f.status == 504 || f.connect || f.reset || f.timeout
	case "reset":
		return f.reset
	case "connect-failure":
		return f.connect
	case "retriable-4xx":
		return f.status == http.StatusConflict
	case "refused-stream":
		// gRPC reports a refused stream as UNAVAILABLE; over HTTP/2 the
		// transport's error names it.
		return f.refused || f.code == codes.Unavailable
	case "unavailable":
		return f.code == codes.Unavailable || (f.code == codes.OK && f.status == 503)
	case "resource-exhausted":
		return f.code == codes.ResourceExhausted || (f.code == codes.OK && f.status == 429)
	case "cancelled":
		return f.code == codes.Canceled
	case "deadline-exceeded":
		return f.code == codes.DeadlineExceeded || f.timeout
	}
	return false
}

// retryReason returns the first retry_on condition of p that f matches.
func retryReason(p *config.RetryPolicy, f tryFailure) (string, bool) {
	for _, on := range p.RetryOn {
		if f.matches(on) {
			return on, true
		}
	}
	return "", false
}

// classify turns a try's error into an outcome for outlier detection and a
// failure for retry_on. perTryExpired says the try's own deadline passed
// while the request's did not.
func classify(err error, latency time.Duration, perTryExpired bool) (upstream.Outcome, tryFailure) {
	o := upstream.Outcome{Latency: latency}
	var f tryFailure
	if perTryExpired {
		f.timeout, f.status, f.code = true, http.StatusGatewayTimeout, codes.DeadlineExceeded
		o.Err = err
		return o, f
	}
	if st, ok := errors.AsType[interface {
		error
		GRPCStatus() *status.Status
	}](err); ok {
		f.code = st.GRPCStatus().Code()
		o.GRPCCode = int(f.code)
		f.status, _ = apierr.HTTPStatus(err)
		if cf, ok := errors.AsType[interface {
			error
			ConnectFailure() bool
		}](err); ok && cf.ConnectFailure() {
			f.connect = true
			o.Err = err
		} else if f.code == codes.Unavailable && !hasServerReason(err) {
			// UNAVAILABLE without the server's own reason: the transport
			// broke after the request left (Envoy's reset).
			f.reset = true
		}
		return o, f
	}
	f.status, _ = apierr.HTTPStatus(err)
	o.Status = f.status
	f.refused = err != nil && strings.Contains(err.Error(), "REFUSED_STREAM")
	return o, f
}

// hasServerReason reports whether a remote error carries a reason the
// server itself set (a Sluice server refusing, not a broken transport).
func hasServerReason(err error) bool {
	ie, ok := errors.AsType[*apierr.Error](err)
	return ok && ie.Reason != "" && ie.Reason != "upstream_unavailable"
}

// retrier is one request's retry state on one backend: the endpoints
// tried, whether it holds a retry of the backend's budget, and how many
// retries it made.
type retrier struct {
	g        *Gateway
	service  string
	b        *backend
	rp       *config.RetryPolicy
	tried    []string
	retrying bool
	retries  int
}

// newRetrier counts a request in flight on b until close.
func (g *Gateway) newRetrier(service string, b *backend, rp *config.RetryPolicy) *retrier {
	b.budget.active.Add(1)
	return &retrier{g: g, service: service, b: b, rp: rp}
}

func (r *retrier) close() {
	r.b.budget.active.Add(-1)
	if r.retrying {
		r.b.budget.doneRetry()
	}
}

// pick leases an endpoint not tried yet, while another exists.
func (r *retrier) pick() (*upstream.Endpoint, error) {
	ep, err := r.b.set.Pick(r.tried...)
	if err != nil {
		return nil, apierr.Errorf(apierr.KindUnavailable, ReasonNoHealthyUpstream, "backend %q has no endpoint to send to: %v", r.b.name, err)
	}
	return ep, nil
}

// tryContext bounds one try by the per-try timeout.
func (r *retrier) tryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.rp != nil && r.rp.PerTryTimeout > 0 {
		return context.WithTimeout(ctx, r.rp.PerTryTimeout.Std())
	}
	return ctx, func() {}
}

// again decides whether to retry after try number attempt (0-based) failed
// on addr with f: the policy has retries left, f matches retry_on and the
// budget allows. It then waits the back-off and reports true; false means
// the request stops with the last failure (or, when ctx ended during the
// back-off, with a timeout).
func (r *retrier) again(ctx context.Context, attempt int, addr string, f tryFailure) bool {
	if r.rp == nil || attempt >= r.rp.NumRetries || ctx.Err() != nil {
		return false
	}
	reason, ok := retryReason(r.rp, f)
	if !ok {
		return false
	}
	if !r.retrying {
		if !r.b.budget.tryRetry(r.rp.Budget.Percent, r.rp.Budget.MinConcurrency) {
			r.g.met.budgetExceeded.WithLabelValues(r.service).Inc()
			return false
		}
		r.retrying = true
	}
	if !slices.Contains(r.tried, addr) {
		r.tried = append(r.tried, addr)
	}
	r.g.met.retries.WithLabelValues(r.service, r.b.name, reason).Inc()
	r.retries++
	t := time.NewTimer(backoff(attempt + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// call sends req to the route's backend, retrying as the route's policy
// allows: never to an endpoint already tried while another exists, within
// the backend's retry budget, with jittered back-off, and all within ctx
// (which carries the route timeout).
func (g *Gateway) call(ctx context.Context, s *service, b *backend, rp *config.RetryPolicy, req *infer.Request) (*infer.Response, callInfo, error) {
	var info callInfo
	r := g.newRetrier(s.name, b, rp)
	defer r.close()
	for attempt := 0; ; attempt++ {
		ep, err := r.pick()
		if err != nil {
			return nil, info, err
		}
		info.endpoint = ep.Addr
		tctx, cancel := r.tryContext(ctx)
		start := time.Now()
		resp, err := b.client.infer(tctx, ep.Addr, req)
		perTryExpired := err != nil && tctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
			ep.Done(upstream.Outcome{Latency: time.Since(start)})
			info.retries = r.retries
			return resp, info, nil
		}
		if ctx.Err() != nil {
			// The request itself timed out or went away: the endpoint is
			// charged only when the route timeout fired while it worked.
			info.retries = r.retries
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				ep.Done(upstream.Outcome{Err: ctx.Err(), Latency: time.Since(start)})
				return nil, info, apierr.Errorf(apierr.KindTimeout, ReasonUpstreamTimeout,
					"model %q on backend %q did not answer within the route timeout (%d tries)", req.Model, b.name, attempt+1)
			}
			ep.Done(upstream.Outcome{Latency: time.Since(start)})
			return nil, info, ctx.Err()
		}
		outcome, f := classify(err, time.Since(start), perTryExpired)
		ep.Done(outcome)
		if perTryExpired {
			err = apierr.Errorf(apierr.KindTimeout, ReasonUpstreamTimeout,
				"model %q did not answer within the per-try timeout %s", req.Model, rp.PerTryTimeout.Std())
		}
		if !r.again(ctx, attempt, ep.Addr, f) {
			info.retries = r.retries
			if ctx.Err() != nil {
				return nil, info, apierr.Errorf(apierr.KindTimeout, ReasonUpstreamTimeout,
					"model %q on backend %q: the route timeout passed during the retry back-off", req.Model, b.name)
			}
			return nil, info, upstreamError(err)
		}
	}
}

// upstreamError is the client-facing error of a failed model call: the
// model's own refusal (a 4xx with its reason) passes through; server-side
// failures become upstream_unavailable, upstream_timeout or keep their
// 5xx reason.
func upstreamError(err error) error {
	if ie, ok := errors.AsType[*apierr.Error](err); ok {
		return ie
	}
	return &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonUpstreamUnavailable, Msg: "model call failed", Err: err}
}
