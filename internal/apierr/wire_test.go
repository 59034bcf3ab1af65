package apierr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestKinds(t *testing.T) {
	tests := []struct {
		kind   Kind
		reason string
		http   int
		code   codes.Code
	}{
		{KindInternal, "backend_error", http.StatusInternalServerError, codes.Internal},
		{KindInvalid, ReasonInvalidShape, http.StatusBadRequest, codes.InvalidArgument},
		{KindNotFound, "model_not_found", http.StatusNotFound, codes.NotFound},
		{KindUnavailable, "model_not_ready", http.StatusServiceUnavailable, codes.Unavailable},
		{KindResourceExhausted, "queue_full", http.StatusTooManyRequests, codes.ResourceExhausted},
		{KindResourceExhausted, ReasonRateLimited, http.StatusTooManyRequests, codes.ResourceExhausted},
		{KindResourceExhausted, ReasonBodyTooLarge, http.StatusRequestEntityTooLarge, codes.ResourceExhausted},
		{KindResourceExhausted, ReasonTooManyEntityRows, http.StatusRequestEntityTooLarge, codes.ResourceExhausted},
		{KindResourceExhausted, ReasonOverloaded, http.StatusServiceUnavailable, codes.ResourceExhausted},
		{KindConflict, "model_in_use", http.StatusConflict, codes.FailedPrecondition},
		{KindUnsupported, "unsupported_parameter", http.StatusBadRequest, codes.Unimplemented},
		{KindTimeout, "queue_timeout", http.StatusGatewayTimeout, codes.DeadlineExceeded},
		{KindUnauthenticated, "missing_credential", http.StatusUnauthorized, codes.Unauthenticated},
		{KindPermissionDenied, "insufficient_role", http.StatusForbidden, codes.PermissionDenied},
	}
	seen := map[Kind]bool{}
	for _, tt := range tests {
		seen[tt.kind] = true
		t.Run(fmt.Sprintf("%d/%s", tt.kind, tt.reason), func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", Errorf(tt.kind, tt.reason, "model 'm': something"))

			code, reason := HTTPStatus(err)
			require.Equal(t, tt.http, code)
			require.Equal(t, tt.reason, reason)

			serr := GRPCStatus(err)
			st, ok := status.FromError(serr)
			require.True(t, ok)
			require.Equal(t, tt.code, st.Code())
			require.Equal(t, tt.code, GRPCCode(err))
			require.Equal(t, "wrapped: model 'm': something", st.Message())
			info := errorInfo(t, st)
			require.Equal(t, tt.reason, info.GetReason())
			require.Equal(t, ErrorDomain, info.GetDomain())

			// A client reading the status gets the same kind and reason back.
			back, ok := errors.AsType[*Error](FromGRPC(serr))
			require.True(t, ok)
			require.Equal(t, tt.kind, back.Kind)
			require.Equal(t, tt.reason, back.Reason)
			require.Equal(t, st.Message(), back.Msg)

			// Logged or audited as the HTTP edge would answer it.
			require.Equal(t, tt.http, CodeHTTPStatus(st.Code(), info.GetReason()))
		})
	}
	for k := KindInternal; k <= KindPermissionDenied; k++ {
		require.True(t, seen[k], "kind %d is not in the table", k)
	}
}

func TestNonDomainErrors(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		http   int
		code   codes.Code
		reason string
	}{
		{"deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, codes.DeadlineExceeded, ReasonDeadlineExceeded},
		{"canceled", context.Canceled, http.StatusBadRequest, codes.Canceled, ReasonCanceled},
		{"max bytes", fmt.Errorf("read body: %w", &http.MaxBytesError{Limit: 10}), http.StatusRequestEntityTooLarge, codes.ResourceExhausted, ReasonBodyTooLarge},
		{"plain", errors.New("boom"), http.StatusInternalServerError, codes.Internal, ReasonInternal},
		{"no reason", &Error{Kind: KindInvalid, Msg: "x"}, http.StatusBadRequest, codes.InvalidArgument, ReasonInternal},
		{"unknown kind", &Error{Kind: 200, Reason: "odd", Msg: "x"}, http.StatusInternalServerError, codes.Internal, "odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, reason := HTTPStatus(tt.err)
			require.Equal(t, tt.http, code)
			require.Equal(t, tt.reason, reason)
			st := status.Convert(GRPCStatus(tt.err))
			require.Equal(t, tt.code, st.Code())
			require.Equal(t, tt.reason, errorInfo(t, st).GetReason())
		})
	}
	t.Run("nil", func(t *testing.T) {
		code, reason := HTTPStatus(nil)
		require.Equal(t, http.StatusOK, code)
		require.Empty(t, reason)
		require.NoError(t, GRPCStatus(nil))
		require.NoError(t, FromGRPC(nil))
		require.Equal(t, codes.OK, GRPCCode(nil))
	})
	t.Run("status passes through", func(t *testing.T) {
		in := status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
		require.Equal(t, in, GRPCStatus(in))
		require.Equal(t, codes.ResourceExhausted, GRPCCode(in))
	})
}

func TestGRPCStatusScrubsServerErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"internal", Errorf(KindInternal, "backend_error", "open /var/lib/sluice/m.onnx: denied"), "open [path]: denied"},
		{"unavailable", Errorf(KindUnavailable, "upstream_unavailable", "endpoint 10.0.0.7:8001 unavailable"), "endpoint [address] unavailable"},
		{"client error kept", Errorf(KindInvalid, ReasonInvalidInput, "input 'x' from 10.0.0.7"), "input 'x' from 10.0.0.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, status.Convert(GRPCStatus(tt.err)).Message())
		})
	}
}

func TestCodeHTTPStatus(t *testing.T) {
	for _, tt := range []struct {
		code   codes.Code
		reason string
		want   int
	}{
		{codes.OK, "", http.StatusOK},
		{codes.Canceled, ReasonCanceled, http.StatusBadRequest},
		{codes.Unknown, "", http.StatusInternalServerError},
		{codes.AlreadyExists, "", http.StatusConflict},
		{codes.Aborted, "", http.StatusServiceUnavailable},
		{codes.OutOfRange, "", http.StatusBadRequest},
		{codes.DataLoss, "", http.StatusInternalServerError},
		{codes.ResourceExhausted, "", http.StatusTooManyRequests},
		{codes.Code(99), "", http.StatusInternalServerError},
	} {
		require.Equal(t, tt.want, CodeHTTPStatus(tt.code, tt.reason), "%v %q", tt.code, tt.reason)
	}
}

func TestFromGRPC(t *testing.T) {
	withInfo := func(code codes.Code, msg, reason, domain string) error {
		st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: domain})
		require.NoError(t, err)
		return st.Err()
	}
	tests := []struct {
		name   string
		err    error
		kind   Kind
		reason string
		msg    string
	}{
		{"triton sends no reason", status.Error(codes.Unavailable, "model not ready"), KindUnavailable, "unavailable", "model not ready"},
		{"canceled", status.Error(codes.Canceled, "context canceled"), KindUnavailable, ReasonCanceled, "context canceled"},
		{"aborted", status.Error(codes.Aborted, "x"), KindUnavailable, "aborted", "x"},
		{"already exists", status.Error(codes.AlreadyExists, "x"), KindConflict, "already_exists", "x"},
		{"out of range", status.Error(codes.OutOfRange, "x"), KindInvalid, "out_of_range", "x"},
		{"unknown", status.Error(codes.Unknown, "x"), KindInternal, ReasonInternal, "x"},
		{"data loss", status.Error(codes.DataLoss, "x"), KindInternal, ReasonInternal, "x"},
		{"code out of range", status.Error(codes.Code(99), "x"), KindInternal, ReasonInternal, "x"},
		{"upper-case reason", withInfo(codes.NotFound, "x", "MODEL_NOT_FOUND", "googleapis.com"), KindNotFound, "model_not_found", "x"},
		{"odd reason dropped", withInfo(codes.NotFound, "x", "not found!", ErrorDomain), KindNotFound, "not_found", "x"},
		{"long reason dropped", withInfo(codes.Internal, "x", strings.Repeat("a", 65), ErrorDomain), KindInternal, ReasonInternal, "x"},
		{"long message cut", status.Error(codes.Internal, strings.Repeat("é", 400)), KindInternal, ReasonInternal, strings.Repeat("é", 256) + "…"},
		{"invalid utf-8", status.Error(codes.Internal, "a\xffb"), KindInternal, ReasonInternal, "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ie, ok := errors.AsType[*Error](FromGRPC(tt.err))
			require.True(t, ok)
			require.Equal(t, tt.kind, ie.Kind)
			require.Equal(t, tt.reason, ie.Reason)
			require.Equal(t, tt.msg, ie.Msg)
		})
	}
	t.Run("not a status", func(t *testing.T) {
		err := errors.New("dial: refused")
		require.Equal(t, err, FromGRPC(err))
	})
	t.Run("domain error kept", func(t *testing.T) {
		err := fmt.Errorf("call: %w", Errorf(KindTimeout, "upstream_timeout", "x"))
		require.Equal(t, err, FromGRPC(err))
	})
}

