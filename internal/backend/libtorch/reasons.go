package libtorch

// Reason codes of this package's errors; each is a row of the table in
// package apierr (apierr.Codes).
const (
	// ReasonBackendError: libtorch failed to run the model (forward()
	// raised).
	ReasonBackendError = "backend_error"
	// ReasonInvalidModelOutput: forward() returned fewer tensors than the
	// configuration's outputs need, or one of another datatype.
	ReasonInvalidModelOutput = "invalid_model_output"
	// ReasonDatatypeMismatch: an input of another datatype than the model declares.
	ReasonDatatypeMismatch = "datatype_mismatch"
	// ReasonInvalidSize: an input whose data does not hold the bytes its shape and datatype need.
	ReasonInvalidSize = "invalid_size"
	// ReasonMissingInput: a required model input is absent.
	ReasonMissingInput = "missing_input"
	// ReasonUnknownInput: an input the model does not declare.
	ReasonUnknownInput = "unknown_input"
	// ReasonUnknownOutput: a requested output the model does not declare.
	ReasonUnknownOutput = "unknown_output"
)
