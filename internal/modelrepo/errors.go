package modelrepo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/modelconfig"
)

// Reasons of the *apierr.Error values this package returns to clients.
const (
	ReasonModelNotFound      = "model_not_found"
	ReasonVersionNotFound    = "version_not_found"
	ReasonModelNotReady      = "model_not_ready"
	ReasonControlDisabled    = "model_control_disabled"
	ReasonLoadFailed         = "model_load_failed"
	ReasonInvalidLoadRequest = "invalid_load_request"
	ReasonGitMismatch        = "model_git_mismatch"
	ReasonChecksumMismatch   = "checksum_mismatch"
	ReasonMissingInput       = "missing_input"
	ReasonUnknownInput       = "unknown_input"
	ReasonDuplicateInput     = "duplicate_input"
	ReasonInvalidDatatype    = "invalid_datatype"
	ReasonInvalidShape       = "invalid_shape"
	ReasonBatchTooLarge      = "batch_too_large"
	ReasonInvalidSize        = "invalid_size"
	ReasonUnknownOutput      = "unknown_output"
	ReasonDuplicateOutput    = "duplicate_output"
	ReasonBackendError       = "backend_error"
	ReasonDeadlineExceeded   = "deadline_exceeded"
	ReasonCanceled           = "request_canceled"
	ReasonShuttingDown       = "shutting_down"
	ReasonInvalidParameter   = "invalid_parameter"
	ReasonEnsembleError      = "ensemble_error"
)

// Load failure causes. They label sluice_model_load_failures_total, so the
// set is closed; two of them (model_git_mismatch and checksum_mismatch) are
// also the reasons the Load API returns, every other cause is returned as
// model_load_failed.
const (
	causeConfig      = "config_invalid"
	causeBackend     = "backend_unknown"
	causeNoVersions  = "no_versions"
	causeModelFile   = "model_file_missing"
	causeProvenance  = "provenance_invalid"
	causeGitMismatch = ReasonGitMismatch
	causeChecksum    = ReasonChecksumMismatch
	causeManifest    = "manifest_invalid"
	causeUnreadable  = "model_unreadable"
	causeSignature   = "signature_mismatch"
	causeInstance    = "instance_failed"
	causeWarmup      = "warmup_failed"
	causeDuplicate   = "duplicate_model"
	causeCanceled    = "load_canceled"
	causeEnsemble    = "ensemble_invalid"
)

// loadError is why one version (or, with version 0, a whole model) failed
// to load.
type loadError struct {
	model   string
	version int64 // 0 when the failure is not about one version
	cause   string
	err     error
}

func (e *loadError) Error() string {
	if e.version == 0 {
		return fmt.Sprintf("model '%s': %v", e.model, e.err)
	}
	return fmt.Sprintf("model '%s' version %d: %v", e.model, e.version, e.err)
}

func (e *loadError) Unwrap() error { return e.err }

// reason is the text shown in the index: the cause code, then the message
// without the model name, on one line ("model_git_mismatch: git commit
// mismatch: ..."), so operators can match on the code.
func (e *loadError) reason() string {
	return e.cause + ": " + oneLine(e.err.Error())
}

// clientError turns a load failure into the error the Load API returns.
func (e *loadError) clientError() *apierr.Error {
	reason := ReasonLoadFailed
	if e.cause == causeGitMismatch || e.cause == causeChecksum {
		reason = e.cause
	}
	// Triton's words first (clients match on them), then Sluice's detail.
	msg := fmt.Sprintf("failed to load '%s': ", e.model)
	if e.version != 0 {
		msg = fmt.Sprintf("load failed for model '%s': version %d is at UNAVAILABLE state: ", e.model, e.version)
	}
	return &apierr.Error{Kind: apierr.KindInvalid, Reason: reason, Msg: msg + "load " + oneLine(e.Error())}
}

func newLoadError(model string, version int64, cause string, err error) *loadError {
	return &loadError{model: model, version: version, cause: cause, err: err}
}

// oneLine joins a multi-line message (config problems come one a line) so
// that it fits an index entry or an HTTP error body.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// problemsOf extracts config problems from err, if it carries them.
func problemsOf(err error) modelconfig.Errors {
	if ps, ok := errors.AsType[modelconfig.Errors](err); ok {
		return ps
	}
	return nil
}
