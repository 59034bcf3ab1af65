package admission

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Reason codes of admission's refusals, as they appear in the JSON error
// body, the gRPC ErrorInfo and the rejections metric: wire's, since every
// edge answers them.
const (
	ReasonOverloaded     = apierr.ReasonOverloaded
	ReasonBodyTooLarge   = apierr.ReasonBodyTooLarge
	ReasonTooManyHeaders = apierr.ReasonTooManyHeaders
)

var (
	// ErrOverloaded reports that the process's in-flight byte budget could
	// not take a request's bytes. The request is refused, not queued; the
	// client may retry (answers carry Retry-After: 1). It is an
	// *apierr.Error of kind ResourceExhausted and reason "overloaded", so
	// every edge answers it the same way through package apierr (HTTP 503,
	// gRPC ResourceExhausted) without knowing this package; match it with
	// errors.Is.
	ErrOverloaded error = &apierr.Error{
		Kind:   apierr.KindResourceExhausted,
		Reason: ReasonOverloaded,
		Msg:    "server overloaded: the in-flight request memory budget is exhausted",
	}

	// ErrBodyTooLarge reports a request body larger than its listener's
	// MaxBodyBytes. Errors that wrap it are *BodyTooLargeError values,
	// which also match *http.MaxBytesError with errors.As.
	ErrBodyTooLarge = errors.New("request body too large")
)

// BodyTooLargeError is the error a body wrapped by Handler returns once
// more than Limit bytes were read. It matches ErrBodyTooLarge with
// errors.Is and *http.MaxBytesError with errors.As, so code that already
// maps http.MaxBytesReader's error to 413 keeps doing so.
type BodyTooLargeError struct {
	Limit int64
}

// Error names the limit the body exceeded.
func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("request body exceeds the limit of %d bytes", e.Limit)
}

// Is reports whether target is ErrBodyTooLarge.
func (e *BodyTooLargeError) Is(target error) bool { return target == ErrBodyTooLarge }

// As sets a **http.MaxBytesError target to an equivalent MaxBytesError.
func (e *BodyTooLargeError) As(target any) bool {
	if p, ok := target.(**http.MaxBytesError); ok {
		*p = &http.MaxBytesError{Limit: e.Limit}
		return true
	}
	return false
}
