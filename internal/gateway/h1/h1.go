// Package h1 is the HTTP/1.1 client of the gateway's KServe v2 proxy: a
// pool of keep-alive connections per endpoint, each carrying one request
// at a time, with the request written and the answer read on the
// caller's goroutine. It also has the server of the gateway's plaintext
// listener (Server, server.go), built for the same reason.
//
// It exists for cost. net/http's Transport hands every request to two
// goroutines of the connection's own (one writes, one reads) and the
// answer back through channels: at a few thousand requests a second on a
// small machine those hand-offs, and the scheduler work they cause, cost
// more CPU than the proxy's own work. Here a request costs the caller's
// goroutine a write and a read.
//
// What it does as net/http does for a proxy: the Host header is the
// endpoint's address; a request without User-Agent gets
// Go-http-client/1.1; Content-Length is sent for a body, and for POST,
// PUT and PATCH without one; 1xx answers before the final one are
// skipped; a connection is reused only after its answer's body was read
// to the end and the server did not ask to close it; a request that fails
// on a reused connection before any byte of the answer arrived is sent
// again once on a new connection (the server may have closed it while it
// sat idle). Errors are *url.Error values, as http.Client.Do returns them:
// a failed dial wraps a *net.OpError with Op "dial", and a request whose
// context ended wraps the context's error.
//
// What it does not do: HTTP/2, proxies from the environment, redirects,
// compression, cookies. Idle connections expire on CloseExpired, which
// the owner calls periodically: the package starts no goroutine.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Client; zero fields take the defaults.
type Options struct {
	// Dial opens a connection [net.Dialer with a 2 s timeout and 30 s
	// keep-alive]. A TLS dialer makes an https client.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost bounds the idle connections kept per address [256].
	MaxIdlePerHost int
	// IdleTimeout is how long an idle connection is kept [90 s].
	IdleTimeout time.Duration
	// Scheme is "http" or "https", for error messages ["http"].
	Scheme string
}

// Client is a pool of HTTP/1.1 connections. It is safe for concurrent use.
type Client struct {
	opts Options
	mu   sync.Mutex // protects idle
	idle map[string][]*conn
}

// New returns a Client.
func New(o Options) *Client {
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if o.MaxIdlePerHost <= 0 {
		o.MaxIdlePerHost = 256
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 90 * time.Second
	}
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	return &Client{opts: o, idle: map[string][]*conn{}}
}

// Request is one request to send.
type Request struct {
	Method string
	// Addr is the endpoint, host:port; it is the Host header too.
	Addr string
	// URI is the request target: the path, and ?query when there is one.
	URI string
	// Header is sent as it is, less the fields Skip names and those the
	// client writes itself: Host, Content-Length, Transfer-Encoding and
	// Trailer (as net/http's Request.Write leaves them out).
	Header http.Header
	// Skip, when not nil, names header fields not to send (hop-by-hop
	// headers, credentials).
	Skip func(name string) bool
	// Extra holds more header fields, name and value pairs, sent after
	// Header's.
	Extra []string
	// Body is sent with a Content-Length.
	Body []byte
}

// conn is one pooled connection.
type conn struct {
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time // when it was put back
}

// Do sends req and returns the answer. The caller must close its Body:
// read to the end first, so the connection can carry another request.
// ctx bounds the whole exchange, reading the body included.
func (c *Client) Do(ctx context.Context, req *Request) (*http.Response, error) {
	if err := checkHeader(req.Header); err != nil {
		return nil, c.urlError(req, err)
	}
	if len(req.Extra)%2 != 0 {
		return nil, c.urlError(req, errors.New("extra header fields: a name without a value"))
	}
	for i := 0; i < len(req.Extra); i += 2 {
		if err := checkField(req.Extra[i], req.Extra[i+1]); err != nil {
			return nil, c.urlError(req, err)
		}
	}
	for attempt := 0; ; attempt++ {
		cn, reused, err := c.get(ctx, req.Addr)
		if err != nil {
			if cerr := ctxErr(ctx, err); cerr != nil {
				err = cerr
			}
			return nil, c.urlError(req, err)
		}
		resp, sent, err := c.roundTrip(ctx, cn, req)
		if err == nil {
			return resp, nil
		}
		_ = cn.nc.Close()
		if err := ctxErr(ctx, err); err != nil {
			return nil, c.urlError(req, err)
		}
		// A reused connection the server closed while it sat idle fails
		// before any byte of the answer: the request never reached a
		// handler, so sending it again is safe.
		if reused && !sent && attempt == 0 {
			continue
		}
		return nil, c.urlError(req, err)
	}
}

