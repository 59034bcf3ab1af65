package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
	"github.com/sluice-ml/sluice/internal/httpapi"
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
		f.status, _ = httpapi.StatusOf(err)
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
	f.status, _ = httpapi.StatusOf(err)
	o.Status = f.status
	return o, f
}

// hasServerReason reports whether a remote error carries a reason the
// server itself set (a Sluice server refusing, not a broken transport).
func hasServerReason(err error) bool {
	ie, ok := errors.AsType[*infer.Error](err)
	return ok && ie.Reason != "" && ie.Reason != "upstream_unavailable"
}

// call sends req to the route's backend, retrying as the route's policy
// allows: never to an endpoint already tried while another exists, within
// the backend's retry budget, with jittered back-off, and all within ctx
// (which carries the route timeout).
func (g *Gateway) call(ctx context.Context, s *service, b *backend, rp *config.RetryPolicy, req *infer.Request) (*infer.Response, callInfo, error) {
	var info callInfo
	b.budget.active.Add(1)
	defer b.budget.active.Add(-1)
	var tried []string
	retrying := false
	defer func() {
		if retrying {
			b.budget.doneRetry()
		}
	}()
	for attempt := 0; ; attempt++ {
		ep, err := b.set.Pick(tried...)
		if err != nil {
			return nil, info, infer.Errorf(infer.KindUnavailable, ReasonNoHealthyUpstream, "backend %q has no endpoint to send to: %v", b.name, err)
		}
		info.endpoint = ep.Addr
		tctx, cancel := ctx, context.CancelFunc(nil)
		if rp != nil && rp.PerTryTimeout > 0 {
			tctx, cancel = context.WithTimeout(ctx, rp.PerTryTimeout.Std())
		}
		start := time.Now()
		resp, err := g.infer(tctx, b, ep.Addr, req)
		perTryExpired := err != nil && tctx.Err() != nil && ctx.Err() == nil
		if cancel != nil {
			cancel()
		}
		if err == nil {
			ep.Done(upstream.Outcome{Latency: time.Since(start)})
			return resp, info, nil
		}
		if ctx.Err() != nil {
			// The request itself timed out or went away: not the endpoint's
			// fault unless the route timeout fired while it was working.
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				ep.Done(upstream.Outcome{Err: ctx.Err(), Latency: time.Since(start)})
				return nil, info, infer.Errorf(infer.KindTimeout, ReasonUpstreamTimeout,
					"model %q on backend %q did not answer within the route timeout (%d tries)", req.Model, b.name, attempt+1)
			}
			ep.Done(upstream.Outcome{Latency: time.Since(start)})
			return nil, info, ctx.Err()
		}
		outcome, f := classify(err, time.Since(start), perTryExpired)
		ep.Done(outcome)
		if perTryExpired {
			err = infer.Errorf(infer.KindTimeout, ReasonUpstreamTimeout,
				"model %q on %s did not answer within the per-try timeout %s", req.Model, ep.Addr, rp.PerTryTimeout.Std())
		}
		if rp == nil || attempt >= rp.NumRetries {
			return nil, info, upstreamError(err)
		}
		reason, ok := retryReason(rp, f)
		if !ok {
			return nil, info, upstreamError(err)
		}
		if !retrying {
			if !b.budget.tryRetry(rp.Budget.Percent, rp.Budget.MinConcurrency) {
				g.met.budgetExceeded.WithLabelValues(s.name).Inc()
				return nil, info, upstreamError(err)
			}
			retrying = true
		}
		if !slices.Contains(tried, ep.Addr) {
			tried = append(tried, ep.Addr)
		}
		g.met.retries.WithLabelValues(s.name, b.name, reason).Inc()
		info.retries++
		if d := backoff(attempt + 1); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, info, infer.Errorf(infer.KindTimeout, ReasonUpstreamTimeout,
					"model %q on backend %q: route timeout during retry back-off", req.Model, b.name)
			case <-t.C:
			}
		}
	}
}

// upstreamError is the client-facing error of a failed model call: the
// model's own refusal (a 4xx with its reason) passes through; server-side
// failures become upstream_unavailable, upstream_timeout or keep their
// 5xx reason.
func upstreamError(err error) error {
	if ie, ok := errors.AsType[*infer.Error](err); ok {
		return ie
	}
	return &infer.Error{Kind: infer.KindUnavailable, Reason: ReasonUpstreamUnavailable, Msg: "model call failed", Err: err}
}
