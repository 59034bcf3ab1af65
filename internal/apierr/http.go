package apierr

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/scrub"
)

// HTTPStatus returns the HTTP status and reason code err answers with
// (see the package doc for the table). A nil err is 200 with no reason.
func HTTPStatus(err error) (code int, reason string) {
	if err == nil {
		return http.StatusOK, ""
	}
	if ie, ok := errors.AsType[*Error](err); ok {
		reason = ie.Reason
		if reason == "" {
			reason = ReasonInternal
		}
		return KindHTTPStatus(ie.Kind, reason), reason
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return http.StatusRequestEntityTooLarge, ReasonBodyTooLarge
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, ReasonDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return http.StatusBadRequest, ReasonCanceled
	}
	return http.StatusInternalServerError, ReasonInternal
}

// KindHTTPStatus returns the HTTP status of an error of kind with reason;
// the reason matters only for KindResourceExhausted.
func KindHTTPStatus(kind Kind, reason string) int {
	switch kind {
	case KindInvalid, KindUnsupported:
		return http.StatusBadRequest
	case KindNotFound:
		return http.StatusNotFound
	case KindUnavailable:
		return http.StatusServiceUnavailable
	case KindResourceExhausted:
		switch reason {
		case ReasonBodyTooLarge, ReasonTooManyEntityRows, ReasonResponseTooLarge:
			return http.StatusRequestEntityTooLarge
		case ReasonOverloaded:
			return http.StatusServiceUnavailable
		default:
			return http.StatusTooManyRequests
		}
	case KindConflict:
		return http.StatusConflict
	case KindTimeout:
		return http.StatusGatewayTimeout
	case KindUnauthenticated:
		return http.StatusUnauthorized
	case KindPermissionDenied:
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}

// An Extra adds a member to an error body or a header to its answer; see
// RequestID, Field and RetryAfter.
type Extra struct {
	key, value string
	header     bool
}

// RequestID adds "request_id": id to the body; an empty id adds nothing.
func RequestID(id string) Extra { return Extra{key: "request_id", value: id} }

// Field adds the string member key: value to the body; an empty value
// adds nothing. Key must not be "error" or "reason".
func Field(key, value string) Extra { return Extra{key: key, value: value} }

// RetryAfter sets the Retry-After header to d in whole seconds, rounded
// up and at least 1.
func RetryAfter(d time.Duration) Extra {
	s := max(int64(math.Ceil(d.Seconds())), 1)
	return Extra{key: "Retry-After", value: strconv.FormatInt(s, 10), header: true}
}

// WriteError answers with status code and the JSON error body
// {"error": msg, "reason": reason} plus the members extra adds, followed
// by a newline. It sets Content-Type: application/json,
// X-Content-Type-Options: nosniff and Content-Length, and drops an
// Inference-Header-Content-Length a handler set before failing. A
// ReasonOverloaded answer carries Retry-After: 1 unless extra or the
// caller already set one. The message of a 5xx answer is scrubbed of
// addresses and absolute paths (package scrub): log the error before
// calling WriteError if the detail matters.
func WriteError(w http.ResponseWriter, code int, reason, msg string, extra ...Extra) {
	if code >= http.StatusInternalServerError {
		msg = scrub.Message(msg)
	}
	n := len(msg) + len(reason) + 24
	for _, e := range extra {
		n += len(e.key) + len(e.value) + 6
	}
	b := make([]byte, 0, n)
	b = append(b, `{"error":`...)
	b = jsonenc.AppendString(b, msg)
	b = append(b, `,"reason":`...)
	b = jsonenc.AppendString(b, reason)
	hdr := w.Header()
	for _, e := range extra {
		switch {
		case e.value == "":
		case e.header:
			hdr.Set(e.key, e.value)
		default:
			b = append(b, ',')
			b = jsonenc.AppendString(b, e.key)
			b = append(b, ':')
			b = jsonenc.AppendString(b, e.value)
		}
	}
	b = append(b, "}\n"...)
	if reason == ReasonOverloaded && hdr.Get("Retry-After") == "" {
		hdr.Set("Retry-After", "1") // the process's byte budget frees as requests finish
	}
	hdr.Del("Inference-Header-Content-Length")
	hdr.Set("Content-Type", "application/json")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
