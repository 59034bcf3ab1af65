package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Server serves HTTP/1.1 and HTTP/1.0 on plaintext connections: the
// gateway's listener when it has no TLS (with TLS, net/http's server
// serves it, HTTP/2 included).
//
// Each connection has one goroutine, which reads a request, runs the
// handler and writes the answer, then reads the next. It exists for cost,
// as Client does: net/http's server starts a goroutine per request to
// watch the connection while the handler runs, cancels it through a
// read deadline afterwards, and sets read deadlines three to five times a
// request, each a timer update in the runtime's poller. Here the
// timeouts are kept by one watchdog goroutine per server, which looks at
// every connection's current deadline a few times a second and only
// touches a connection that overstayed.
//
// What it does as net/http's server does: keep-alive (HTTP/1.1 unless
// "Connection: close", HTTP/1.0 with "Connection: keep-alive"),
// pipelined requests, Content-Length and chunked request bodies, Expect:
// 100-continue (sent on the handler's first read of the body; any other
// expectation is answered 417), a missing or repeated Host refused, the
// head bounded by MaxHeaderBytes plus 4 KiB (431), a Content-Length
// computed for an answer the handler wrote whole before returning and
// chunked encoding otherwise, Date and sniffed Content-Type headers, no
// body for HEAD, 1xx, 204 and 304, at most 256 KiB of an unread request
// body read after the handler (more, and the connection closes),
// handler panics recovered (http.ErrAbortHandler silently), and
// Shutdown's graceful close. Requests it cannot parse are answered with
// the JSON error body every Sluice error has ("error", "reason").
//
// What it does not do: TLS, HTTP/2, Hijack, trailers on answers, and
// ending a request's context (net/http's ends when the client goes away
// or the handler returns; here it is context.Background, and the
// handler's own timeouts bound its work).
type Server struct {
	// Handler answers every request.
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's head, from its first
	// byte (0: ReadTimeout).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included, from
	// its first byte (0: none).
	ReadTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (0: ReadTimeout).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's head, with 4 KiB of slack as
	// net/http has [1 MiB].
	MaxHeaderBytes int
	// Logger logs handler panics (nil: discarded).
	Logger *slog.Logger

	mu       sync.Mutex // protects lns, conns, closed, watching
	lns      map[net.Listener]struct{}
	conns    map[*serverConn]struct{}
	closed   bool
	watching bool
	shutting atomic.Bool   // closed, read without the lock
	stop     chan struct{} // closed by Shutdown and Close: the watchdog ends
}

// Connection states, for Shutdown: an idle connection waits for a
// request and may be closed; an active one finishes its request first.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// maxPostHandlerRead is how much of a request body the handler left
// unread the server reads to keep the connection (net/http's bound).
const maxPostHandlerRead = 256 << 10

// headerSlack is what a head may exceed MaxHeaderBytes by: the reader's
// buffer (as net/http).
const headerSlack = 4096

// Serve accepts connections on ln and serves them until Shutdown or
// Close, then returns http.ErrServerClosed; any other error ends it too.
// ln is closed when Serve returns.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		_ = ln.Close()
		return http.ErrServerClosed
	}
	defer s.untrack(ln)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return http.ErrServerClosed
			}
			if !retryAccept(err) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := s.newConn(nc)
		if c == nil {
			_ = nc.Close()
			return http.ErrServerClosed
		}
		go s.serveConn(c)
	}
}

