package apierr

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/scrub"
)

// kindCodes maps a domain error kind to its gRPC code.
var kindCodes = [...]codes.Code{
	KindInternal:          codes.Internal,
	KindInvalid:           codes.InvalidArgument,
	KindNotFound:          codes.NotFound,
	KindUnavailable:       codes.Unavailable,
	KindResourceExhausted: codes.ResourceExhausted,
	KindConflict:          codes.FailedPrecondition,
	KindUnsupported:       codes.Unimplemented,
	KindTimeout:           codes.DeadlineExceeded,
	KindUnauthenticated:   codes.Unauthenticated,
	KindPermissionDenied:  codes.PermissionDenied,
}

// codeKinds maps a gRPC code to its domain error kind and the reason a
// status without an ErrorInfo gets: the inverse of kindCodes, with the
// codes Sluice never sends folded in.
var codeKinds = [...]struct {
	kind   Kind
	reason string
}{
	codes.OK:                 {KindInternal, ReasonInternal},
	codes.Canceled:           {KindUnavailable, ReasonCanceled},
	codes.Unknown:            {KindInternal, ReasonInternal},
	codes.InvalidArgument:    {KindInvalid, "invalid_argument"},
	codes.DeadlineExceeded:   {KindTimeout, ReasonDeadlineExceeded},
	codes.NotFound:           {KindNotFound, "not_found"},
	codes.AlreadyExists:      {KindConflict, "already_exists"},
	codes.PermissionDenied:   {KindPermissionDenied, "permission_denied"},
	codes.ResourceExhausted:  {KindResourceExhausted, "resource_exhausted"},
	codes.FailedPrecondition: {KindConflict, "failed_precondition"},
	codes.Aborted:            {KindUnavailable, "aborted"},
	codes.OutOfRange:         {KindInvalid, "out_of_range"},
	codes.Unimplemented:      {KindUnsupported, "unimplemented"},
	codes.Internal:           {KindInternal, ReasonInternal},
	codes.Unavailable:        {KindUnavailable, "unavailable"},
	codes.DataLoss:           {KindInternal, ReasonInternal},
	codes.Unauthenticated:    {KindUnauthenticated, "unauthenticated"},
}

// KindCode returns the gRPC code of an error of kind.
func KindCode(kind Kind) codes.Code {
	if int(kind) < len(kindCodes) {
		return kindCodes[kind]
	}
	return codes.Internal
}

// KindOf returns the domain error kind of a gRPC code; codes it does not
// know (and OK) are KindInternal.
func KindOf(c codes.Code) Kind {
	if int(c) < len(codeKinds) {
		return codeKinds[c].kind
	}
	return KindInternal
}

// CodeReason returns the reason FromGRPC gives a status with code c that
// carries no usable ErrorInfo: the code's name in snake_case, "internal"
// for Unknown, Internal and DataLoss.
func CodeReason(c codes.Code) string {
	if int(c) < len(codeKinds) {
		return codeKinds[c].reason
	}
	return ReasonInternal
}

// CodeHTTPStatus returns the HTTP status Sluice's HTTP edges answer for
// the error a gRPC status with code c and reason stands for, so that a
// gRPC outcome can be logged or audited next to HTTP ones: 200 for OK,
// 400 for Canceled (what an HTTP edge answers a client that went away),
// else the status of the code's kind (KindOf, KindHTTPStatus).
func CodeHTTPStatus(c codes.Code, reason string) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return http.StatusBadRequest
	default:
		return KindHTTPStatus(KindOf(c), reason)
	}
}

// GRPCCode returns the gRPC code err answers with: the code of an
// *apierr.Error's Kind, ResourceExhausted for an *http.MaxBytesError,
// DeadlineExceeded or Canceled for context errors, the code of an error
// carrying a gRPC status, and Internal otherwise. A nil err is OK.
func GRPCCode(err error) codes.Code {
	code, _ := classify(err)
	return code
}

func classify(err error) (codes.Code, string) {
	if err == nil {
		return codes.OK, ""
	}
	if ie, ok := errors.AsType[*Error](err); ok {
		reason := ie.Reason
		if reason == "" {
			reason = ReasonInternal
		}
		return KindCode(ie.Kind), reason
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return codes.ResourceExhausted, ReasonBodyTooLarge
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, ReasonDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled, ReasonCanceled
	}
	if s, ok := status.FromError(err); ok {
		return s.Code(), StatusReason(s)
	}
	return codes.Internal, ReasonInternal
}

// GRPCStatus turns err into the gRPC status error every Sluice gRPC edge
// returns: the code err maps to, err's message (scrubbed for server-side
// failures) and an ErrorInfo detail with its reason in ErrorDomain. An
// error that already carries a gRPC status and no *apierr.Error (one from
// grpc itself, or from an interceptor) is returned as it is. A nil err is
// nil.
func GRPCStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); !ok {
		if _, ok := status.FromError(err); ok {
			return err
		}
	}
	code, reason := classify(err)
	msg := err.Error()
	// Server-side failures (what an HTTP edge answers 5xx) are scrubbed;
	// the server's log keeps the detail.
	if CodeHTTPStatus(code, reason) >= http.StatusInternalServerError {
		msg = scrub.Message(msg)
	}
	return StatusError(code, reason, msg)
}

// StatusError builds a status error with code and msg and an ErrorInfo
// detail carrying reason in ErrorDomain.
func StatusError(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = withInfo
	}
	return st.Err()
}

// StatusReason returns the reason of st's first ErrorInfo detail when it
// looks like a reason code (CleanReason), or "". The status may come
// from the network, so anything odd is dropped rather than passed on.
func StatusReason(st *status.Status) string {
	if len(st.Proto().GetDetails()) == 0 {
		return "" // skip decoding the details, the common case for Triton
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return CleanReason(info.GetReason())
		}
	}
	return ""
}

// MaxMessageLen bounds how much of a received status message FromGRPC
// keeps, so a hostile or chatty server cannot blow up logs and error
// bodies.
const MaxMessageLen = 512

// FromGRPC turns an error a gRPC client call returned into an
// *apierr.Error: Kind from the status code (KindOf), Reason from its
// ErrorInfo (StatusReason) or else CodeReason, Msg the status message cut
// to MaxMessageLen bytes of valid UTF-8. An error that already holds an
// *apierr.Error, one that carries no gRPC status, and nil are returned as
// they are.
func FromGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	reason := StatusReason(st)
	if reason == "" {
		reason = CodeReason(st.Code())
	}
	return &Error{Kind: KindOf(st.Code()), Reason: reason, Msg: Truncate(st.Message(), MaxMessageLen)}
}

// Truncate cuts s to at most limit bytes on a rune boundary, marking the
// cut with an ellipsis, and replaces invalid UTF-8 with U+FFFD.
func Truncate(s string, limit int) string {
	if len(s) > limit {
		cut := max(limit, 0)
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
