package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/scrub"
)

// Reason codes this package produces itself. Errors from the model layer
// keep their own reasons. Where the same problem can arise over gRPC the
// code matches grpcapi's.
const (
	reasonInvalidJSON          = "invalid_json"
	reasonInvalidRequest       = "invalid_request"
	reasonInvalidInput         = "invalid_input"
	reasonDuplicateInput       = "duplicate_input"
	reasonDuplicateOutput      = "duplicate_output"
	reasonInvalidDatatype      = "invalid_datatype"
	reasonInvalidShape         = "invalid_shape"
	reasonSizeMismatch         = "tensor_size_mismatch"
	reasonRaggedData           = "ragged_data"
	reasonContentsMismatch     = "contents_datatype_mismatch"
	reasonValueOutOfRange      = "value_out_of_range"
	reasonInvalidParameter     = "invalid_parameter"
	reasonUnsupportedParameter = "unsupported_parameter"
	reasonInvalidBinarySize    = "invalid_binary_size"
	reasonInvalidHeader        = "invalid_header"
	reasonUnsupportedEncoding  = "unsupported_content_encoding"
	reasonRawInput             = "raw_input_unsupported"
	reasonBodyTooLarge         = "body_too_large"
	reasonOverloaded           = admission.ReasonOverloaded
	reasonUnrepresentable      = "unrepresentable_value"
	reasonInvalidConfig        = "invalid_config"
	reasonNotFound             = "not_found"
	reasonMethodNotAllowed     = "method_not_allowed"
	reasonCanceled             = "canceled"
	reasonDeadlineExceeded     = "deadline_exceeded"
	reasonInternal             = "internal"
)

// statusOf maps an error to its HTTP status and reason code. This is the
// only place a domain error Kind becomes an HTTP status.
func statusOf(err error) (int, string) {
	if ie, ok := errors.AsType[*infer.Error](err); ok {
		reason := ie.Reason
		if reason == "" {
			reason = reasonInternal
		}
		switch ie.Kind {
		case infer.KindInvalid, infer.KindUnsupported:
			return http.StatusBadRequest, reason
		case infer.KindNotFound:
			return http.StatusNotFound, reason
		case infer.KindUnavailable:
			return http.StatusServiceUnavailable, reason
		case infer.KindResourceExhausted:
			if reason == reasonBodyTooLarge {
				return http.StatusRequestEntityTooLarge, reason
			}
			return http.StatusTooManyRequests, reason
		case infer.KindConflict:
			return http.StatusConflict, reason
		case infer.KindTimeout:
			return http.StatusGatewayTimeout, reason
		case infer.KindUnauthenticated:
			return http.StatusUnauthorized, reason
		case infer.KindPermissionDenied:
			return http.StatusForbidden, reason
		default:
			return http.StatusInternalServerError, reason
		}
	}
	switch {
	case isMaxBytes(err):
		return http.StatusRequestEntityTooLarge, reasonBodyTooLarge
	case errors.Is(err, admission.ErrOverloaded):
		return http.StatusServiceUnavailable, reasonOverloaded
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, reasonDeadlineExceeded
	case errors.Is(err, context.Canceled):
		// 499 is nginx's private code; clients that went away see nothing,
		// and proxies understand a plain 400 better.
		return http.StatusBadRequest, reasonCanceled
	}
	return http.StatusInternalServerError, reasonInternal
}

// isMaxBytes reports whether err comes from http.MaxBytesReader.
func isMaxBytes(err error) bool {
	_, ok := errors.AsType[*http.MaxBytesError](err)
	return ok
}

// invalidf builds a KindInvalid domain error.
func invalidf(reason, format string, args ...any) *infer.Error {
	return infer.Errorf(infer.KindInvalid, reason, format, args...)
}

// writeError answers with the JSON error body {"error", "reason"} and the
// status that err maps to. Server-side failures are logged with the request
// id; client mistakes only at debug level, so a noisy client cannot flood
// the log.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, requestID string, err error) {
	code, reason := statusOf(err)
	msg := err.Error()
	if code >= 500 {
		h.logger.Error("request failed", "request_id", requestID, "method", r.Method, "path", r.URL.Path,
			"status", code, "reason", reason, "err", err)
		msg = scrub.Message(msg) // the log line above keeps the addresses and paths
	} else {
		h.logger.Debug("request rejected", "request_id", requestID, "method", r.Method, "path", r.URL.Path,
			"status", code, "reason", reason, "err", err)
	}
	writeErrorBody(w, code, reason, msg)
}

// writeErrorBody writes {"error": msg, "reason": reason} with status code.
func writeErrorBody(w http.ResponseWriter, code int, reason, msg string) {
	b := make([]byte, 0, len(msg)+len(reason)+32)
	b = append(b, `{"error":`...)
	b = jsonenc.AppendString(b, msg)
	b = append(b, `,"reason":`...)
	b = jsonenc.AppendString(b, reason)
	b = append(b, "}\n"...)
	hdr := w.Header()
	hdr.Del("Inference-Header-Content-Length")
	hdr.Set("Content-Type", "application/json")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Del("Content-Length")
	if reason == reasonOverloaded {
		hdr.Set("Retry-After", "1") // the process's byte budget frees as requests finish
	}
	w.WriteHeader(code)
	_, _ = w.Write(b) //nolint:gosec // G705: a JSON body sent as application/json with nosniff, not HTML
}

// StatusOf maps an error to the HTTP status and reason code every Sluice
// HTTP edge uses (the gateway's too).
func StatusOf(err error) (int, string) { return statusOf(err) }
