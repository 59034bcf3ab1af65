package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
	"github.com/sluice-ml/sluice/internal/httpapi"
)

// newProxyClient is the HTTP client of the KServe v2 proxy and of HTTP
// health checks: keep-alive connections to few hosts, no proxy from the
// environment, no compression negotiation (bodies pass through as is).
func newProxyClient() *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           d.DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			DisableCompression:    true,
			ResponseHeaderTimeout: 0, // the request context bounds it
			ForceAttemptHTTP2:     false,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// maxProxyBody bounds a proxied request body: KServe v2 binary tensors can
// be large, but not unbounded.
const maxProxyBody = 64 << 20

// serveProxy passes a KServe v2 request through to the proxy backend
// after authentication and rate limiting, retrying on another endpoint as
// the proxy's retry policy allows.
func (g *Gateway) serveProxy(w http.ResponseWriter, r *http.Request, st *state) {
	start := time.Now()
	reqID := requestID(r)
	w.Header().Set("X-Request-Id", reqID)
	e := accesslog.Entry{Time: start, RequestID: reqID, Service: "proxy", Route: "proxy", Backend: st.proxy.Backend}
	defer func() {
		e.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
		g.access.Log(e)
		g.met.requests.WithLabelValues("proxy", "proxy", strconv.Itoa(e.Status), e.Source, e.ClientID).Inc()
		g.met.duration.WithLabelValues("proxy").Observe(time.Since(start).Seconds())
	}()
	if _, err := g.admit(r.Context(), st, r, &e); err != nil {
		code, reason := httpapi.StatusOf(err)
		e.Status, e.Reason, e.Error = code, reason, err.Error()
		writeHTTPError(w, reqID, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxProxyBody))
	e.RequestBytes = int64(len(body))
	if err != nil {
		e.Status, e.Reason = http.StatusRequestEntityTooLarge, ReasonBodyTooLarge
		if errors.Is(err, admission.ErrOverloaded) {
			e.Status, e.Reason = http.StatusServiceUnavailable, admission.ReasonOverloaded
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, reqID, e.Status, e.Reason, "reading the request body: "+err.Error())
		return
	}
	b := st.backends[st.proxy.Backend]
	ctx, cancel := context.WithTimeout(r.Context(), st.proxy.Timeout.Std())
	defer cancel()
	rt := g.newRetrier("proxy", b, st.proxy.Retries)
	defer rt.close()
	defer func() { e.Retries = rt.retries }()
	for attempt := 0; ; attempt++ {
		ep, err := rt.pick()
		if err != nil {
			e.Status, e.Reason = http.StatusServiceUnavailable, ReasonNoHealthyUpstream
			writeError(w, reqID, e.Status, e.Reason, err.Error())
			return
		}
		e.Endpoint = ep.Addr
		tctx, tcancel := rt.tryContext(ctx)
		tryStart := time.Now()
		resp, err := g.forward(tctx, r, b, ep.Addr, body, reqID)
		var f tryFailure
		if err != nil {
			f.timeout = tctx.Err() != nil && ctx.Err() == nil
			f.connect = !f.timeout && isConnectErr(err)
			f.reset = !f.connect && !f.timeout
			f.status = http.StatusBadGateway
			if f.timeout {
				f.status = http.StatusGatewayTimeout
			}
			ep.Done(upstream.Outcome{Err: err, Latency: time.Since(tryStart)})
		} else {
			f.status = resp.StatusCode
			ep.Done(upstream.Outcome{Status: resp.StatusCode, Latency: time.Since(tryStart)})
		}
		if err == nil && resp.StatusCode < 500 {
			e.Status, e.Source = resp.StatusCode, "model"
			copyResponse(w, resp, &e)
			tcancel()
			return
		}
		if resp != nil {
			if rt.again(ctx, attempt, ep.Addr, f) {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
				_ = resp.Body.Close()
				tcancel()
				continue
			}
			e.Status, e.Source = resp.StatusCode, "model"
			copyResponse(w, resp, &e)
			tcancel()
			return
		}
		tcancel()
		if rt.again(ctx, attempt, ep.Addr, f) {
			continue
		}
		code, rsn := http.StatusBadGateway, ReasonUpstreamUnavailable
		if f.timeout || errors.Is(err, context.DeadlineExceeded) {
			code, rsn = http.StatusGatewayTimeout, ReasonUpstreamTimeout
		}
		e.Status, e.Reason, e.Error = code, rsn, err.Error()
		writeError(w, reqID, code, rsn, "model server "+ep.Addr+": "+err.Error())
		return
	}
}

// forward sends one try of a proxied request to b's endpoint addr.
func (g *Gateway) forward(ctx context.Context, r *http.Request, b *backend, addr string, body []byte, reqID string) (*http.Response, error) {
	u := *r.URL
	u.Scheme, u.Host = b.scheme, addr
	// The host is a configured endpoint, never the caller's choice.
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body)) //nolint:gosec // G704: host from the backend's configured endpoints
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		if hopHeader(k) {
			continue
		}
		out.Header[k] = vs
	}
	out.Header.Set("X-Request-Id", reqID)
	out.ContentLength = int64(len(body))
	return b.http.Do(out) //nolint:gosec // G704: host from the backend's configured endpoints
}

// copyResponse streams resp to w and closes it.
func copyResponse(w http.ResponseWriter, resp *http.Response, e *accesslog.Entry) {
	defer resp.Body.Close()
	h := w.Header()
	for k, vs := range resp.Header {
		if hopHeader(k) {
			continue
		}
		h[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	e.ResponseBytes = n
}

// isConnectErr reports a dial failure (a failed TLS handshake included,
// see tlsDialer): the request never left.
func isConnectErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
