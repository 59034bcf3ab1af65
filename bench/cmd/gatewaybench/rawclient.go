package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// rawClient is the load generator's HTTP/1.1 client: keep-alive
// connections, each used by one request at a time, the request written
// with a single write from bytes prepared once per phase, the answer read
// with http.ReadResponse on the calling goroutine. net/http's Transport
// hands every request to two goroutines per connection (a read loop and a
// write loop) and back; on a 2-CPU machine shared with the servers being
// measured, those wake-ups cost the servers CPU time.
type rawClient struct {
	addr    string // host:port
	timeout time.Duration
	maxIdle int
	dialer  net.Dialer

	mu   sync.Mutex
	idle []*rawConn // guarded by mu
}

type rawConn struct {
	c    net.Conn
	br   *bufio.Reader
	buf  []byte    // request bytes; reused
	used time.Time // last answer read
}

// staleAfter is how long an idle connection is trusted: servers and
// proxies close idle client connections (HAProxy's timeout client, for
// one), and a request written to a closed connection would count as an
// error the server never saw.
const staleAfter = 5 * time.Second

func newRawClient(rawURL string, maxIdle int, timeout time.Duration) (*rawClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("load generator: %q is not an http:// URL", rawURL)
	}
	return &rawClient{addr: u.Host, timeout: timeout, maxIdle: maxIdle, dialer: net.Dialer{Timeout: 2 * time.Second}}, nil
}

func (rc *rawClient) get(ctx context.Context) (*rawConn, error) {
	now := time.Now()
	rc.mu.Lock()
	for len(rc.idle) > 0 {
		c := rc.idle[len(rc.idle)-1]
		rc.idle = rc.idle[:len(rc.idle)-1]
		if now.Sub(c.used) < staleAfter {
			rc.mu.Unlock()
			return c, nil
		}
		_ = c.c.Close() // stale; the server may have closed it already
	}
	rc.mu.Unlock()
	c, err := rc.dialer.DialContext(ctx, "tcp", rc.addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 8<<10)}, nil
}

func (rc *rawClient) put(c *rawConn) {
	c.used = time.Now()
	rc.mu.Lock()
	if len(rc.idle) < rc.maxIdle {
		rc.idle = append(rc.idle, c)
		c = nil
	}
	rc.mu.Unlock()
	if c != nil {
		_ = c.c.Close() // over the idle limit
	}
}

// closeIdle closes every idle connection.
func (rc *rawClient) closeIdle() {
	rc.mu.Lock()
	idle := rc.idle
	rc.idle = nil
	rc.mu.Unlock()
	for _, c := range idle {
		_ = c.c.Close() // nothing to report: we are done with it
	}
}

// requestHead returns the request line and fixed headers of every request
// of a phase, up to but excluding Content-Length.
func requestHead(rawURL string, h http.Header) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	b := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\n", u.RequestURI(), u.Host)
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			b = fmt.Appendf(b, "%s: %s\r\n", k, v)
		}
	}
	return b, nil
}

// post sends head + Content-Length + body on a pooled connection and
// returns the status and body of the answer.
func (rc *rawClient) post(ctx context.Context, head, body []byte) (int, []byte, error) {
	c, err := rc.get(ctx)
	if err != nil {
		return 0, nil, err
	}
	if err := c.c.SetDeadline(time.Now().Add(rc.timeout)); err != nil {
		_ = c.c.Close() // unusable
		return 0, nil, err
	}
	c.buf = append(c.buf[:0], head...)
	c.buf = append(c.buf, "Content-Length: "...)
	c.buf = strconv.AppendInt(c.buf, int64(len(body)), 10)
	c.buf = append(c.buf, "\r\n\r\n"...)
	c.buf = append(c.buf, body...)
	if _, err := c.c.Write(c.buf); err != nil {
		_ = c.c.Close() // broken
		return 0, nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		_ = c.c.Close() // broken or closed by the server
		return 0, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read to the end or failed; nothing more to learn
	if err != nil {
		_ = c.c.Close() // the answer was cut short
		return resp.StatusCode, nil, err
	}
	if resp.Close {
		_ = c.c.Close() // the server asked to close
	} else {
		rc.put(c)
	}
	return resp.StatusCode, b, nil
}