func TestWriteError(t *testing.T) {
	tests := []struct {
		name       string
		code       int
		reason     string
		msg        string
		extra      []Extra
		preset     map[string]string
		wantBody   string
		wantHeader map[string]string
	}{
		{
			name: "client error", code: http.StatusBadRequest, reason: ReasonInvalidShape,
			msg:        `input 'x' <b>&"quoted"` + "\n" + `from 10.0.0.7`,
			wantBody:   `{"error":"input 'x' <b>&\"quoted\"\nfrom 10.0.0.7","reason":"invalid_shape"}` + "\n",
			wantHeader: map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff", "Retry-After": ""},
		},
		{
			name: "server error scrubbed", code: http.StatusServiceUnavailable, reason: "online_store_unavailable",
			msg:      "read tcp 10.0.0.5:41294->10.0.0.7:6379: i/o timeout",
			wantBody: `{"error":"[socket]: i/o timeout","reason":"online_store_unavailable"}` + "\n",
		},
		{
			name: "request id and field", code: http.StatusNotFound, reason: "no_route", msg: "no route",
			extra:    []Extra{RequestID("r-1"), Field("feature_stale_reason", "stale"), RequestID(""), Field("empty", "")},
			wantBody: `{"error":"no route","reason":"no_route","request_id":"r-1","feature_stale_reason":"stale"}` + "\n",
		},
		{
			name: "overloaded gets retry-after", code: http.StatusServiceUnavailable, reason: ReasonOverloaded, msg: "server overloaded",
			wantBody:   `{"error":"server overloaded","reason":"overloaded"}` + "\n",
			wantHeader: map[string]string{"Retry-After": "1"},
		},
		{
			name: "caller's retry-after wins", code: http.StatusServiceUnavailable, reason: ReasonOverloaded, msg: "x",
			preset:     map[string]string{"Retry-After": "7"},
			wantBody:   `{"error":"x","reason":"overloaded"}` + "\n",
			wantHeader: map[string]string{"Retry-After": "7"},
		},
		{
			name: "rate limited", code: http.StatusTooManyRequests, reason: ReasonRateLimited, msg: "slow down",
			extra:      []Extra{RetryAfter(1500 * time.Millisecond)},
			wantBody:   `{"error":"slow down","reason":"rate_limited"}` + "\n",
			wantHeader: map[string]string{"Retry-After": "2"},
		},
		{
			name: "stale headers dropped", code: http.StatusInternalServerError, reason: ReasonInternal, msg: "internal error",
			preset:     map[string]string{"Inference-Header-Content-Length": "12", "Content-Length": "999"},
			wantBody:   `{"error":"internal error","reason":"internal"}` + "\n",
			wantHeader: map[string]string{"Inference-Header-Content-Length": "", "Content-Length": "47"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			for k, v := range tt.preset {
				rec.Header().Set(k, v)
			}
			WriteError(rec, tt.code, tt.reason, tt.msg, tt.extra...)
			require.Equal(t, tt.code, rec.Code)
			require.Equal(t, tt.wantBody, rec.Body.String())
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
			require.Equal(t, fmt.Sprint(len(tt.wantBody)), rec.Header().Get("Content-Length"))
			for k, v := range tt.wantHeader {
				require.Equal(t, v, rec.Header().Get(k), k)
			}
			var body map[string]string
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			require.Equal(t, tt.reason, body["reason"])
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{0, "1"}, {-time.Second, "1"}, {time.Millisecond, "1"}, {time.Second, "1"}, {1001 * time.Millisecond, "2"}, {90 * time.Second, "90"}} {
		require.Equal(t, tt.want, RetryAfter(tt.d).value, tt.d)
	}
}

func TestTruncate(t *testing.T) {
	require.Equal(t, "abc", Truncate("abc", 3))
	require.Equal(t, "ab…", Truncate("abcd", 2))
	require.Equal(t, "…", Truncate("é", 1))
	require.Equal(t, "…", Truncate("abc", -1))
}

func errorInfo(t *testing.T, st *status.Status) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	t.Fatalf("status %v has no ErrorInfo", st)
	return nil
}
