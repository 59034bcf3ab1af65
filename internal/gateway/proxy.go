package gateway

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/gateway/upstream"
)

// The KServe v2 proxy: an L7 hop with the service path's admission
// (authentication, rate limit) in front of a kserve_http backend, and its
// retry policy behind. Bodies pass through untouched.
//
// Trust does not travel through it. It forwards only the inference and
// read API groups (config.ProxyDefaultAPIs) and those allow_apis lists;
// anything else, and an inference naming a shared-memory region unless
// shared-memory is listed, is refused here (403 proxy_api_not_allowed)
// and audited with the client's identity. What it forwards carries
// X-Sluice-Forwarded-Client, the client it authenticated and its address
// signed with Options.ForwardedKey, so the model server treats the call as
// that client's and never as a local process's (authz.VerifyForwarded).

// maxProxyBody bounds a proxied request body: KServe v2 binary tensors can
// be large, but not unbounded.
const maxProxyBody = 64 << 20

// readProxyBody reads a proxied request's body. With package h1's client,
// which is done with the body when its Do returns (net/http's may still
// be writing it), the buffer comes from a pool, and release, called once
// the request is answered, gives it back.
func readProxyBody(w http.ResponseWriter, r *http.Request, up *upstreamHTTP) (body []byte, release func(), err error) {
	rd := http.MaxBytesReader(w, r.Body, maxProxyBody)
	if up.h1 == nil {
		body, err = readAll(rd, r.ContentLength)
		return body, func() {}, err
	}
	buf := proxyBodies.Get().(*[]byte)
	body, err = readAllInto(*buf, rd, r.ContentLength)
	return body, func() {
		if cap(body) <= maxPooledBody {
			*buf = body[:0]
			proxyBodies.Put(buf)
		}
	}, err
}

// proxyBodies holds the buffers proxied request bodies are read into;
// those over maxPooledBody are left to the garbage collector.
var proxyBodies = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledBody = 64 << 10

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
	id, err := g.admit(r.Context(), st, r.Header, r.RemoteAddr, r.TLS, &e)
	if err != nil {
		code, reason := apierr.HTTPStatus(err)
		e.Status, e.Reason, e.Error = code, reason, err.Error()
		writeHTTPError(w, reqID, err)
		return
	}
	group, need := authz.KServeHTTPGroup(r.Method, r.URL.EscapedPath())
	var audit *authz.Event
	if need >= authz.RoleOperate || group == authz.GroupSharedMemory {
		action, target := authz.KServeHTTPAction(r.URL.EscapedPath())
		if action == "" {
			action = "shared_memory.status"
		}
		audit = g.proxyAudit(r, id, reqID, action, target)
		defer func() { g.recordProxyAudit(audit, e.Status, e.Reason) }()
	}
	if !px.allowed[group] {
		e.Status, e.Reason = http.StatusForbidden, ReasonProxyAPINotAllowed
		writeError(w, reqID, e.Status, e.Reason, proxyRefusal(group))
		return
	}
	body, release, err := readProxyBody(w, r, px.up)
	defer release()
	e.RequestBytes = int64(len(body))
	if err != nil {
		e.Status, e.Reason = http.StatusRequestEntityTooLarge, ReasonBodyTooLarge
		if errors.Is(err, admission.ErrOverloaded) {
			e.Status, e.Reason = http.StatusServiceUnavailable, admission.ReasonOverloaded // Retry-After: 1
		}
		writeError(w, reqID, e.Status, e.Reason, "reading the request body: "+err.Error())
		return
	}
	if group == authz.GroupInference && !px.allowed[authz.GroupSharedMemory] {
		if uses, err := usesSharedMemory(body, r.Header); uses || err != nil {
			if audit == nil {
				audit = g.proxyAudit(r, id, reqID, "infer.shared_memory", strings.TrimPrefix(r.URL.Path, "/v2/models/"))
				defer func() { g.recordProxyAudit(audit, e.Status, e.Reason) }()
			}
			e.Status, e.Reason = http.StatusForbidden, ReasonProxyAPINotAllowed
			msg := "the gateway's KServe proxy does not forward inference requests that name a shared-memory region (gateway.proxy.allow_apis: [shared-memory])"
			if err != nil {
				msg += ": " + err.Error()
			}
			writeError(w, reqID, e.Status, e.Reason, msg)
			return
		}
	}
	fwd := forwarding{keepToken: slices.Contains(px.cfg.AllowAPIs, group) && slices.Contains(config.ProxyStateAPIs, group)}
	if len(g.opts.ForwardedKey) > 0 {
		fwd.identity = authz.SignForwarded(g.opts.ForwardedKey, authz.Forwarded{Client: id.ClientID, Addr: r.RemoteAddr}, reqID, g.opts.Now())
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
		resp, f, err := g.proxyTry(ctx, rt, ep, r, px.up, body, reqID, fwd)
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
		// The endpoint stays in the access log (endpoint, error); the
		// cause (a refused connection, a certificate that does not
		// verify) goes to the client scrubbed of every address.
		e.Status, e.Reason, e.Error = code, rsn, err.Error()
		writeError(w, reqID, code, rsn, msg+": "+err.Error())
		return
	}
}

