package h1

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startServer serves h on a loopback port with s's settings; the server
// closes with the test.
func startServer(t *testing.T, s *Server, h http.Handler) string {
	t.Helper()
	s.Handler = h
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed)
		// Close only closes the connections: wait for their goroutines.
		require.Eventually(t, func() bool { return s.closeIdle() == 0 }, 5*time.Second, time.Millisecond)
	})
	return ln.Addr().String()
}

// echo answers with the method, target, Host, the body's length and
// the body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "%s %s host=%s te=%v cl=%d body=%s", r.Method, r.RequestURI, r.Host, r.TransferEncoding, r.ContentLength, b)
})

// rawConn is a client connection that writes raw bytes and reads
// answers with http.ReadResponse.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(20*time.Second)))
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	_, err := io.WriteString(c.nc, s)
	require.NoError(c.t, err)
}

// answer is what the test looks at in an answer.
type answer struct {
	StatusCode       int
	Header           http.Header
	ContentLength    int64
	TransferEncoding []string
	Close            bool
}

// read reads one answer to a request of method and its body.
func (c *rawConn) read(method string) (answer, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return answer{resp.StatusCode, resp.Header, resp.ContentLength, resp.TransferEncoding, resp.Close}, string(b)
}

// closed reports whether the server closed the connection (after the
// answers read so far).
func (c *rawConn) closed() bool {
	c.t.Helper()
	_, err := c.br.ReadByte()
	return err != nil
}

// errorBody is the JSON error every Sluice error answer has.
type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

func requireJSONError(t *testing.T, resp answer, body string, code int, reason string) {
	t.Helper()
	require.Equal(t, code, resp.StatusCode, body)
	var e errorBody
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	require.Equal(t, reason, e.Reason, body)
	require.NotEmpty(t, e.Error)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
}

func TestServerKeepAlive(t *testing.T) {
	addr := startServer(t, &Server{}, echo)
	c := dialRaw(t, addr)
	// Two requests pipelined, then a third after the answers: one
	// connection carries all three.
	c.send("GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
	resp, body := c.read(http.MethodGet)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "GET /a?x=1 host=h te=[] cl=0 body=", body)
	require.Equal(t, int64(len(body)), resp.ContentLength, "a whole answer goes out with its length")
	require.NotEmpty(t, resp.Header.Get("Date"))
	require.False(t, resp.Close)
	_, body = c.read(http.MethodPost)
	require.Equal(t, "POST /b host=h te=[] cl=5 body=hello", body)
	c.send("GET /c HTTP/1.1\r\nHost: h\r\n\r\n")
	_, body = c.read(http.MethodGet)
	require.Equal(t, "GET /c host=h te=[] cl=0 body=", body)
}

func TestServerNetHTTPClient(t *testing.T) {
	addr := startServer(t, &Server{}, echo)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for i := range 20 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v2/models/m/infer", strings.NewReader(strings.Repeat("x", i*1000)))
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, fmt.Sprintf("POST /v2/models/m/infer host=%s te=[] cl=%d body=%s", addr, i*1000, strings.Repeat("x", i*1000)), string(b))
	}
}

func TestServerChunked(t *testing.T) {
	big := strings.Repeat("y", 10<<10)
	addr := startServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		switch r.URL.Path {
		case "/flush":
			_, _ = io.WriteString(w, "first ")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "second")
		case "/big":
			_, _ = io.WriteString(w, big)
		default:
			_, _ = fmt.Fprintf(w, "te=%v cl=%d body=%s trailer=%s", r.TransferEncoding, r.ContentLength, b, r.Trailer.Get("X-T"))
		}
	}))
	c := dialRaw(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: t\r\n\r\n")
	resp, body := c.read(http.MethodPost)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "te=[chunked] cl=-1 body=hello world trailer=t", body)

	c.send("GET /flush HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, body = c.read(http.MethodGet)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding, "a flushed answer has no length")
	require.Equal(t, "first second", body)

	c.send("GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, body = c.read(http.MethodGet)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding, "an answer over the buffer has no length")
	require.Equal(t, big, body)
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"), "sniffed")

	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	_, body = c.read(http.MethodGet)
	require.Equal(t, "te=[] cl=0 body= trailer=", body, "the connection still serves")
}

func TestServerExpectContinue(t *testing.T) {
	addr := startServer(t, &Server{}, echo)
	c := dialRaw(t, addr)
	c.send("POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	line, err := c.br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 100 Continue\r\n", line, "sent on the handler's first read, before the body came")
	line, err = c.br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\r\n", line)
	c.send("abc")
	resp, body := c.read(http.MethodPost)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "POST /x host=h te=[] cl=3 body=abc", body)

	// A handler that answers without reading: no 100, and the connection
	// closes (the client may still send the body).
	addr = startServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	c = dialRaw(t, addr)
	c.send("POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	resp, _ = c.read(http.MethodPost)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.True(t, resp.Close)
	require.True(t, c.closed())

	c = dialRaw(t, addr)
	c.send("POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc")
	resp, _ = c.read(http.MethodPost)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "HTTP/1.0: the expectation is ignored")

	c = dialRaw(t, addr)
	c.send("POST /x HTTP/1.1\r\nHost: h\r\nExpect: something-else\r\nContent-Length: 3\r\n\r\nabc")
	resp, body = c.read(http.MethodPost)
	requireJSONError(t, resp, body, http.StatusExpectationFailed, "invalid_request")
	require.True(t, c.closed())
}

