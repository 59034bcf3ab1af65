package admission

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// testServer is an httptest server with Handler in front of next.
type testServer struct {
	url    string
	client *http.Client
	budget *Budget
	m      *Metrics
	reg    *prometheus.Registry
}

func startServer(t *testing.T, l Limits, budgetBytes int64, next http.Handler) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	b := NewBudget(budgetBytes, m)
	srv := httptest.NewUnstartedServer(Handler("test", l, b, m, next))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's recovered panic
	srv.Start()
	t.Cleanup(srv.Close)
	return &testServer{url: srv.URL, client: srv.Client(), budget: b, m: m, reg: reg}
}

// readAll is an endpoint that reads the whole body the way Sluice's body
// readers do and answers errors as they do: 413 for a MaxBytesError, 503
// for ErrOverloaded. It answers the body's length.
var readAll = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		apierr.WriteError(w, http.StatusRequestEntityTooLarge, ReasonBodyTooLarge, err.Error())
		return
	}
	switch {
	case errors.Is(err, ErrOverloaded):
		writeOverloaded(w)
	case err != nil:
		apierr.WriteError(w, http.StatusBadRequest, "invalid_request", err.Error())
	default:
		_, _ = w.Write([]byte(strconv.Itoa(len(b))))
	}
})

// post sends body to the server: with a Content-Length when known is
// true, chunked otherwise. hdr adds header fields.
// answer is a response read whole: its status, headers and body.
type answer struct {
	StatusCode int
	Header     http.Header
	Close      bool
	Body       []byte
}

// readAnswer reads resp's body; the caller closes it.
func readAnswer(t *testing.T, resp *http.Response) answer {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{StatusCode: resp.StatusCode, Header: resp.Header, Close: resp.Close, Body: body}
}

func (s *testServer) post(t *testing.T, body []byte, known bool, hdr http.Header) answer {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if !known {
		rd = io.MultiReader(rd) // hides the length: the transport sends it chunked
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url, rd)
	require.NoError(t, err)
	maps.Copy(req.Header, hdr)
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return readAnswer(t, resp)
}

// requireAnswer checks status and, for errors, the JSON body's reason.
func requireAnswer(t *testing.T, resp answer, status int, reason string) {
	t.Helper()
	body := resp.Body
	require.Equal(t, status, resp.StatusCode, "body: %s", body)
	if reason == "" {
		return
	}
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "body: %s", body)
	require.Equal(t, reason, e.Reason, "error: %s", e.Error)
	require.NotEmpty(t, e.Error)
	if status == http.StatusServiceUnavailable {
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, 5*time.Millisecond, what, func() (bool, string) { return cond(), "not yet" })
}

func manyHeaders(n int) http.Header {
	h := http.Header{}
	for i := range n {
		h.Set("X-Test-"+strconv.Itoa(i), "v")
	}
	return h
}