// proxyTry makes one try on ep under the retry policy's per-try timeout
// and tells ep how it went. It returns the response, or how the try
// failed for retry_on.
func (g *Gateway) proxyTry(ctx context.Context, rt *retrier, ep *upstream.Endpoint, r *http.Request, up *upstreamHTTP, body []byte, reqID string, fwd forwarding) (*http.Response, tryFailure, error) {
	tctx, cancel := rt.tryContext(ctx)
	start := time.Now()
	resp, err := up.forward(tctx, r, ep.Addr, body, reqID, fwd)
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

// ReasonProxyAPINotAllowed refuses a request whose API group the KServe
// proxy does not forward (gateway.proxy.allow_apis) (403).
const ReasonProxyAPINotAllowed = "proxy_api_not_allowed"

// proxyRefusal is the message of a request whose group the proxy does
// not forward.
func proxyRefusal(group string) string {
	if group == "" {
		return "the gateway's KServe proxy forwards only KServe v2 API paths it knows"
	}
	return "the gateway's KServe proxy does not forward the " + group + " API (it forwards " +
		strings.Join(config.ProxyDefaultAPIs, ", ") + " and what gateway.proxy.allow_apis lists)"
}

// forwarding is what a proxied request carries beyond the caller's
// headers: the signed client identity, and the caller's X-Sluice-Token
// for a state-changing group allow_apis lists (the model server checks
// it; no other group gets it).
type forwarding struct {
	identity  string
	keepToken bool
}

// proxyAudit starts the audit event of a proxied call that changes state
// or reaches shared memory: the client as the gateway authenticated it,
// and its own address.
func (g *Gateway) proxyAudit(r *http.Request, id auth.Identity, reqID, action, target string) *authz.Event {
	via := "api_key"
	switch {
	case id.Anonymous:
		via = authz.ViaOpen
	case r.Header.Get("Authorization") == "" && r.Header.Get("X-Api-Key") == "":
		via = authz.ViaMTLS
	}
	return &authz.Event{
		Component: authz.ComponentGatewayProxy, Action: action, Target: target,
		Who: id.ClientID, Via: via, Addr: r.RemoteAddr, Client: id.ClientID, RequestID: reqID,
	}
}

// recordProxyAudit records ev with the status answered.
func (g *Gateway) recordProxyAudit(ev *authz.Event, status int, reason string) {
	ev.Status, ev.Reason = status, reason
	switch {
	case status == http.StatusForbidden && reason == ReasonProxyAPINotAllowed:
		ev.Result = authz.ResultDenied
	case status >= 400:
		ev.Result = authz.ResultError
	default:
		ev.Result = authz.ResultOK
	}
	g.opts.Audit.Record(*ev)
}

// usesSharedMemory reports whether a KServe v2 inference body names a
// shared-memory region (a "shared_memory_region" parameter, which the
// model server reads and writes). It looks at the JSON part (the first
// Inference-Header-Content-Length bytes with the binary extension), after
// the body's Content-Encoding; the quick byte search decides the common
// case, and a body that might hide the name (escapes) is scanned token by
// token, duplicate keys included. An error means the body could not be
// read: the proxy refuses it rather than guess.
func usesSharedMemory(body []byte, h http.Header) (bool, error) {
	switch enc := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "deflate":
		var zr io.ReadCloser
		var err error
		if enc == "gzip" {
			zr, err = gzip.NewReader(bytes.NewReader(body))
		} else {
			zr, err = zlib.NewReader(bytes.NewReader(body))
		}
		if err != nil {
			return false, fmt.Errorf("content-encoding %s: %w", enc, err)
		}
		defer zr.Close()
		// The model server decompresses at most its body limit; so do we.
		plain, err := io.ReadAll(io.LimitReader(zr, maxProxyBody+1))
		if err != nil {
			return false, fmt.Errorf("content-encoding %s: %w", enc, err)
		}
		body = plain
	default:
		return false, nil // the model server refuses an encoding it does not know
	}
	if v := h.Get("Inference-Header-Content-Length"); v != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 && n <= len(body) {
			body = body[:n]
		}
	}
	if !bytes.Contains(body, []byte("shared_memory")) && !bytes.Contains(body, []byte(`\u`)) {
		return false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("inference header: %w", err)
		}
		if s, ok := tok.(string); ok && strings.HasPrefix(s, "shared_memory_") {
			return true, nil
		}
	}
}
