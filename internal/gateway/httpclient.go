package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/gateway/h1"
)

// upstreamHTTP is the HTTP client of the KServe v2 proxy and of the
// kserve_http health checks, with the scheme it speaks: "http", or
// "https" for a backend with a tls block (connections of its own).
// It is package h1's client, or Options.HTTPClient when one is given.
type upstreamHTTP struct {
	h1     *h1.Client
	client *http.Client // instead of h1: Options.HTTPClient
	scheme string
}

// newUpstreamHTTP is the shared plaintext client.
func newUpstreamHTTP(client *http.Client) *upstreamHTTP {
	if client != nil {
		return &upstreamHTTP{client: client, scheme: "http"}
	}
	return &upstreamHTTP{h1: h1.New(h1.Options{Dial: dialer().DialContext}), scheme: "http"}
}

// dialer dials upstream connections: a short connect timeout (a dead
// endpoint must fail over quickly), keep-alive probes on idle ones.
func dialer() *net.Dialer { return &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second} }

// withTLS is a client like u with connections of its own, speaking TLS
// with cfg.
func (u *upstreamHTTP) withTLS(cfg *tls.Config) *upstreamHTTP {
	if u.client == nil {
		return &upstreamHTTP{h1: h1.New(h1.Options{Dial: tlsDialer(dialer().DialContext, cfg), Scheme: "https"}), scheme: "https"}
	}
	t, ok := u.client.Transport.(*http.Transport)
	if !ok {
		t = &http.Transport{DisableCompression: true}
	}
	t = t.Clone()
	dial := t.DialContext
	if dial == nil {
		dial = dialer().DialContext
	}
	t.DialTLSContext = tlsDialer(dial, cfg)
	c := *u.client
	c.Transport = t
	return &upstreamHTTP{client: &c, scheme: "https"}
}

// forward sends one try of a proxied request r, whose body was read into
// body, to endpoint addr: the caller's headers less the hop-by-hop ones
// and its credentials, and reqID as X-Request-Id.
func (u *upstreamHTTP) forward(ctx context.Context, r *http.Request, addr string, body []byte, reqID string, fwd forwarding) (*http.Response, error) {
	if u.client != nil {
		return u.forwardStd(ctx, r, addr, body, reqID, fwd)
	}
	extra := []string{"X-Request-Id", reqID}
	if fwd.identity != "" {
		extra = append(extra, authz.HeaderForwardedClient, fwd.identity)
	}
	skip := skipForwarded
	if fwd.keepToken {
		skip = skipForwardedKeepToken
	}
	// The host is a configured endpoint, never the caller's choice.
	return u.h1.Do(ctx, &h1.Request{
		Method: r.Method, Addr: addr, URI: r.URL.RequestURI(),
		Header: r.Header, Skip: skip, Extra: extra,
		Body: body,
	})
}

// skipForwarded names the request headers the proxy does not pass on:
// hop-by-hop ones, the caller's credentials, X-Request-Id, which it sets
// itself, and X-Sluice-Forwarded-Client, which only the gateway may set.
func skipForwarded(name string) bool {
	return hopHeader(name) || ownHeader(name)
}

// skipForwardedKeepToken is skipForwarded letting the caller's
// X-Sluice-Token through (a state-changing group allow_apis lists).
func skipForwardedKeepToken(name string) bool {
	if strings.EqualFold(name, "X-Sluice-Token") {
		return false
	}
	return skipForwarded(name)
}

// ownHeader names the headers the proxy sets itself.
func ownHeader(name string) bool {
	return strings.EqualFold(name, "X-Request-Id") || strings.EqualFold(name, authz.HeaderForwardedClient)
}

// forwardStd is forward through net/http.
func (u *upstreamHTTP) forwardStd(ctx context.Context, r *http.Request, addr string, body []byte, reqID string, fwd forwarding) (*http.Response, error) {
	url := *r.URL
	url.Scheme, url.Host = u.scheme, addr
	out, err := http.NewRequestWithContext(ctx, r.Method, url.String(), bytes.NewReader(body)) //nolint:gosec // G704: the host is a backend's configured endpoint
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(r.Header)+2)
	skip := skipForwarded
	if fwd.keepToken {
		skip = skipForwardedKeepToken
	}
	for k, vs := range r.Header {
		if !skip(k) {
			h[k] = vs
		}
	}
	h["X-Request-Id"] = []string{reqID}
	if fwd.identity != "" {
		h[authz.HeaderForwardedClient] = []string{fwd.identity}
	}
	out.Header = h
	out.ContentLength = int64(len(body))
	return u.client.Do(out) //nolint:gosec // G704: the host is a backend's configured endpoint
}

// get sends GET path to addr and returns the status; the body is dropped.
func (u *upstreamHTTP) get(ctx context.Context, addr, path string) (int, error) {
	var resp *http.Response
	var err error
	if u.client != nil {
		var req *http.Request
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.scheme+"://"+addr+path, nil); err != nil {
			return 0, err
		}
		resp, err = u.client.Do(req)
	} else {
		resp, err = u.h1.Do(ctx, &h1.Request{Method: http.MethodGet, Addr: addr, URI: path})
	}
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // so the connection can be reused
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// closeIdle closes the connections no request uses.
func (u *upstreamHTTP) closeIdle() {
	if u.client != nil {
		u.client.CloseIdleConnections()
		return
	}
	u.h1.CloseIdle()
}

// closeExpired closes the connections idle for too long (net/http's
// transport does that on its own).
func (u *upstreamHTTP) closeExpired(now time.Time) {
	if u.h1 != nil {
		u.h1.CloseExpired(now)
	}
}
