package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestAdmission runs the inference endpoint behind admission's handler
// with AnswerBodyTooLarge, as the KServe HTTP port runs it, on a real
// server and checks the answers: 400 body_too_large in Triton's words past
// the listener's limit, whether the Content-Length says so up front or a
// chunked body runs over (qa/L0_http http_input_size_limit_test.py wants
// 400, "request JSON size of ... bytes exceeds the maximum allowed input
// size of" for JSON and "exceeds the maximum allowed value" for a raw
// body), 503 overloaded past the process budget, including when a gzip
// body inflates past it.
func TestAdmission(t *testing.T) {
	const kib = 1 << 10
	req := simpleRequest(seq(0, 16), seq(0, 16))
	padded := func(n int) []byte { return []byte(strings.Repeat(" ", n-len(req)) + req) }
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, err := zw.Write(b)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		return buf.Bytes()
	}
	tests := []struct {
		name    string
		limits  admission.Limits
		budget  int64
		body    []byte
		chunked bool
		enc     string
		raw     bool // Inference-Header-Content-Length: 0
		status  int
		reason  string
		want    string // in the error message
	}{
		{name: "within everything", limits: admission.DefaultLimits(64 * kib), budget: 1024 * kib, body: padded(4 * kib), status: http.StatusOK},
		{name: "chunked within everything", limits: admission.DefaultLimits(64 * kib), budget: 1024 * kib, body: padded(20 * kib), chunked: true, status: http.StatusOK},
		{
			name: "chunked over the listener limit", limits: admission.DefaultLimits(16 * kib), budget: 1024 * kib, body: padded(20 * kib), chunked: true,
			status: http.StatusBadRequest, reason: reasonBodyTooLarge, want: "request JSON size of over 16384 bytes exceeds the maximum allowed input size of 16384 bytes. Use --http-max-input-size to increase the limit.",
		},
		{
			name: "length over the listener limit", limits: admission.DefaultLimits(16 * kib), budget: 1024 * kib, body: padded(20 * kib),
			status: http.StatusBadRequest, reason: reasonBodyTooLarge, want: "request JSON size of 20480 bytes exceeds the maximum allowed input size of 16384 bytes. Use --http-max-input-size to increase the limit.",
		},
		{
			name: "raw body over the listener limit", limits: admission.DefaultLimits(16 * kib), budget: 1024 * kib, body: padded(20 * kib), raw: true,
			status: http.StatusBadRequest, reason: reasonBodyTooLarge, want: "Raw input has a byte_size (20480 bytes) that exceeds the maximum allowed value of 16384 bytes.",
		},
		{
			name: "chunked raw body over the listener limit", limits: admission.DefaultLimits(16 * kib), budget: 1024 * kib, body: padded(20 * kib), raw: true, chunked: true,
			status: http.StatusBadRequest, reason: reasonBodyTooLarge, want: "Raw input has a byte_size (over 16384 bytes) that exceeds the maximum allowed value of 16384 bytes.",
		},
		{
			name: "gzip inflating past the limit", limits: admission.DefaultLimits(64 * kib), budget: 1024 * kib, body: gz(padded(80 * kib)), enc: "gzip",
			status: http.StatusBadRequest, reason: reasonBodyTooLarge, want: "Decompressed data size exceeds the maximum allowed value of 65536 bytes.",
		},
		{
			name: "chunked past the budget", limits: admission.DefaultLimits(64 * kib), budget: 8 * kib, body: padded(20 * kib), chunked: true,
			status: http.StatusServiceUnavailable, reason: reasonOverloaded,
		},
		{name: "gzip that fits", limits: admission.DefaultLimits(64 * kib), budget: 1024 * kib, body: gz(padded(60 * kib)), enc: "gzip", status: http.StatusOK},
		{
			name: "gzip inflating past the budget", limits: admission.DefaultLimits(64 * kib), budget: 32 * kib, body: gz(padded(60 * kib)), enc: "gzip",
			status: http.StatusServiceUnavailable, reason: reasonOverloaded,
		},
		{
			name: "chunked gzip inflating past the budget", limits: admission.DefaultLimits(64 * kib), budget: 32 * kib, body: gz(padded(60 * kib)), chunked: true, enc: "gzip",
			status: http.StatusServiceUnavailable, reason: reasonOverloaded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := newTestHandler(t, newFakeModels())
			budget := admission.NewBudget(tt.budget, nil)
			srv := httptest.NewServer(admission.HandlerAnswering("kserve_http", tt.limits, budget, nil, AnswerBodyTooLarge, h))
			defer srv.Close()
			var body io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(body) // no length: sent chunked
			}
			r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v2/models/simple/infer", body)
			require.NoError(t, err)
			if tt.enc != "" {
				r.Header.Set("Content-Encoding", tt.enc)
			}
			if tt.raw {
				r.Header.Set(headerLength, "0")
			}
			resp, err := srv.Client().Do(r)
			require.NoError(t, err)
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tt.status, resp.StatusCode, "body: %s", got)
			if tt.reason != "" {
				var e struct{ Error, Reason string }
				require.NoError(t, json.Unmarshal(got, &e), "body: %s", got)
				require.Equal(t, tt.reason, e.Reason, "error: %s", e.Error)
				require.Contains(t, e.Error, tt.want)
				if tt.status == http.StatusServiceUnavailable {
					require.Equal(t, "1", resp.Header.Get("Retry-After"))
				}
			}
			harness.WaitFor(t, 10*time.Second, 5*time.Millisecond, "the budget released", func() (bool, string) {
				n := budget.InUse()
				return n == 0, fmt.Sprintf("budget still holds %d bytes", n)
			})
		})
	}
}

func TestStatusOfOverloaded(t *testing.T) {
	code, reason := statusOf(admission.ErrOverloaded)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, reasonOverloaded, reason)
	code, reason = statusOf(&admission.BodyTooLargeError{Limit: 10})
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Equal(t, reasonBodyTooLarge, reason)
}
