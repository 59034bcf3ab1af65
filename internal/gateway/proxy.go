package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
	"github.com/sluice-ml/sluice/internal/wire"
)

// The KServe v2 proxy: an L7 hop with the service path's admission
// (authentication, rate limit) in front of a kserve_http backend, and its
// retry policy behind. Bodies pass through untouched.

// maxProxyBody bounds a proxied request body: KServe v2 binary tensors can
// be large, but not unbounded.
const maxProxyBody = 64 << 20

// serveProxy passes a KServe v2 request through to the proxy backend
// after authentication and rate limiting, retrying on another endpoint as
// the proxy's retry policy allows.
func (g *Gateway) serveProxy(w http.ResponseWriter, r *http.Request, st *state) {
	px := st.proxy
	start := time.Now()
	reqID := requestID(r.Header)
	w.Header()["X-Request-Id"] = []string{reqID}
	e := accesslog.Entry{Time: start, RequestID: reqID, Service: "proxy", Route: "proxy", Backend: px.cfg.Backend}
	defer func() {
		elapsed := time.Since(start)
		e.LatencyMS = float64(elapsed.Microseconds()) / 1000
		g.access.Log(e)
		g.met.requests.WithLabelValues("proxy", "proxy", strconv.Itoa(e.Status), e.Source, e.ClientID, reasonLabel(e.Status, e.Reason)).Inc()
		px.duration.Observe(elapsed.Seconds())
	}()
	if _, err := g.admit(r.Context(), st, r.Header, r.RemoteAddr, r.TLS, &e); err != nil {
		code, reason := wire.HTTPStatus(err)
		e.Status, e.Reason, e.Error = code, reason, err.Error()
		writeHTTPError(w, reqID, err)
		return
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, maxProxyBody), r.ContentLength)
	e.RequestBytes = int64(len(body))
	if err != nil {
		e.Status, e.Reason = http.StatusRequestEntityTooLarge, ReasonBodyTooLarge
		if errors.Is(err, admission.ErrOverloaded) {
			e.Status, e.Reason = http.StatusServiceUnavailable, admission.ReasonOverloaded // Retry-After: 1
		}
		writeError(w, reqID, e.Status, e.Reason, "reading the request body: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), px.cfg.Timeout.Std())
	defer cancel()
	rt := g.newRetrier("proxy", px.b, px.cfg.Retries)
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
		resp, f, err := g.proxyTry(ctx, rt, ep, r, px.up, body, reqID)
		if resp != nil && (resp.StatusCode < 500 || !rt.again(ctx, attempt, ep.Addr, f)) {
			// An answer: passed on as it is, a 5xx too when it is not
			// retried.
			e.Status, e.Source = resp.StatusCode, "model"
			copyResponse(w, resp, &e)
			return
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
			continue
		}
		if rt.again(ctx, attempt, ep.Addr, f) {
			continue
		}
		code, rsn, msg := http.StatusBadGateway, ReasonUpstreamUnavailable, "the model server did not answer"
		if f.timeout || errors.Is(err, context.DeadlineExceeded) {
			code, rsn, msg = http.StatusGatewayTimeout, ReasonUpstreamTimeout, "the model server did not answer in time"
		}
		// The endpoint and the transport's error stay in the access log
		// (endpoint, error): a client learns no internal address.
		e.Status, e.Reason, e.Error = code, rsn, err.Error()
		writeError(w, reqID, code, rsn, msg)
		return
	}
}

// proxyTry makes one try on ep under the retry policy's per-try timeout
// and tells ep how it went. It returns the response, or how the try
// failed for retry_on.
func (g *Gateway) proxyTry(ctx context.Context, rt *retrier, ep *upstream.Endpoint, r *http.Request, up *upstreamHTTP, body []byte, reqID string) (*http.Response, tryFailure, error) {
	tctx, cancel := rt.tryContext(ctx)
	start := time.Now()
	resp, err := up.forward(tctx, r, ep.Addr, body, reqID)
	var f tryFailure
	if err != nil {
		f.timeout = tctx.Err() != nil && ctx.Err() == nil
		f.connect = !f.timeout && isConnectErr(err)
		f.reset = !f.connect && !f.timeout
		f.status = http.StatusBadGateway
		if f.timeout {
			f.status = http.StatusGatewayTimeout
		}
		ep.Done(upstream.Outcome{Err: err, Latency: time.Since(start)})
		cancel()
		return nil, f, err
	}
	f.status = resp.StatusCode
	ep.Done(upstream.Outcome{Status: resp.StatusCode, Latency: time.Since(start)})
	// The per-try context must outlive the response: its body is still
	// to be read. Closing the body cancels it.
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, f, nil
}

// cancelBody is a response body that releases its request's context when
// closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
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
	buf := copyBufs.Get().(*[]byte)
	n, _ := io.CopyBuffer(w, resp.Body, *buf) // w's ReadFrom, when it has one, goes first
	copyBufs.Put(buf)
	e.ResponseBytes = n
}

// copyBufs holds the buffers copyResponse copies through when w cannot
// read from a reader itself (a wrapped ResponseWriter).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// isConnectErr reports a dial failure (a failed TLS handshake included,
// see tlsDialer): the request never left.
func isConnectErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
