package grpcapi

import (
	"google.golang.org/grpc/codes"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// ErrorDomain is the ErrorInfo domain attached to every error status this
// package returns (apierr.ErrorDomain). Clients match ErrorInfo.Reason
// within this domain.
const ErrorDomain = apierr.ErrorDomain

// Reason codes this package produces itself. Errors from the model layer
// keep their own reasons. Where the same problem can arise over HTTP the
// code is wire's, which httpapi uses too.
const (
	reasonMissingModelName = "missing_model_name"
	reasonInvalidInput     = apierr.ReasonInvalidInput
	reasonDuplicateInput   = apierr.ReasonDuplicateInput
	reasonInvalidDatatype  = apierr.ReasonInvalidDatatype
	reasonInvalidShape     = apierr.ReasonInvalidShape
	reasonSizeMismatch     = apierr.ReasonSizeMismatch
	reasonRawInputCount    = "raw_input_count_mismatch"
	reasonMixedRawAndTyped = "mixed_raw_and_typed"
	reasonContentsMismatch = apierr.ReasonContentsMismatch
	reasonRawOnlyDatatype  = "raw_contents_required"
	reasonValueOutOfRange  = apierr.ReasonValueOutOfRange
	reasonInvalidParameter = apierr.ReasonInvalidParameter
	reasonUnsupportedRepo  = "unsupported_repository_name"
	reasonInternal         = apierr.ReasonInternal
)

// CodeOf returns the gRPC code for err (apierr.GRPCCode): the code of an
// *apierr.Error's Kind, DeadlineExceeded or Canceled for context errors,
// and Internal otherwise. A nil err is OK.
func CodeOf(err error) codes.Code { return apierr.GRPCCode(err) }

// toStatus turns a domain error into a gRPC status error whose message
// says what and where and whose ErrorInfo detail carries the reason code
// (apierr.GRPCStatus).
func toStatus(err error) error { return apierr.GRPCStatus(err) }

// invalidf builds a KindInvalid domain error.
func invalidf(reason, format string, args ...any) *apierr.Error {
	return apierr.Errorf(apierr.KindInvalid, reason, format, args...)
}
