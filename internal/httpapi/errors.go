package httpapi

import (
	"net/http"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Reason codes this package produces itself. Errors from the model layer
// keep their own reasons. Where the same problem can arise over gRPC the
// code is wire's, which grpcapi uses too.
const (
	reasonInvalidJSON         = apierr.ReasonInvalidJSON
	reasonInvalidRequest      = apierr.ReasonInvalidRequest
	reasonInvalidInput        = apierr.ReasonInvalidInput
	reasonDuplicateInput      = apierr.ReasonDuplicateInput
	reasonDuplicateOutput     = apierr.ReasonDuplicateOutput
	reasonInvalidDatatype     = apierr.ReasonInvalidDatatype
	reasonInvalidShape        = apierr.ReasonInvalidShape
	reasonSizeMismatch        = apierr.ReasonSizeMismatch
	reasonRaggedData          = "ragged_data"
	reasonContentsMismatch    = apierr.ReasonContentsMismatch
	reasonValueOutOfRange     = apierr.ReasonValueOutOfRange
	reasonInvalidParameter    = apierr.ReasonInvalidParameter
	reasonInvalidBinarySize   = "invalid_binary_size"
	reasonInvalidHeader       = "invalid_header"
	reasonUnsupportedEncoding = "unsupported_content_encoding"
	reasonRawInput            = "raw_input_unsupported"
	reasonBodyTooLarge        = apierr.ReasonBodyTooLarge
	reasonOverloaded          = apierr.ReasonOverloaded
	reasonUnrepresentable     = "unrepresentable_value"
	reasonNotFound            = apierr.ReasonNotFound
	reasonMethodNotAllowed    = apierr.ReasonMethodNotAllowed
	reasonInternal            = apierr.ReasonInternal
)

// statusOf maps an error to its HTTP status and reason code, as every
// Sluice edge does (package apierr).
func statusOf(err error) (int, string) { return apierr.HTTPStatus(err) }

// invalidf builds a KindInvalid domain error.
func invalidf(reason, format string, args ...any) *apierr.Error {
	return apierr.Errorf(apierr.KindInvalid, reason, format, args...)
}

// writeError answers with the JSON error body {"error", "reason"} and the
// status that err maps to. Server-side failures are logged with the request
// id; client mistakes only at debug level, so a noisy client cannot flood
// the log. apierr.WriteError scrubs a 5xx message; the log line keeps the
// addresses and paths.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, requestID string, err error) {
	code, reason := statusOf(err)
	if code >= 500 {
		h.logger.Error("request failed", "request_id", requestID, "method", r.Method, "path", r.URL.Path,
			"status", code, "reason", reason, "err", err)
	} else {
		h.logger.Debug("request rejected", "request_id", requestID, "method", r.Method, "path", r.URL.Path,
			"status", code, "reason", reason, "err", err)
	}
	apierr.WriteError(w, code, reason, err.Error())
}
