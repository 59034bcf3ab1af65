package grpcapi

import (
	"google.golang.org/grpc/codes"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/wire"
)

// ErrorDomain is the ErrorInfo domain attached to every error status this
// package returns (wire.ErrorDomain). Clients match ErrorInfo.Reason
// within this domain.
const ErrorDomain = wire.ErrorDomain

// Reason codes this package produces itself. Errors from the model layer
// keep their own reasons. Where the same problem can arise over HTTP the
// code is wire's, which httpapi uses too.
const (
	reasonMissingModelName = "missing_model_name"
	reasonInvalidInput     = wire.ReasonInvalidInput
	reasonDuplicateInput   = wire.ReasonDuplicateInput
	reasonInvalidDatatype  = wire.ReasonInvalidDatatype
	reasonInvalidShape     = wire.ReasonInvalidShape
	reasonSizeMismatch     = wire.ReasonSizeMismatch
	reasonRawInputCount    = "raw_input_count_mismatch"
	reasonMixedRawAndTyped = "mixed_raw_and_typed"
	reasonContentsMismatch = wire.ReasonContentsMismatch
	reasonRawOnlyDatatype  = "raw_contents_required"
	reasonValueOutOfRange  = wire.ReasonValueOutOfRange
	reasonInvalidParameter = wire.ReasonInvalidParameter
	reasonUnsupportedRepo  = "unsupported_repository_name"
	reasonInternal         = wire.ReasonInternal
)

// CodeOf returns the gRPC code for err (wire.GRPCCode): the code of an
// *infer.Error's Kind, DeadlineExceeded or Canceled for context errors,
// and Internal otherwise. A nil err is OK.
func CodeOf(err error) codes.Code { return wire.GRPCCode(err) }

// toStatus turns a domain error into a gRPC status error whose message
// says what and where and whose ErrorInfo detail carries the reason code
// (wire.GRPCStatus).
func toStatus(err error) error { return wire.GRPCStatus(err) }

// invalidf builds a KindInvalid domain error.
func invalidf(reason, format string, args ...any) *infer.Error {
	return infer.Errorf(infer.KindInvalid, reason, format, args...)
}