// retryAccept reports accept errors that pass (a full file table, a
// connection reset before it was accepted), as net/http retries them.
func retryAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.lns == nil {
		s.lns = map[net.Listener]struct{}{}
	}
	s.lns[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	delete(s.lns, ln)
	s.mu.Unlock()
	_ = ln.Close()
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// newConn registers a connection (nil once the server is closed) and
// starts the watchdog with the first one.
func (s *Server) newConn(nc net.Conn) *serverConn {
	c := &serverConn{s: s, nc: nc}
	c.lr.r = nc
	c.lr.remain = math.MaxInt64
	c.br = bufio.NewReaderSize(&c.lr, 4<<10)
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	if a := nc.RemoteAddr(); a != nil {
		c.remote = a.String()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.conns == nil {
		s.conns = map[*serverConn]struct{}{}
	}
	s.conns[c] = struct{}{}
	if !s.watching && s.tick() > 0 {
		s.watching = true
		if s.stop == nil {
			s.stop = make(chan struct{})
		}
		go s.watch(s.stop, s.tick())
	}
	return c
}

func (s *Server) forget(c *serverConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// tick is the watchdog's period: an eighth of the shortest timeout,
// between 5 ms and 1 s; 0 when no timeout is set.
func (s *Server) tick() time.Duration {
	d := time.Duration(0)
	for _, t := range []time.Duration{s.ReadHeaderTimeout, s.ReadTimeout, s.IdleTimeout} {
		if t > 0 && (d == 0 || t < d) {
			d = t
		}
	}
	if d == 0 {
		return 0
	}
	return min(max(d/8, 5*time.Millisecond), time.Second)
}

// watch interrupts the reads of connections whose deadline passed: a
// read deadline in the past fails the blocked read, and the connection's
// goroutine closes it.
func (s *Server) watch(stop chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var due []*serverConn
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		s.mu.Lock()
		for c := range s.conns {
			if d := c.deadline.Load(); d != 0 && now > d {
				due = append(due, c)
			}
		}
		s.mu.Unlock()
		for i, c := range due {
			if c.expired.CompareAndSwap(false, true) {
				_ = c.nc.SetReadDeadline(time.Unix(1, 0))
			}
			due[i] = nil
		}
		due = due[:0]
	}
}

// Shutdown stops accepting connections, closes the idle ones, and waits
// for the others to finish their request and close, or for ctx to end
// (its error is returned then; the connections are left to finish).
func (s *Server) Shutdown(ctx context.Context) error {
	s.shut()
	wait := time.Millisecond
	for {
		if s.closeIdle() == 0 {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.shut()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.state.Store(stateClosed)
		_ = c.nc.Close()
	}
	return nil
}

// shut marks the server closed, closes its listeners and stops the
// watchdog.
func (s *Server) shut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.shutting.Store(true)
	for ln := range s.lns {
		_ = ln.Close()
	}
	if s.stop != nil {
		close(s.stop)
	}
}

// closeIdle closes the connections waiting for a request and returns
// how many connections are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			_ = c.nc.Close()
		}
	}
	return len(s.conns)
}

// serverConn is one connection.
type serverConn struct {
	s      *Server
	nc     net.Conn
	lr     limitReader
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	state  atomic.Int32
	// deadline is when the read under way must end, in Unix nanoseconds
	// (0: none); the watchdog reads it.
	deadline atomic.Int64
	// expired: the watchdog set the connection's read deadline in the
	// past. It is not reset; the connection closes after the request.
	expired atomic.Bool
	// ownDeadline: a handler set a read or write deadline itself
	// (ResponseController); they are cleared after its request.
	ownDeadline bool
	pending     []byte   // an answer's first bytes, held until its head is written
	scratch     [24]byte // formats numbers without an allocation
}

// limitReader is the connection's reader, bounding a request head.
type limitReader struct {
	r      io.Reader
	remain int64
	hit    bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.remain <= 0 {
		l.hit = true
		return 0, io.EOF
	}
	if int64(len(p)) > l.remain {
		p = p[:l.remain]
	}
	n, err := l.r.Read(p)
	l.remain -= int64(n)
	return n, err
}

// arm sets the deadline of the read under way to d from now (0: none).
func (c *serverConn) arm(now time.Time, d time.Duration) {
	if d <= 0 {
		c.deadline.Store(0)
		return
	}
	c.deadline.Store(now.Add(d).UnixNano())
}

func (s *Server) serveConn(c *serverConn) {
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler { //nolint:errorlint // the panic value itself, as net/http compares it
			if s.Logger != nil {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				s.Logger.Error("panic serving a request", "remote", c.remote, "panic", fmt.Sprint(v), "stack", string(buf))
			}
		}
		c.state.Store(stateClosed)
		_ = c.nc.Close()
		s.forget(c)
	}()
	c.serve()
}

// serve reads and answers requests until the connection closes.
func (c *serverConn) serve() {
	s := c.s
	wait := s.ReadHeaderTimeout // the first request: no idle wait before it
	if wait <= 0 {
		wait = s.ReadTimeout
	}
	for {
		if c.br.Buffered() == 0 {
			c.arm(time.Now(), wait)
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // Shutdown closed it
		}
		if !c.serveOne() {
			return
		}
		if s.shutting.Load() || !c.state.CompareAndSwap(stateActive, stateIdle) {
			return
		}
		wait = s.IdleTimeout
		if wait <= 0 {
			wait = s.ReadTimeout
		}
	}
}

