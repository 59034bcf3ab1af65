package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/scrub"
)

// ErrorDomain is the ErrorInfo domain attached to every error status this
// package returns. Clients match ErrorInfo.Reason within this domain.
const ErrorDomain = "sluice"

// Reason codes this package produces itself. Errors from the model layer
// keep their own reasons.
const (
	reasonMissingModelName = "missing_model_name"
	reasonInvalidInput     = "invalid_input"
	reasonDuplicateInput   = "duplicate_input"
	reasonInvalidDatatype  = "invalid_datatype"
	reasonInvalidShape     = "invalid_shape"
	reasonSizeMismatch     = "tensor_size_mismatch"
	reasonRawInputCount    = "raw_input_count_mismatch"
	reasonMixedRawAndTyped = "mixed_raw_and_typed"
	reasonContentsMismatch = "contents_datatype_mismatch"
	reasonRawOnlyDatatype  = "raw_contents_required"
	reasonValueOutOfRange  = "value_out_of_range"
	reasonInvalidParameter = "invalid_parameter"
	reasonUnsupportedRepo  = "unsupported_repository_name"
	reasonDeadlineExceeded = "deadline_exceeded"
	reasonCanceled         = "request_canceled"
	reasonInternal         = "internal"
)

// kindCodes maps a domain error kind to its gRPC code.
var kindCodes = map[infer.Kind]codes.Code{
	infer.KindInternal:          codes.Internal,
	infer.KindInvalid:           codes.InvalidArgument,
	infer.KindNotFound:          codes.NotFound,
	infer.KindUnavailable:       codes.Unavailable,
	infer.KindResourceExhausted: codes.ResourceExhausted,
	infer.KindConflict:          codes.FailedPrecondition,
	infer.KindUnsupported:       codes.Unimplemented,
	infer.KindTimeout:           codes.DeadlineExceeded,
	infer.KindUnauthenticated:   codes.Unauthenticated,
	infer.KindPermissionDenied:  codes.PermissionDenied,
}

// CodeOf returns the gRPC code for err: the code of an *infer.Error's
// Kind, DeadlineExceeded or Canceled for context errors, and Internal
// otherwise. A nil err is OK.
func CodeOf(err error) codes.Code {
	code, _ := classify(err)
	return code
}

func classify(err error) (codes.Code, string) {
	if err == nil {
		return codes.OK, ""
	}
	if ie, ok := errors.AsType[*infer.Error](err); ok {
		code, ok := kindCodes[ie.Kind]
		if !ok {
			code = codes.Internal
		}
		reason := ie.Reason
		if reason == "" {
			reason = reasonInternal
		}
		return code, reason
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, reasonDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled, reasonCanceled
	}
	if s, ok := status.FromError(err); ok {
		return s.Code(), reasonFromStatus(s)
	}
	return codes.Internal, reasonInternal
}

// toStatus turns a domain error into a gRPC status error whose message
// says what and where and whose ErrorInfo detail carries the reason code.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*infer.Error](err); !ok {
		if _, ok := status.FromError(err); ok {
			return err // already a status, e.g. from grpc itself
		}
	}
	code, reason := classify(err)
	msg := err.Error()
	switch code { //nolint:exhaustive // only server-side failures are scrubbed
	case codes.Internal, codes.Unavailable, codes.Unknown, codes.DataLoss:
		msg = scrub.Message(msg) // the server's log keeps the detail
	}
	return newStatus(code, reason, msg)
}

// newStatus builds a status error with an ErrorInfo detail.
func newStatus(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = withInfo
	}
	return st.Err()
}

// reasonFromStatus returns the ErrorInfo reason of s, or "".
func reasonFromStatus(s *status.Status) string {
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// invalidf builds a KindInvalid domain error.
func invalidf(reason, format string, args ...any) *infer.Error {
	return infer.Errorf(infer.KindInvalid, reason, format, args...)
}

// ToStatus turns a domain error into the gRPC status error every Sluice
// gRPC edge returns: the code its kind maps to and an ErrorInfo detail
// with its reason.
func ToStatus(err error) error { return toStatus(err) }
