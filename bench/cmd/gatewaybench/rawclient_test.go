package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer answers every POST with its body and counts new connections.
func echoServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestRawClientKeepAliveAndHeaders(t *testing.T) {
	srv, conns := echoServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v2/models/m/infer" || r.Header.Get("Authorization") != "Bearer k" ||
			r.Header.Get("Content-Type") != "application/json" || r.ContentLength != int64(len(b)) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	url := srv.URL + "/v2/models/m/infer"
	rc := rawFor(t, url, 8, 5*time.Second)
	head, err := requestHead(url, http.Header{"Authorization": {"Bearer k"}, "Content-Type": {"application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		body := strings.Repeat("x", i*300) // crosses the 4 KiB buffer sizes
		status, got, err := rc.post(context.Background(), head, []byte(body))
		if err != nil || status != http.StatusOK || string(got) != body {
			t.Fatalf("request %d: status %d err %v body %d bytes, want %d", i, status, err, len(got), len(body))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 sequential requests; want 1 (keep-alive)", n)
	}
}

func TestRawClientChunkedAndClose(t *testing.T) {
	big := strings.Repeat("y", 10_000)
	var n atomic.Int64
	srv, conns := echoServer(t, func(w http.ResponseWriter, _ *http.Request) {
		switch n.Add(1) {
		case 1: // chunked: flushed before the end, no Content-Length
			_, _ = w.Write([]byte(big[:5000]))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte(big[5000:]))
		default:
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	rc := rawFor(t, srv.URL, 8, 5*time.Second)
	head, _ := requestHead(srv.URL, nil)
	status, got, err := rc.post(context.Background(), head, nil)
	if err != nil || status != http.StatusOK || string(got) != big {
		t.Fatalf("chunked: status %d err %v, %d bytes", status, err, len(got))
	}
	for range 2 {
		if status, _, err := rc.post(context.Background(), head, nil); err != nil || status != http.StatusServiceUnavailable {
			t.Fatalf("close: status %d err %v", status, err)
		}
	}
	// The first connection was kept; each "Connection: close" answer
	// closed its connection, so the third request needed a new one.
	if c := conns.Load(); c != 2 {
		t.Fatalf("%d connections; want 2", c)
	}
}

func TestRawClientTimeoutAndStale(t *testing.T) {
	release := make(chan struct{})
	srv, conns := echoServer(t, func(_ http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done(): // the client gave up and closed
			}
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	rc := rawFor(t, srv.URL, 8, 100*time.Millisecond)
	head, _ := requestHead(srv.URL+"/slow", nil)
	t0 := time.Now()
	_, _, err := rc.post(context.Background(), head, nil)
	if errorKind(err) != "timeout" || time.Since(t0) > 2*time.Second {
		t.Fatalf("slow answer: %v (%s) after %s; want a timeout after 100ms", err, errorKind(err), time.Since(t0))
	}
	// An idle connection older than staleAfter is not reused.
	fast, _ := requestHead(srv.URL+"/fast", nil)
	if status, _, err := rc.post(context.Background(), fast, nil); err != nil || status != http.StatusOK {
		t.Fatalf("fast: %d %v", status, err)
	}
	before := conns.Load()
	rc.mu.Lock()
	for _, c := range rc.idle {
		c.used = time.Now().Add(-2 * staleAfter)
	}
	rc.mu.Unlock()
	if status, _, err := rc.post(context.Background(), fast, nil); err != nil || status != http.StatusOK {
		t.Fatalf("after stale: %d %v", status, err)
	}
	if conns.Load() != before+1 {
		t.Fatalf("a stale idle connection was reused")
	}
}

func TestRequestHead(t *testing.T) {
	h, err := requestHead("http://127.0.0.1:9/v1/services/a:predict?x=1", http.Header{"X-B": {"2"}, "Authorization": {"Bearer k"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "POST /v1/services/a:predict?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAuthorization: Bearer k\r\nX-B: 2\r\n"
	if string(h) != want {
		t.Fatalf("head %q; want %q", h, want)
	}
	if _, err := newRawClient("https://example.invalid/", 1, time.Second); err == nil {
		t.Fatal("https accepted")
	}
}
