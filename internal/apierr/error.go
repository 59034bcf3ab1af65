package apierr

import "fmt"

// Kind classifies an Error so the protocol edges can pick a status code.
// Only this package turns a Kind into an HTTP or gRPC status (its package
// doc has the table).
type Kind uint8

// The error kinds.
const (
	KindInternal          Kind = iota // 500 / Internal
	KindInvalid                       // 400 / InvalidArgument
	KindNotFound                      // 404 / NotFound
	KindUnavailable                   // 503 / Unavailable
	KindResourceExhausted             // 413, 429 or 503 / ResourceExhausted
	KindConflict                      // 409 / FailedPrecondition
	KindUnsupported                   // 400 / Unimplemented
	KindTimeout                       // 504 / DeadlineExceeded
	KindUnauthenticated               // 401 / Unauthenticated
	KindPermissionDenied              // 403 / PermissionDenied
)

// ReasonResponseTooLarge is a response larger than its model's maximum
// output (config.pbtxt parameter max_output_bytes, or the server's
// default) or than the process's in-flight budget could ever hold: the
// client must ask for less. The edges answer 413 / ResourceExhausted.
const ReasonResponseTooLarge = "response_too_large"

// Error is a domain error with a stable, snake_case reason code that
// clients can match on, e.g. "invalid_shape" or "model_not_found".
type Error struct {
	Kind   Kind
	Reason string
	Msg    string // says what and where: "input 'x': expected shape [-1,128], got [2,127]"
	Err    error  // optional cause
}

// Error returns Msg, with the cause appended when there is one.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error of the given kind and reason.
func Errorf(kind Kind, reason, format string, args ...any) *Error {
	return &Error{Kind: kind, Reason: reason, Msg: fmt.Sprintf(format, args...)}
}
