package apierr

// ErrorDomain is the ErrorInfo domain of every gRPC error status Sluice
// sends. Clients match ErrorInfo.Reason within it.
const ErrorDomain = "sluice"

// Reason codes more than one edge produces. Each component keeps the
// reasons only it produces; these are the ones the edges share, so that
// the same problem has the same name on every port and both protocols.
const (
	// ReasonInternal is a server-side failure with nothing more specific
	// to say, and the reason of an *apierr.Error that has none.
	ReasonInternal = "internal"
	// ReasonOverloaded is a refusal by the process's in-flight byte
	// budget (package admission): 503 with Retry-After: 1.
	ReasonOverloaded = "overloaded"
	// ReasonBodyTooLarge is a request body over its listener's limit: 413.
	ReasonBodyTooLarge = "body_too_large"
	// ReasonTooManyEntityRows is a feature request naming more entities
	// than the feature server takes in one request: 413.
	ReasonTooManyEntityRows = "too_many_entity_rows"
	// ReasonTooManyHeaders is a request with more header fields (or gRPC
	// metadata values) than its listener takes.
	ReasonTooManyHeaders = "too_many_headers"
	// ReasonRateLimited is a request refused by a rate limit: 429.
	ReasonRateLimited = "rate_limited"
	// ReasonDeadlineExceeded is a request that ran out of time.
	ReasonDeadlineExceeded = "deadline_exceeded"
	// ReasonCanceled is a request whose client went away.
	ReasonCanceled = "canceled"
	// ReasonNotFound is an HTTP path no endpoint serves.
	ReasonNotFound = "not_found"
	// ReasonMethodNotAllowed is a known path asked with the wrong method.
	ReasonMethodNotAllowed = "method_not_allowed"
	// ReasonInvalidJSON is a body that is not JSON, or not the JSON
	// document the endpoint expects at the top level.
	ReasonInvalidJSON = "invalid_json"
	// ReasonInvalidRequest is a request that is wrong in a way no more
	// specific reason names.
	ReasonInvalidRequest = "invalid_request"
)

// Reason codes of the KServe v2 inference protocol's request problems,
// the same over HTTP and gRPC (packages httpapi and grpcapi).
const (
	ReasonInvalidInput     = "invalid_input"
	ReasonDuplicateInput   = "duplicate_input"
	ReasonDuplicateOutput  = "duplicate_output"
	ReasonInvalidDatatype  = "invalid_datatype"
	ReasonInvalidShape     = "invalid_shape"
	ReasonSizeMismatch     = "tensor_size_mismatch"
	ReasonContentsMismatch = "contents_datatype_mismatch"
	ReasonValueOutOfRange  = "value_out_of_range"
	ReasonInvalidParameter = "invalid_parameter"
)