func TestHandler(t *testing.T) {
	const kib = 1 << 10
	limits := Limits{MaxBodyBytes: 64 * kib, MaxHeaderCount: 20}
	tests := []struct {
		name   string
		limits Limits
		budget int64
		size   int
		known  bool // Content-Length sent; chunked otherwise
		hdr    http.Header
		status int
		reason string // empty for success; also the rejections label counted once
	}{
		{name: "small with length", limits: limits, budget: kib * kib, size: kib, known: true, status: http.StatusOK},
		{name: "empty", limits: limits, budget: kib * kib, size: 0, known: true, status: http.StatusOK},
		{name: "at the limit with length", limits: limits, budget: kib * kib, size: 64 * kib, known: true, status: http.StatusOK},
		{name: "over the limit by length", limits: limits, budget: kib * kib, size: 64*kib + 1, known: true, status: http.StatusRequestEntityTooLarge, reason: ReasonBodyTooLarge},
		{name: "chunked under the limit", limits: limits, budget: kib * kib, size: 10 * kib, status: http.StatusOK},
		{name: "chunked at the limit", limits: limits, budget: kib * kib, size: 64 * kib, status: http.StatusOK},
		{name: "chunked over the limit", limits: limits, budget: kib * kib, size: 200 * kib, status: http.StatusRequestEntityTooLarge, reason: ReasonBodyTooLarge},
		{name: "length over the budget", limits: limits, budget: 16 * kib, size: 32 * kib, known: true, status: http.StatusServiceUnavailable, reason: ReasonOverloaded},
		{name: "chunked over the budget", limits: limits, budget: 16 * kib, size: 32 * kib, status: http.StatusServiceUnavailable, reason: ReasonOverloaded},
		{name: "no body limit, budget still applies", limits: Limits{}, budget: 16 * kib, size: 32 * kib, status: http.StatusServiceUnavailable, reason: ReasonOverloaded},
		{name: "unlimited budget", limits: limits, budget: 0, size: 64 * kib, status: http.StatusOK},
		{name: "too many headers", limits: limits, budget: kib * kib, size: kib, known: true, hdr: manyHeaders(21), status: http.StatusRequestHeaderFieldsTooLarge, reason: ReasonTooManyHeaders},
		{
			name: "repeated values count", limits: limits, budget: kib * kib, size: kib, known: true,
			hdr: http.Header{"X-Repeated": strings.Split(strings.Repeat("v,", 21), ",")}, status: http.StatusRequestHeaderFieldsTooLarge, reason: ReasonTooManyHeaders,
		},
		{name: "headers within the count", limits: limits, budget: kib * kib, size: kib, known: true, hdr: manyHeaders(10), status: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, tt.limits, tt.budget, readAll)
			resp := s.post(t, bytes.Repeat([]byte("x"), tt.size), tt.known, tt.hdr)
			requireAnswer(t, resp, tt.status, tt.reason)
			if tt.status == http.StatusRequestEntityTooLarge && tt.known {
				require.True(t, resp.Close, "a refused Content-Length body closes the connection")
			}
			for _, reason := range []string{ReasonOverloaded, ReasonBodyTooLarge, ReasonTooManyHeaders} {
				want := 0.0
				if reason == tt.reason {
					want = 1
				}
				require.InDelta(t, want, testutil.ToFloat64(s.m.rejections.WithLabelValues("test", reason)), 0, reason)
			}
			waitFor(t, "the budget to be released", func() bool { return s.budget.InUse() == 0 })
		})
	}
}

func TestHandlerGETUntouched(t *testing.T) {
	var sawBody io.ReadCloser
	s := startServer(t, DefaultLimits(1), 1, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawBody = r.Body
		w.WriteHeader(http.StatusNoContent)
	}))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url, nil)
	require.NoError(t, err)
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, http.NoBody, sawBody)
}

// slowUpload is a chunked upload whose body the test feeds through a pipe.
type slowUpload struct {
	pw   *io.PipeWriter
	done chan struct{}
	resp answer
	err  error
}

func (s *testServer) startUpload(ctx context.Context, t *testing.T) *slowUpload {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, pr)
	require.NoError(t, err)
	u := &slowUpload{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		resp, err := s.client.Do(req)
		if err != nil {
			u.err = err
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body) // the status is what the tests check
		u.resp = answer{StatusCode: resp.StatusCode, Header: resp.Header, Close: resp.Close, Body: body}
	}()
	t.Cleanup(func() {
		_ = pw.CloseWithError(errors.New("test over"))
		<-u.done
	})
	return u
}

func (u *slowUpload) wait(t *testing.T) (answer, error) {
	t.Helper()
	select {
	case <-u.done:
		return u.resp, u.err
	case <-time.After(10 * time.Second):
		t.Fatal("upload did not finish")
		return answer{}, nil
	}
}

