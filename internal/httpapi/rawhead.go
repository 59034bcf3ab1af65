package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync"
)

// Go's HTTP/1 server trims the whitespace around each header value, as
// RFC 9110 allows. Triton forwards header values as they arrive, trailing
// spaces included (qa/L0_parameters test_headers sends one ending in a
// space and reads it back as a request parameter). To forward the same
// value, connections accepted through RecordHeads keep the bytes read
// while a request head arrives, and forwardHeaders restores the trailing
// whitespace of each forwarded value from them.

// maxRecordedHead bounds the bytes a connection keeps between requests:
// the head itself plus what a previous handler left unread of its body
// (the server discards up to 256 KiB of it).
const maxRecordedHead = DefaultMaxHeaderBytes + 320<<10

// RecordHeads wraps ln so that the handler can read each request head as
// it arrived (see forwardHeaders). TLS connections pass unchanged (the
// server needs the *tls.Conn itself); their values stay trimmed.
func RecordHeads(ln net.Listener) net.Listener { return headListener{ln} }

type headListener struct{ net.Listener }

func (l headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if _, isTLS := c.(*tls.Conn); isTLS {
		return c, nil
	}
	return &headConn{Conn: c, recording: true}, nil
}

// headConn records the bytes read from the time a handler returns until
// the next handler starts, that is the next request head (and whatever
// the server read ahead with it).
type headConn struct {
	net.Conn
	mu        sync.Mutex
	recording bool
	buf       []byte
}

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.recording {
			c.buf = append(c.buf, p[:n]...)
			if over := len(c.buf) - maxRecordedHead; over > 0 {
				c.buf = append(c.buf[:0], c.buf[over:]...)
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

// CloseWrite half-closes the connection when the underlying one can (TCP).
// net/http calls it before closing a connection it refuses (a head over
// the limit answered 431): without it the server closes with the
// client's unread bytes pending, the kernel resets the connection, and
// the client may lose the answer.
func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// take stops recording and returns the bytes recorded.
func (c *headConn) take() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	c.buf, c.recording = nil, false
	return b
}

// resume starts recording the next head.
func (c *headConn) resume() {
	c.mu.Lock()
	c.recording = true
	c.mu.Unlock()
}

type (
	headConnKey struct{}
	rawHeadKey  struct{}
)

// connContext puts a recording connection in the context of its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if hc, ok := c.(*headConn); ok {
		return context.WithValue(ctx, headConnKey{}, hc)
	}
	return ctx
}

// recordedHeads hands each request the head its connection recorded
// (HTTP/1 only), in its context, and has the connection record the next
// head once the handler returns.
func recordedHeads(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hc, ok := r.Context().Value(headConnKey{}).(*headConn)
		if !ok || r.ProtoMajor != 1 {
			h.ServeHTTP(w, r)
			return
		}
		raw := hc.take()
		defer hc.resume()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rawHeadKey{}, raw)))
	})
}

// rawHeaderValues returns the values of the header name as they arrived,
// trailing whitespace kept: each trimmed value in vals is matched to a
// "name: value" line of the recorded head. A value with no such line
// stays as it is.
func rawHeaderValues(ctx context.Context, name string, vals []string) []string {
	raw, _ := ctx.Value(rawHeadKey{}).([]byte)
	if len(raw) == 0 {
		return vals
	}
	out := make([]string, len(vals))
	copy(out, vals)
	used := map[int]bool{}
	lines := bytes.Split(raw, []byte("\n"))
	for i, v := range vals {
		for j, line := range lines {
			if used[j] || len(line) <= len(name) || line[len(name)] != ':' || !strings.EqualFold(string(line[:len(name)]), name) {
				continue
			}
			rest := bytes.TrimLeft(bytes.TrimSuffix(line[len(name)+1:], []byte("\r")), " \t")
			if !bytes.HasPrefix(rest, []byte(v)) || len(bytes.Trim(rest[len(v):], " \t")) != 0 {
				continue
			}
			used[j] = true
			out[i] = string(rest)
			break
		}
	}
	return out
}
