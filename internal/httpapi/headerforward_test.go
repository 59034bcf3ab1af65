package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// --http-header-forward-pattern: the headers it matches reach the model as
// request parameters (modelled on qa/L0_parameters, which sends headers
// and reads them back as parameters).
func TestHeaderForward(t *testing.T) {
	f := newFakeModels()
	h := New(f, Options{HeaderForward: regexp.MustCompile(`^triton-`)}, nil, prometheus.NewRegistry())
	body := strings.Replace(simpleRequest(seq(0, 16), seq(0, 16)), `"inputs"`, `"parameters":{"triton-kept":"from body"},"inputs"`, 1)
	rec := do(t, h, http.MethodPost, "/v2/models/simple/infer", []byte(body), map[string]string{
		"Triton-Tenant": "acme", "Triton-Kept": "from header", "Authorization": "secret",
	})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	f.mu.Lock()
	params := f.lastReq.Parameters
	f.mu.Unlock()
	require.Equal(t, infer.Parameters{"triton-tenant": "acme", "triton-kept": "from body"}, params, "matching headers only; the body wins")

	plain := New(f, Options{}, nil, prometheus.NewRegistry())
	rec = do(t, plain, http.MethodPost, "/v2/models/simple/infer", []byte(simpleRequest(seq(0, 16), seq(0, 16))), map[string]string{"Triton-Tenant": "acme"})
	require.Equal(t, http.StatusOK, rec.Code)
	f.mu.Lock()
	require.Empty(t, f.lastReq.Parameters, "no pattern, no forwarding")
	f.mu.Unlock()
}

// Under a pattern that forwards every header (qa/L0_parameters
// test_headers_reserved_rejected runs with --http-header-forward-pattern
// .*), a header named as a parameter Triton reserves is refused with 400
// "reserved for Triton usage"; ordinary headers still pass.
func TestHeaderForwardReservedNames(t *testing.T) {
	f := newFakeModels()
	h := New(f, Options{HeaderForward: regexp.MustCompile(`.*`)}, nil, prometheus.NewRegistry())
	req := []byte(simpleRequest(seq(0, 16), seq(0, 16)))
	for _, name := range []string{
		"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output",
		"triton_enable_empty_final_response", "triton_final_response", "triton_injected_via_header",
	} {
		rec := do(t, h, http.MethodPost, "/v2/models/simple/infer", req, map[string]string{name: "dummy-value"})
		requireError(t, rec, http.StatusBadRequest, "invalid_parameter", "header '"+name+"'", "reserved for Triton usage")
	}
	rec := do(t, h, http.MethodPost, "/v2/models/simple/infer", req, map[string]string{"My_Header_1": "my_value_1"})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	f.mu.Lock()
	require.Equal(t, "my_value_1", f.lastReq.Parameters["my_header_1"])
	f.mu.Unlock()
}

// The generate extension forwards headers as infer does: a header named
// as a reserved parameter is refused there too, before any stream starts.
func TestHeaderForwardReservedNamesGenerate(t *testing.T) {
	h := New(newFakeModels(), Options{HeaderForward: regexp.MustCompile(`.*`)}, nil, prometheus.NewRegistry())
	for _, path := range []string{"/v2/models/identity/generate", "/v2/models/identity/generate_stream"} {
		rec := do(t, h, http.MethodPost, path, []byte(`{"IN":[1,2,3,4]}`), map[string]string{"sequence_id": "7"})
		requireError(t, rec, http.StatusBadRequest, "invalid_parameter", "header 'sequence_id'", "reserved for Triton usage")
		rec = do(t, h, http.MethodPost, path, []byte(`{"IN":[1,2,3,4]}`), map[string]string{"My_Header_1": "v"})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
}

// qa/L0_parameters test_headers forwards 'This is a "quoted" string with
// a backslash\ ' (a trailing space) under --http-header-forward-pattern
// .* and reads it back unchanged, as Triton keeps header values as they
// arrive. Sent raw over a real connection (Go's server trims values), on
// one keep-alive connection twice so the second head is recorded too.
func TestHeaderForwardKeepsTrailingSpaces(t *testing.T) {
	f := newFakeModels()
	h := New(f, Options{HeaderForward: regexp.MustCompile(`.*`)}, nil, prometheus.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := NewServer(h, ServerOptions{})
	go func() { _ = srv.Serve(RecordHeads(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	br := bufio.NewReader(conn)
	body := simpleRequest(seq(0, 16), seq(0, 16))
	for _, want := range []string{`This is a "quoted" string with a backslash\ `, "two trailing tabs\t\t"} {
		_, err = fmt.Fprintf(conn, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"My_Header_3: %s\r\nMy_Header_1:   my_value_1  \r\nContent-Length: %d\r\n\r\n%s", want, len(body), body)
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		f.mu.Lock()
		params := f.lastReq.Parameters
		f.mu.Unlock()
		require.Equal(t, want, params["my_header_3"], "trailing whitespace kept")
		require.Equal(t, "my_value_1  ", params["my_header_1"], "leading whitespace dropped, trailing kept")
	}
}

// FuzzRawHeaderValues: whatever bytes a connection recorded, each value
// comes back as given or with only trailing spaces and tabs added.
func FuzzRawHeaderValues(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nMy_Header: a b  \r\n\r\n"), "my_header", "a b")
	f.Add([]byte("x: \t\r\nx:y\t\n"), "x", "y")
	f.Fuzz(func(t *testing.T, raw []byte, name, val string) {
		ctx := context.WithValue(context.Background(), rawHeadKey{}, raw)
		got := rawHeaderValues(ctx, name, []string{val, val})
		require.Len(t, got, 2)
		for _, g := range got {
			require.True(t, strings.HasPrefix(g, val))
			require.Empty(t, strings.Trim(g[len(val):], " \t"))
		}
	})
}

// A head over the server's limit through RecordHeads is answered 431 and
// the client reads it: the recording connection half-closes as a TCP
// connection does, so the server's close does not reset the connection
// under the client's unsent header bytes.
func TestRecordHeadsOversizedHeadAnswered(t *testing.T) {
	h := New(newFakeModels(), Options{}, nil, prometheus.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := NewServer(h, ServerOptions{MaxHeaderBytes: 16 << 10})
	go func() { _ = srv.Serve(RecordHeads(ln)) }()
	t.Cleanup(func() {
		_ = srv.Close()
		// net/http lingers half a second after the half-close before it
		// closes a refused connection; those goroutines end on their own.
		harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "refused connections closed", func() (bool, string) {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			return !strings.Contains(stacks, "closeWriteAndWait"), "net/http still lingering"
		})
	})

	var c net.Conn = &headConn{}
	_, ok := c.(interface{ CloseWrite() error })
	require.True(t, ok, "a recording connection half-closes as its TCP connection does")
	for range 3 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ln.Addr().String()+"/v2/health/live", nil)
		require.NoError(t, err)
		req.Header.Set("X-Hostile", strings.Repeat("h", 80<<10))
		tr := &http.Transport{}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		require.NoError(t, err, "the 431 answer is read, not lost to a reset")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	}
}