// serveOne reads one request and answers it; it reports whether the
// connection may carry another.
func (c *serverConn) serveOne() bool {
	s := c.s
	start := time.Now()
	head := s.ReadHeaderTimeout
	if head <= 0 {
		head = s.ReadTimeout
	}
	c.arm(start, head)
	maxHead := s.MaxHeaderBytes
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	// What the reader holds already counts: it came in before the limit
	// was set.
	c.lr.remain, c.lr.hit = int64(maxHead+headerSlack-c.br.Buffered()), false
	req, err := http.ReadRequest(c.br)
	c.lr.remain = math.MaxInt64
	if err != nil {
		switch {
		case c.lr.hit:
			c.refuse(http.StatusRequestHeaderFieldsTooLarge, apierr.ReasonTooManyHeaders, "the request head exceeds "+strconv.Itoa(maxHead)+" bytes")
		case c.expired.Load() || errors.Is(err, io.EOF) || isNetError(err):
			// A timeout or a client that went away: nobody to answer.
		default:
			c.refuse(http.StatusBadRequest, apierr.ReasonInvalidRequest, "malformed HTTP request: "+err.Error())
		}
		return false
	}
	if msg := checkRequest(req); msg != "" {
		code := http.StatusBadRequest
		if req.ProtoMajor != 1 {
			code = http.StatusHTTPVersionNotSupported
		}
		c.refuse(code, apierr.ReasonInvalidRequest, msg)
		return false
	}
	w := &response{c: c, req: req, header: make(http.Header, 4), declared: -1, closeAfter: req.Close}
	rb := &requestBody{c: c, w: w, rc: req.Body, length: req.ContentLength}
	if req.Body == nil || req.Body == http.NoBody {
		rb.eof = true
		c.arm(start, 0)
	} else {
		c.arm(start, s.ReadTimeout)
	}
	// Expect, as net/http reads it: 100-continue counts for an HTTP/1.1
	// request with a body; any other expectation is refused.
	if e := req.Header.Get("Expect"); e != "" && httpguts.HeaderValuesContainsToken([]string{e}, "100-continue") {
		ok := req.ProtoAtLeast(1, 1) && !rb.eof
		rb.expect, rb.expected = ok, ok
	} else if e != "" {
		w.closeAfter = true
		apierr.WriteError(w, http.StatusExpectationFailed, apierr.ReasonInvalidRequest, "the only expectation served is Expect: 100-continue")
		w.finish()
		return false
	}
	if !rb.eof {
		req.Body = rb
		w.body = rb
	}
	// The request's context is context.Background (ReadRequest's): no
	// per-request context to allocate, and none for the handler's own
	// timeouts to register with.
	req.RemoteAddr = c.remote
	s.Handler.ServeHTTP(w, req)
	w.finish()
	rb.closed = true
	if c.ownDeadline {
		c.ownDeadline = false
		_ = c.nc.SetDeadline(time.Time{})
	}
	return !w.closeAfter && !w.broken && !c.expired.Load()
}

// isNetError reports a failed read of the connection.
func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET)
}

// checkRequest returns why a parsed request is refused, as net/http's
// server refuses it, or "".
func checkRequest(req *http.Request) string {
	if req.ProtoMajor != 1 {
		return "unsupported protocol version " + req.Proto
	}
	// http.ReadRequest took the Host field out of Header, and refused
	// a repeated one.
	switch {
	case req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect:
		return "missing required Host header"
	case req.Host != "" && !httpguts.ValidHostHeader(req.Host):
		return "malformed Host header"
	}
	// Field names and values: textproto.ReadMIMEHeader refused the
	// invalid ones already.
	return ""
}

// refuse answers a request that never reached the handler and closes
// the connection.
func (c *serverConn) refuse(code int, reason, msg string) {
	w := &response{c: c, header: make(http.Header, 4), declared: -1, closeAfter: true}
	apierr.WriteError(w, code, reason, msg)
	w.finish()
}

// requestBody is a request's body as the handler reads it: it sends 100
// Continue before the first read when the client expects it, and ends
// the read deadline once the body was read to its end.
type requestBody struct {
	c        *serverConn
	w        *response
	rc       io.ReadCloser
	expect   bool // Expect: 100-continue, not answered yet
	expected bool // the request had Expect: 100-continue
	length   int64
	n        int64 // bytes read
	eof      bool
	closed   bool
	err      error // a read error other than io.EOF
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof {
		return 0, io.EOF
	}
	if b.expect {
		b.expect = false
		if !b.w.headSent && !b.w.broken {
			_, _ = b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := b.c.bw.Flush(); err != nil {
				b.w.broken = true
			}
		}
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			b.eof = true
			b.c.arm(time.Time{}, 0)
		} else {
			b.err = err
		}
	}
	return n, err
}

// Close stops the handler's reads; what is left is the server's to read
// or not (done).
func (b *requestBody) Close() error {
	b.closed = true
	return nil
}

