package h1

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient is a client whose idle connections close with the test.
func newClient(t *testing.T, o Options) *Client {
	t.Helper()
	c := New(o)
	t.Cleanup(c.CloseIdle)
	return c
}

// echoServer answers every request with 200 and a body describing it:
// method, target, the headers the test asks about and the body.
func echoServer(t *testing.T, conns *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Host", r.Host)
		fmt.Fprintf(w, "%s %s ua=%q id=%q auth=%q te=%q cl=%d body=%s",
			r.Method, r.RequestURI, r.Header.Get("User-Agent"), r.Header.Get("X-Request-Id"),
			r.Header.Get("Authorization"), r.TransferEncoding, r.ContentLength, b)
	}))
	if conns != nil {
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// do is c.Do for a request expected to fail: the body of an answer it
// got anyway is read and closed.
func do(ctx context.Context, c *Client, req *Request) (string, error) {
	resp, err := c.Do(ctx, req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

func TestRequestAsSent(t *testing.T) {
	addr := echoServer(t, nil)
	c := newClient(t, Options{})
	skip := func(k string) bool { return k == "Authorization" }
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{
			name: "post with body, extra header, skipped header, default user agent",
			req: Request{
				Method: http.MethodPost, URI: "/v2/models/m/infer?x=1", Body: []byte(`{"a":1}`),
				Header: http.Header{"Authorization": {"Bearer k"}, "Content-Length": {"999"}, "Transfer-Encoding": {"chunked"}},
				Skip:   skip, Extra: []string{"X-Request-Id", "r-1"},
			},
			want: `POST /v2/models/m/infer?x=1 ua="Go-http-client/1.1" id="r-1" auth="" te=[] cl=7 body={"a":1}`,
		},
		{
			name: "the caller's user agent",
			req:  Request{Method: http.MethodGet, URI: "/v2/health/ready", Header: http.Header{"User-Agent": {"kserve-client/2"}}},
			want: `GET /v2/health/ready ua="kserve-client/2" id="" auth="" te=[] cl=0 body=`,
		},
		{
			name: "post without a body says so",
			req:  Request{Method: http.MethodPost, URI: "/p"},
			want: `POST /p ua="Go-http-client/1.1" id="" auth="" te=[] cl=0 body=`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Addr = addr
			resp, err := c.Do(t.Context(), &tt.req)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, addr, resp.Header.Get("X-Seen-Host"), "Host is the endpoint")
			require.Equal(t, tt.want, readAll(t, resp))
		})
	}
}

func TestConnectionReuse(t *testing.T) {
	var conns atomic.Int64
	addr := echoServer(t, &conns)
	c := newClient(t, Options{})
	for range 20 {
		resp, err := c.Do(t.Context(), &Request{Method: http.MethodPost, Addr: addr, URI: "/", Body: []byte("x")})
		require.NoError(t, err)
		readAll(t, resp)
	}
	require.Equal(t, int64(1), conns.Load(), "sequential requests share one connection")
	require.Equal(t, 1, c.Idle(addr))

	// A body closed before its end takes its connection with it.
	resp, err := c.Do(t.Context(), &Request{Method: http.MethodGet, Addr: addr, URI: "/"})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Zero(t, c.Idle(addr))
	resp, err = c.Do(t.Context(), &Request{Method: http.MethodGet, Addr: addr, URI: "/"})
	require.NoError(t, err)
	readAll(t, resp)
	require.Equal(t, int64(2), conns.Load())

	// Expired idle connections close on CloseExpired.
	c.CloseExpired(time.Now().Add(time.Hour))
	require.Zero(t, c.Idle(addr))
}

// rawServer runs handle on every connection to a loopback listener; stop
// is closed when the test ends, before the handlers are waited for.
func rawServer(t *testing.T, handle func(c net.Conn, br *bufio.Reader, stop <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c, bufio.NewReader(c), stop)
			})
		}
	})
	t.Cleanup(func() {
		close(stop)
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestAnswers(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		code   int
		body   string
		reused bool
	}{
		{name: "content length", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", code: 200, body: "ok", reused: true},
		{name: "chunked", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n1\r\n!\r\n0\r\n\r\n", code: 200, body: "ok!", reused: true},
		{name: "1xx first", answer: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\ny", code: 201, body: "y", reused: true},
		{name: "server closes", answer: "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbusy", code: 503, body: "busy"},
		{name: "body to the end of the connection", answer: "HTTP/1.1 200 OK\r\n\r\nall of it", code: 200, body: "all of it"},
		{name: "no body", answer: "HTTP/1.1 204 No Content\r\n\r\n", code: 204, reused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, func(c net.Conn, br *bufio.Reader, _ <-chan struct{}) {
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, r.Body)
					if _, err := io.WriteString(c, tt.answer); err != nil {
						return
					}
					if !tt.reused {
						return // the server's end of the connection
					}
				}
			})
			c := newClient(t, Options{})
			resp, err := c.Do(t.Context(), &Request{Method: http.MethodPost, Addr: addr, URI: "/", Body: []byte("q")})
			require.NoError(t, err)
			require.Equal(t, tt.code, resp.StatusCode)
			require.Equal(t, tt.body, readAll(t, resp))
			want := 0
			if tt.reused {
				want = 1
			}
			require.Equal(t, want, c.Idle(addr), "kept for reuse")
		})
	}
}

