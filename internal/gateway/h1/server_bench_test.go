package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkServer is one keep-alive connection sending a KServe-sized
// POST and reading the answer, against Server and net/http's server with
// the same handler: what the server side costs per request, allocations
// included (the client's share is the same in both).
func BenchmarkServer(b *testing.B) {
	body := strings.Repeat("x", 3113)
	req := "POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nAuthorization: Bearer k\r\nContent-Length: 3113\r\n\r\n" + body
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header()["Content-Type"] = []string{"application/json"}
		w.Header()["Content-Length"] = []string{"2"}
		_, _ = io.WriteString(w, "{}")
	})
	run := func(b *testing.B, serve func(net.Listener) error, stop func()) {
		b.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = serve(ln); close(done) }()
		defer func() { stop(); <-done }()
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := io.WriteString(nc, req); err != nil {
				b.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
	b.Run("h1", func(b *testing.B) {
		s := &Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
		run(b, s.Serve, func() { _ = s.Close() })
	})
	b.Run("nethttp", func(b *testing.B) {
		s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
		run(b, s.Serve, func() { _ = s.Close() })
	})
}
