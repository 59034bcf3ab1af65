package kserve

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Reason codes this package gives errors whose server sent none (Triton
// never does) or whose failure happened on the client side.
const (
	ReasonUnavailable       = "upstream_unavailable"
	ReasonTimeout           = "upstream_timeout"
	ReasonCanceled          = "upstream_canceled"
	ReasonResourceExhausted = "upstream_resource_exhausted"
	ReasonInvalid           = "upstream_invalid_argument"
	ReasonNotFound          = "upstream_not_found"
	ReasonConflict          = "upstream_failed_precondition"
	ReasonUnsupported       = "upstream_unimplemented"
	ReasonUnauthenticated   = "upstream_unauthenticated"
	ReasonPermissionDenied  = "upstream_permission_denied"
	ReasonError             = "upstream_error"
	// ReasonBadResponse marks a response that does not hold together:
	// sizes that disagree with shapes, unknown datatypes, missing names.
	ReasonBadResponse = "upstream_bad_response"
	// ReasonBadAddress marks an endpoint address gRPC cannot parse.
	ReasonBadAddress = "upstream_bad_address"
	// ReasonClientClosed marks a call made after Client.Close.
	ReasonClientClosed = "upstream_client_closed"
)

// codeReasons is the reason of a failed call whose server sent none, by
// gRPC code. The kind comes from apierr.KindOf, the inverse of what every
// Sluice gRPC edge answers.
var codeReasons = [...]string{
	codes.Canceled:           ReasonCanceled,
	codes.Unknown:            ReasonError,
	codes.InvalidArgument:    ReasonInvalid,
	codes.DeadlineExceeded:   ReasonTimeout,
	codes.NotFound:           ReasonNotFound,
	codes.AlreadyExists:      ReasonConflict,
	codes.PermissionDenied:   ReasonPermissionDenied,
	codes.ResourceExhausted:  ReasonResourceExhausted,
	codes.FailedPrecondition: ReasonConflict,
	codes.Aborted:            ReasonUnavailable,
	codes.OutOfRange:         ReasonInvalid,
	codes.Unimplemented:      ReasonUnsupported,
	codes.Internal:           ReasonError,
	codes.Unavailable:        ReasonUnavailable,
	codes.DataLoss:           ReasonError,
	codes.Unauthenticated:    ReasonUnauthenticated,
}

// RPCError is the error of a failed call to a model server. It carries
// both views a caller needs:
//
//   - the gRPC status (GRPCStatus, so status.FromError and status.Code
//     work on it and on errors wrapping it), to decide retries on
//     Unavailable, ResourceExhausted or DeadlineExceeded;
//   - an *apierr.Error (Unwrap, so errors.As finds it) whose Kind follows
//     the code and whose Reason is the server's ErrorInfo reason when it
//     sent one (Sluice does, Triton does not), else one of the Reason*
//     defaults of this package.
type RPCError struct {
	// Addr is the endpoint called, as passed to the Client.
	Addr string
	// Method is the RPC's short name, e.g. "ModelInfer".
	Method string
	// Status is the call's status; never nil, never OK.
	Status *status.Status
	// Err is the domain view of the failure; never nil.
	Err *apierr.Error
	// connectFailure: no connection ever carried the request.
	connectFailure bool
}

// Error returns the domain message, which names the method and endpoint.
func (e *RPCError) Error() string { return e.Err.Error() }

// Unwrap returns the *apierr.Error.
func (e *RPCError) Unwrap() error { return e.Err }

// GRPCStatus returns the call's status, for status.FromError.
func (e *RPCError) GRPCStatus() *status.Status { return e.Status }

// Code returns the call's gRPC code.
func (e *RPCError) Code() codes.Code { return e.Status.Code() }

// ConnectFailure reports whether the request never left the client because
// no connection to the endpoint could be established: the connection was
// refused, the TCP or HTTP/2 handshake failed or timed out, or the
// endpoint was in backoff after such a failure. Retrying such a call
// elsewhere is always safe. A call that failed after a connection carried
// it (the peer reset it, went away, or timed out) is not a connect
// failure; that is Envoy's "reset".
func (e *RPCError) ConnectFailure() bool { return e.connectFailure }

// IsConnectFailure reports whether err (or an error it wraps) is an
// *RPCError whose request never reached the server because no connection
// could be established (see RPCError.ConnectFailure). It matches Envoy's
// connect-failure retry condition.
func IsConnectFailure(err error) bool {
	if e, ok := errors.AsType[*RPCError](err); ok {
		return e.connectFailure
	}
	return false
}

// newRPCError builds the error of a failed call from its status.
func newRPCError(addr, method string, st *status.Status, connectFailure bool) *RPCError {
	code := st.Code()
	kind, reason := apierr.KindOf(code), ReasonError
	if int(code) < len(codeReasons) && code != codes.OK {
		reason = codeReasons[code]
	}
	if r := apierr.StatusReason(st); r != "" {
		reason = r
	}
	msg := method + " " + addr + ": " + code.String() + ": " + apierr.Truncate(st.Message(), apierr.MaxMessageLen)
	return &RPCError{
		Addr:           addr,
		Method:         method,
		Status:         st,
		Err:            &apierr.Error{Kind: kind, Reason: reason, Msg: msg},
		connectFailure: connectFailure,
	}
}

// localError builds an *RPCError for a failure found on the client side
// (a bad response, a bad address, a closed client) with the given code.
func localError(addr, method string, code codes.Code, ie *apierr.Error) *RPCError {
	msg := method + " " + addr + ": " + ie.Error()
	return &RPCError{
		Addr:   addr,
		Method: method,
		Status: status.New(code, msg),
		Err:    &apierr.Error{Kind: ie.Kind, Reason: ie.Reason, Msg: msg, Err: ie.Err},
	}
}