// ctxErr is ctx's error when err comes from ctx ending: a connection's
// deadline is only ever set once ctx is done.
func ctxErr(ctx context.Context, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		<-ctx.Done()
	}
	return ctx.Err()
}

// roundTrip writes req on cn and reads the answer's head. sent reports
// whether any byte of an answer arrived.
func (c *Client) roundTrip(ctx context.Context, cn *conn, req *Request) (resp *http.Response, sent bool, err error) {
	// The end of ctx, its deadline included, interrupts whatever read or
	// write is blocked: a deadline in the past. (No deadline is set
	// otherwise: ctx's own timer is the one, and setting a connection's
	// deadlines costs timer updates on every request.)
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if err := writeRequest(cn.bw, req); err != nil {
		return nil, false, err
	}
	if _, err := cn.br.Peek(1); err != nil {
		return nil, false, err
	}
	hr := &http.Request{Method: req.Method}
	for {
		resp, err = http.ReadResponse(cn.br, hr)
		if err != nil {
			return nil, true, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// 100 Continue, 103 Early Hints...: the final answer follows.
		_ = resp.Body.Close()
	}
	resp.Body = &body{rc: resp.Body, cn: cn, c: c, addr: req.Addr, keep: !resp.Close, stop: stop}
	return resp, true, nil
}

// writeRequest writes req's head and body and flushes.
func writeRequest(w *bufio.Writer, req *Request) error {
	_, _ = w.WriteString(req.Method)
	_ = w.WriteByte(' ')
	_, _ = w.WriteString(req.URI)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.WriteString(req.Addr)
	_, _ = w.WriteString("\r\n")
	hasUA := false
	for k, vs := range req.Header {
		if ownField(k) || (req.Skip != nil && req.Skip(k)) {
			continue
		}
		if k == "User-Agent" {
			hasUA = true
		}
		for _, v := range vs {
			_, _ = w.WriteString(k)
			_, _ = w.WriteString(": ")
			_, _ = w.WriteString(v)
			_, _ = w.WriteString("\r\n")
		}
	}
	for i := 0; i+1 < len(req.Extra); i += 2 {
		if req.Extra[i] == "User-Agent" {
			hasUA = true
		}
		_, _ = w.WriteString(req.Extra[i])
		_, _ = w.WriteString(": ")
		_, _ = w.WriteString(req.Extra[i+1])
		_, _ = w.WriteString("\r\n")
	}
	if !hasUA {
		_, _ = w.WriteString("User-Agent: Go-http-client/1.1\r\n")
	}
	if len(req.Body) > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		_, _ = w.WriteString("Content-Length: ")
		var n [20]byte
		_, _ = w.Write(strconv.AppendInt(n[:0], int64(len(req.Body)), 10))
		_, _ = w.WriteString("\r\n")
	}
	_, _ = w.WriteString("\r\n")
	_, _ = w.Write(req.Body)
	return w.Flush()
}