func TestServerRefusals(t *testing.T) {
	addr := startServer(t, &Server{MaxHeaderBytes: 1 << 10}, echo)
	for _, tc := range []struct {
		name, req string
		code      int
		reason    string
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"bad header line", "GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"bad header name", "GET / HTTP/1.1\r\nHost: a\r\nX(y): 1\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"control byte in a value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"bad Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", http.StatusHTTPVersionNotSupported, "invalid_request"},
		{"head over the limit", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 8<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge, "too_many_headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			c.send(tc.req)
			resp, body := c.read(http.MethodGet)
			requireJSONError(t, resp, body, tc.code, tc.reason)
			require.True(t, resp.Close)
			require.True(t, c.closed())
		})
	}
}

func TestServerConnectionClose(t *testing.T) {
	addr := startServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bye" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	for _, tc := range []struct {
		name, req string
		closes    bool
		header    string // the answer's Connection header, less "close" (ReadResponse takes it out)
	}{
		{"HTTP/1.1", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", false, ""},
		{"HTTP/1.1 close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", true, ""},
		{"handler closes", "GET /bye HTTP/1.1\r\nHost: h\r\n\r\n", true, ""},
		{"HTTP/1.0", "GET / HTTP/1.0\r\n\r\n", true, ""},
		{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", false, "keep-alive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			c.send(tc.req)
			resp, body := c.read(http.MethodGet)
			require.Equal(t, "ok", body)
			require.Equal(t, tc.header, resp.Header.Get("Connection"))
			require.Equal(t, tc.closes, resp.Close, "Connection: close")
			if tc.closes {
				require.True(t, c.closed())
				return
			}
			c.send(tc.req)
			_, body = c.read(http.MethodGet)
			require.Equal(t, "ok", body, "the connection carries another request")
		})
	}
}

func TestServerHeadAndBodilessStatuses(t *testing.T) {
	addr := startServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
			_, err := io.WriteString(w, "no")
			require.ErrorIs(t, err, http.ErrBodyNotAllowed)
		default:
			_, _ = io.WriteString(w, "hello")
		}
	}))
	c := dialRaw(t, addr)
	c.send("HEAD / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, body := c.read(http.MethodHead)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, int64(5), resp.ContentLength, "the length the body would have")
	require.Empty(t, body)
	c.send("GET /204 HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, body = c.read(http.MethodGet)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, body)
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	_, body = c.read(http.MethodGet)
	require.Equal(t, "hello", body, "framing intact after both")
}

func TestServerDeclaredLength(t *testing.T) {
	addr := startServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		if r.URL.Path == "/short" {
			_, _ = io.WriteString(w, "abc")
			return
		}
		_, _ = io.WriteString(w, "0123456789")
		_, err := io.WriteString(w, "more")
		require.ErrorIs(t, err, http.ErrContentLength)
	}))
	c := dialRaw(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	_, body := c.read(http.MethodGet)
	require.Equal(t, "0123456789", body)
	c.send("GET /short HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, int64(10), resp.ContentLength)
	b, err := io.ReadAll(resp.Body)
	require.Error(t, err, "the connection closes short of the declared length")
	require.Equal(t, "abc", string(b))
}

func TestServerUnreadBody(t *testing.T) {
	addr := startServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	c := dialRaw(t, addr)
	small := strings.Repeat("s", 1000)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n" + small)
	_, body := c.read(http.MethodPost)
	require.Equal(t, "ok", body)
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	_, body = c.read(http.MethodGet)
	require.Equal(t, "ok", body, "a small unread body is read past, and the connection serves on")

	c = dialRaw(t, addr)
	c.send(fmt.Sprintf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", 10<<20))
	go func() { _, _ = c.nc.Write(bytes.Repeat([]byte("b"), 1<<20)) }()
	resp, body := c.read(http.MethodPost)
	require.Equal(t, "ok", body)
	require.True(t, resp.Close, "more than 256 KiB left unread: the connection closes")
}

func TestServerPanic(t *testing.T) {
	addr := startServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	c := dialRaw(t, addr)
	c.send("GET /panic HTTP/1.1\r\nHost: h\r\n\r\n")
	require.True(t, c.closed(), "the connection closes without an answer")
	c = dialRaw(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	_, body := c.read(http.MethodGet)
	require.Equal(t, "ok", body, "the server serves on")
}

func TestServerTimeouts(t *testing.T) {
	addr := startServer(t, &Server{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 100 * time.Millisecond}, echo)
	t.Run("idle", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		_, body := c.read(http.MethodGet)
		require.Equal(t, "GET / host=h te=[] cl=0 body=", body)
		require.True(t, c.closed(), "an idle connection closes after IdleTimeout")
	})
	t.Run("slow head", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.send("GET / HTTP/1.1\r\nHost: h\r\n") // the head never ends
		require.True(t, c.closed(), "a head that does not arrive in ReadHeaderTimeout closes the connection")
	})
}

func TestServerShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	s := &Server{}
	addr := startServer(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	idle := dialRaw(t, addr)
	idle.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	_, body := idle.read(http.MethodGet)
	require.Equal(t, "ok", body)
	busy := dialRaw(t, addr)
	busy.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	require.True(t, idle.closed(), "Shutdown closes the idle connection")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a request was running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	_, body = busy.read(http.MethodGet)
	require.Equal(t, "ok", body, "the running request is answered")
	require.NoError(t, <-done)
	require.True(t, busy.closed())
	_, err := net.Dial("tcp", addr)
	require.Error(t, err, "the listener is closed")
}