// settle decides, as the answer's head is about to be written, what
// becomes of the body the handler did not read to its end: at most
// maxPostHandlerRead bytes of it are read and dropped, so that the
// connection can carry the next request; when more is left, when the
// client expected 100 Continue, or when a read failed, the connection
// closes after the answer (and the head says so).
func (b *requestBody) settle(w *response) {
	if b.eof || w.closeAfter {
		return
	}
	if b.expected || b.err != nil {
		w.closeAfter = true
		return
	}
	if cl := b.length; cl > 0 && cl-b.n > maxPostHandlerRead {
		w.closeAfter = true
		return
	}
	n, err := io.CopyN(io.Discard, b.rc, maxPostHandlerRead+1)
	b.n += n
	if n > maxPostHandlerRead || (err != nil && !errors.Is(err, io.EOF)) {
		w.closeAfter = true
		return
	}
	b.eof = true
	b.c.arm(time.Time{}, 0)
}

// response is the http.ResponseWriter of one request. An answer's first
// 4 KiB wait in the connection's pending buffer: an answer the handler
// wrote whole by the time it returns goes out with a Content-Length, in
// the same write as its head.
type response struct {
	c           *serverConn
	req         *http.Request // nil: an answer to a request that did not parse
	body        *requestBody  // nil: the request had no body
	header      http.Header
	status      int
	wroteHeader bool
	headSent    bool
	chunked     bool
	noBody      bool  // HEAD, or a status without a body
	declared    int64 // the handler's Content-Length; -1: none
	written     int64
	closeAfter  bool
	broken      bool // a write failed: the connection is gone
	done        bool
}

const pendingSize = 4 << 10

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.wroteHeader || w.done {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An informational answer (103 Early Hints): sent at once, the
		// final one follows.
		if !w.broken {
			w.writeStatus(code)
			w.writeFields(false)
			_, _ = w.c.bw.WriteString("\r\n")
			w.flush()
		}
		return
	}
	w.wroteHeader, w.status = true, code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64); err == nil && n >= 0 {
			w.declared = n
		} else {
			w.header.Del("Content-Length")
		}
	}
	w.noBody = (w.req != nil && w.req.Method == http.MethodHead) || !bodyAllowed(code)
}