// ownField reports the header fields the client writes itself.
func ownField(k string) bool {
	switch k {
	case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return strings.EqualFold(k, "Host") || strings.EqualFold(k, "Content-Length") ||
		strings.EqualFold(k, "Transfer-Encoding") || strings.EqualFold(k, "Trailer")
}

// checkHeader refuses header fields that would break the request's
// framing (see checkField).
func checkHeader(h http.Header) error {
	for k, vs := range h {
		for _, v := range vs {
			if err := checkField(k, v); err != nil {
				return err
			}
		}
		if len(vs) == 0 {
			if err := checkField(k, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkField refuses a field whose name is empty or holds a separator or
// a control character, or whose value holds a control character other
// than tab.
func checkField(k, v string) error {
	if k == "" {
		return errors.New("empty header field name")
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c == ':' || c >= 0x7f {
			return fmt.Errorf("invalid header field name %q", k)
		}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return fmt.Errorf("invalid value for header field %s", k)
		}
	}
	return nil
}

// get returns an idle connection to addr, or dials one; reused says which.
func (c *Client) get(ctx context.Context, addr string) (*conn, bool, error) {
	now := time.Now()
	c.mu.Lock()
	for cs := c.idle[addr]; len(cs) > 0; cs = c.idle[addr] {
		cn := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		c.idle[addr] = cs[:len(cs)-1]
		if now.Sub(cn.idleAt) < c.opts.IdleTimeout {
			c.mu.Unlock()
			return cn, true, nil
		}
		_ = cn.nc.Close()
	}
	c.mu.Unlock()
	nc, err := c.opts.Dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10)}, false, nil
}

// put keeps cn for the next request to addr, or closes it. Its deadline
// was never set: only the end of a context sets one, and such a
// connection is not put back.
func (c *Client) put(addr string, cn *conn) {
	if cn.br.Buffered() > 0 {
		_ = cn.nc.Close() // bytes nobody asked for
		return
	}
	cn.idleAt = time.Now()
	c.mu.Lock()
	cs := c.idle[addr]
	if len(cs) < c.opts.MaxIdlePerHost {
		c.idle[addr] = append(cs, cn)
		cn = nil
	}
	c.mu.Unlock()
	if cn != nil {
		_ = cn.nc.Close()
	}
}

// CloseIdle closes every idle connection.
func (c *Client) CloseIdle() { c.closeIdle(time.Time{}) }

// CloseExpired closes the connections idle for longer than IdleTimeout
// at now.
func (c *Client) CloseExpired(now time.Time) { c.closeIdle(now) }

// closeIdle closes the idle connections put back before now minus the
// idle timeout; all of them when now is zero.
func (c *Client) closeIdle(now time.Time) {
	var drop []*conn
	c.mu.Lock()
	for addr, cs := range c.idle {
		keep := cs[:0]
		for _, cn := range cs {
			if now.IsZero() || now.Sub(cn.idleAt) >= c.opts.IdleTimeout {
				drop = append(drop, cn)
			} else {
				keep = append(keep, cn)
			}
		}
		clear(cs[len(keep):])
		if len(keep) == 0 {
			delete(c.idle, addr)
		} else {
			c.idle[addr] = keep
		}
	}
	c.mu.Unlock()
	for _, cn := range drop {
		_ = cn.nc.Close()
	}
}

// Idle returns the number of idle connections to addr.
func (c *Client) Idle(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle[addr])
}

func (c *Client) urlError(req *Request, err error) error {
	return &url.Error{Op: methodOp(req.Method), URL: c.opts.Scheme + "://" + req.Addr + req.URI, Err: err}
}

// methodOp is the Op of a *url.Error, as net/http writes it: "Post".
func methodOp(m string) string {
	if m == "" {
		return "Get"
	}
	b := []byte(m)
	for i := 1; i < len(b); i++ {
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}

// body is an answer's body. Read to the end and closed, it gives its
// connection back to the pool; closed early, or after an error, it
// closes the connection.
type body struct {
	rc     io.ReadCloser
	cn     *conn
	c      *Client
	addr   string
	keep   bool        // the server did not ask to close
	stop   func() bool // stops the context's watch
	eof    bool
	broken bool
	closed bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("h1: read on a closed body")
	}
	n, err := b.rc.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.eof = true
	default:
		b.broken = true
	}
	return n, err
}

func (b *body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// stop reports false when the context's watch already ran: the
	// connection's deadline is in the past.
	if b.stop() && b.eof && b.keep && !b.broken {
		_ = b.rc.Close() // at EOF: nothing left to read
		b.c.put(b.addr, b.cn)
		return nil
	}
	// Closed early: net/http's body would read the rest to the end on
	// Close; closing the connection first makes that fail at once.
	err := b.cn.nc.Close()
	_ = b.rc.Close()
	return err
}
