package h1

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzServer feeds the server a connection's worth of arbitrary bytes,
// with a handler that reads the body and echoes it. Whatever comes in,
// the server must not panic, and what it writes back must be a sequence
// of well-formed HTTP/1.1 answers (100 Continue included), each with a
// valid status, whose bodies read to their end.
func FuzzServer(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: t\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: h\r\nExpect: nope\r\nContent-Length: 3\r\n\r\nabc",
		"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"GET http://other/x HTTP/1.1\r\nHost: h\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("x", 3000) + "\r\n\r\n",
		"GARBAGE\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Server{MaxHeaderBytes: 2 << 10, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			if r.Method == http.MethodHead {
				// The answers are read without their requests: a HEAD
				// answer's length would be taken for a body.
				w.WriteHeader(http.StatusNoContent)
				return
			}
			if r.URL.Path == "/flush" {
				w.(http.Flusher).Flush()
			}
			_, _ = w.Write(b)
		})}
		out := &bytes.Buffer{}
		c := s.newConn(&fakeConn{r: bytes.NewReader(in), w: out})
		s.serveConn(c)
		br := bufio.NewReader(out)
		for {
			if _, err := br.Peek(1); err != nil {
				return // every answer read
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the server wrote a malformed answer: %v\nin: %q\nout: %q", err, in, out.String())
			}
			if resp.StatusCode < 100 || resp.StatusCode > 599 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if resp.StatusCode == http.StatusContinue {
				continue
			}
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatalf("reading an answer's body: %v\nin: %q\nout: %q", err, in, out.String())
			}
		}
	})
}

// fakeConn is a connection reading in and writing to w.
type fakeConn struct {
	r io.Reader
	w io.Writer
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }
