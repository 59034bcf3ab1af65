package batch

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// The reasons of the *apierr.Error values the batcher returns.
const (
	// ReasonQueueFull: the request's priority level already holds
	// MaxQueueSize requests (KindUnavailable).
	ReasonQueueFull = "queue_full"
	// ReasonQueueTimeout: the request waited longer than its queue
	// timeout under the Reject action (KindUnavailable).
	ReasonQueueTimeout = "queue_timeout"
	// ReasonInvalidPriority: the priority is negative or above the
	// model's priority levels (KindInvalid).
	ReasonInvalidPriority = "invalid_priority"
	// ReasonModelUnloading: the batcher is closing (KindUnavailable).
	ReasonModelUnloading = "model_unloading"
	// ReasonDeadlineExceeded: the request's deadline passed before it ran
	// (KindTimeout).
	ReasonDeadlineExceeded = "deadline_exceeded"
	// ReasonCanceled: the request's context was cancelled before it ran
	// (KindUnavailable).
	ReasonCanceled = "canceled"
	// ReasonBackendError: the executor failed with a plain error or
	// returned outputs that do not fit the batch (KindInternal).
	ReasonBackendError = "backend_error"
)

// ctxError reports a request whose context ended.
func ctxError(ctx context.Context) *apierr.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &apierr.Error{Kind: apierr.KindTimeout, Reason: ReasonDeadlineExceeded, Msg: "request deadline exceeded", Err: context.Cause(ctx)}
	}
	return &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonCanceled, Msg: "request canceled", Err: context.Cause(ctx)}
}

func (b *Batcher) unloadingError() *apierr.Error {
	return apierr.Errorf(apierr.KindUnavailable, ReasonModelUnloading, "model '%s' version %s is unloading", b.model, b.version)
}

// queueFullError leads with Triton's words, which its QA looks for
// (qa/L0_simple_ensemble EnsembleStepMaxQueueSizeTest).
func (b *Batcher) queueFullError(level, size int) *apierr.Error {
	return apierr.Errorf(apierr.KindUnavailable, ReasonQueueFull,
		"model '%s' version %s: Exceeds maximum queue size: the queue of priority level %d is full (max_queue_size %d)", b.model, b.version, level+1, size)
}

// queueTimeoutError is Triton's message, whole: its QA compares the
// client's error message with it (qa/L0_batcher queue_timeout_test.py
// test_default_queue_policy_timeout_prompt_response). The reason code
// tells it apart from other unavailable errors.
func queueTimeoutError() *apierr.Error {
	return apierr.Errorf(apierr.KindUnavailable, ReasonQueueTimeout, "Request timeout expired")
}

// backendError keeps an executor's *apierr.Error and wraps anything else.
func (b *Batcher) backendError(ctx context.Context, err error) error {
	if ie, ok := errors.AsType[*apierr.Error](err); ok {
		return ie
	}
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	return &apierr.Error{
		Kind: apierr.KindInternal, Reason: ReasonBackendError,
		Msg: fmt.Sprintf("model '%s' version %s: execute", b.model, b.version), Err: err,
	}
}

// outputError reports executor outputs that cannot be split by request.
func (b *Batcher) outputError(format string, args ...any) error {
	return &apierr.Error{
		Kind: apierr.KindInternal, Reason: ReasonBackendError,
		Msg: fmt.Sprintf("model '%s' version %s: ", b.model, b.version) + fmt.Sprintf(format, args...),
	}
}
