package onnxruntime

// Reason codes of this package's errors; each is a row of the table in
// package apierr (apierr.Codes).
const (
	// ReasonBackendError: the ONNX Runtime session failed to run the model.
	ReasonBackendError = "backend_error"
	// ReasonDatatypeMismatch: an input of another datatype than the model declares.
	ReasonDatatypeMismatch = "datatype_mismatch"
	// ReasonInvalidBytes: a BYTES input whose elements are not valid strings for the model.
	ReasonInvalidBytes = "invalid_bytes"
	// ReasonInvalidSize: an input whose data does not hold the bytes its shape and datatype need.
	ReasonInvalidSize = "invalid_size"
	// ReasonMissingInput: a required model input is absent.
	ReasonMissingInput = "missing_input"
	// ReasonOptionalInputs: a model with optional inputs, which the ONNX backend does not run.
	ReasonOptionalInputs = "optional_inputs"
	// ReasonScalarInput: a model with a scalar (rank 0) input, which the ONNX backend does not run.
	ReasonScalarInput = "scalar_input"
	// ReasonScalarOutput: a model with a scalar (rank 0) output, which the ONNX backend does not run.
	ReasonScalarOutput = "scalar_output"
	// ReasonUnknownInput: an input the model does not declare.
	ReasonUnknownInput = "unknown_input"
	// ReasonUnknownOutput: a requested output the model does not declare.
	ReasonUnknownOutput = "unknown_output"
	// ReasonUnsupportedDatatype: a model input or output of a datatype the ONNX backend does not convert.
	ReasonUnsupportedDatatype = "unsupported_datatype"
)