func TestHandlerBudgetExhaustedBySlowUploads(t *testing.T) {
	const kib = 1 << 10
	s := startServer(t, Limits{MaxBodyBytes: 512 * kib}, 1024*kib, readAll)

	// Three uploads send 290 KiB each and stall: 870 KiB of the 1 MiB
	// budget (896 KiB of it open to chunked bodies) are held by bodies
	// still being read.
	var slow []*slowUpload
	for range 3 {
		u := s.startUpload(t.Context(), t)
		_, err := u.pw.Write(bytes.Repeat([]byte("s"), 290*kib))
		require.NoError(t, err)
		slow = append(slow, u)
	}
	waitFor(t, "the stalled bodies to be charged", func() bool { return s.budget.InUse() == 870*kib })

	// A fourth chunked upload runs past the budget: 503, not growth.
	u := s.startUpload(t.Context(), t)
	_, err := u.pw.Write(bytes.Repeat([]byte("f"), 200*kib))
	require.NoError(t, err)
	require.NoError(t, u.pw.Close())
	resp, err := u.wait(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.LessOrEqual(t, s.budget.InUse(), int64(1024*kib))

	// A body whose Content-Length does not fit is refused before it is read.
	resp = s.post(t, bytes.Repeat([]byte("c"), 200*kib), true, nil)
	requireAnswer(t, resp, http.StatusServiceUnavailable, ReasonOverloaded)

	// A small request still fits in what is left.
	waitFor(t, "the refused upload's charge to be released", func() bool { return s.budget.InUse() == 870*kib })
	resp = s.post(t, bytes.Repeat([]byte("k"), kib), true, nil)
	requireAnswer(t, resp, http.StatusOK, "")
	require.InDelta(t, 2, testutil.ToFloat64(s.m.rejections.WithLabelValues("test", ReasonOverloaded)), 0)
	require.InDelta(t, 870*kib, testutil.ToFloat64(s.m.inflight), 0)
	require.InDelta(t, 1024*kib, testutil.ToFloat64(s.m.budget), 0)

	// The stalled uploads finish and everything is released.
	for _, u := range slow {
		require.NoError(t, u.pw.Close())
		resp, err := u.wait(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	waitFor(t, "the budget to be released", func() bool { return s.budget.InUse() == 0 })
	require.InDelta(t, 0, testutil.ToFloat64(s.m.inflight), 0)
}

// TestHandlerReserveKeepsSmallRequests: chunked uploads that hold all the
// budget they may (seven eighths) leave the reserve to requests that
// declare a small body; a chunked or a large request is refused.
func TestHandlerReserveKeepsSmallRequests(t *testing.T) {
	const mib = 1 << 20
	s := startServer(t, Limits{MaxBodyBytes: 8 * mib}, 16*mib, readAll)
	for range 2 {
		u := s.startUpload(t.Context(), t)
		_, err := u.pw.Write(bytes.Repeat([]byte("s"), 13*mib/2))
		require.NoError(t, err)
	}
	waitFor(t, "the stalled bodies to be charged", func() bool { return s.budget.InUse() == 13*mib })

	// 1.5 MiB more would fit the 16 MiB budget, but not the 14 MiB open
	// to chunked and large bodies.
	requireAnswer(t, s.post(t, bytes.Repeat([]byte("c"), 3*mib/2), false, nil), http.StatusServiceUnavailable, ReasonOverloaded)
	requireAnswer(t, s.post(t, bytes.Repeat([]byte("l"), 3*mib/2), true, nil), http.StatusServiceUnavailable, ReasonOverloaded)
	for range 3 {
		requireAnswer(t, s.post(t, bytes.Repeat([]byte("k"), SmallBytes), true, nil), http.StatusOK, "")
	}
	waitFor(t, "the refused and answered requests to be released", func() bool { return s.budget.InUse() == 13*mib })
}

func TestHandlerReleasesOnDisconnect(t *testing.T) {
	const kib = 1 << 10
	tests := []struct {
		name  string
		known bool
	}{
		{name: "chunked"},
		{name: "content-length", known: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, Limits{MaxBodyBytes: 512 * kib}, 1024*kib, readAll)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			pr, pw := io.Pipe()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, pr)
			require.NoError(t, err)
			if tt.known {
				req.ContentLength = 400 * kib
			}
			var wg sync.WaitGroup
			wg.Go(func() {
				resp, err := s.client.Do(req)
				if err == nil {
					_ = resp.Body.Close()
				}
			})
			_, err = pw.Write(bytes.Repeat([]byte("d"), 100*kib))
			require.NoError(t, err)
			want := int64(100 * kib)
			if tt.known {
				want = 400 * kib // reserved up front
			}
			waitFor(t, "the body to be charged", func() bool { return s.budget.InUse() == want })
			cancel() // the client goes away mid-body
			_ = pw.CloseWithError(context.Canceled)
			wg.Wait()
			waitFor(t, "the budget to be released", func() bool { return s.budget.InUse() == 0 })
		})
	}
}

func TestHandlerReleasesOnPanic(t *testing.T) {
	const kib = 1 << 10
	for _, known := range []bool{false, true} {
		t.Run("known="+strconv.FormatBool(known), func(t *testing.T) {
			s := startServer(t, Limits{MaxBodyBytes: 512 * kib}, 1024*kib, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				panic(http.ErrAbortHandler)
			}))
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url,
				io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("p"), 100*kib))))
			require.NoError(t, err)
			if known {
				req.Body = io.NopCloser(bytes.NewReader(bytes.Repeat([]byte("p"), 100*kib)))
				req.ContentLength = 100 * kib
			}
			resp, err := s.client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			require.Error(t, err, "the aborted handler sends no answer")
			waitFor(t, "the budget to be released", func() bool { return s.budget.InUse() == 0 })
		})
	}
}