func TestStaleConnectionIsRetriedOnce(t *testing.T) {
	// The server answers one request per connection and then closes it
	// without saying so: the idle connection is dead when reused.
	var conns atomic.Int64
	addr := rawServer(t, func(c net.Conn, br *bufio.Reader, _ <-chan struct{}) {
		conns.Add(1)
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	c := newClient(t, Options{})
	for i := range 3 {
		resp, err := c.Do(t.Context(), &Request{Method: http.MethodPost, Addr: addr, URI: "/", Body: []byte("q")})
		require.NoError(t, err, "request %d", i)
		require.Equal(t, "ok", readAll(t, resp))
		require.Equal(t, 1, c.Idle(addr), "the client cannot know the server will close it")
	}
	require.Equal(t, int64(3), conns.Load(), "each reuse failed and was sent again on a new connection")
}

func TestConnectFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := newClient(t, Options{})
	_, err = do(t.Context(), c, &Request{Method: http.MethodGet, Addr: addr, URI: "/"})
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "dial", op.Op)
	require.Contains(t, err.Error(), `Get "http://`+addr+`/"`)
}

func TestContextEnds(t *testing.T) {
	addr := rawServer(t, func(c net.Conn, br *bufio.Reader, stop <-chan struct{}) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
		<-stop // the rest never comes
	})
	c := newClient(t, Options{})

	t.Run("deadline while the body is read", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		resp, err := c.Do(ctx, &Request{Method: http.MethodGet, Addr: addr, URI: "/"})
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.Error(t, err)
		require.NoError(t, resp.Body.Close())
		require.Zero(t, c.Idle(addr), "a cut-short connection is not reused")
	})
	t.Run("cancel while waiting for the answer", func(t *testing.T) {
		hang := rawServer(t, func(_ net.Conn, br *bufio.Reader, stop <-chan struct{}) {
			_, _ = http.ReadRequest(br)
			<-stop
		})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := do(ctx, c, &Request{Method: http.MethodGet, Addr: hang, URI: "/"})
		require.ErrorIs(t, err, context.Canceled)
		require.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("deadline while waiting for the answer", func(t *testing.T) {
		hang := rawServer(t, func(_ net.Conn, br *bufio.Reader, stop <-chan struct{}) {
			_, _ = http.ReadRequest(br)
			<-stop
		})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := do(ctx, c, &Request{Method: http.MethodGet, Addr: hang, URI: "/"})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestHeaderInjectionRefused(t *testing.T) {
	addr := echoServer(t, nil)
	c := newClient(t, Options{})
	for _, h := range []http.Header{
		{"X-A": {"v\r\nX-Injected: 1"}},
		{"X-A\r\nX-B": {"v"}},
		{"": {"v"}},
		{"X A": {"v"}},
	} {
		_, err := do(t.Context(), c, &Request{Method: http.MethodGet, Addr: addr, URI: "/", Header: h})
		require.Error(t, err, "%q", h)
	}
	_, err := do(t.Context(), c, &Request{Method: http.MethodGet, Addr: addr, URI: "/", Extra: []string{"X-Request-Id", "a\nb"}})
	require.Error(t, err)
	_, err = do(t.Context(), c, &Request{Method: http.MethodGet, Addr: addr, URI: "/", Extra: []string{"X-Request-Id"}})
	require.Error(t, err)
}

func TestConcurrentRequests(t *testing.T) {
	var conns atomic.Int64
	addr := echoServer(t, &conns)
	c := newClient(t, Options{MaxIdlePerHost: 4})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				body := fmt.Sprintf("%d-%d", g, i)
				resp, err := c.Do(context.Background(), &Request{Method: http.MethodPost, Addr: addr, URI: "/", Body: []byte(body)})
				if err != nil {
					failed.Add(1)
					continue
				}
				b, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || !strings.HasSuffix(string(b), "body="+body) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "every answer belongs to its request")
	require.LessOrEqual(t, c.Idle(addr), 4, "MaxIdlePerHost")
}

func TestMethodOp(t *testing.T) {
	for m, want := range map[string]string{"POST": "Post", "GET": "Get", "": "Get", "PATCH": "Patch"} {
		require.Equal(t, want, methodOp(m))
	}
	require.NoError(t, ctxErr(context.Background(), io.EOF), "an error of a live context is not the context's")
}
