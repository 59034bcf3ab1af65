package python

import (
	"errors"
	"fmt"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// The reasons of the *apierr.Error values the backend returns for
// inference requests.
const (
	// ReasonWorkerCrashed: the worker running the request died before
	// answering, or every worker of the version is down (KindUnavailable,
	// 503). The request may be retried; other instances keep serving.
	ReasonWorkerCrashed = "worker_crashed"
	// ReasonModelError: the model answered the request with
	// InferenceResponse(error=TritonError(...)). The kind follows the
	// TritonError code: none or INVALID_ARG is KindInvalid (400).
	ReasonModelError = "model_error"
	// ReasonModelException: execute() raised, or returned something other
	// than one InferenceResponse per request; every request of the call
	// fails (KindInternal, 500).
	ReasonModelException = "model_exception"
	// ReasonInvalidModelOutput: an output's batch dimension disagrees with
	// the request's batch size (KindInternal, 500). A requested output the
	// response lacks is left out, and one of another data type than the
	// configuration's is answered as the model made it, as Triton does.
	ReasonInvalidModelOutput = "invalid_model_output"
	// ReasonRequestTooLarge: the request does not fit in one worker
	// message (KindResourceExhausted).
	ReasonRequestTooLarge = "request_too_large"
)

var (
	// errDead is why a worker stopped answering; crash errors wrap it.
	errDead = errors.New("python worker is not running")
	// errNotSent marks a call that found its worker dead before sending
	// anything: it may go to another worker.
	errNotSent = errors.New("not sent")
)

// crashError is the error of a request whose worker died.
func crashError(model string, version int64, instance string, cause error) *apierr.Error {
	return &apierr.Error{
		Kind:   apierr.KindUnavailable,
		Reason: ReasonWorkerCrashed,
		Msg:    fmt.Sprintf("model '%s' version %d: python worker %s crashed while running the request", model, version, instance),
		Err:    cause,
	}
}

// kindOfCode maps a TritonError code to an error kind. A TritonError
// without a code is the model saying the request is bad: 400.
func kindOfCode(code byte) apierr.Kind {
	switch code {
	case codeInternal, codeUnknown:
		return apierr.KindInternal
	case codeNotFound:
		return apierr.KindNotFound
	case codeUnavailable, codeCancelled:
		return apierr.KindUnavailable
	case codeUnsupported:
		return apierr.KindUnsupported
	case codeAlreadyExists:
		return apierr.KindConflict
	default: // codeDefault, codeInvalidArg
		return apierr.KindInvalid
	}
}

// workerError is the JSON of an opError (and of an opFinalized that
// reports a failed finalize()).
type workerError struct {
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

// readyInfo is the JSON of opReady.
type readyInfo struct {
	Protocol int    `json:"protocol"`
	PID      int    `json:"pid"`
	Python   string `json:"python"`
	Numpy    string `json:"numpy"`
}

// logLine is the JSON of opLog.
type logLine struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
}