func TestCharge(t *testing.T) {
	const kib = 1 << 10
	var chargeErr error
	s := startServer(t, DefaultLimits(64*kib), 100*kib, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n, _ := strconv.ParseInt(r.URL.Query().Get("grow"), 10, 64)
		chargeErr = Charge(r.Context(), n)
		if errors.Is(chargeErr, ErrOverloaded) {
			writeOverloaded(w)
		}
	}))
	send := func(grow int, enc string) answer {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"?grow="+strconv.Itoa(grow), strings.NewReader(strings.Repeat("z", 10*kib)))
		require.NoError(t, err)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := s.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return readAnswer(t, resp)
	}

	// Growth is charged like a chunked body: within the 87.5 KiB of the
	// budget that is not the reserve.
	t.Run("growth that fits", func(t *testing.T) {
		requireAnswer(t, send(70*kib, "gzip"), http.StatusOK, "")
		require.NoError(t, chargeErr)
		require.Zero(t, s.budget.InUse())
	})
	t.Run("growth past the budget", func(t *testing.T) {
		requireAnswer(t, send(95*kib, "gzip"), http.StatusServiceUnavailable, ReasonOverloaded)
		require.ErrorIs(t, chargeErr, ErrOverloaded)
		require.Zero(t, s.budget.InUse())
	})
	t.Run("no account without an encoding", func(t *testing.T) {
		requireAnswer(t, send(1<<30, ""), http.StatusOK, "")
		require.NoError(t, chargeErr)
	})
	t.Run("a context not from Handler", func(t *testing.T) {
		require.NoError(t, Charge(t.Context(), 1<<40))
	})
}

func TestBodyErrors(t *testing.T) {
	b := NewBudget(100, nil)
	a := &account{b: b, rej: NewMetrics(nil).forListener("t")}
	rec := httptest.NewRecorder()
	bd := &body{rc: http.MaxBytesReader(rec, io.NopCloser(strings.NewReader(strings.Repeat("x", 60))), 50), acct: a, limit: 50}
	_, err := io.ReadAll(bd)
	require.ErrorIs(t, err, ErrBodyTooLarge)
	mbe, ok := errors.AsType[*http.MaxBytesError](err)
	require.True(t, ok, "a body over the limit matches *http.MaxBytesError")
	require.Equal(t, int64(50), mbe.Limit)
	_, err = bd.Read(make([]byte, 1))
	require.ErrorIs(t, err, ErrBodyTooLarge, "the error is sticky")
	a.close()
	require.Zero(t, b.InUse())

	a = &account{b: b, rej: NewMetrics(nil).forListener("t")}
	bd = &body{rc: io.NopCloser(strings.NewReader(strings.Repeat("x", 150))), acct: a}
	_, err = io.ReadAll(bd)
	require.ErrorIs(t, err, ErrOverloaded)
	require.NotErrorIs(t, err, ErrBodyTooLarge)
	a.close()
	require.Zero(t, b.InUse())
	require.ErrorIs(t, a.charge(1), ErrOverloaded, "a closed account takes no more")
	require.Zero(t, b.InUse())
}

// TestHandlerSmallRequestDoesNotAllocate holds the hot path to its
// promise: a small request with a Content-Length costs no allocation.
func TestHandlerSmallRequestDoesNotAllocate(t *testing.T) {
	h, w, req := benchSetup()
	allocs := testing.AllocsPerRun(100, func() { h.ServeHTTP(w, req) })
	require.Zero(t, allocs)
}

// A client that writes its whole oversized body before reading the answer
// (Triton's Python client sends a body over 64 MiB that way and reported
// a bare BrokenPipeError, issue 25) gets the 413 with its message: a body
// at most maxDrainBytes past the limit is read and discarded before the
// answer, not cut off by a reset. Raw TCP, so that nothing but the server
// decides when the connection ends.
func TestHandlerDrainsOversizedBody(t *testing.T) {
	const limit = 64 << 10
	s := startServer(t, Limits{MaxBodyBytes: limit}, 0, readAll)
	addr := strings.TrimPrefix(s.url, "http://")
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	size := 48 << 20 // far more than the loopback socket buffers hold
	_, err = fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", addr, size)
	require.NoError(t, err)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for sent := 0; sent < size; sent += len(chunk) {
		_, err := conn.Write(chunk)
		require.NoError(t, err, "the server stopped reading after %d of %d bytes", sent, size)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	requireAnswer(t, readAnswer(t, resp), http.StatusRequestEntityTooLarge, ReasonBodyTooLarge)
	require.True(t, resp.Close, "the connection still closes after the answer")
}
