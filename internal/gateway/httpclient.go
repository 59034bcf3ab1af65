package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// upstreamHTTP is the HTTP client of the KServe v2 proxy and of the
// kserve_http health checks, with the scheme it speaks: "http", or
// "https" for a backend with a tls block (a transport of its own).
type upstreamHTTP struct {
	client *http.Client
	scheme string
}

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

// withTLS is u with a transport of its own speaking TLS with cfg.
func (u *upstreamHTTP) withTLS(cfg *tls.Config) *upstreamHTTP {
	t, ok := u.client.Transport.(*http.Transport)
	if !ok {
		t = newProxyClient().Transport.(*http.Transport)
	}
	t = t.Clone()
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t.DialTLSContext = tlsDialer(dial, cfg)
	c := *u.client
	c.Transport = t
	return &upstreamHTTP{client: &c, scheme: "https"}
}

// do sends one request.
func (u *upstreamHTTP) do(req *http.Request) (*http.Response, error) {
	return u.client.Do(req) //nolint:gosec // G704: the host is a backend's configured endpoint
}

// get sends GET path to addr and returns the status; the body is dropped.
func (u *upstreamHTTP) get(ctx context.Context, addr, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.scheme+"://"+addr+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := u.do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// closeIdle closes the connections no request uses.
func (u *upstreamHTTP) closeIdle() { u.client.CloseIdleConnections() }