// bodyAllowed reports whether an answer with status code may have a
// body.
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if w.done {
		return 0, http.ErrHandlerTimeout
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.noBody {
		if w.req != nil && w.req.Method == http.MethodHead && bodyAllowed(w.status) {
			w.written += int64(len(p))
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	c := w.c
	if !w.headSent {
		if len(c.pending)+len(p) <= pendingSize {
			c.pending = append(c.pending, p...)
			return len(p), nil
		}
		w.sendHead(false, p)
	}
	if w.broken {
		return 0, io.ErrClosedPipe
	}
	if w.chunked {
		_, _ = c.bw.Write(strconv.AppendInt(c.scratch[:0], int64(len(p)), 16))
		_, _ = c.bw.WriteString("\r\n")
		_, _ = c.bw.Write(p)
		_, err := c.bw.WriteString("\r\n")
		if err != nil {
			w.broken = true
			return 0, err
		}
		return len(p), nil
	}
	if _, err := c.bw.Write(p); err != nil {
		w.broken = true
		return 0, err
	}
	return len(p), nil
}

// Flush sends what was written so far (http.Flusher).
func (w *response) Flush() {
	if w.done {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(false, nil)
	}
	w.flush()
}

// FlushError is Flush reporting a failed write (http.ResponseController).
func (w *response) FlushError() error {
	w.Flush()
	if w.broken {
		return io.ErrClosedPipe
	}
	return nil
}

// SetReadDeadline sets the connection's read deadline until the end of
// the request (http.ResponseController).
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.ownDeadline = true
	return w.c.nc.SetReadDeadline(t)
}

// SetWriteDeadline sets the connection's write deadline until the end of
// the request (http.ResponseController).
func (w *response) SetWriteDeadline(t time.Time) error {
	w.c.ownDeadline = true
	return w.c.nc.SetWriteDeadline(t)
}

// sendHead writes the head, then the pending bytes. final: the handler
// returned, so the pending bytes are the whole body; next is what the
// handler writes after them (for sniffing a Content-Type).
func (w *response) sendHead(final bool, next []byte) {
	c := w.c
	w.headSent = true
	if w.body != nil {
		w.body.settle(w)
	}
	if w.broken {
		c.pending = c.pending[:0]
		return
	}
	length, keepAlive10 := w.framing(final)
	w.writeStatus(w.status)
	w.writeFields(true)
	bw := c.bw
	if _, ok := w.header["Date"]; !ok {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.WriteString(httpDate())
		_, _ = bw.WriteString("\r\n")
	}
	w.writeSniffed(next)
	if length >= 0 && (bodyAllowed(w.status) || w.declared >= 0) {
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(strconv.AppendInt(c.scratch[:0], length, 10))
		_, _ = bw.WriteString("\r\n")
	}
	if w.chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	switch {
	case w.closeAfter:
		_, _ = bw.WriteString("Connection: close\r\n")
	case keepAlive10:
		_, _ = bw.WriteString("Connection: keep-alive\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	p := c.pending
	c.pending = c.pending[:0]
	if len(p) == 0 || w.noBody {
		return
	}
	if w.chunked {
		_, _ = bw.Write(strconv.AppendInt(c.scratch[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(p)
		_, _ = bw.WriteString("\r\n")
		return
	}
	_, _ = bw.Write(p)
}

// framing decides how the answer's body is delimited: by a length (-1:
// none), chunked (w.chunked) or the end of the connection
// (w.closeAfter); and whether an HTTP/1.0 answer says keep-alive.
func (w *response) framing(final bool) (length int64, keepAlive10 bool) {
	if vs := w.header["Connection"]; httpguts.HeaderValuesContainsToken(vs, "close") {
		w.closeAfter = true
	}
	length = -1
	switch {
	case w.noBody:
		if w.declared >= 0 {
			length = w.declared
		} else if final && w.req != nil && w.req.Method == http.MethodHead && bodyAllowed(w.status) && w.written > 0 {
			length = w.written
		}
	case w.declared >= 0:
		length = w.declared
	case final:
		length = int64(len(w.c.pending))
	case w.req == nil || w.req.ProtoAtLeast(1, 1):
		w.chunked = true
	default:
		w.closeAfter = true // HTTP/1.0: the body ends with the connection
	}
	// HTTP/1.0 that asked for keep-alive, and gets it.
	keepAlive10 = w.req != nil && !w.req.ProtoAtLeast(1, 1) && !w.closeAfter
	return length, keepAlive10
}

// writeStatus writes the status line.
func (w *response) writeStatus(code int) {
	bw := w.c.bw
	_, _ = bw.WriteString("HTTP/1.1 ")
	_, _ = bw.Write(strconv.AppendInt(w.c.scratch[:0], int64(code), 10))
	_ = bw.WriteByte(' ')
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	_, _ = bw.WriteString(text)
	_, _ = bw.WriteString("\r\n")
}

// writeFields writes the handler's header fields, less those the server
// writes itself (framing, Connection) when final; fields with invalid
// names are left out, and line breaks in values become spaces.
func (w *response) writeFields(final bool) {
	bw := w.c.bw
	for k, vs := range w.header {
		if final && serverField(k) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vs {
			_, _ = bw.WriteString(k)
			_, _ = bw.WriteString(": ")
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			_, _ = bw.WriteString(strings.TrimSpace(v))
			_, _ = bw.WriteString("\r\n")
		}
	}
}

// writeSniffed writes a Content-Type sniffed from the body's first bytes
// (the pending ones, else next) when the handler set none.
func (w *response) writeSniffed(next []byte) {
	if _, ok := w.header["Content-Type"]; ok || w.noBody {
		return
	}
	sniff := w.c.pending
	if len(sniff) == 0 {
		sniff = next
	}
	if len(sniff) == 0 {
		return
	}
	bw := w.c.bw
	_, _ = bw.WriteString("Content-Type: ")
	_, _ = bw.WriteString(http.DetectContentType(sniff))
	_, _ = bw.WriteString("\r\n")
}

// serverField reports the fields the server writes itself.
func serverField(k string) bool {
	switch k {
	case "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
		return true
	}
	return false
}

// finish ends the answer after the handler returned.
func (w *response) finish() {
	if w.done {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(true, nil)
	} else if w.chunked && !w.broken {
		_, _ = w.c.bw.WriteString("0\r\n\r\n")
	}
	w.done = true
	if w.declared >= 0 && w.written != w.declared && !w.noBody {
		w.closeAfter = true // the client waits for bytes that will not come
	}
	w.flush()
}

func (w *response) flush() {
	if w.broken {
		return
	}
	if err := w.c.bw.Flush(); err != nil {
		w.broken = true
	}
}

// dateCache holds the Date header of the current second.
var dateCache atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

// httpDate is the Date header for now.
func httpDate() string {
	now := time.Now()
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &dateValue{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}
